"""Counting host reads of tensor values with a `TorchFunctionMode`.

On CUDA, reading a tensor's value on the host (`.item()`, `float(t)`, `if t:`, printing, `.tolist()`,
`.numpy()`, data-dependent shapes such as `nonzero` or boolean-mask indexing, `torch.tensor` over a
list of tensors) waits for every queued kernel. The same Python calls happen on the CPU, where they
are cheap, so counting them there shows on a laptop, and in CI, what would stall a GPU.

Reads that PyTorch makes of host-resident bookkeeping - a CPU tensor read inside `torch.optim` or
`torch.utils.data`, such as the step counters of a non-fused optimizer or a DataLoader's seed - are not
syncs on any device and are not counted.
Reads PyTorch makes on the user's behalf that would sync on CUDA (`GradScaler.step` with a
non-fused optimizer, `clip_grad_norm_(error_if_nonfinite=True)`) are counted, attributed to the
first frame outside torch.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OPTIM_DIR = os.path.join(os.path.dirname(torch.__file__), "optim") + os.sep
_THIS_FILE = os.path.abspath(__file__)
# CPU tensors read inside these are host bookkeeping (optimizer step counters, the DataLoader's seed and
# sampler order), not syncs on any device.
_BOOKKEEPING_DIRS = (_OPTIM_DIR, os.path.join(os.path.dirname(torch.__file__), "utils", "data") + os.sep)

_ALWAYS = {
    "item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__", "__complex__",
    "__format__", "__repr__", "__str__", "__array__", "nonzero", "argwhere", "masked_select",
    "unique", "unique_consecutive", "nonzero_static", "repeat_interleave",
}  # fmt: skip


def _has_tensor(obj: Any) -> bool:
    if isinstance(obj, torch.Tensor):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_has_tensor(o) for o in obj)
    return False


def _bool_index(index: Any) -> bool:
    if isinstance(index, torch.Tensor):
        return index.dtype == torch.bool
    if isinstance(index, tuple):
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index)
    return False


def _read_kind(func: Any, args: tuple, kwargs: dict) -> str | None:
    """The name of the host read `func(*args)` performs, or None if it performs none."""
    name = getattr(func, "__name__", "")
    if name in _ALWAYS:
        if name == "repeat_interleave" and not (len(args) > 1 and isinstance(args[1], torch.Tensor)):
            return None
        return name
    if name == "__getitem__" and len(args) > 1 and _bool_index(args[1]):
        return "boolean-mask index"
    if func in (torch.tensor, torch.as_tensor) and args and isinstance(args[0], (list, tuple)) and _has_tensor(args[0]):
        return f"torch.{name} over tensors"
    if name in ("cpu", "to") and args and isinstance(args[0], torch.Tensor) and args[0].device.type != "cpu":
        target = args[1] if len(args) > 1 else kwargs.get("device")
        if name == "cpu" or str(target).startswith("cpu"):
            return f".{name}() to host"
    if name in ("to", "cuda", "copy_"):
        return _host_to_device(name, args, kwargs)
    if func in (torch.tensor, torch.as_tensor) and _is_accelerator(kwargs.get("device")):
        return f"torch.{name}(..., device={kwargs['device']}) (blocking host-to-device copy)"
    return None


def _is_accelerator(device: Any) -> bool:
    if not isinstance(device, (str, torch.device)):
        return False
    try:
        return torch.device(device).type not in ("cpu", "meta")
    except (RuntimeError, TypeError):
        return False


def _host_to_device(name: str, args: tuple, kwargs: dict) -> str | None:
    """A copy from host memory to an accelerator that makes the host wait.

    Without `non_blocking=True` the host waits for the copy (and for the stream to reach it). With it, a
    copy from pageable (unpinned) memory is still synchronous: the driver stages pageable memory through
    a pinned buffer itself, and `set_sync_debug_mode` does not flag it. Only the arguments are inspected
    (the target device is named, not created), so both are checked on any machine, the CPU included.
    """
    if name == "copy_":
        dst, src = (args[0], args[1]) if len(args) > 1 else (None, None)
        if not isinstance(dst, torch.Tensor) or dst.device.type in ("cpu", "meta"):
            return None
        non_blocking = kwargs.get("non_blocking") or (len(args) > 2 and args[2] is True)
    else:
        src = args[0] if args else None
        if name == "cuda":
            target: Any = "cuda"
        else:
            found = (a for a in args[1:] if isinstance(a, (str, torch.device, torch.Tensor)))
            target = next(found, kwargs.get("device"))
            if isinstance(target, torch.Tensor):  # .to(other_tensor)
                target = target.device
        if not _is_accelerator(target):
            return None
        non_blocking = kwargs.get("non_blocking") or any(a is True for a in args[1:])
    if not isinstance(src, torch.Tensor) or src.device.type != "cpu":
        return None
    if not non_blocking:
        return f".{name}() host-to-device copy without non_blocking (blocking)"
    if not src.is_pinned():
        return "non_blocking copy from unpinned memory"
    return None


_MARK = "_hotloop_device_side"


def _to_host(func: Any) -> bool:
    """`.cpu()`, or a `.to()` whose line spells `"cpu"`: on a CPU run the device variable is "cpu" too, so only
    the source tells a copy back to the host from a move to the script's device."""
    import linecache

    name = getattr(func, "__name__", "")
    if name != "to":
        return name == "cpu"
    frame = sys._getframe(1)
    while frame is not None and (
        frame.f_code.co_filename.startswith(_TORCH_DIR) or frame.f_code.co_filename == _THIS_FILE
    ):
        frame = frame.f_back
    if frame is None:
        return False
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).replace(" ", "")
    return "'cpu'" in text or '"cpu"' in text


def _is_device_side(t: Any) -> bool:
    return isinstance(t, torch.nn.Parameter) or getattr(t, _MARK, False)


def _mark(out: Any) -> None:
    if isinstance(out, torch.Tensor):
        try:
            setattr(out, _MARK, True)
        except (AttributeError, RuntimeError):
            pass
    elif isinstance(out, (list, tuple)):
        for o in out:
            _mark(o)


def _device_side(func: Any, args: tuple, kwargs: dict) -> bool:
    """Would `func`'s result live on the accelerator in a GPU run? Yes when an input would (a parameter, a
    model output, anything computed from them), when the script moves a tensor to its device
    (`.to(device)`, `.cuda()`), or creates one there (`device=`). A CPU tensor of random offsets used to
    slice a NumPy array (nanoGPT's `ix`) stays on the host: reading it is no device sync."""
    if _to_host(func):
        return False  # brought back to the host: reading the copy is no sync (the copy itself was)
    name = getattr(func, "__name__", "")
    if name == "cuda" or (name == "to" and any(isinstance(a, (str, torch.device)) for a in args[1:])):
        return True
    if "device" in kwargs and kwargs["device"] is not None:
        return True
    for a in args:
        if _is_device_side(a):
            return True
        if isinstance(a, (list, tuple)) and any(_is_device_side(x) for x in a[:8]):
            return True
    return any(_is_device_side(v) for v in kwargs.values())


@dataclass(frozen=True)
class HostRead:
    kind: str
    """The operation (`item`, `__bool__`, `boolean-mask index`, ...)."""
    filename: str
    """First frame outside torch: the code that caused the read."""
    lineno: int
    label: Any
    """What the counter's `label` was when the read happened (e.g. the step)."""
    host_only: bool = False
    """With provenance tracking: the tensor would stay on the host in a GPU run (not derived from the model's
    parameters or outputs, never moved to the script's device), so this read is no device sync."""


class HostReadCounter(TorchFunctionMode):
    """Record host reads while active.

        with HostReadCounter() as c:
            train()
        print(c.total, c.by_site())

    Set `counter.label` (e.g. to the current step) to group reads; `reads` keeps each one in order.
    """

    def __init__(self, skip_dirs: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.reads: list[HostRead] = []
        self.label: Any = None
        self.skip_dirs = (_TORCH_DIR, *skip_dirs)
        """Frames under these directories are not "the user's code" (torch always; doctor adds more)."""
        self.depth = 0
        """> 0 while a read found at the Python level runs (so the dispatch level does not count it twice)."""
        self.sink: Any = None
        """Called with each `HostRead` as it is recorded (doctor's DataLoader workers stream them to a file)."""
        self.provenance = False
        """Track which tensors would live on the accelerator (doctor turns it on; see `_device_side`)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        kind = _read_kind(func, args, kwargs)
        if kind is None and self.provenance and args and _is_device_side(args[0]) and _to_host(func):
            # On a CPU run a no-op returning the same (marked) tensor; in the GPU run a device-to-host copy:
            # record it, and hand back an unmarked alias so that reads of the host copy are host-only.
            self._record(f".{func.__name__}() to host", args)
            out = func(*args, **kwargs)
            return out.view_as(out) if out is args[0] else out
        if kind is None:
            out = func(*args, **kwargs)
            if self.provenance and _device_side(func, args, kwargs):
                _mark(out)
            return out
        self._record(kind, args)
        self.depth += 1
        try:
            return func(*args, **kwargs)
        finally:
            self.depth -= 1

    def _record(self, kind: str, args: tuple, start: int = 2, classify: bool = True) -> None:
        frame = sys._getframe(start)
        in_optim = False
        fallback = None  # first frame outside torch: used when no frame is the user's (e.g. hotloop's own loop)
        while frame is not None:
            fname = frame.f_code.co_filename
            if fname.startswith(_BOOKKEEPING_DIRS):
                in_optim = True
            outside_torch = not fname.startswith(_TORCH_DIR) and os.path.abspath(fname) != _THIS_FILE
            if fallback is None and outside_torch and not fname.startswith("<"):
                fallback = frame
            if outside_torch and not fname.startswith(self.skip_dirs) and not fname.startswith("<"):
                break  # ("<frozen runpy>", "<string>": not a file of the user's)
            frame = frame.f_back
        frame = frame or fallback
        tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if in_optim and tensor is not None and tensor.device.type == "cpu":
            return  # host-resident optimizer bookkeeping: not a sync on any device
        site = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("<unknown>", 0)
        host_only = classify and self.provenance and tensor is not None and not _is_device_side(tensor)
        read = HostRead(kind, site[0], site[1], self.label, host_only)
        self.reads.append(read)
        if self.sink is not None:
            self.sink(read)

    def record_here(self, kind: str) -> None:
        """Record a sync found by other means (a patched `torch.cuda.synchronize`, a sync-debug warning)."""
        if self.depth == 0:
            self._record(kind, (), start=2)

    @property
    def total(self) -> int:
        return len(self.reads)

    def by_label(self) -> Counter:
        return Counter(r.label for r in self.reads)

    def by_site(self) -> Counter:
        return Counter((r.filename, r.lineno, r.kind) for r in self.reads)


class DispatchReads(TorchDispatchMode):
    """The aten-level half: reads that never pass through a Python-visible torch function.

    `aten._local_scalar_dense` (every scalar read), `nonzero`, `_unique2` and boolean `index` are
    recorded into the same counter, unless the Python-level mode already recorded the read in progress.
    It also counts float32 matrix multiplies per device type (`fp32_matmuls`): on a GPU with bf16 they
    run at a fraction of the bf16 tensor-core rate, which doctor reports as a missing autocast.
    """

    def __init__(self, counter: HostReadCounter) -> None:
        super().__init__()
        self.counter = counter
        aten = torch.ops.aten
        self.ops = {
            aten._local_scalar_dense.default: "item (aten)",
            aten.nonzero.default: "nonzero (aten)",
            aten._unique2.default: "unique (aten)",
        }
        self.index = aten.index.Tensor
        self.matmuls = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default}
        self.fp32_matmuls: Counter = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kind = self.ops.get(func)
        if kind is None and func is self.index and len(args) > 1:
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1] or ()):
                kind = "boolean-mask index (aten)"
        elif func in self.matmuls:
            a = args[1] if func in (torch.ops.aten.addmm.default, torch.ops.aten.baddbmm.default) else args[0]
            if isinstance(a, torch.Tensor) and a.dtype == torch.float32:
                self.fp32_matmuls[a.device.type] += 1
        if kind is None or self.counter.depth:
            return func(*args, **(kwargs or {}))
        self.counter._record(kind, args, start=2, classify=False)  # aten-level tensors carry no provenance mark
        self.counter.depth += 1  # a sync-debug warning raised by this op is the same read
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.counter.depth -= 1
