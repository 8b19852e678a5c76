"""TensorBoard events (optional extra `tensorboard`); the writer flushes from its own thread."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


class TensorBoardSink:
    fast = True
    name = "tensorboard"

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, row: dict[str, Any]) -> None:
        step = row["step"]
        for k, v in row.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                tag = k[4:] if k.startswith("val_") else k
                self.writer.add_scalar(f"{'val' if k.startswith('val_') else 'train'}/{tag}", v, step)

    def close(self) -> None:
        self.writer.close()
