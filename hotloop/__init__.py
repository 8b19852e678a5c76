"""hotloop: a PyTorch training engine whose hot loop never waits on the host.

import hotloop
cfg = hotloop.TrainConfig(max_steps=1000, batch_size=64, lr=3e-4)
trainer = hotloop.Trainer(model, cfg)
trainer.fit(train_data, val_data)
"""

from hotloop.callbacks import Callback
from hotloop.checkpoint import load_checkpoint
from hotloop.config import GPTConfig, OptimConfig, TrainConfig, build_config, load_config
from hotloop.errors import ConfigError, DataError, HotloopError, LossError
from hotloop.trainer import Trainer, TrainState

__version__ = "0.1.0"

__all__ = [
    "Callback",
    "ConfigError",
    "DataError",
    "GPTConfig",
    "HotloopError",
    "LossError",
    "OptimConfig",
    "TrainConfig",
    "TrainState",
    "Trainer",
    "build_config",
    "load_checkpoint",
    "load_config",
]
