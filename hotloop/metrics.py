"""Metrics that stay on the device until a boundary, then cost one host read for all of them.

Inside the hot loop every scalar (loss, the user's metrics, the gradient norm) is added into a
running on-device sum: `sums[k] += value.detach()`, which queues a kernel and returns at once. At a
log or eval boundary `read_scalars` stacks every pending tensor and calls `.tolist()` once: one
device-to-host copy, one sync, however many metrics there are. Counts (steps, samples) are Python
ints kept on the host, so dividing a sum by its count needs no device read either.

Stateful metrics (torchmetrics `Metric` objects a loss function returns after updating them) follow the
same rule: `compute()` runs on the device at the boundary and its result joins the one read; then
the metric is reset. Evaluation gives them a clean state of their own and puts training's back after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class RunningSums:
    """Per-key running sums on the device plus a host-side count of the updates since the last reset."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.count = 0

    def add(self, values: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():  # values may still carry autograd history: no detach op needed under no_grad
            for k, v in values.items():
                if k in self.sums:
                    self.sums[k].add_(v)
                else:
                    self.sums[k] = v.detach().float().clone()
        self.count += 1

    def means(self) -> dict[str, torch.Tensor]:
        """Device tensors of the means (no read); empty if nothing was added."""
        return {k: v / self.count for k, v in self.sums.items()} if self.count else {}

    def reset(self) -> None:
        self.sums = {}
        self.count = 0


def read_scalars(
    values: dict[str, torch.Tensor], reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> dict[str, Any]:
    """Read every tensor in `values` with a single host transfer.

    Scalars come back as floats, vectors (e.g. per-step flags) as lists of floats. `reduce` (several
    ranks: the mean over ranks) is applied to the one flat vector first, so it is one collective.
    """
    if not values:
        return {}
    keys = list(values)
    device = values[keys[0]].device
    # (a DTensor - a probe over FSDP2-sharded gradients - is made whole first; a collective, on the device)
    local = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in values.items()}
    # float64: token and sample counts stay exact past 2**24
    flat = [local[k].detach().to(torch.float64).reshape(-1).to(device) for k in keys]
    vector = torch.cat(flat)
    if reduce is not None:
        vector = reduce(vector)
    numbers = vector.tolist()  # sync: the one read of a boundary
    out: dict[str, Any] = {}
    i = 0
    for k, t in zip(keys, flat, strict=True):
        n = t.numel()
        out[k] = numbers[i] if values[k].dim() == 0 else numbers[i : i + n]
        i += n
    return out


def compute_metric_objects(objects: dict[str, Any]) -> dict[str, torch.Tensor]:
    """`compute()` of each stateful metric as device tensors (no read); metrics never updated are left out."""
    out: dict[str, torch.Tensor] = {}
    for k, m in objects.items():
        if getattr(m, "update_count", getattr(m, "_update_count", 1)) == 0:
            continue
        value = m.compute()
        if isinstance(value, dict):  # a MetricCollection: one entry per member
            out.update({f"{k}_{name}": v.detach() for name, v in value.items() if isinstance(v, torch.Tensor)})
        elif isinstance(value, torch.Tensor):
            out[k] = value.detach()
    return out


class MetricStates:
    """Set stateful metrics aside: their state is saved and reset now, and put back by `restore()`."""

    def __init__(self, metrics: Iterable[Any]) -> None:
        self.saved = [(m, _metric_state(m)) for m in metrics]
        for m, _ in self.saved:
            m.reset()

    def restore(self) -> None:
        for m, state in self.saved:
            values, count = state
            for k, v in values.items():
                setattr(m, k, v)
            if hasattr(m, "_update_count"):
                m._update_count = count
            if hasattr(m, "_computed"):
                m._computed = None


def _metric_state(m: Any) -> tuple[dict[str, Any], int]:
    """A copy of a metric's state: torchmetrics' `metric_state` (tensors and lists of tensors)."""
    state = getattr(m, "metric_state", None)
    if state is None:
        import copy

        state = {k: v for k, v in vars(m).items() if not k.startswith("__")}
        return copy.deepcopy(state), 0
    copied = {k: v.clone() if isinstance(v, torch.Tensor) else [t.clone() for t in v] for k, v in state.items()}
    return copied, getattr(m, "_update_count", 0)


def note_validate_args(objects: dict[str, Any], noted: set[str]) -> None:
    """Say once per metric that torchmetrics' `validate_args=True` reads the device on every update."""
    for k, m in objects.items():
        if getattr(m, "validate_args", False) and k not in noted:
            noted.add(k)
            print(f"hotloop: note: the metric '{k}' ({type(m).__name__}) checks its arguments on every update, "
                  "which reads the device each step; create it with validate_args=False")  # fmt: skip
