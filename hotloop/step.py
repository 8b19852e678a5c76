"""The train step: one accumulation window in, one optimizer step out, no host reads.

    for each micro-batch i of n:   (gradient sync skipped on all but the last)
        loss_i = loss_fn(model, batch) under autocast
        backward(loss_i / n)       (scaled for fp16)
    unscale_ -> norm -> non-finite flag -> clip -> optimizer step (skipped on the device where the flag
    is set: `precision.py`) -> zero_grad
    scheduler.step()               (once per optimizer step, never per micro-batch)

Dividing by the window's true size n (not by `grad_accum`) makes a short final window an exact
average too. Everything returned is a tensor; the caller decides when to read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hotloop.data import Batch
from hotloop.data import batch_size_of as default_batch_size
from hotloop.errors import LossError
from hotloop.optim import is_plateau
from hotloop.precision import Precision

LossFn = Callable[[nn.Module, Batch], Any]
_NO_CONTEXT = nullcontext()


def default_loss_fn(model: nn.Module, batch: Batch) -> Any:
    """`model(*batch)` for tuples/lists, `model(**batch)` for dicts, `model(batch)` otherwise."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def is_metric_object(v: Any) -> bool:
    """A stateful metric (torchmetrics `Metric`, or anything with update/compute/reset): computed at boundaries."""
    return hasattr(v, "compute") and hasattr(v, "reset") and hasattr(v, "update") and not isinstance(v, torch.Tensor)


def _loss_of(out: Any) -> Any:
    """The loss inside whatever a model or loss function returned (see `as_metrics`)."""
    if isinstance(out, (tuple, list)):
        if not out:
            raise LossError("the loss function returned an empty tuple; its first element must be the loss")
        return out[0]
    if isinstance(out, dict) and type(out) is dict:
        if "loss" not in out:
            raise LossError(f"the loss function returned a dict without a 'loss' key (keys: {sorted(out)})")
        return out["loss"]
    if hasattr(out, "loss"):  # Hugging Face ModelOutput, dataclasses, namedtuple-likes
        loss = out.loss
        if loss is None:
            raise LossError(
                f"the model returned a {type(out).__name__} whose .loss is None: put the targets in the batch "
                "(e.g. a `labels` key) so the model computes its loss, or pass loss_fn=..."
            )
        return loss
    if isinstance(out, Mapping):
        if "loss" not in out:
            raise LossError(f"the loss function returned a mapping without a 'loss' key (keys: {sorted(out)})")
        return out["loss"]
    raise LossError(
        f"the loss function returned a {type(out).__name__}; return a scalar loss tensor, a dict with 'loss', an "
        "object with .loss (Hugging Face outputs) or a tuple whose first element is the loss (pass loss_fn=... "
        "when the model's forward returns logits)"
    )


def as_metrics(out: Any, training: bool = True) -> dict[str, Any]:
    """What a loss function returned, as `{"loss": tensor, <metric>: 0-dim tensor or Metric object, ...}`.

    Accepted: a scalar tensor; a dict with "loss"; an object with `.loss` (Hugging Face `ModelOutput`,
    dataclasses); a tuple/list whose first element is the loss. Beside the loss, only 0-dim tensors and
    stateful metric objects (torchmetrics) are kept; logits, hidden states and other values are ignored,
    never read. Shapes are checked, never values: no device read.
    """
    if isinstance(out, torch.Tensor):
        loss, extra = out, None
    else:
        loss = _loss_of(out)
        extra = out if isinstance(out, Mapping) else None
    if not isinstance(loss, torch.Tensor):
        raise LossError(f"the loss is a {type(loss).__name__}, not a tensor")
    if loss.numel() != 1:
        where = "the first element of the returned tuple" if isinstance(out, (tuple, list)) else "the loss"
        raise LossError(
            f"{where} has shape {tuple(loss.shape)}; return a scalar loss tensor (reduce it with .mean() or .sum()), "
            "or pass loss_fn=... when the model's forward returns logits"
        )
    if training and not loss.requires_grad:
        raise LossError("the loss does not require grad: it was detached or computed under torch.no_grad()")
    metrics: dict[str, Any] = {"loss": loss}
    if extra is not None:
        for k, v in extra.items():
            if k == "loss":
                continue
            if isinstance(v, torch.Tensor):
                if v.dim() == 0:
                    metrics[k] = v
            elif is_metric_object(v):
                metrics[k] = v
    return metrics


def grad_norm(params: list[torch.Tensor]) -> torch.Tensor:
    """Global L2 norm of the gradients, accumulated in fp32 (fp16/bf16 sums of squares overflow, seed 000)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros((), device=params[0].device)
    grads = [g if g.dtype in (torch.float32, torch.float64) else g.float() for g in grads]
    norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=True)
    if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor of per-shard partial norms; reduce it (on the device)
        norm = norm.full_tensor()
    return norm


@dataclass
class StepOutput:
    metrics: dict[str, torch.Tensor]
    """Window means of the loss function's scalars (device tensors; may still carry autograd history)."""
    grad_norm: torch.Tensor
    """Gradient norm before clipping (device tensor)."""
    samples: int
    """Samples in the window (host int from shapes)."""
    lr: float
    """Base LR this step trained with (a Python float; LLRD groups scale it)."""
    nonfinite: torch.Tensor
    """On-device float flag, 1.0 when the loss or gradients were not finite (that update was skipped)."""


class TrainStep:
    """Callable that runs one accumulation window. Owns the order of the numerics, not the policy.

    Host cost matters here: on a GPU a small model is launch-bound, so the step adds as few ops as it
    can to the user's forward and backward (measured by `hotloop bench --workload overhead`): no
    division for a window of one, metrics handed on without copies, one three-op non-finite flag, and
    the gradient norm and clipping on the foreach kernels directly when every gradient is an fp32
    tensor on one device (PyTorch's generic helpers regroup the tensors by device and dtype each call),
    and a fused Adam/AdamW stepped on lists built once (`optim.FusedStep`, via the precision).

    CUDA graphs (`cudagraphs=True`, compile modes that capture them): each micro-batch starts a new
    graph step, the metrics are cloned out of the graph's output buffers (the next replay overwrites
    them), and `.grad` buffers are allocated once and zeroed in place, never set to None - otherwise the
    first backward's graph outputs would become `.grad` and the next replay would overwrite them.

    Static shapes: with a compiled model, a micro-batch whose size differs from the first one (a short
    final batch) runs through `eager_model` instead of sending the compiled graph onto dynamic shapes.
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        precision: Precision,
        clip_grad: float | None,
        no_sync: Callable[[], AbstractContextManager] | None = None,
        batch_size_of: Callable[[Batch], int] | None = None,
        cudagraphs: bool = False,
        eager_model: nn.Module | None = None,
    ) -> None:
        self.model, self.loss_fn, self.optimizer, self.scheduler = model, loss_fn, optimizer, scheduler
        self.precision, self.clip_grad, self.no_sync = precision, clip_grad, no_sync
        self.cudagraphs, self.eager_model = cudagraphs, eager_model
        self.static_size: int | None = None
        self.inspect_grads: Callable[[], None] | None = None
        """Called once with true gradients in place (after unscale, before clipping), then cleared."""
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self.batch_size_of = batch_size_of or default_batch_size
        self.metric_objects: dict[str, Any] = {}
        """Stateful metrics (torchmetrics) the loss function returned, by key: the boundary computes them."""
        self.step_scheduler = scheduler is not None and not is_plateau(scheduler)
        """ReduceLROnPlateau steps on a validation metric at eval boundaries instead (the Trainer does it)."""
        devices = {p.device for p in self.params}
        self.plain_fp32 = len(devices) == 1 and all(
            p.dtype == torch.float32 and type(p) in (torch.Tensor, nn.Parameter) for p in self.params
        )
        """Every gradient is a plain fp32 tensor on one device: the foreach fast path is exact."""
        if cudagraphs:
            for p in self.params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)

    def __call__(self, window: Any) -> StepOutput:
        return self.run(self.update, window)

    def run(self, update: Callable[[Any], tuple], window: Any) -> StepOutput:
        """`update(window)` - this step's own `update`, or a CUDA graph's replay of it (`graphs.py`) - between
        reading the LR it trains with and stepping the schedule."""
        group = self.optimizer.param_groups[-1]
        lr = group["lr"] / group.get("lr_scale", 1.0)
        metrics, norm, samples, bad = update(window)
        if self.step_scheduler:
            self.scheduler.step()
        return StepOutput(metrics, norm, samples, lr, bad)

    def update(self, window: Any) -> tuple[dict[str, torch.Tensor], torch.Tensor, int, torch.Tensor]:
        """The window's forward/backward passes and the optimizer step: (metrics, grad norm, samples, flag).
        Device work only - the schedule is the caller's - so `graphs.py` can capture it whole."""
        n = len(window)
        metrics: dict[str, torch.Tensor] = {}
        samples = 0
        for i, batch in enumerate(window):
            size = self.batch_size_of(batch)
            samples += size
            model = self.model
            if self.eager_model is not None:
                if self.static_size is None:
                    self.static_size = size
                elif size != self.static_size:
                    model = self.eager_model  # a short batch: no recompile, no dynamic-shape graph
            if self.cudagraphs:
                torch.compiler.cudagraph_mark_step_begin()  # output buffers are reused: a new step begins
            with self.no_sync() if self.no_sync is not None and i < n - 1 else _NO_CONTEXT:
                if self.precision.dtype is None:  # fp32: no autocast context to enter
                    out = as_metrics(self.loss_fn(model, batch))
                else:
                    with self.precision.autocast():
                        out = as_metrics(self.loss_fn(model, batch))
                self.precision.backward(out["loss"] / n if n > 1 else out["loss"])
            for k, v in out.items():
                if not isinstance(v, torch.Tensor):
                    self.metric_objects[k] = v  # updated by the loss function; computed at log boundaries
                    continue
                if self.cudagraphs:
                    v = v.detach().clone()
                if n == 1:
                    metrics[k] = v  # handed on as is: no copy, no op (readers detach at the boundary)
                else:
                    metrics[k] = metrics[k] + v.detach() if k in metrics else v.detach()
        with torch.no_grad():
            self.precision.unscale_(self.optimizer)
            if self.inspect_grads is not None:
                self.inspect_grads()
                self.inspect_grads = None
            norm, grads = self._norm()
            bad = self.precision.found_inf(metrics["loss"], norm)
            if self.clip_grad is not None:
                if grads is not None:
                    torch._foreach_mul_(grads, torch.clamp(self.clip_grad / (norm + 1e-6), max=1.0))
                else:
                    torch.nn.utils.clip_grads_with_norm_(self.params, self.clip_grad, norm, foreach=True)
            self.precision.step(self.optimizer, bad)
            self._zero_grad()
            if n > 1:
                metrics = {k: v / n for k, v in metrics.items()}
        return metrics, norm, samples, bad

    def _norm(self) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """The global gradient norm, and the gradients when the foreach fast path applies."""
        if not self.plain_fp32:
            return grad_norm(self.params), None
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return torch.zeros((), device=self.params[0].device), grads
        # plain_fp32: every gradient is float32 here, so the foreach norm cannot overflow (seed 000)
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))), grads  # noqa: HL009

    def _zero_grad(self) -> None:
        if self.cudagraphs:  # stable buffers (see the class docstring)
            torch._foreach_zero_([p.grad for p in self.params if p.grad is not None])
        else:
            for p in self.params:
                p.grad = None
