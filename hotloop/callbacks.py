"""Callbacks: a small, fixed set of hooks.

Hooks that run inside the hot loop (`on_step_end`) receive tensors and must not read them (no
`.item()`, no printing): that would put a sync back into every step. Hooks at boundaries receive
Python floats that were already read; `log_tensors` is how a callback adds its own device tensors to a
log boundary's single read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from hotloop.step import StepOutput
    from hotloop.trainer import Trainer


class Callback:
    def on_fit_start(self, trainer: Trainer) -> None:
        """Before the first step (model on device, optimizer built)."""

    def on_step_end(self, trainer: Trainer, output: StepOutput) -> None:
        """After every optimizer step. `output` holds device tensors: do not read them here."""

    def log_tensors(self, trainer: Trainer) -> dict[str, torch.Tensor] | None:
        """At each log boundary, before its one host read: device tensors (0-dim, or vectors) to add to the
        row. They are read in the same transfer as hotloop's metrics (and averaged over ranks), so a
        callback's own on-device statistics reach metrics.jsonl and every sink without a sync of their own."""
        return None

    def on_log(self, trainer: Trainer, row: dict[str, Any]) -> None:
        """At each log boundary, with the row written to metrics.jsonl (Python values)."""

    def on_validation_end(self, trainer: Trainer, metrics: dict[str, float]) -> None:
        """After each evaluation, with `val_*` metrics as Python floats."""

    def on_fit_end(self, trainer: Trainer) -> None:
        """After the last step, the final evaluation and the final save."""
