"""Where boundary metrics go: the console, `metrics.jsonl` and TensorBoard.

Sinks only ever receive Python floats, after the boundary's single host read, so no sink can add
a sync. `Loggers` fans one row out to all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hotloop.logging.console import Console
from hotloop.logging.jsonl import JsonlSink
from hotloop.logging.tensorboard import TensorBoardSink, tensorboard_available


class Loggers:
    def __init__(self, sinks: Sequence[Any]) -> None:
        self.sinks = list(sinks)

    def log(self, row: dict[str, Any]) -> None:
        for s in self.sinks:
            s.log(row)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


__all__ = ["Console", "JsonlSink", "Loggers", "TensorBoardSink", "tensorboard_available"]
