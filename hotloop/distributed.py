"""Running on several processes with PyTorch's own engine: torchrun, DDP, FSDP2, gloo/nccl.

    torchrun --nproc_per_node=2 -m hotloop fit recipe=classify strategy=ddp
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend c10d --rdzv_endpoint HOST:29500 -m hotloop fit ...

Nothing here launches processes or moves tensors itself: torchrun starts the ranks and sets RANK,
WORLD_SIZE, LOCAL_RANK and the rendezvous; this module initialises the default process group from
that environment (nccl on CUDA, gloo on CPU, with `dist_timeout`), pins each rank to its local GPU,
and wraps the model:

- `ddp`: `DistributedDataParallel`. Gradient all-reduce is skipped on all but the last micro-batch
  of an accumulation window with `no_sync()`.
- `fsdp`: FSDP2 `fully_shard` on each block (`shard_modules`, the model's `hotloop_shard_modules()`
  or `hotloop_blocks()`, else its largest block list), then on the root; parameters become DTensors
  sharded over the ranks, so the optimizer is built after sharding. bf16 runs use FSDP2's
  `MixedPrecisionPolicy` (bf16 compute, fp32 reduction) instead of autocast. Gradient reduce-scatter
  is skipped on all but the last micro-batch with `set_requires_gradient_sync(False)`.

`batch_size` is per rank. Boundary metrics of all ranks are summed with a single all-reduce of one
flat vector (`reduce_vector`); only rank 0 logs and writes files.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hotloop.errors import ConfigError

STRATEGIES = ("auto", "none", "ddp", "fsdp")


def launched() -> bool:
    """True when this process was started by torchrun (or an equivalent launcher) with a world > 1."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


@dataclass
class Dist:
    """This process's place in the job. One process (`world == 1`) is the degenerate case of everything."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    strategy: str = "none"
    """The resolved strategy: none, ddp or fsdp."""
    owns_group: bool = False
    """This module initialised the process group (and destroys it in `close`)."""

    @property
    def main(self) -> bool:
        """Rank 0: the one that prints, logs and writes whole files."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def reduce_vector(self, flat: torch.Tensor) -> torch.Tensor:
        """Sum `flat` over all ranks in one collective (boundaries only)."""
        if self.active:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        return flat

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order (checkpoint boundaries only: a collective)."""
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def close(self, failed: bool = False) -> None:
        if self.owns_group and dist.is_available() and dist.is_initialized():
            if dist.get_backend() == "gloo" and self.world > 1 and not (failed or _FAILED):
                # Leave together: a rank that destroys its gloo pairs while a peer still talks to it (the last
                # broadcast of a script that ends right after) aborted the process now and then ("terminate
                # called without an active exception", ~1 run in 10 on a loaded 2-core machine). Not on the
                # way out of an error (a peer may be dead); bounded at 30 s otherwise, never a hang.
                try:
                    dist.monitored_barrier(timeout=timedelta(seconds=30))
                except Exception:  # noqa: BLE001 - a dead peer: nothing left to wait for
                    pass
            dist.destroy_process_group()
            self.owns_group = False


def resolve_strategy(strategy: str, world: int) -> str:
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy={strategy} is not one of {', '.join(STRATEGIES)}")
    if strategy == "auto":
        return "ddp" if world > 1 else "none"
    if strategy == "none" and world > 1:
        raise ConfigError(
            f"strategy=none with {world} processes would train {world} unrelated models; use strategy=ddp or fsdp"
        )
    return strategy


def setup(strategy: str, device: str, timeout_s: float) -> tuple[Dist, str]:
    """Join the torchrun job, if any. Returns this rank's `Dist` and the device name it must use."""
    if not launched():
        return Dist(strategy=resolve_strategy(strategy, 1)), device
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    resolved = resolve_strategy(strategy, world)
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if cuda:
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} GPU(s): "
                "lower --nproc_per_node to the GPU count"
            )
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    owns = False
    if not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if cuda else "gloo",
            timeout=timedelta(seconds=timeout_s),
            device_id=torch.device(device) if cuda else None,
        )
        owns = True
    d = Dist(rank, world, local_rank, resolved, owns)
    if owns:
        _OWNED.append(d)
        if len(_OWNED) == 1:
            atexit.register(teardown)
            sys.excepthook = _noting_failure(sys.excepthook)
    return d, device


_OWNED: list[Dist] = []
_FAILED = False  # an uncaught exception is ending the process (set before atexit runs teardown)


def _noting_failure(hook: Any) -> Any:
    def note(*exc: Any) -> None:
        global _FAILED
        _FAILED = True
        hook(*exc)

    return note


def teardown(failed: bool = False) -> None:
    """Destroy the process group hotloop created (the CLI calls this in `finally`; atexit too)."""
    while _OWNED:
        _OWNED.pop().close(failed)


def shard_targets(model: nn.Module, names: str | None) -> list[nn.Module]:
    """The modules FSDP2 shards one by one before the root."""
    if names:
        wanted = {n.strip() for n in names.split(",") if n.strip()}
        found = [m for m in model.modules() if type(m).__name__ in wanted and m is not model]
        if not found:
            present = sorted({type(m).__name__ for m in model.modules()})
            raise ConfigError(f"shard_modules={names} matches no submodule; classes in this model: {present}")
        return found
    if hasattr(model, "hotloop_shard_modules"):
        return list(model.hotloop_shard_modules())
    from hotloop.optim import find_blocks

    return find_blocks(model)


def wrap_fsdp(model: nn.Module, names: str | None, bf16: bool) -> nn.Module:
    """Shard `model` in place with FSDP2 (blocks, then the root)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # As DDP does: every rank starts from rank 0's weights. fully_shard keeps each rank's own slice, so
    # ranks that built the model from different RNG states would otherwise stitch together different inits.
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t.data, src=0)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
    kwargs: dict[str, Any] = {"mp_policy": mp} if mp is not None else {}
    for block in reversed(shard_targets(model, names)):  # inner modules before the ones that contain them
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def wrap_ddp(model: nn.Module, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def no_sync_for(strategy: str, wrapped: nn.Module) -> Any:
    """A context-manager factory that skips gradient synchronisation, or None."""
    if strategy == "ddp":
        return wrapped.no_sync
    if strategy == "fsdp":

        @contextmanager
        def skip_reduce() -> Iterator[None]:
            wrapped.set_requires_gradient_sync(False)  # type: ignore[operator]
            try:
                yield
            finally:
                wrapped.set_requires_gradient_sync(True)  # type: ignore[operator]

        return skip_reduce
    return None


def is_secondary_failure(exc: BaseException) -> bool:
    """An error a rank gets because *another* rank died (its peer closed the connection, a collective timed out)."""
    if not (dist.is_available() and dist.is_initialized()):
        return False
    if isinstance(exc, getattr(dist, "DistError", ())):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "Timed out", "[gloo", "NCCL")
    )
