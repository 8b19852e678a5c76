"""The contenders: one function per training stack, each running `warmup + steps` optimizer steps of a workload.

Every variant uses the same model, data, batch size, AdamW (fused, with the seeds' decay/no-decay
groups), gradient clipping at 1.0 and precision, compiles the model on CUDA, and reads its loss on the
host once every 50 steps at most:

- `plain`: the best loop a strong engineer writes by hand from the seeds - in-memory tensors sliced a
  batch at a time with a shuffled index (kept on the GPU on CUDA), the loss summed on the device and
  read every 50 steps, `torch.compile` and bf16 autocast on CUDA. This is the baseline of every ratio.
- `naive`: the same loop fed by a per-sample `DataLoader` (how most people feed tensors).
- `hotloop`: `hotloop.Trainer` given the tensors.
- `lightning`: a `LightningModule` logging its loss with `self.log`, fed by a DataLoader that fetches a
  whole batch per index list (one gather, not 256 sample calls), compiled and bf16 on CUDA like plain.
- `accelerate`: an `Accelerator`-prepared loop over that same batched DataLoader, compiled and bf16 on CUDA.
- `hotloop-graphs`, `hotloop-step-graph` (opt-in, CUDA only): hotloop with `compile="reduce-overhead"` (CUDA
  graphs of the model's passes) and with `cuda_graph="step"` (the whole step in one graph, `graphs.py`),
  for launch-bound models such as `mlp`. `hotloop-eager` (CUDA only): hotloop with its default
  `cuda_graph=auto` turned off - the row `hotloop` was before auto.

A `Window` marks the measured steps (after warmup) and synchronises the device at its two ends only.
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from hotloop.benchmarks.workloads import Workload

SYNC_EVERY = 50


class Window:
    """Times steps (warmup, warmup + steps]; `label` tells a host-read counter which reads fall inside.

    On CUDA it also reads the peak allocated memory at the window's end (a stack may reset the peak
    counter later, at its own boundaries), and with `cuda_syncs=True` it turns
    `torch.cuda.set_sync_debug_mode("warn")` on for the measured steps only, so a caller catching warnings
    counts the syncs of those steps - not compilation's, warmup's, or the window's own two."""

    def __init__(self, device: torch.device, warmup: int, steps: int, counter: Any = None,
                 cuda_syncs: bool = False) -> None:  # fmt: skip
        self.device, self.warmup, self.steps, self.counter = device, warmup, steps, counter
        self.cuda_syncs = cuda_syncs and device.type == "cuda"
        self.t0 = self.t1 = 0.0
        self.peak_mb = 0.0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def tick(self, step: int) -> None:
        """Call after optimizer step number `step` (1-based) completed on the host."""
        if step == self.warmup:
            self._sync()
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(self.device)
            self.t0 = time.perf_counter()
            if self.counter is not None:
                self.counter.label = "window"
            if self.cuda_syncs:
                torch.cuda.set_sync_debug_mode("warn")
        elif step == self.warmup + self.steps:
            if self.cuda_syncs:
                torch.cuda.set_sync_debug_mode(0)
            self._sync()
            self.t1 = time.perf_counter()
            if self.device.type == "cuda":
                self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
            if self.counter is not None:
                self.counter.label = "after"

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


def _loader(w: Workload, device: torch.device) -> DataLoader:
    """Per-sample loading: 256 `__getitem__` calls and a collate per batch (the `naive` feed)."""
    cuda = device.type == "cuda"
    return DataLoader(
        TensorDataset(w.x, w.y),
        batch_size=w.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=4 if cuda else 0,
        pin_memory=cuda,
        persistent_workers=cuda,
        generator=torch.Generator().manual_seed(0),
    )


class _Batches(Dataset):
    """In-memory tensors whose `__getitems__` (the DataLoader fetcher's batched path) gathers a whole batch at
    once: one `index_select` per tensor per batch, not 256 sample calls and a collate."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]

    def __getitems__(self, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        i = torch.as_tensor(idx)
        return self.x.index_select(0, i), self.y.index_select(0, i)


def _as_is(batch: Any) -> Any:
    return batch


def _batched_loader(w: Workload, device: torch.device) -> DataLoader:
    """The fast way to feed in-memory tensors through a DataLoader (for the stacks that need one)."""
    return DataLoader(_Batches(w.x, w.y), batch_size=w.batch_size, shuffle=True, drop_last=True, collate_fn=_as_is,
                      pin_memory=device.type == "cuda", generator=torch.Generator().manual_seed(0))  # fmt: skip


def _autocast(w: Workload, device: torch.device) -> contextlib.AbstractContextManager:
    if w.precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _groups(model: torch.nn.Module, weight_decay: float = 0.01) -> list[dict[str, Any]]:
    """The seeds' decay/no-decay split: matrices decay; biases, norms and other vectors do not."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]  # fmt: skip


def _compiled(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    return torch.compile(model) if device.type == "cuda" else model


def _hand_loop(w: Workload, device: torch.device, window: Window, batches: Callable[[], Any]) -> None:
    """The seeds' hand-written step, fed by `batches()` (one epoch of device batches per call)."""
    torch.manual_seed(0)
    model = w.make_model().to(device)
    opt = torch.optim.AdamW(_groups(model), lr=w.lr, fused=True)
    fwd = _compiled(model, device)
    running = torch.zeros((), device=device)
    total, step = window.warmup + window.steps, 0
    while step < total:
        for xb, yb in batches():
            with _autocast(w, device):
                loss = fwd(xb, yb)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            running += loss.detach()
            step += 1
            if step % SYNC_EVERY == 0:
                _ = (running / SYNC_EVERY).item()  # the one sync of a log interval
                running.zero_()
            window.tick(step)
            if step >= total:
                break


def run_plain(w: Workload, device: torch.device, window: Window) -> None:
    x, y = w.x, w.y
    if device.type == "cuda":  # resident on the GPU: no copy per step
        x, y = x.to(device), y.to(device)
    n, b = x.shape[0] // w.batch_size, w.batch_size
    g = torch.Generator().manual_seed(0)

    def sliced() -> Any:  # a shuffled index per epoch, one gather per tensor per batch
        order = torch.randperm(x.shape[0], generator=g).to(device, non_blocking=True)
        for i in range(n):
            idx = order[i * b : (i + 1) * b]
            yield x.index_select(0, idx), y.index_select(0, idx)

    _hand_loop(w, device, window, sliced)


def run_naive(w: Workload, device: torch.device, window: Window) -> None:
    loader = _loader(w, device)

    def per_sample() -> Any:
        for xb, yb in loader:
            yield xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)

    _hand_loop(w, device, window, per_sample)


def run_hotloop(w: Workload, device: torch.device, window: Window, **overrides: Any) -> None:
    from hotloop import Callback, TrainConfig, Trainer

    class Tick(Callback):
        def on_step_end(self, trainer: Trainer, output: Any) -> None:
            window.tick(trainer.state.step)

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = TrainConfig(max_steps=window.warmup + window.steps, batch_size=w.batch_size, lr=w.lr,
                          schedule="constant", clip_grad=1.0, precision=w.precision, log_every=SYNC_EVERY,
                          eval_every=0, run_dir=run_dir, progress="off", tensorboard=False,
                          device=str(device), seed=0, **overrides)  # fmt: skip
        torch.manual_seed(0)
        Trainer(w.make_model(), cfg, callbacks=[Tick()]).fit((w.x, w.y))


CUDA_GRAPH_VARIANTS = {
    "hotloop-graphs": {"compile": "reduce-overhead"},
    "hotloop-step-graph": {"cuda_graph": "step"},
    "hotloop-eager": {"cuda_graph": "off"},
}
"""hotloop's CUDA-graph variants and their config (refused off CUDA by `check_variants`): the opt-in modes, and
the default's `cuda_graph=auto` turned off, to show what auto's graph is worth."""


def run_lightning(w: Workload, device: torch.device, window: Window) -> None:
    import lightning as L

    class Lit(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = w.make_model()
            self.fwd = _compiled(self.model, device)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = self.fwd(*batch)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(_groups(self.model), lr=w.lr, fused=True)

        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None, **_: Any) -> None:
            # Lightning's mixed-precision plugin refuses to clip for a fused optimizer (it cannot unscale
            # first). Under bf16 or fp32 there is no scaler, so clipping directly is exact: what a strong
            # Lightning user writes to keep fused AdamW rather than fall back to the slower foreach one.
            torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val or 1.0)

    class Tick(L.Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            window.tick(trainer.global_step)

    torch.manual_seed(0)
    trainer = L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        max_steps=window.warmup + window.steps,
        precision="bf16-mixed" if w.precision == "bf16" else "32-true",
        gradient_clip_val=1.0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[Tick()],
    )
    trainer.fit(Lit(), _batched_loader(w, device))


def run_accelerate(w: Workload, device: torch.device, window: Window) -> None:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    # Accelerate keeps its state per process and refuses a second Accelerator with another precision;
    # one bench process runs several workloads (gpt2 in bf16, then mlp in fp32), so start each run clean.
    AcceleratorState._reset_state(reset_partial_state=True)
    acc = Accelerator(cpu=device.type != "cuda", mixed_precision="bf16" if w.precision == "bf16" else "no")
    torch.manual_seed(0)
    model = w.make_model()
    opt = torch.optim.AdamW(_groups(model), lr=w.lr, fused=True)
    model, opt, loader = acc.prepare(model, opt, _batched_loader(w, device))
    fwd = _compiled(model, device)
    running = torch.zeros((), device=acc.device)
    total, step = window.warmup + window.steps, 0
    while step < total:
        for xb, yb in loader:
            with acc.autocast():
                loss = fwd(xb, yb)
            acc.backward(loss)
            acc.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            running += loss.detach()
            step += 1
            if step % SYNC_EVERY == 0:
                _ = (running / SYNC_EVERY).item()
                running.zero_()
            window.tick(step)
            if step >= total:
                break


VARIANTS: dict[str, Callable[[Workload, torch.device, Window], None]] = {
    "plain": run_plain,
    "naive": run_naive,
    "hotloop": run_hotloop,
    "lightning": run_lightning,
    "accelerate": run_accelerate,
    **{name: functools.partial(run_hotloop, **overrides) for name, overrides in CUDA_GRAPH_VARIANTS.items()},
}
DEFAULT_VARIANTS = ["plain", "naive", "hotloop", "lightning", "accelerate"]  # the CUDA-graph variants: ask for them
REQUIRES = {"lightning": "lightning", "accelerate": "accelerate"}
