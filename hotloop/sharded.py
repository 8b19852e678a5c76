"""Sharded checkpoints (strategy=fsdp) through torch.distributed.checkpoint (DCP).

Every rank writes its shards; rank 0 then writes `meta.pt` (counters, RNG, data position, config) and the
manifest, whose presence is the commit: a directory without a manifest is an unfinished save, never
resumed from (`checkpoint.latest_valid`). DCP reshards on load, so a checkpoint of N ranks resumes on M.

Asynchronous saves (`async_checkpoint`, `save_sharded_async`) use `dcp.async_save`: the shards are staged
to host memory (`HostStager`: DCP's DefaultStager kept for the whole run, so its host buffers - pinned on
CUDA - are allocated once and reused by every save), the training thread goes on, and a DCP thread writes
them. The commit (meta.pt + manifest, then retention) runs after DCP's future resolves, which on the
coordinator means every rank's shards are on disk. DCP's collectives in that thread use a dedicated gloo
group (`checkpoint_group`), never the training process group, so they cannot interleave with training
collectives (and async_save needs a CPU backend anyway).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from hotloop.checkpoint import (
    CKPT_DIR,
    FORMAT,
    CheckpointError,
    _atomic_write,
    _manifest_path,
    _quiet_single_process,
    _remove,
    atomic_save,
    purge,
    safe_load,
    sha256_file,
)


def save_sharded(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    run_dir: str | Path,
    step: int,
    keep_last: int | None,
    main: bool,
    barrier: Callable[[], None],
    metrics: dict[str, float] | None = None,
    best: tuple[str, str] | None = None,
) -> Path:
    """Commit a sharded checkpoint of `step` (every rank calls this), then purge beyond `keep_last`."""
    path = sharded_path(run_dir, step)
    save_sharded_to(path, model, optimizer, meta, main, barrier, step=step, metrics=metrics)
    if main and keep_last:
        purge(run_dir, keep_last, best)
    barrier()
    return path


def sharded_path(run_dir: str | Path, step: int) -> Path:
    """The directory of the sharded checkpoint of `step`."""
    return Path(run_dir) / CKPT_DIR / f"step_{step:08d}"


def _prepare(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, main: bool,
             barrier: Callable[[], None]) -> dict[str, Any]:  # fmt: skip
    from torch.distributed.checkpoint.state_dict import get_state_dict

    if main:  # a checkpoint of this step saved before a rollback: replace it, manifest first
        _manifest_path(path).unlink(missing_ok=True)
        _remove(path)
    barrier()
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optimizer": optim_sd}


def commit_sharded(path: Path, meta: dict[str, Any], step: int | None, metrics: dict[str, float] | None) -> None:
    """Rank 0, once every rank's shards are written: meta.pt, then the manifest (the commit)."""
    atomic_save(meta, path / "meta.pt")
    files = sorted(f for f in path.rglob("*") if f.is_file())
    manifest = {
        "format": FORMAT,
        "kind": "dcp",
        "step": meta.get("step", step),
        "files": {str(f.relative_to(path.parent)): {"size": f.stat().st_size, "sha256": sha256_file(f)} for f in files},
        **({"metrics": metrics} if metrics else {}),
    }
    _atomic_write(_manifest_path(path), lambda f: f.write(json.dumps(manifest, indent=1).encode()))


def save_sharded_to(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    meta: dict[str, Any],
    main: bool,
    barrier: Callable[[], None],
    step: int | None = None,
    metrics: dict[str, float] | None = None,
) -> Path:
    import torch.distributed.checkpoint as dcp

    state = _prepare(path, model, optimizer, main, barrier)
    with _quiet_single_process():
        dcp.save(state, checkpoint_id=str(path))
    if main:  # DCP's save returns on the coordinator only after every rank's shards are written
        commit_sharded(path, meta, step, metrics)
    barrier()
    return path


class HostStager:
    """DCP's DefaultStager for the whole run: staged host copies reuse the buffers of the previous save
    (pinned on CUDA, copied without blocking). At most one save is in flight, so a buffer is never
    refilled while a writer still reads it."""

    def __init__(self, device: torch.device) -> None:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        cuda = device.type == "cuda"
        self.stager = DefaultStager(StagingOptions(use_pinned_memory=cuda, use_shared_memory=False,
                                                   use_async_staging=False, use_non_blocking_copy=cuda))  # fmt: skip

    def close(self) -> None:
        self.stager.close()


def checkpoint_group() -> Any:
    """A gloo process group for DCP's background collectives (every rank must call this, once)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.new_group(backend="gloo")


def save_sharded_async(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    main: bool,
    barrier: Callable[[], None],
    stager: HostStager,
    group: Any,
) -> Future:
    """Stage this rank's shards to host memory and start writing them; returns DCP's future. The caller
    commits with `commit_sharded` (rank 0) once the future resolves."""
    import torch.distributed.checkpoint as dcp

    state = _prepare(path, model, optimizer, main, barrier)
    with _quiet_single_process():
        return dcp.async_save(state, checkpoint_id=str(path), process_group=group, async_stager=stager.stager,
                              no_dist=group is None)  # fmt: skip


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
    return safe_load(path / "meta.pt")


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
