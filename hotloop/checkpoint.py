"""Checkpoints that survive any crash, and finding the newest one that is intact.

Layout of `run_dir/checkpoints/`:

    step_00000037.pt     the state (torch.save)
    step_00000037.json   its manifest: step, and size + sha256 of every file of the checkpoint
    step_00000037/       or, with strategy=fsdp, a torch.distributed.checkpoint (DCP) directory: each
                         rank's shards of the model and optimizer, `.metadata`, and `meta.pt` (rank 0:
                         schedule, data position and RNG of every rank, history, config)

Commit protocol. The state is written to a temporary file in the same directory, flushed and
fsynced, `os.replace`d onto its name, and the directory fsynced; then the manifest goes through the
same steps. A checkpoint exists only once its manifest does, and it is *valid* only while every file
still has the size and sha256 the manifest records - so a truncated, zero-byte or bit-flipped file is
recognised without unpickling garbage. A sharded checkpoint follows the same rule: rank 0 writes
the manifest (covering every rank's files) only after DCP's save has finished on all ranks.
Retention deletes old checkpoints only after the new one is
committed, manifest first (so a purge cut short leaves an uncommitted orphan, never a half-valid
checkpoint), and never counts uncommitted files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hotloop.errors import HotloopError

CKPT_DIR = "checkpoints"
FORMAT = 1


class CheckpointError(HotloopError):
    """A checkpoint could not be written or read."""


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Callable[[Any], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_save(obj: Any, path: str | Path) -> Path:
    """`torch.save` that leaves either the old file or the complete new one, whatever happens."""
    path = Path(path)
    _atomic_write(path, lambda f: torch.save(obj, f))
    return path


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CKPT_DIR / f"step_{step:08d}.pt"


def _manifest_path(ckpt: Path) -> Path:
    return ckpt.with_suffix(".json")


def verify(ckpt: Path) -> str | None:
    """None if `ckpt` is committed and intact, else the reason it is not."""
    mpath = _manifest_path(ckpt)
    if not mpath.is_file():
        return "no manifest (the save did not complete)"
    try:
        manifest = json.loads(mpath.read_text())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError):
        return "unreadable manifest"
    for name, meta in files.items():
        f = ckpt.parent / name
        if not f.is_file():
            return f"{name} is missing"
        size = f.stat().st_size
        if size != meta["size"]:
            return f"{name} has {size} bytes, the manifest says {meta['size']} (truncated?)"
        if sha256_file(f) != meta["sha256"]:
            return f"{name} does not match its sha256 (corrupted)"
    return None


@dataclass
class Found:
    path: Path
    step: int


def committed(run_dir: str | Path) -> list[Found]:
    """Checkpoints with a manifest, oldest first (not yet verified)."""
    d = Path(run_dir) / CKPT_DIR
    out = []
    for m in sorted(d.glob("step_*.json")) if d.is_dir() else []:
        try:
            step = int(m.stem.split("_", 1)[1])
        except ValueError:
            continue
        sharded = m.with_suffix("")
        out.append(Found(sharded if sharded.is_dir() else m.with_suffix(".pt"), step))
    return out


def latest_valid(run_dir: str | Path, strict: bool = False) -> Path | None:
    """The newest intact checkpoint; a broken newer one is skipped with a warning (or raises if `strict`)."""
    for found in reversed(committed(run_dir)):
        reason = verify(found.path)
        if reason is None:
            return found.path
        msg = f"skipping checkpoint {found.path}: {reason}"
        if strict:
            raise CheckpointError(msg + " (resume_strict=true; set it to false to fall back to the previous one)")
        warnings.warn(msg, stacklevel=2)
    return None


def save_checkpoint(state: dict[str, Any], run_dir: str | Path, step: int, keep_last: int | None = 3) -> Path:
    """Commit `state` as the checkpoint of `step`, then purge beyond the newest `keep_last`."""
    path = checkpoint_path(run_dir, step)
    atomic_save(state, path)
    manifest = {
        "format": FORMAT,
        "step": step,
        "files": {path.name: {"size": path.stat().st_size, "sha256": sha256_file(path)}},
    }
    _atomic_write(_manifest_path(path), lambda f: f.write(json.dumps(manifest, indent=1).encode()))
    if keep_last:
        purge(run_dir, keep_last)
    return path


def purge(run_dir: str | Path, keep_last: int) -> None:
    """Delete committed checkpoints older than the newest `keep_last` (manifest first)."""
    found = committed(run_dir)
    for old in found[: max(0, len(found) - keep_last)]:
        _manifest_path(old.path).unlink(missing_ok=True)
        _remove(old.path)
    # temporaries and orphans left by crashed saves
    d = Path(run_dir) / CKPT_DIR
    live = {f.path.name for f in committed(run_dir)}
    for f in d.glob("step_*"):
        if f.suffix != ".json" and f.name not in live:
            _remove(f)
    for f in d.glob(".step_*.tmp"):
        f.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def is_sharded(path: Path) -> bool:
    """A DCP checkpoint directory (strategy=fsdp) rather than one torch.save file."""
    return path.is_dir() and (path / ".metadata").is_file()


def resolve(path: str | Path, strict: bool = False) -> Path:
    """A checkpoint from a run directory (newest valid), a file or a sharded checkpoint directory
    (verified if it has a manifest)."""
    p = Path(path)
    if p.is_dir() and not is_sharded(p):
        found = latest_valid(p, strict=strict)
        if found is None:
            raise CheckpointError(f"no valid checkpoint in {p / CKPT_DIR}: train first (hotloop fit run_dir={p})")
        return found
    if not p.is_file() and not is_sharded(p):
        raise CheckpointError(f"no checkpoint at {p}: pass a run directory written by `hotloop fit` or a .pt file")
    if _manifest_path(p).is_file():
        reason = verify(p)
        if reason is not None:
            raise CheckpointError(f"checkpoint {p} is not usable: {reason}")
    return p


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint file, or the newest valid checkpoint of a run directory.

    Returns the saved dict: `model`, `optimizer`, `scheduler`, `precision`, `step`, `epoch`, `data`,
    `rng`, `history`, `config`.

    `map_location` applies to the model and optimizer tensors only: RNG states and data positions stay
    CPU tensors whatever the device (`torch.set_rng_state` and `Generator.set_state` take nothing else),
    so a checkpoint written on one device resumes on another.
    """
    p = resolve(path)
    if is_sharded(p):
        state = _load_sharded_full(p)
    else:
        try:
            state = torch.load(p, map_location="cpu", weights_only=False)
        except Exception as e:  # a file without a manifest can still be garbage
            raise CheckpointError(f"cannot read checkpoint {p}: {e}") from None
    if str(map_location) != "cpu" and isinstance(state, dict):
        for key in ("model", "optimizer"):
            if key in state:
                state[key] = _tree_to(state[key], map_location)
    return state


def _tree_to(obj: Any, device: str | torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return type(obj)((k, _tree_to(v, device)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_tree_to(v, device) for v in obj]
    return obj


def capture_rng() -> dict[str, Any]:
    """Python, NumPy, torch CPU and every CUDA device's RNG state."""
    import random

    import numpy as np

    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    import random

    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# -- sharded checkpoints (strategy=fsdp): torch.distributed.checkpoint ---------------------------------


@contextmanager
def _quiet_single_process() -> Iterator[None]:
    """DCP warns when used without a process group; in one process that is the intent (resharding to 1)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        yield


def save_sharded(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    run_dir: str | Path,
    step: int,
    keep_last: int | None,
    main: bool,
    barrier: Callable[[], None],
) -> Path:
    """Commit a sharded checkpoint of `step` (every rank calls this), then purge beyond `keep_last`."""
    path = Path(run_dir) / CKPT_DIR / f"step_{step:08d}"
    save_sharded_to(path, model, optimizer, meta, main, barrier, step=step)
    if main and keep_last:
        purge(run_dir, keep_last)
    barrier()
    return path


def save_sharded_to(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    main: bool,
    barrier: Callable[[], None],
    step: int | None = None,
) -> Path:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    if main:  # a checkpoint of this step saved before a rollback: replace it, manifest first
        _manifest_path(path).unlink(missing_ok=True)
        _remove(path)
    barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    with _quiet_single_process():
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(path))
    if main:  # DCP's save returns on the coordinator only after every rank's shards are written
        atomic_save(meta, path / "meta.pt")
        files = sorted(f for f in path.rglob("*") if f.is_file())
        manifest = {
            "format": FORMAT,
            "kind": "dcp",
            "step": meta.get("step", step),
            "files": {
                str(f.relative_to(path.parent)): {"size": f.stat().st_size, "sha256": sha256_file(f)} for f in files
            },
        }
        _atomic_write(_manifest_path(path), lambda f: f.write(json.dumps(manifest, indent=1).encode()))
    barrier()
    return path


def load_sharded_into(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Load a sharded checkpoint into `model`/`optimizer`, resharding to however many ranks run now
    (one process without a process group included); returns the rest of the state (`meta.pt`)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optimizer": optim_sd}
    try:
        with _quiet_single_process():
            dcp.load(state, checkpoint_id=str(path))
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"cannot load sharded checkpoint {path} into this model: {first}") from None
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return torch.load(path / "meta.pt", map_location="cpu", weights_only=False)


def load_full_into_sharded(state: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """A one-file checkpoint (full tensors, optimizer state keyed by position) into an FSDP2-sharded model."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    opts = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, state["model"], options=opts)
    # optimizer.state_dict() numbers parameters by position in the param groups; the same groups are built
    # from the same model, so position i is the same parameter here, which DCP wants by name.
    names = {p: n for n, p in model.named_parameters()}
    order = [names[p] for g in optimizer.param_groups for p in g["params"]]
    saved = state["optimizer"]
    ids = [i for g in saved["param_groups"] for i in g["params"]]
    by_id = dict(zip(ids, order, strict=True))
    fqn_state = {
        "state": {by_id[i]: v for i, v in saved["state"].items()},
        "param_groups": [{**g, "params": [by_id[i] for i in g["params"]]} for g in saved["param_groups"]],
    }
    set_optimizer_state_dict(model, optimizer, fqn_state, options=opts)


def _load_sharded_full(path: Path) -> dict[str, Any]:
    """A sharded checkpoint as one dict of full tensors, in this process (for sample/validate/inspection)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "full.pt"
        with _quiet_single_process():
            dcp_to_torch_save(str(path), str(out))
        full = torch.load(out, map_location="cpu", weights_only=False)
    meta = torch.load(path / "meta.pt", map_location="cpu", weights_only=False)
    return {**meta, "model": full["model"], "optimizer": full["optimizer"]}
