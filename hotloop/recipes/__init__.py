"""Built-in recipes: Python functions that supply a model, data and config defaults.

A recipe module exposes `defaults(device) -> dict` (config values for that device, overridden by the
user's YAML and `key=value`), and `run(cfg) -> Trainer`. `hotloop fit` with no arguments runs `gpt`.
"""

from __future__ import annotations

import importlib
from typing import Any

from hotloop.errors import ConfigError

DEFAULT_RECIPE = "gpt"


def get_recipe(name: str) -> Any:
    try:
        return importlib.import_module(f"hotloop.recipes.{name}")
    except ModuleNotFoundError:
        from hotloop.config import RECIPES

        raise ConfigError(f"unknown recipe `{name}`; available: {', '.join(RECIPES)}") from None


def recipe_defaults(name: str, device: str) -> dict[str, Any]:
    return get_recipe(name).defaults(device)
