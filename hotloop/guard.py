"""Numerical guardrails that cost no per-step sync.

- Non-finite loss or gradients: the train step computes an on-device flag per step and the optimizer
  step is skipped *on the device* (`precision.py` owns that mechanism: fused optimizers take the flag
  as `found_inf`, exactly as a GradScaler hands it over; other optimizers restore a snapshot with
  `torch.where`), so the weights never see the bad update and the host never waits. The flags are
  read at the next boundary together with the metrics, and the log names the affected steps. Then the
  policy acts: `nonfinite="skip"` warns and goes on, `"rollback"` restores the last good checkpoint,
  `"raise"` stops.
- Loss spikes: a logged loss above `spike_factor` x the EMA of earlier logged losses restores the last
  good checkpoint, multiplies the LR by `lr_backoff`, and goes on with the data *after* the window that
  caused it. After `max_rollbacks` it raises.
- The initial-loss check (the first loss against ln(C)) and gradient health after the first backward
  (parameters with no gradient - a DDP hang risk - or an all-zero one) are read at the first boundary.
- `debug_anomaly=true`: backward hooks that name the first module producing a non-finite gradient.
  A debug mode: it reads every gradient on the host (syncs every step) and says so.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from hotloop.errors import HotloopError


class GuardError(HotloopError):
    """Training was stopped by a guardrail (non-finite values, repeated spikes)."""


@dataclass
class GuardState:
    """Host-side guard state; part of every checkpoint so a resumed run behaves the same."""

    ema: float | None = None
    logged: int = 0
    rollbacks: int = 0
    lr_scale: float = 1.0
    nonfinite_steps: list[int] = field(default_factory=list)
    streak: int = 0
    """Consecutive non-finite steps up to the last boundary."""
    streak_start: int = 0
    """The first step of that streak, and the LR it trained with."""
    streak_lr: float = 0.0

    def state_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def diverged(gs: GuardState, flags: list[float], start_step: int, lrs: list[float], max_streak: int) -> str | None:
    """Update the non-finite streak with one interval's per-step flags; a message when training diverged.

    Diverged: every step of the interval (two or more) was non-finite, or `max_streak` steps in a row were.
    Skipping suits a rare bad batch; when nothing is finite any more it only hides the failure.
    """
    for i, f in enumerate(flags):
        if not f:
            gs.streak = 0
            continue
        if gs.streak == 0:
            gs.streak_start, gs.streak_lr = start_step + 1 + i, lrs[i] if i < len(lrs) else 0.0
        gs.streak += 1
    if gs.streak >= max_streak or (len(flags) >= 2 and all(flags)):
        return (
            f"training diverged: {gs.streak} non-finite steps in a row since step {gs.streak_start} "
            f"(lr {gs.streak_lr:.3g} there); lower lr, use a longer warmup_steps, set clip_grad, or use precision=bf16"
        )
    return None


class SpikeDetector:
    """`spike_factor` x EMA of the logged loss; the EMA ignores the first `warmup` rows and the spikes."""

    def __init__(self, factor: float | None, state: GuardState, decay: float = 0.9, warmup: int = 3) -> None:
        self.factor, self.state, self.decay, self.warmup = factor, state, decay, warmup

    def is_spike(self, loss: float) -> bool:
        st = self.state
        if not math.isfinite(loss):
            return False  # the non-finite policy handles it
        spike = bool(self.factor) and st.ema is not None and st.logged >= self.warmup and loss > self.factor * st.ema
        if not spike:
            st.ema = loss if st.ema is None else self.decay * st.ema + (1 - self.decay) * loss
            st.logged += 1
        return spike


def check_initial_loss(first: float, num_classes: int) -> str | None:
    """A warning when the first loss is more than 20% away from ln(C), else None."""
    expected = math.log(num_classes)
    if math.isfinite(first) and abs(first - expected) <= 0.2 * expected:
        return None
    return (
        f"initial loss {first:.4f} is far from ln({num_classes}) = {expected:.4f} expected of an untrained "
        f"{num_classes}-way classifier; likely causes: an output layer initialised too large (logits not near 0), "
        "labels outside [0, C) or num_classes wrong, softmax applied before cross_entropy, a loss summed instead "
        "of averaged, or inputs that are not normalised"
    )


def grad_health_probe(params: list[tuple[str, nn.Parameter]]) -> tuple[list[str], list[str], torch.Tensor | None]:
    """(names without gradient, names probed, on-device flags: the probed gradient is all zeros)."""
    missing = [n for n, p in params if p.requires_grad and p.grad is None]
    probed = [(n, p) for n, p in params if p.grad is not None]
    if not probed:
        return missing, [], None
    flags = torch.stack([p.grad.detach().abs().amax() == 0 for _, p in probed])
    return missing, [n for n, _ in probed], flags


def grad_health_warning(missing: list[str], zero: list[str]) -> str | None:
    parts = []
    if missing:
        parts.append(
            f"no gradient for {', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''} (unused in the loss: "
            "DDP will hang waiting for them; remove them or set requires_grad=False)"
        )
    if zero:
        parts.append(
            f"all-zero gradient for {', '.join(zero[:10])}{' ...' if len(zero) > 10 else ''} (dead units, a "
            "detached branch, or a zero-initialised layer feeding another)"
        )
    return "gradient health after the first backward: " + "; ".join(parts) if parts else None


def install_anomaly_hooks(model: nn.Module) -> list[Any]:
    """Backward hooks naming the first module whose input gradient turns non-finite (debug; syncs)."""

    def make_hook(name: str):
        def hook(module: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
            outs_ok = all(g is None or bool(torch.isfinite(g).all()) for g in grad_output)  # sync: debug mode
            ins_bad = any(g is not None and not bool(torch.isfinite(g).all()) for g in grad_input)  # sync: debug mode
            if outs_ok and ins_bad:
                raise GuardError(
                    f"debug_anomaly: module `{name or type(model).__name__}` ({type(module).__name__}) produced a "
                    "non-finite gradient from finite incoming gradients"
                )

        return hook

    handles = []
    for name, module in model.named_modules():
        if any(True for _ in module.parameters(recurse=False)) or not list(module.children()):
            handles.append(module.register_full_backward_hook(make_hook(name)))
    return handles


def warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)
