"""Precision: autocast, loss scaling and the order of the fp16 step.

A `Precision` owns the numerics of one step and nothing else: the autocast context of the forward,
how the loss is backpropagated, how gradients are unscaled before clipping, and how the optimizer
steps. Adding a precision is adding a subclass, never a branch in the train step.

fp16 needs a GradScaler, and its order is fixed: scale -> backward -> `unscale_` -> clip -> `step`
-> `update`. Clipping scaled gradients would clip against a norm 2**16 times too large.

A note on syncs: `GradScaler.step` reads `found_inf` on the host (`.item()`) unless the optimizer
handles scaling itself (`_step_supports_amp_scaling`, true for the fused Adam/AdamW/SGD). hotloop
builds fused optimizers wherever the device has them (see `optim.py`), so an fp16 step skips an
inf/NaN update inside the kernel and the host never waits.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from hotloop.errors import ConfigError
from hotloop.optim import FusedStep


def _flag(x: torch.Tensor) -> torch.Tensor:
    """1.0 where the 0-dim `x` is inf/NaN, else (-)0.0, as float32 (the dtype the fused optimizers read)."""
    flag = torch.nan_to_num(x * 0.0, nan=1.0)
    return flag if flag.dtype == torch.float32 else flag.float()


class Precision:
    """fp32: no autocast, no scaling. Subclasses override the hooks they need.

    Non-finite steps are skipped here, in one place, and on the device: `found_inf` computes an
    on-device flag (1.0 for a bad step) from the window's loss and the gradient norm, and `step`
    applies the update only where it is 0 - without a host read. Fused optimizers take the flag as
    `found_inf`, exactly as a GradScaler hands it over (Adam/AdamW through `optim.FusedStep`), and skip
    inside their kernel; other optimizers step, then put back a snapshot of the weights and moments with
    `torch.where` (it costs a copy of them: use a fused optimizer). A subclass that skips by other means
    (fp16's GradScaler) overrides both.
    """

    name = "fp32"
    dtype: torch.dtype | None = None
    cache_enabled = True
    """Autocast's cache of casted weights; off under a whole-step CUDA graph (`graphs.py`), as PyTorch's
    CUDA-graph notes ask for autocast inside a capture."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._fused: FusedStep | None = None

    def autocast(self) -> AbstractContextManager:
        return nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Make `.grad` hold true gradients (before clipping or reading the norm)."""

    def found_inf(self, loss: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        """On-device float flag: 1.0 when the loss or any gradient is inf/NaN (the norm is then inf/NaN too).

        `x * 0` is (-)0 for a finite x and NaN otherwise, and `nan_to_num` turns that NaN into 1.0 in the
        same float dtype: three kernels (add, mul, nan_to_num), where `isnan(x - x).float()` took four and
        two `isfinite` calls and their logic eleven. -0.0 reads as "not bad" everywhere the flag is used
        (the fused kernels test `== 1`, the step counters subtract it, the skip counter sums it)."""
        return _flag(loss + norm)  # the step calls this under no_grad: no detach needed

    def step(self, optimizer: torch.optim.Optimizer, found_inf: torch.Tensor) -> None:
        """`optimizer.step()`, with no effect where `found_inf` is 1 (never read on the host)."""
        if optimizer.defaults.get("fused"):
            # Known gap: fused SGD with momentum allocates its buffer uninitialised and fills it in the first
            # step's kernel; if that very first step is skipped, the buffer stays uninitialised.
            if self._fused is None or self._fused.optimizer is not optimizer:
                self._fused = FusedStep(optimizer)
            self._fused(found_inf)  # Adam/AdamW without torch.optim's per-call list building (`optim.py`)
            return
        # Non-fused: snapshot parameters and state on their device, step, then keep the old values where bad.
        # (CPU-resident step counters of non-capturable optimizers still advance: reading the flag would sync.)
        bad = found_inf.bool()
        tensors = [p for g in optimizer.param_groups for p in g["params"]]
        tensors += [v for st in optimizer.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
        tensors = [t for t in tensors if t.device == bad.device and t.is_floating_point()]
        snapshot = [t.detach().clone() for t in tensors]
        optimizer.step()
        with torch.no_grad():
            for t, old in zip(tensors, snapshot, strict=True):
                t.copy_(torch.where(bad, old, t))

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class BF16(Precision):
    """bf16 autocast: fp32's range, so no loss scaling. Parameters and optimizer state stay fp32."""

    name = "bf16"
    dtype = torch.bfloat16

    def autocast(self) -> AbstractContextManager:
        return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=self.cache_enabled)


class FP16(Precision):
    """fp16 autocast with a GradScaler; a step whose gradients hold inf/NaN is skipped by the scaler.

    Overflowing steps are part of how a GradScaler finds its scale, so only a non-finite *loss* is
    reported as a bad step; the scaler's own skips are not.
    """

    name = "fp16"
    dtype = torch.float16

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.scaler = torch.amp.GradScaler(device.type)

    def autocast(self) -> AbstractContextManager:
        return torch.autocast(self.device.type, dtype=torch.float16, cache_enabled=self.cache_enabled)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.scaler.unscale_(optimizer)

    def found_inf(self, loss: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        return _flag(loss)  # under no_grad (see the step); the scaler checks the gradients itself

    def step(self, optimizer: torch.optim.Optimizer, found_inf: torch.Tensor) -> None:
        self.scaler.step(optimizer)  # skips inf/NaN gradients (inside the kernel for fused optimizers)
        self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


_PRECISIONS: dict[str, type[Precision]] = {"fp32": Precision, "bf16": BF16, "fp16": FP16}


def resolve_precision(name: str, device: torch.device) -> Precision:
    """Pick the precision: `auto` is bf16 on CUDA that supports it, fp16 on older CUDA, fp32 elsewhere."""
    asked = name
    if name == "auto":
        if device.type == "cuda":
            name = "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"
        else:
            name = "fp32"
    if name not in _PRECISIONS:
        raise ConfigError(f"invalid value for `precision`: {name!r}; allowed: auto, bf16, fp16, fp32")
    if device.type == "cuda" and name == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise ConfigError("precision=bf16 needs a GPU with native bf16 (Ampere or newer); use precision=fp16")
    if device.type == "cuda":
        # TF32 matmuls: ~8x the fp32 matmul rate on Ampere+, with a 10-bit mantissa that training tolerates
        # (the fp32 ops left under autocast, or a whole run with precision=auto). An explicit precision=fp32
        # asks for true fp32, so TF32 is switched off for it.
        tf32 = asked != "fp32"
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        torch.backends.cudnn.allow_tf32 = tf32
    return _PRECISIONS[name](device)
