"""`cuda_graph="step"`: the whole train step in one CUDA graph, captured once and replayed every step.

Why. A small model on a GPU is launch-bound: the host takes longer to issue the kernels than the GPU
takes to run them. On one H100 (2026-11-23; the `mlp` bench model, batch 256, a 16-core host) a
hand-written step cost 2.0 ms eager and 2.5 ms compiled, and the same step captured whole by hand -
forward, backward, clipping, fused AdamW - 168 us (`bench/probes/hand_step_graph.py`). In `hotloop bench
--workload mlp --device cuda`, `cuda_graph=step` ran 3134 steps/s against 332 without it, 338 for the
best hand loop and 185 for Lightning (`bench/RESULTS.md`). `compile="reduce-overhead"` graphs only the
model's passes: clipping, the non-finite flag and the optimizer still launch one by one (347 steps/s).

How.
- Warm-up: the first `WARMUP_STEPS` windows run the eager step on a side stream, as PyTorch's
  whole-network capture recipe asks, so optimizer state, cuBLAS workspaces and compiled code are made
  outside the capture.
- Capture: the next window is copied into static input buffers and `TrainStep.update` is captured with
  every `.grad` set to None (the graph's first backward then writes the gradients rather than adding to
  stale ones). For the capture only, the optimizer's groups are `capturable` and their LRs are device
  tensors the graph reads; the window's scalars, the gradient norm and the non-finite flag are stacked
  inside the graph into one output buffer. The graph then replays once, which trains on that window.
- Replay: the window's tensors are copied into the static buffers, each group's LR is written into its
  device tensor when the schedule moved it (`fill_` passes the value as a kernel argument: no sync), the
  graph replays, and the output buffer is cloned out in one copy (the next replay overwrites it). The
  schedule steps on the host afterwards, as in the eager step.
- Never wrong, sometimes eager: a window the graph was not captured for runs the eager step - another
  length, structure, shape or dtype (a short last batch or window, an out-of-memory split) or a tensor
  off the device. If the optimizer's state or groups were replaced since the capture (a rollback, a
  `load_state_dict`), the graph is dropped and captured again. A hyperparameter other than the LR that
  moves after the capture (OneCycleLR cycling momentum), or stateful metric objects returned by the loss
  function, end graphs for the run, with a note.

Refused at set-up where it cannot work (`check`): no CUDA device, fp16 (the GradScaler keeps per-step
state on the host), DDP/FSDP, a compile mode that captures CUDA graphs itself, a non-fused optimizer.
The graph keeps its activations' memory between steps, and an eager fallback step needs its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from hotloop.errors import ConfigError
from hotloop.step import StepOutput, TrainStep

WARMUP_STEPS = 3
_GROUP_KEYS_SKIPPED = ("params", "lr", "initial_lr", "names", "lr_scale", "layer")


def check(
    value: str, device: torch.device, precision: str, dist_active: bool, optimizer: torch.optim.Optimizer
) -> None:
    """Refuse `cuda_graph=step` where it cannot work, naming the setting to change: what is only known once the
    run is set up (the device, `precision=auto` resolved, torchrun, the optimizer). The config refuses the
    combinations it spells out itself (`TrainConfig.validate`: compile modes with their own CUDA graphs, fp16,
    strategy=ddp/fsdp)."""
    if value == "off":
        return
    why = None
    if device.type != "cuda":
        why = f"needs a CUDA device (device is {device}); set cuda_graph=off on this machine"
    elif precision == "fp16":
        why = "cannot capture fp16's GradScaler (it keeps per-step state on the host); use precision=bf16"
    elif dist_active:
        why = "is single-process only: under torchrun (DDP/FSDP) set cuda_graph=off"
    elif not optimizer.defaults.get("fused"):
        why = (f"needs a fused optimizer to capture ({type(optimizer).__name__} is not): keep "
               "optim.implementation=fused (or auto), or pass fused=True to your optimizer")  # fmt: skip
    if why:
        raise ConfigError(f"cuda_graph=step {why}")


def _signature(batch: Any) -> tuple[Any, list[torch.Tensor], tuple]:
    leaves, spec = tree_flatten(batch)
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    key = tuple((x.shape, x.dtype, x.device) if isinstance(x, torch.Tensor) else x for x in leaves)
    return spec, tensors, key


class CapturedStep:
    """Wraps a `TrainStep`: eager warm-up, one capture, then a replay per window (see the module docstring).

    Anything else is the wrapped step's (`metric_objects`, `inspect_grads`, ...)."""

    def __init__(self, step: TrainStep, device: torch.device, note: Callable[[str], None] = print) -> None:
        if device.type == "cuda" and device.index is None:  # tensors say cuda:0, never bare cuda
            device = torch.device("cuda", torch.cuda.current_device())
        self.step, self.device, self.note = step, device, note
        # From the first warm-up step on, not only in the capture: autocast's state is part of what a compiled
        # model's guards check, and a recompile inside the capture would void it.
        step.precision.cache_enabled = False
        self.warmup_left = WARMUP_STEPS
        self.enabled = True
        self.stream = torch.cuda.Stream(device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.captures = 0
        """Graphs captured so far (a rollback or a loaded optimizer state makes a new one)."""
        self.replays = 0
        self.eager_steps = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.step, name)

    def __call__(self, window: Any) -> StepOutput:
        if not self.enabled or self.warmup_left > 0 or self.step.inspect_grads is not None:
            return self._eager(window)
        batches = list(window)  # a lazy window's batches are taken now: all are copied before the replay
        sigs = [_signature(b) for b in batches]
        if self.graph is not None and not self._still_valid():
            self.graph = None
            if not self.enabled:  # `_still_valid` ended graphs for the run
                return self._eager(batches)
        if self.graph is None:
            if not self._capturable(sigs):
                return self._eager(batches)
            return self._capture(batches, sigs)
        if len(sigs) != len(self.sigs) or any(
            s[0] != c[0] or s[2] != c[2] for s, c in zip(sigs, self.sigs, strict=False)
        ):
            return self._eager(batches)  # not the window the graph was captured for
        for (_, tensors, _), static in zip(sigs, self.static, strict=True):
            for src, dst in zip(tensors, static, strict=True):
                dst.copy_(src, non_blocking=True)
        return self.step.run(self._replay, batches)

    # -- eager ---------------------------------------------------------------------------------

    def _eager(self, window: Any) -> StepOutput:
        self.eager_steps += 1
        if self.warmup_left <= 0 or not self.enabled:
            return self.step(window)
        self.warmup_left -= 1
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            out = self.step(window)
        current.wait_stream(self.stream)
        # Nothing may keep a warm-up step's autograd graph alive: its parameters' AccumulateGrad nodes would
        # carry this side stream into the capture (PyTorch warns of a stream mismatch that can break it).
        out.metrics = {k: v.detach() for k, v in out.metrics.items()}
        return out

    def _capturable(self, sigs: list[tuple[Any, list[torch.Tensor], tuple]]) -> bool:
        if self.step.metric_objects:
            self._disable("the loss function returns stateful metric objects, whose updates run on the host")
            return False
        if any(isinstance(g["lr"], torch.Tensor) for g in self.step.optimizer.param_groups):
            self._disable("the optimizer's LR is a tensor (the graph writes its own LR tensors from Python floats)")
            return False
        return all(t.device == self.device for _, tensors, _ in sigs for t in tensors)

    def _disable(self, why: str) -> None:
        self.enabled, self.graph = False, None
        self.note(f"hotloop: note: cuda_graph=step is off for the rest of this run: {why}")

    # -- capture and replay ---------------------------------------------------------------------

    def _frozen(self) -> list[dict[str, Any]]:
        """Every group's hyperparameters but the LR: the graph holds their values as captured."""
        groups = self.step.optimizer.param_groups
        return [{k: v for k, v in g.items() if k not in _GROUP_KEYS_SKIPPED} for g in groups]

    def _still_valid(self) -> bool:
        opt = self.step.optimizer
        if opt.state is not self.opt_state or opt.param_groups is not self.opt_groups:
            return False  # replaced (a rollback or a resume loaded the optimizer): capture again
        if self._frozen() != self.frozen:
            self._disable("a hyperparameter other than the LR changed after the capture (e.g. momentum cycling)")
            return False
        return True

    def _capture(self, batches: list[Any], sigs: list[tuple[Any, list[torch.Tensor], tuple]]) -> StepOutput:
        step, opt = self.step, self.step.optimizer
        self.static = [[t.clone() for t in tensors] for _, tensors, _ in sigs]
        static_batches = []
        for batch, (spec, _, _), static in zip(batches, sigs, self.static, strict=True):
            leaves, _ = tree_flatten(batch)
            it = iter(static)
            leaves = [next(it) if isinstance(x, torch.Tensor) else x for x in leaves]
            static_batches.append(spec.unflatten(leaves))
        self.sigs = sigs
        host_lrs = [g["lr"] for g in opt.param_groups]
        self.lrs = [torch.tensor(float(lr), dtype=torch.float32, device=self.device) for lr in host_lrs]
        self.host_lrs = list(host_lrs)
        saved_capturable = [g.get("capturable", False) for g in opt.param_groups]
        for g, lr in zip(opt.param_groups, self.lrs, strict=True):
            g["lr"], g["capturable"] = lr, True
        for p in step.params:
            p.grad = None
        graph, failed = torch.cuda.CUDAGraph(), None
        stream = torch.cuda.current_stream(self.device)
        try:
            # thread_local: a checkpoint writer or logger thread touching CUDA meanwhile does not void the capture
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                metrics, norm, samples, bad = step.update(static_batches)
                self.keys = list(metrics)
                packed = [metrics[k].detach().float().reshape(()) for k in self.keys]
                self.out = torch.stack([*packed, norm.detach().float().reshape(()), bad.float().reshape(())])
        except RuntimeError as e:  # torch.AcceleratorError included
            failed = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            torch.cuda.set_stream(stream)  # a failing capture_end leaves `torch.cuda.graph`'s own stream current
        finally:
            for g, lr, cap in zip(opt.param_groups, host_lrs, saved_capturable, strict=True):
                g["lr"], g["capturable"] = lr, cap
        if failed is not None:  # nothing ran during the capture: this window trains eagerly, and so does the run
            self._disable(f"the step could not be captured ({failed}); a host sync or a recompile in the step?")
            for p in step.params:
                p.grad = None
            return self._eager(batches)
        self.graph, self.samples = graph, samples
        self.opt_state, self.opt_groups, self.frozen = opt.state, opt.param_groups, self._frozen()
        self.captures += 1
        return self.step.run(self._replay, batches)

    def _replay(self, _window: Any) -> tuple[dict[str, torch.Tensor], torch.Tensor, int, torch.Tensor]:
        """`TrainStep.update`'s result, by replaying the graph on the static buffers (already filled)."""
        for i, g in enumerate(self.step.optimizer.param_groups):
            if g["lr"] != self.host_lrs[i]:
                self.lrs[i].fill_(g["lr"])
                self.host_lrs[i] = g["lr"]
        assert self.graph is not None
        self.graph.replay()
        self.replays += 1
        values = self.out.clone().unbind(0)
        return dict(zip(self.keys, values[:-2], strict=True)), values[-2], self.samples, values[-1]


def wrap(step: TrainStep, value: str, device: torch.device, note: Callable[[str], None] = print) -> Any:
    """The step the trainer calls: `step` itself, or a `CapturedStep` around it for `cuda_graph=step`."""
    return CapturedStep(step, device, note) if value == "step" else step
