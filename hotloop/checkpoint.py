"""Checkpoints: atomic writes and loading.

A checkpoint is written to a temporary file in the target directory, flushed and fsynced, then
`os.replace`d onto its final name and the directory fsynced: a crash at any moment leaves either the
old file or the new one, never a torn one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from hotloop.errors import HotloopError

CKPT_DIR = "checkpoints"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_save(obj: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CKPT_DIR / f"step_{step:08d}.pt"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Committed checkpoints of a run, oldest first."""
    d = Path(run_dir) / CKPT_DIR
    return sorted(d.glob("step_*.pt")) if d.is_dir() else []


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint file, or the newest checkpoint of a run directory.

    Returns the saved dict: `model`, `optimizer`, `scheduler`, `precision`, `step`, `epoch`, `config`.
    """
    p = Path(path)
    if p.is_dir():
        found = list_checkpoints(p)
        if not found:
            raise HotloopError(f"no checkpoint in {p / CKPT_DIR}: train first (hotloop fit run_dir={p})")
        p = found[-1]
    if not p.is_file():
        raise HotloopError(f"no checkpoint at {p}: pass a run directory written by `hotloop fit` or a .pt file")
    return torch.load(p, map_location=map_location, weights_only=False)
