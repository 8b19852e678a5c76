"""hotloop: a PyTorch training engine whose hot loop never waits on the host.

    import hotloop
    cfg = hotloop.TrainConfig(max_steps=1000, batch_size=64, lr=3e-4)
    trainer = hotloop.Trainer(model, cfg)
    trainer.fit(train_data, val_data)

Names are imported on first use (PEP 562), so `hotloop lint` starts without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from hotloop.errors import ConfigError, DataError, HotloopError, LossError

__version__ = "0.1.0"

_LAZY = {
    "Callback": "hotloop.callbacks",
    "load_checkpoint": "hotloop.checkpoint",
    "GPTConfig": "hotloop.config",
    "OptimConfig": "hotloop.config",
    "TrainConfig": "hotloop.config",
    "build_config": "hotloop.config",
    "load_config": "hotloop.config",
    "Trainer": "hotloop.trainer",
    "TrainState": "hotloop.trainer",
}

__all__ = ["ConfigError", "DataError", "HotloopError", "LossError", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hotloop' has no attribute {name!r}")
