"""Memory: activation checkpointing, and surviving an out-of-memory step without changing the math.

`activation_checkpointing=full` wraps each block (the same discovery as layer-wise LR decay and FSDP:
`shard_modules`, the model's `hotloop_shard_modules()`/`hotloop_blocks()`, else its largest block list)
in `torch.utils.checkpoint` (non-reentrant): a block keeps only its input for backward and runs its
forward again during backward. Seed 004: activation memory goes from O(L) towards O(sqrt L) for about a
third more compute. `selective` uses PyTorch's selective activation checkpointing (`context_fn` with a
policy): the outputs of the expensive ops (matmuls, attention) are saved, the cheap ones (norms,
activations, dropout masks, adds) recomputed - most of the saving for a fraction of the recompute.

The RNG state is replayed during recomputation (`preserve_rng_state`), so dropout draws the same masks and
the gradients equal those without checkpointing (tested: fp32, CPU, within 1e-6). The wrap replaces each
block's `forward` on the instance, so parameter names and checkpoints are unchanged, and it composes with
`torch.compile`, DDP and FSDP2. In distillation only the student is wrapped (the teacher has no backward).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hotloop.errors import ConfigError, HotloopError

MODES = ("none", "full", "selective")


def _save_expensive() -> Callable[..., Any]:
    from torch.utils.checkpoint import CheckpointPolicy

    aten = torch.ops.aten
    expensive = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default,
                 aten._scaled_dot_product_flash_attention.default,
                 aten._scaled_dot_product_efficient_attention.default,
                 aten._scaled_dot_product_cudnn_attention.default}  # fmt: skip
    cpu_sdpa = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_sdpa is not None:
        expensive.add(cpu_sdpa.default)

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        return CheckpointPolicy.MUST_SAVE if op in expensive else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def apply_activation_checkpointing(model: nn.Module, mode: str, shard_modules: str | None = None) -> int:
    """Wrap `model`'s blocks for `mode` (none, full, selective); returns how many blocks were wrapped."""
    if mode not in MODES:
        raise ConfigError(f"invalid value for `activation_checkpointing`: {mode!r}; allowed: {', '.join(MODES)}")
    if mode == "none":
        return 0
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    from hotloop.distributed import shard_targets

    blocks = shard_targets(model, shard_modules)
    if not blocks:
        raise ConfigError(
            "activation_checkpointing needs the model's blocks: give the model a `hotloop_blocks()` method, a "
            "ModuleList/Sequential of identical blocks, or set shard_modules=BlockClassName"
        )
    kwargs: dict[str, Any] = {"use_reentrant": False, "preserve_rng_state": True}
    if mode == "selective":
        kwargs["context_fn"] = functools.partial(create_selective_checkpoint_contexts, _save_expensive())
    for block in blocks:
        if getattr(block, "_hotloop_checkpointed", False):
            continue
        inner = block.forward

        @functools.wraps(inner)
        def forward(*args: Any, _inner: Callable[..., Any] = inner, **kw: Any) -> Any:
            if not torch.is_grad_enabled():  # evaluation: nothing is saved anyway
                return _inner(*args, **kw)
            return checkpoint(_inner, *args, **kw, **kwargs)

        block.forward = forward
        block._hotloop_checkpointed = True
    return len(blocks)


def activation_bytes(forward: Callable[[], torch.Tensor]) -> int:
    """Bytes allocated by `forward()` and still held when it returns: the activations kept for backward.

    Measured from the profiler's allocation events (allocations minus frees), so it sees what a checkpoint
    keeps too; `saved_tensors_hooks` cannot (inside a checkpointed block the checkpoint's own hooks take
    over, so an outer hook sees nothing of it). Runs the backward afterwards to free the graph."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = forward()
    held = sum(e.self_cpu_memory_usage for e in prof.events())
    loss.backward()
    return int(held)


class OutOfMemory(HotloopError):
    """A step ran out of memory and could not be split further."""


def split_batch(batch: Any, parts: int) -> list[Any]:
    """`batch` cut into `parts` micro-batches along the first dimension (every tensor alike)."""
    from hotloop.data import tree_map

    if parts == 1:
        return [batch]
    pieces: list[Any] = []
    for i in range(parts):
        pieces.append(tree_map(lambda t, i=i: t.tensor_split(parts)[i], batch))
    return pieces


class MicroBatches:
    """`auto_micro_batch=true`: an out-of-memory step is retried with each micro-batch split in two.

    The window keeps its data, so the optimizer step sees the same global batch: the train step divides
    the loss by the window's micro-batch count, and halves of equal size average exactly to the whole
    (an odd size gives halves one sample apart, and the mean differs in the last bits). The split is
    kept for the rest of the run and saved in the checkpoint; each new split is an event row."""

    def __init__(self, enabled: bool, split: int = 1) -> None:
        self.enabled, self.split = enabled, split

    def run(self, step_fn: Any, window: Any, optimizer: Any, event: Callable[[dict], None]) -> Any:
        if not self.enabled:
            return step_fn(window)
        window = list(window)  # a retry needs the same batches again (a lazy window would take new ones)
        if self.split > 1:
            window = [piece for batch in window for piece in split_batch(batch, self.split)]
        while True:
            try:
                return step_fn(window)
            except torch.OutOfMemoryError as e:
                if not self.enabled:
                    raise
                from hotloop.data import batch_size_of

                smallest = min(batch_size_of(b) for b in window)
                optimizer.zero_grad(set_to_none=True)  # drop the failed step's gradients and cached blocks
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                if smallest < 2:
                    raise OutOfMemory(
                        "out of memory with micro-batches of one sample: lower the model's memory "
                        "(activation_checkpointing=full, precision=bf16) or shard it (strategy=fsdp)"
                    ) from e
                window = [piece for batch in window for piece in split_batch(batch, 2)]
                self.split *= 2
                event(
                    {
                        "event": "micro_batch",
                        "reason": f"out of memory: each batch now runs as {self.split} "
                        f"micro-batches of ~{max(1, smallest // 2)} samples (same global batch)",
                        "split": self.split,
                    }
                )


def memory_check(t: Any, source: Any) -> None:
    """`memory_check` (auto: on CUDA): before step 1 of a fresh run, `preflight` the first batch when the source
    can be peeked without moving it (in-memory tensors, a DataLoader that is not stateful)."""
    from hotloop.data import LoaderSource, TensorSlices

    on = t.cfg.memory_check
    on = t.device.type == "cuda" if on == "auto" else on
    peekable = isinstance(source, TensorSlices) or (isinstance(source, LoaderSource) and not source.stateful)
    if not on or t.state.step > 0 or not peekable:
        return
    batch = next(iter(t._batches(source, 0)), None)
    if batch is not None:
        line = preflight(t, batch)
        if t.dist.main:
            print(line, flush=True)


def preflight(t: Any, batch: Any) -> str:
    """One forward/backward at the first batch's shape before step 1: does a step fit in memory?

    On CUDA the peak (`max_memory_allocated`) is compared with the device's capacity; an out-of-memory
    error stops the run before any training with the peak, the capacity and the fixes (unless
    `auto_micro_batch` will split it). On the CPU the step's peak allocation is measured (profiler
    allocation events). Nothing of the step stays: the RNG is forked, buffers (BatchNorm statistics) are
    put back, gradients dropped, stateful metrics reset. Returns the line to print.
    """
    from hotloop.data import batch_size_of
    from hotloop.step import as_metrics

    model = t.model
    buffers = {k: b.detach().clone() for k, b in model.named_buffers()}
    cuda = t.device.type == "cuda"
    shape = _shape(batch)
    peak = 0
    with torch.random.fork_rng(devices=[t.device] if cuda else []):
        try:
            if cuda:
                torch.cuda.reset_peak_memory_stats(t.device)
                out = _one_step(t, batch, as_metrics)
                peak = torch.cuda.max_memory_allocated(t.device)
            else:
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                    out = _one_step(t, batch, as_metrics)
                running = 0
                for e in sorted(prof.events(), key=lambda e: e.time_range.start):
                    running += e.self_cpu_memory_usage
                    peak = max(peak, running)
        except torch.OutOfMemoryError:
            model.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.empty_cache()
            if t.cfg.auto_micro_batch:
                return f"hotloop: memory check: a batch {shape} does not fit; auto_micro_batch will split it"
            total = torch.cuda.mem_get_info(t.device)[1] if cuda else 0
            raise OutOfMemory(
                f"one training step at batch shape {shape} does not fit in memory"
                + (f" ({total / 2**30:.1f} GiB on {torch.cuda.get_device_name(t.device)})" if cuda else "")
                + f": lower batch_size (now {batch_size_of(batch)}) and raise grad_accum, or set "
                "activation_checkpointing=full, precision=bf16, or auto_micro_batch=true"
            ) from None
    for v in out.values():
        if not isinstance(v, torch.Tensor) and hasattr(v, "reset"):
            v.reset()
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        for k, b in model.named_buffers():
            b.copy_(buffers[k])
    if cuda:
        total = torch.cuda.mem_get_info(t.device)[1]
        return (f"hotloop: memory check: one step at batch {shape} peaks at {peak / 2**30:.2f} GiB of "
                f"{total / 2**30:.1f} GiB ({peak / total:.0%})")  # fmt: skip
    return f"hotloop: memory check: one step at batch {shape} peaks at {peak / 2**20:.1f} MiB of allocations (CPU)"


def _one_step(t: Any, batch: Any, as_metrics: Any) -> dict[str, Any]:
    with t.precision.autocast():
        out = as_metrics(t.loss_fn(t.forward_model, batch))
    out["loss"].backward()
    return out


def _shape(batch: Any) -> str:
    from hotloop.data import first_tensor

    x = first_tensor(batch)
    return "x".join(map(str, x.shape)) if x is not None else "?"
