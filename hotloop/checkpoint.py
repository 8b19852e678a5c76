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
import math
import os
import pickle
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
        ok = (
            isinstance(files, dict)
            and files
            and all(
                isinstance(m, dict) and isinstance(m.get("size"), int) and isinstance(m.get("sha256"), str)
                for m in files.values()
            )
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        ok = False
    if not ok:
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


def save_checkpoint(
    state: dict[str, Any],
    run_dir: str | Path,
    step: int,
    keep_last: int | None = 3,
    metrics: dict[str, float] | None = None,
    best: tuple[str, str] | None = None,
) -> Path:
    """Commit `state` as the checkpoint of `step`, then purge beyond the newest `keep_last` (and the best).

    `metrics` (e.g. the latest `val_loss`) go into the manifest; `best` = (metric, "min"|"max") keeps the
    checkpoint with the best such value whatever its age."""
    path = checkpoint_path(run_dir, step)
    atomic_save(state, path)
    manifest = {
        "format": FORMAT,
        "step": step,
        "files": {path.name: {"size": path.stat().st_size, "sha256": sha256_file(path)}},
        **({"metrics": metrics} if metrics else {}),
    }
    _atomic_write(_manifest_path(path), lambda f: f.write(json.dumps(manifest, indent=1).encode()))
    if keep_last:
        purge(run_dir, keep_last, best)
    return path


def best_checkpoint(run_dir: str | Path, metric: str, mode: str = "min") -> Path | None:
    """The committed checkpoint whose manifest records the best `metric` (`min` or `max`), or None."""
    scored = []
    for found in committed(run_dir):
        try:
            value = json.loads(_manifest_path(found.path).read_text()).get("metrics", {}).get(metric)
        except (ValueError, OSError, AttributeError):
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            scored.append((value if mode == "min" else -value, found.step, found.path))
    return min(scored)[2] if scored else None


def purge(run_dir: str | Path, keep_last: int, best: tuple[str, str] | None = None) -> None:
    """Delete committed checkpoints older than the newest `keep_last`, never the best one (manifest first)."""
    found = committed(run_dir)
    keep = best_checkpoint(run_dir, *best) if best else None
    for old in found[: max(0, len(found) - keep_last)]:
        if old.path == keep:
            continue
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


def _legacy_numpy_globals() -> list[Any]:
    """The NumPy types an older checkpoint's RNG state pickled (an ndarray of uint32): data, never code."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    found = [core.multiarray._reconstruct, np.ndarray, np.dtype]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None and hasattr(dtypes, "UInt32DType"):
        found.append(dtypes.UInt32DType)
    return found


def safe_load(path: Path) -> Any:
    """`torch.load(weights_only=True)`: tensors and plain Python values only, so a file never runs code.

    Checkpoints written before hotloop stored NumPy's RNG state as a tensor hold one uint32 ndarray; its
    three NumPy types are allowed (they rebuild an array, nothing else). Anything else is refused with
    one line naming the file and what it holds.
    """
    try:
        with torch.serialization.safe_globals(_legacy_numpy_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        what = next((line.strip() for line in str(e).splitlines() if "GLOBAL" in line or "Unsupported" in line), "")
        raise CheckpointError(
            f"refused to load {path}: it holds a Python object no hotloop checkpoint contains"
            f"{f' ({what[:160]})' if what else ''}, and unpickling it could run code. If you made this file "
            f"and trust it, convert it once: python -c \"import hotloop.checkpoint as c; c.convert_trusted('{path}')\""
        ) from None
    except Exception as e:  # truncated or garbage bytes
        first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise CheckpointError(f"cannot read checkpoint {path}: {first}") from None


def convert_trusted(path: str | Path) -> Path:
    """Rewrite a checkpoint *you trust* (an older format, or one holding extra objects) so it loads with
    `weights_only=True`: loaded with full unpickling once, its RNG state normalised, saved again and its
    manifest refreshed. Never call this on a file from someone else."""
    p = Path(path)
    state = torch.load(p, map_location="cpu", weights_only=False)  # the caller vouches for this file
    if isinstance(state, dict) and isinstance(state.get("rng"), dict):
        rngs = [state["rng"], *state.get("rank_rng", [])]
        for rng in rngs:
            n = rng.get("numpy")
            if isinstance(n, tuple):
                rng["numpy"] = _numpy_state(n)
    atomic_save(state, p)
    mpath = _manifest_path(p)
    if mpath.is_file():
        manifest = json.loads(mpath.read_text())
        manifest["files"][p.name] = {"size": p.stat().st_size, "sha256": sha256_file(p)}
        _atomic_write(mpath, lambda f: f.write(json.dumps(manifest, indent=1).encode()))
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
        state = safe_load(p)
    check_state(state, p, full=False)
    if str(map_location) != "cpu" and isinstance(state, dict):
        for key in ("model", "optimizer"):
            if key in state:
                state[key] = _tree_to(state[key], map_location)
    return state


_FULL_STATE = {"optimizer": dict, "epoch": int, "data": dict, "rng": dict, "history": list, "precision": dict}


def check_state(state: Any, path: Path, full: bool = True) -> None:
    """Raise a `CheckpointError` naming `path` and every problem unless `state` is a hotloop state.

    A file can pass its manifest's hash and still not be one (written by something else, or edited):
    this turns what would be a `KeyError` deep in a resume into one line. `full`: everything a resume
    needs; otherwise what `sample`/`validate`/`load_checkpoint` need (model, step, config)."""
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} is not a hotloop state: it holds a {type(state).__name__}")
    need: dict[str, type] = {"model": dict, "step": int, "config": dict, **(_FULL_STATE if full else {})}
    problems = []
    for key, kind in need.items():
        if key not in state:
            problems.append(f"`{key}` is missing")
        elif not isinstance(state[key], kind) or (kind is int and isinstance(state[key], bool)):
            problems.append(f"`{key}` is a {type(state[key]).__name__}, not a {kind.__name__}")
    if isinstance(state.get("model"), dict):
        odd = [k for k, v in state["model"].items() if not isinstance(v, torch.Tensor)]
        if odd:
            problems.append(f"`model` entries that are not tensors: {', '.join(map(str, odd[:3]))}")
    if full and isinstance(state.get("data"), dict) and not isinstance(state["data"].get("batches"), int):
        problems.append("`data.batches` (the data position) is missing or not an integer")
    if full and isinstance(state.get("rng"), dict) and not isinstance(state["rng"].get("torch"), torch.Tensor):
        problems.append("`rng.torch` (the torch RNG state) is missing")
    if full and isinstance(state.get("history"), list) and not all(isinstance(r, dict) for r in state["history"]):
        problems.append("`history` holds entries that are not rows")
    if problems:
        raise CheckpointError(f"checkpoint {path} is not a valid hotloop state: {'; '.join(problems)}")


def config_of(state: dict[str, Any], path: Path) -> Any:
    """The run's `TrainConfig` from a checkpoint, or a `CheckpointError` naming the file."""
    from hotloop.config import build_config
    from hotloop.errors import ConfigError

    try:
        return build_config(state["config"])
    except ConfigError as e:
        raise CheckpointError(f"checkpoint {path} holds an invalid config: {e}") from None


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], path: Path) -> None:
    """`model.load_state_dict(weights)` for sample/validate/teachers: a mismatch or non-finite weights are one line."""
    try:
        model.load_state_dict(weights)
    except (RuntimeError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path} does not fit this model: {str(e).splitlines()[0][:300]}") from None
    bad = [n for n, t in model.state_dict().items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise CheckpointError(
            f"checkpoint {path} holds non-finite weights ({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}): "
            "that run diverged; use an earlier checkpoint or train again with a lower lr"
        )


def _tree_to(obj: Any, device: str | torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return type(obj)((k, _tree_to(v, device)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_tree_to(v, device) for v in obj]
    return obj


def capture_rng() -> dict[str, Any]:
    """Python, NumPy, torch CPU and every CUDA device's RNG state, as tensors and plain Python values only
    (NumPy's key array becomes a tensor), so the checkpoint loads with `weights_only=True`."""
    import random

    import numpy as np

    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": _numpy_state(np.random.get_state()),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    import random

    import numpy as np

    random.setstate(state["python"])
    n = state["numpy"]
    if isinstance(n, dict):
        keys = n["keys"].numpy().astype(np.uint32)
        np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    else:  # the format before weights_only loading: a tuple holding an ndarray
        np.random.set_state(n)
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _numpy_state(state: tuple) -> dict[str, Any]:
    """NumPy's (kind, uint32 keys, pos, has_gauss, cached) as a dict of a tensor and plain values."""
    import numpy as np

    kind, keys, pos, has_gauss, cached = state
    keys = torch.from_numpy(np.asarray(keys).astype(np.int64))
    return {"kind": kind, "keys": keys, "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


# -- sharded checkpoints (strategy=fsdp): torch.distributed.checkpoint ---------------------------------


@contextmanager
def _quiet_single_process() -> Iterator[None]:
    """DCP warns when used without a process group; in one process that is the intent (resharding to 1)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        yield


def _load_sharded_full(path: Path) -> dict[str, Any]:
    """A sharded checkpoint as one dict of full tensors, in this process (for sample/validate/inspection)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "full.pt"
        with _quiet_single_process():
            dcp_to_torch_save(str(path), str(out))
        full = safe_load(out)
    meta = safe_load(path / "meta.pt")
    return {**meta, "model": full["model"], "optimizer": full["optimizer"]}
