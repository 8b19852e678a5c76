"""`metrics.jsonl`: one JSON object per boundary, appended and flushed so a crash loses nothing logged."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _clean(v: Any) -> Any:
    # JSON has no NaN/Infinity; write them as strings a reader can still recognise.
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


class JsonlSink:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def log(self, row: dict[str, Any]) -> None:
        self.file.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()
