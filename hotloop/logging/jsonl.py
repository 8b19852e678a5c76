"""`metrics.jsonl`: one JSON object per boundary, appended and flushed so a crash loses nothing logged."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


def _clean(v: Any) -> Any:
    # JSON has no NaN/Infinity; write them as strings a reader can still recognise.
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


class JsonlSink:
    fast = True
    name = "jsonl"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def log(self, row: dict[str, Any]) -> None:
        self.file.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def truncate_metrics(path: Path, step: int) -> None:
    """Drop rows logged after `step` (resuming from its checkpoint logs them again); torn lines go too."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line torn by a kill mid-write
        if isinstance(row, dict) and isinstance(row.get("step", 0), int) and row.get("step", 0) <= step:
            keep.append(line)  # anything else is not a row of this run
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in keep))
    os.replace(tmp, path)
