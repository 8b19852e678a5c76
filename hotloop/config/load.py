"""Building a `TrainConfig` from layered dictionaries: defaults < recipe < YAML < `key=value` overrides.

Values from the command line arrive as strings and are converted by the field's declared type (`_coerce`);
an unknown key gets the closest valid key suggested; a YAML file that is missing or not a mapping is
refused with its path. The schema itself (fields, docs, validation) is `schema.py`.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Union

import yaml

from hotloop.config.schema import TrainConfig, _fail, _sections
from hotloop.errors import ConfigError


def valid_keys(cls: type = TrainConfig, prefix: str = "") -> list[str]:
    """All dotted keys a config accepts."""
    keys: list[str] = []
    sections = _sections(cls)
    for f in dataclasses.fields(cls):
        if f.name in sections:
            keys += valid_keys(sections[f.name], prefix + f.name + ".")
        else:
            keys.append(prefix + f.name)
    return keys


def _unknown(key: str) -> ConfigError:
    close = difflib.get_close_matches(key, valid_keys(), n=1, cutoff=0.6)
    hint = f"; did you mean `{close[0]}`?" if close else "; run `hotloop fit --help-config` to list the keys"
    return ConfigError(f"unknown config key `{key}`{hint}")


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _coerce(name: str, value: Any, tp: Any) -> Any:
    """Convert `value` (from YAML or a `key=value` string) to the field type `tp`."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (Union, types.UnionType):
        if type(None) in args and (value is None or (isinstance(value, str) and value.lower() in ("none", "null"))):
            return None
        inner = [a for a in args if a is not type(None)]
        if bool in inner and (isinstance(value, bool) or (isinstance(value, str) and value.lower() in _TRUE | _FALSE)):
            return _coerce(name, value, bool)
        errors = []
        for a in inner:
            if a is bool:
                continue
            try:
                return _coerce(name, value, a)
            except ConfigError as e:
                errors.append(e)
        raise errors[0]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        _fail(name, value, "true or false")
    if tp is int:
        if isinstance(value, bool):
            _fail(name, value, "an integer")
        if isinstance(value, int):
            return value
        try:
            f = float(value)
        except (TypeError, ValueError):
            _fail(name, value, "an integer")
        if not f.is_integer():
            _fail(name, value, "an integer")
        return int(f)
    if tp is float:
        if isinstance(value, bool):
            _fail(name, value, "a number")
        try:
            return float(value)
        except (TypeError, ValueError):
            _fail(name, value, "a number")
    if tp is str:
        if isinstance(value, (dict, list)):
            _fail(name, value, "a string")
        return str(value)
    return value


def _build(cls: type, raw: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    sections = _sections(cls)
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in names:
            raise _unknown(prefix + key)
        if key in sections:
            if value is None:
                value = {}
            if not isinstance(value, dict):
                _fail(prefix + key, value, f"a mapping of {sections[key].__name__} fields")
            kwargs[key] = _build(sections[key], value, prefix + key + ".")
        else:
            kwargs[key] = _coerce(prefix + key, value, hints[key])
    return cls(**kwargs)


def _check_keys(cls: type, raw: dict[str, Any], prefix: str = "") -> None:
    names = {f.name for f in dataclasses.fields(cls)}
    sections = _sections(cls)
    for key, value in raw.items():
        if key not in names:
            raise _unknown(prefix + key)
        if key in sections and isinstance(value, dict):
            _check_keys(sections[key], value, prefix + key + ".")


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """Turn `{"gpt.n_layer": 6}` into `{"gpt": {"n_layer": 6}}`."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"config key `{key}` puts a section under a plain value")
        node[parts[-1]] = value
    return out


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Parse `key=value` strings into a nested dict of strings (typed later by the field)."""
    flat: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"expected key=value, got `{item}` (for example `max_steps=100`)")
        key, value = item.split("=", 1)
        key = key.strip().lstrip("-").replace("-", "_")
        if not key:
            raise ConfigError(f"empty key in `{item}`")
        flat[key] = value
    return nest(flat)


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p} (pass an existing YAML file to --config)")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"cannot parse config file {p}: {what}{where} (it must be a YAML mapping of keys)") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping of keys to values, got {type(data).__name__}")
    flat_dotted = {k: v for k, v in data.items() if isinstance(k, str) and "." in k}
    plain = {k: v for k, v in data.items() if k not in flat_dotted}
    return _merge(plain, nest(flat_dotted))


def build_config(*layers: dict[str, Any], base: dict[str, Any] | None = None) -> TrainConfig:
    """Merge nested dicts (later wins) over `base` and validate into a `TrainConfig`."""
    merged: dict[str, Any] = dict(base or {})
    for layer in layers:
        merged = _merge(merged, layer)
    return _build(TrainConfig, merged)


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None, default_recipe: str | None = None
) -> TrainConfig:
    """Defaults < recipe defaults (for the resolved device) < YAML file < `key=value` overrides."""
    from hotloop.recipes import recipe_defaults

    file_layer = read_yaml(path) if path else {}
    cli_layer = parse_overrides(overrides or [])
    user = _merge(file_layer, cli_layer)
    # Check the user's keys first so a typo is reported before the recipe is consulted.
    _check_keys(TrainConfig, user)
    recipe = user.get("recipe", default_recipe)
    device = str(user.get("device", "auto"))
    recipe_layer = (
        recipe_defaults(str(recipe), device) if recipe and str(recipe).lower() not in ("none", "null") else {}
    )
    return build_config(recipe_layer, user)
