"""A log interval: what the loop accumulates between two log boundaries, and the row it becomes.

Per step, only on-device work that costs no read: the loss function's scalars go into running sums
(one `add_` each), the gradient norm and the non-finite flag into lists (no op at all), token counts
returned as tensors into a device sum; samples, time and the host's wait for data are Python numbers.
At the boundary, `pending()` hands every tensor to the one read, and `row()` turns what was read into
the row's training fields:

    loss (and every user metric), grad_norm, clip_frac (the share of steps whose gradient norm exceeded
    clip_grad; the seeds' threshold is 10%), lr, samples_per_s, tokens_per_s, mfu (tokens/s x
    flops_per_token against the GPU's dense bf16 peak), peak_mem_mb (CUDA: max allocated since the last
    row; CPU: the process's peak RSS), data_wait_frac (host time spent waiting for the next batch).
"""

from __future__ import annotations

import resource
import sys
from typing import Any

import torch

from hotloop.metrics import RunningSums


class LogInterval:
    def __init__(
        self, clip_grad: float | None, world: int, device: torch.device, flops_per_token: float | None
    ) -> None:
        self.clip_grad, self.world, self.device = clip_grad, world, device
        self.flops_per_token = flops_per_token
        self.peak = None
        if device.type == "cuda" and flops_per_token:
            from hotloop.benchmarks import peak_flops

            self.peak = peak_flops(torch.cuda.get_device_name(device))
        self.reset(0)

    def reset(self, step: int) -> None:
        self.start_step = step
        self.sums = RunningSums()
        self.norms: list[torch.Tensor] = []
        self.flags: list[torch.Tensor] = []
        self.lrs: list[float] = []
        self.tokens_dev: torch.Tensor | None = None
        self.samples = self.tokens = 0
        self.seconds = self.wait_s = 0.0
        self.ckpt_block_s = 0.0
        """Time the training thread spent on checkpoints this interval (the host copy, or a whole sync save)."""
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)  # allocator counters: host-side, no sync

    @property
    def steps(self) -> int:
        return len(self.norms)

    def add(
        self, metrics: dict[str, torch.Tensor], norm: torch.Tensor, flag: torch.Tensor, samples: int, lr: float
    ) -> None:
        """One optimizer step (no host read; `samples` already counts every rank)."""
        self.sums.add(metrics)
        self.norms.append(norm)
        self.flags.append(flag)
        self.lrs.append(lr)
        self.samples += samples

    def add_tokens(self, tokens: int | torch.Tensor) -> None:
        if isinstance(tokens, torch.Tensor):  # summed on the device; counted at the boundary
            self.tokens_dev = tokens if self.tokens_dev is None else self.tokens_dev + tokens
        else:
            self.tokens += tokens * self.world

    def pending(self) -> dict[str, torch.Tensor]:
        """Every tensor of the interval, for the boundary's one read (nothing is read here)."""
        out = self.sums.means()
        if self.norms:
            norms = torch.stack(self.norms)
            out["grad_norm"] = norms.mean()
            if self.clip_grad is not None:
                out["clip_frac"] = (norms > self.clip_grad).float().mean()
            out["_nonfinite"] = torch.stack(self.flags)
        if self.tokens_dev is not None:
            out["_tokens"] = self.tokens_dev
        return out

    def row(self, probes: dict[str, Any]) -> dict[str, Any]:
        """The interval's host-side fields, after the read (`probes`: the `_`-prefixed values read)."""
        if "tokens" in probes:
            self.tokens += round(probes.pop("tokens") * self.world)  # the mean over ranks, times the ranks
        t = max(self.seconds, 1e-9)
        row: dict[str, Any] = {"samples_per_s": self.samples / t}
        if self.tokens:
            row["tokens_per_s"] = self.tokens / t
            if self.peak and self.flops_per_token:
                row["mfu"] = row["tokens_per_s"] / self.world * self.flops_per_token / self.peak
        row["peak_mem_mb"] = round(peak_memory_mb(self.device), 1)
        row["data_wait_frac"] = round(min(1.0, self.wait_s / t), 4)
        if self.ckpt_block_s:
            row["ckpt_block_s"] = round(self.ckpt_block_s, 4)
        return row


def peak_memory_mb(device: torch.device) -> float:
    """CUDA: max memory allocated since the last reset; elsewhere the process's peak resident set."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / (2**20 if sys.platform == "darwin" else 2**10)
