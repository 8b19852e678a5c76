"""Configuration: the schema (`schema.py`: one dataclass tree, every field documented and validated) and
how a config is built from layers (`load.py`: defaults < recipe < YAML < `key=value`). Everything is
importable from `hotloop.config`, as before the split."""

from hotloop.config.load import build_config, load_config, nest, parse_overrides, read_yaml, valid_keys
from hotloop.config.schema import (
    COMPILE_MODES,
    OPTIMIZERS,
    PRECISIONS,
    PROGRESS,
    RECIPES,
    SCHEDULES,
    ClassifyConfig,
    DistillConfig,
    GPTConfig,
    GuardConfig,
    OptimConfig,
    TrainConfig,
)

__all__ = [
    "COMPILE_MODES",
    "OPTIMIZERS",
    "PRECISIONS",
    "PROGRESS",
    "RECIPES",
    "SCHEDULES",
    "ClassifyConfig",
    "DistillConfig",
    "GPTConfig",
    "GuardConfig",
    "OptimConfig",
    "TrainConfig",
    "build_config",
    "load_config",
    "nest",
    "parse_overrides",
    "read_yaml",
    "valid_keys",
]
