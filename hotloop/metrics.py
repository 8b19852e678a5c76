"""Metrics that stay on the device until a boundary, then cost one host read for all of them.

Inside the hot loop every scalar (loss, the user's metrics, the gradient norm) is added into a
running on-device sum: `sums[k] += value.detach()`, which queues a kernel and returns at once. At a
log or eval boundary `read_scalars` stacks every pending tensor and calls `.tolist()` once: one
device-to-host copy, one sync, however many metrics there are. Counts (steps, samples) are Python
ints kept on the host, so dividing a sum by its count needs no device read either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class RunningSums:
    """Per-key running sums on the device plus a host-side count of the updates since the last reset."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.count = 0

    def add(self, values: dict[str, torch.Tensor]) -> None:
        for k, v in values.items():
            v = v.detach().float()
            if k in self.sums:
                self.sums[k] += v
            else:
                self.sums[k] = v.clone()
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
    flat = [local[k].detach().float().reshape(-1).to(device) for k in keys]
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
