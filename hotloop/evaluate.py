"""Evaluation: validation means on the device, no host read until the caller's boundary.

`model.eval()` on the model *and* its wrappers (DDP, torch.compile: a loss function may ask
`model.training`), `torch.no_grad()` (never `inference_mode`, which breaks a learnable temperature), the
training RNG left as it was, and means weighted by batch size. Stateful metrics shared with training
(torchmetrics) get a clean state for evaluation and training's comes back after; with a compiled model a
short last batch runs eagerly, so the compiled graph keeps static shapes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from hotloop.data import BatchSource, batch_size_of
from hotloop.errors import DataError
from hotloop.memory import split_batch
from hotloop.metrics import MetricStates, compute_metric_objects
from hotloop.step import as_metrics

if TYPE_CHECKING:
    from hotloop.trainer import Trainer


def evaluate(t: Trainer, source: BatchSource) -> dict[str, torch.Tensor]:
    """Sample-weighted validation means as device tensors (`val_*`); no host read."""
    was_training = t.model.training
    t.forward_model.eval()  # the wrappers too (DDP, torch.compile): a loss_fn may ask `model.training`
    sums: dict[str, torch.Tensor] = {}
    objects: dict[str, Any] = {}
    seen = 0
    devices = [t.device] if t.device.type == "cuda" else []
    step_fn = getattr(t, "_step_fn", None)
    # Stateful metrics shared with training get a clean state for evaluation; training's comes back after.
    training_state = MetricStates(step_fn.metric_objects.values() if step_fn is not None else ())
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices):  # eval leaves training's RNG as it was
            first = None
            for i, batch in enumerate(t._batches(source, 0)):
                if t.cfg.eval_batches and i >= t.cfg.eval_batches:
                    break
                n = batch_size_of(batch)
                first = first or n
                # a short last batch runs eagerly: the compiled model keeps one static-shape graph
                model = t.forward_model if n == first else t.eager_model
                for piece, m in _pieces(t, model, batch, n):
                    for k, v in piece.items():
                        if not isinstance(v, torch.Tensor):
                            objects[k] = v
                            continue
                        v = v.detach().float().reshape(()) * m
                        sums[k] = sums[k] + v if k in sums else v
                seen += n
        computed = compute_metric_objects(objects)
    finally:
        t.forward_model.train(was_training)
        for m in objects.values():
            m.reset()
        training_state.restore()
    if not seen:
        raise DataError("the validation data yielded no batch; pass a non-empty val_data")
    return {f"val_{k}": v / seen for k, v in sums.items()} | {f"val_{k}": v for k, v in computed.items()}


def _pieces(t: Trainer, model: Any, batch: Any, n: int) -> list[tuple[dict[str, Any], int]]:
    """The loss function's outputs for `batch`, with their sample counts. An out-of-memory error halves the
    batch (the evaluation batch only; training's is never touched) and evaluates the halves."""
    try:
        with t.precision.autocast():
            return [(as_metrics(t.loss_fn(model, batch), training=False), n)]
    except torch.OutOfMemoryError:
        if n < 2:
            raise
        if t.device.type == "cuda":
            torch.cuda.empty_cache()
        halves = split_batch(batch, 2)
        return [p for h in halves for p in _pieces(t, t.eager_model, h, batch_size_of(h))]
