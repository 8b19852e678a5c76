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

Refused at set-up where it cannot work (`resolve`): no CUDA device, fp16 (the GradScaler keeps per-step
state on the host), DDP/FSDP, a compile mode that captures CUDA graphs itself, a non-fused optimizer.
The graph keeps its activations' memory between steps, and an eager fallback step needs its own.

`cuda_graph="auto"` (the default) captures only where it can work (anything `step` refuses is eager,
quietly), only where it pays, and only a step that does the same thing every step:
- Pays: warm-up step 2 is timed without a sync (CUDA events, read at the decision). The step is
  launch-bound when the GPU finished it within `LAUNCH_BOUND` x the time the host took to issue it -
  the GPU waited on launches (the `mlp` bench model on an H100). A GPU-bound step (GPT-2 small, 40 ms)
  gains nothing from a graph and would pay its memory, so it stays eager, with a one-line note.
- Only hotloop's own loss function (`model(*batch)`), or one marked `loss_fn.graph_safe = True`: a user's
  loss function is where step-dependent Python logic lives (a KL weight annealed by the step, a term
  switched on at step N), which no record of earlier steps can foresee. Launch-bound with a user's loss
  function, the run stays eager and the note says how to capture it.
- Same every step: warm-up steps 3 and 4 record what the step dispatches (`OpStream`: each op with its
  shapes, dtypes, `requires_grad`, Python scalars, the values of small host tensors, and the torch.compile
  frames compiled during the step; an optimizer's `lr` argument is left out, the graph writes it). Python-side state or
  randomness in the model or loss function - a layer picked with `random`, a weight annealed by a Python
  float, a curriculum - changes the record between steps, and a graph would replay one of them forever:
  the run stays eager and the note names the first op that differed. Compiled code runs compiled under
  the recorder (`ignore_compile_internals`), so the recorded steps train exactly as the others.
- Stays the same: every `VERIFY_EVERY` replays one step runs eagerly under the recorder and is compared
  with the reference; a change (a callback freezing layers, an epoch-based schedule inside the model)
  ends graphs for the run, with a note. What a replay cannot show is Python work with no tensor op
  (appending to a list in the loss function): set `cuda_graph=off` for such a step.
The capture itself does not synchronise (no `torch.cuda.synchronize`/`empty_cache` as `torch.cuda.graph`
does), so the hot-loop contract holds through it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from hotloop.errors import ConfigError
from hotloop.step import StepOutput, TrainStep, default_loss_fn

WARMUP_STEPS = 3
AUTO_WARMUP_STEPS = 4
"""auto: step 1 compiles (and inspects the first gradients), step 2 is timed, steps 3 and 4 are recorded."""
LAUNCH_BOUND = 1.25
"""auto captures when the GPU finished the timed step within this many times the host's issue time."""
VERIFY_EVERY = 200
"""auto: replays between two eager, recorded steps compared with the reference record."""
SMALL_HOST_TENSOR = 16
_PLAIN = (bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format)
_GROUP_KEYS_SKIPPED = ("params", "lr", "initial_lr", "names", "lr_scale", "layer")


def resolve(
    value: str,
    device: torch.device,
    precision: str,
    dist_active: bool,
    optimizer: torch.optim.Optimizer,
    graphs_compile: bool = False,
) -> str:
    """The mode this run uses: `off`, `step`, or `auto` where a whole-step graph can work. `step` is refused
    where it cannot, naming the setting to change; `auto` there is quietly `off`. What is only known once
    the run is set up: the device, `precision=auto` resolved, torchrun, the optimizer, a compile mode with
    its own CUDA graphs (`graphs_compile`). The config refuses what it spells out itself
    (`TrainConfig.validate`)."""
    if value == "off":
        return "off"
    why = None
    if device.type != "cuda":
        why = f"needs a CUDA device (device is {device}); set cuda_graph=off on this machine"
    elif precision == "fp16":
        why = "cannot capture fp16's GradScaler (it keeps per-step state on the host); use precision=bf16"
    elif dist_active:
        why = "is single-process only: under torchrun (DDP/FSDP) set cuda_graph=off"
    elif graphs_compile:
        why = "cannot be combined with a compile mode that captures CUDA graphs itself; set cuda_graph=off"
    elif not optimizer.defaults.get("fused"):
        why = (f"needs a fused optimizer to capture ({type(optimizer).__name__} is not): keep "
               "optim.implementation=fused (or auto), or pass fused=True to your optimizer")  # fmt: skip
    if why is None:
        return value
    if value == "auto":
        return "off"
    raise ConfigError(f"cuda_graph=step {why}")


def _describe(x: Any, host_values: bool) -> Any:
    """What of an op's argument decides the kernel it launches (see `OpStream`)."""
    if isinstance(x, torch.Tensor):
        d: tuple = (tuple(x.shape), x.dtype, x.device.type, x.requires_grad)
        if host_values and x.device.type == "cpu" and x.numel() <= SMALL_HOST_TENSOR and x.layout == torch.strided:
            d += (tuple(x.detach().reshape(-1).tolist()),)  # a host value the kernel gets: no device read
        return d
    if isinstance(x, (list, tuple)):
        return tuple(_describe(v, host_values) for v in x)
    if isinstance(x, dict):  # an optimizer's `lr` is left out: the graph writes the LR itself
        return tuple((k, _describe(v, host_values)) for k, v in x.items() if k != "lr")
    if x is None or isinstance(
        x, (bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format)
    ):
        return x
    return type(x).__name__


def _frames_compiled() -> int:
    utils = sys.modules.get("torch._dynamo.utils")  # not imported: nothing was compiled
    return int(utils.counters["frames"]["total"]) if utils is not None else 0


class OpStream(TorchDispatchMode):
    """Records every op a step dispatches, as `_describe` sees its arguments, into `ops`.

    `ignore_compile_internals`: compiled code runs as compiled under this mode (the recorder sees the ops
    outside its kernels: buffer allocations, extern matmuls), so a recorded step trains like any other."""

    def __init__(self, host_values: bool = True) -> None:
        super().__init__()
        self.host_values = host_values
        """host_values: record the values of small host tensors (on the GPU, what a step copies in; off for a
        step on the CPU, where every tensor is a host tensor)."""
        self.ops: list[tuple] = []

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.ops.append((str(func), _describe(args, self.host_values), _describe(kwargs, self.host_values)))
        return func(*args, **kwargs)


def _first_difference(a: list[tuple], b: list[tuple]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            what = "compiled frames" if x[0] == "frames compiled" else x[0]
            return f"op {i} ({what}): {_short(x)} vs {_short(y)}"
    return f"{len(a)} ops vs {len(b)}"


def _short(op: tuple) -> str:
    text = repr(op[1:]) if op[0] != "frames compiled" else str(op[1])
    return text if len(text) <= 120 else text[:117] + "..."


def _signature(batch: Any) -> tuple[Any, list[torch.Tensor], tuple]:
    leaves, spec = tree_flatten(batch)
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    key = tuple((x.shape, x.dtype, x.device) if isinstance(x, torch.Tensor) else x for x in leaves)
    return spec, tensors, key


class CapturedStep:
    """Wraps a `TrainStep`: eager warm-up, one capture, then a replay per window (see the module docstring).

    Anything else is the wrapped step's (`metric_objects`, `inspect_grads`, ...)."""

    def __init__(
        self, step: TrainStep, device: torch.device, note: Callable[[str], None] = print, auto: bool = False
    ) -> None:
        if device.type == "cuda" and device.index is None:  # tensors say cuda:0, never bare cuda
            device = torch.device("cuda", torch.cuda.current_device())
        self.step, self.device, self.note, self.auto = step, device, note, auto
        # From the first warm-up step on, not only in the capture: autocast's state is part of what a compiled
        # model's guards check, and a recompile inside the capture would void it. The Trainer sets it already
        # before its memory check runs the model (else that compile is guarded on the cache and recompiles).
        # auto keeps it off when it decides for eager launches: turning it on would recompile the model.
        step.precision.cache_enabled = False
        self.warmup_steps = AUTO_WARMUP_STEPS if auto else WARMUP_STEPS
        self.warmup_left = self.warmup_steps
        self.enabled = True
        self.timing: tuple[torch.cuda.Event, torch.cuda.Event, float] | None = None
        """auto: warm-up step 2's CUDA events and host issue time (read at the decision, no sync before)."""
        self.records: list[list[tuple]] = []
        """auto: warm-up steps 3 and 4's op records; the first becomes the reference replays are checked against."""
        self.since_check = 0
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
        if self.auto and self.since_check >= VERIFY_EVERY:
            return self._verify(batches)
        for (_, tensors, _), static in zip(sigs, self.static, strict=True):
            for src, dst in zip(tensors, static, strict=True):
                dst.copy_(src, non_blocking=True)
        return self.step.run(self._replay, batches)

    # -- eager ---------------------------------------------------------------------------------

    def _eager(self, window: Any) -> StepOutput:
        self.eager_steps += 1
        if self.warmup_left <= 0 or not self.enabled:
            return self.step(window)
        done = self.warmup_steps - self.warmup_left
        self.warmup_left -= 1
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            if not self.auto or done == 0 or self.step.inspect_grads is not None:
                out = self.step(window)
            elif done == 1:
                out = self._timed(window)
            else:
                out = self._recorded(window)
        current.wait_stream(self.stream)
        # Nothing may keep a warm-up step's autograd graph alive: its parameters' AccumulateGrad nodes would
        # carry this side stream into the capture (PyTorch warns of a stream mismatch that can break it).
        out.metrics = {k: v.detach() for k, v in out.metrics.items()}
        if self.auto and self.warmup_left == 0:
            self._decide()
        return out

    # -- auto: does a graph pay, and is the step the same every step? ---------------------------

    def _timed(self, window: Any) -> StepOutput:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        out = self.step(window)
        end.record()
        self.timing = (start, end, time.perf_counter() - t0)
        return out

    def _recorded(self, window: Any) -> StepOutput:
        """The eager step, its dispatched ops recorded into `self.records`. The window's batches are taken
        first, outside the recorder, as the capture takes them: fetching a batch of an accumulation window
        (slicing a shuffled index at the window's offset) differs every step and is not part of the graph."""
        window = list(window)
        rec = OpStream(host_values=self.device.type != "cpu")
        frames = _frames_compiled()

        def update(w: Any) -> tuple:
            with rec:
                return self.step.update(w)

        out = self.step.run(update, window)
        self.records.append([*rec.ops, ("frames compiled", _frames_compiled() - frames)])
        return out

    def _decide(self) -> None:
        """End of auto's warm-up: capture from the next step on, or stay eager for the run (with the reason)."""
        if self.timing is None or len(self.records) < 2:  # a warm-up step inspected gradients: not measured
            self.enabled = False
            return
        start, end, host_s = self.timing
        if not end.query():  # step 2 finished long ago: no wait, and no sync when it has
            end.synchronize()
        gpu_s = start.elapsed_time(end) / 1e3
        measured = f"the GPU took {gpu_s * 1e3:.2f} ms for a step the host issued in {host_s * 1e3:.2f} ms"
        if gpu_s > LAUNCH_BOUND * host_s:
            self.enabled = False
            self.note(f"hotloop: note: cuda_graph=auto keeps eager launches: the step is GPU-bound ({measured})")
            return
        loss_fn = self.step.loss_fn
        if loss_fn is not default_loss_fn and not getattr(loss_fn, "graph_safe", False):
            self.enabled = False
            self.note(
                f"hotloop: note: cuda_graph=auto keeps eager launches: the step is launch-bound ({measured}), but "
                "its loss_fn is the user's, whose Python-side logic a graph would freeze (a weight annealed by "
                "the step, a term switched on at step N). If it does the same work every step, set "
                "cuda_graph=step, or loss_fn.graph_safe = True, to capture the whole step"
            )
            return
        first, second = self.records[0], self.records[-1]
        self.records = [first]
        if first != second:
            self._disable(
                "the step dispatches different work from one step to the next (warm-up steps 3 and 4 differ at "
                f"{_first_difference(first, second)}): Python-side state or randomness in the model or loss "
                "function would be frozen by a graph. Set cuda_graph=off to silence this, or cuda_graph=step "
                "to capture anyway"
            )
            return
        self.note(f"hotloop: note: cuda_graph=auto captures the whole step from the next one: launch-bound "
                  f"({measured}); set cuda_graph=off to keep eager launches")  # fmt: skip

    def _verify(self, window: Any) -> StepOutput:
        """Every `VERIFY_EVERY` replays: this step runs eagerly under the recorder and must match the reference."""
        self.since_check = 0
        self.eager_steps += 1
        out = self._recorded(window)
        reference, now = self.records[0], self.records.pop()
        if now != reference:
            self._disable(
                f"the step's work changed after {self.replays} replays ({_first_difference(reference, now)}); "
                "it runs eagerly from now on"
            )
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
        mode = "auto" if self.auto else "step"
        self.note(f"hotloop: note: cuda_graph={mode} is off for the rest of this run: {why}")

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
        # torch.full, not torch.tensor: the value goes in as a kernel argument, no host-to-device copy (a sync)
        self.lrs = [torch.full((), float(lr), dtype=torch.float32, device=self.device) for lr in host_lrs]
        self.host_lrs = list(host_lrs)
        saved_capturable = [g.get("capturable", False) for g in opt.param_groups]
        for g, lr in zip(opt.param_groups, self.lrs, strict=True):
            g["lr"], g["capturable"] = lr, True
        for p in step.params:
            p.grad = None
        graph, failed = torch.cuda.CUDAGraph(), None
        stream = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(stream)
        try:
            # Not `torch.cuda.graph`, whose entry synchronises the device and empties the cache: the capture
            # stream waits on the current one instead, and the hot loop never waits on the host.
            with torch.cuda.stream(self.stream):
                # thread_local: a checkpoint writer or logger thread touching CUDA meanwhile does not void it
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    metrics, norm, samples, bad = step.update(static_batches)
                    self.keys = list(metrics)
                    packed = [metrics[k].detach().float().reshape(()) for k in self.keys]
                    self.out = torch.stack([*packed, norm.detach().float().reshape(()), bad.float().reshape(())])
                except BaseException:
                    try:
                        graph.capture_end()  # ends the (invalidated) capture; the first error is the one to tell
                    except RuntimeError:
                        pass
                    raise
                graph.capture_end()
        except RuntimeError as e:  # torch.AcceleratorError included
            failed = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            torch.cuda.set_stream(stream)
        finally:
            stream.wait_stream(self.stream)
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
        self.since_check += 1
        values = self.out.clone().unbind(0)
        return dict(zip(self.keys, values[:-2], strict=True)), values[-2], self.samples, values[-1]


def wrap(step: TrainStep, value: str, device: torch.device, note: Callable[[str], None] = print) -> Any:
    """The step the trainer calls: `step` itself, or a `CapturedStep` around it for `cuda_graph=step|auto`
    (`value` as `resolve` returned it)."""
    return CapturedStep(step, device, note, auto=value == "auto") if value in ("step", "auto") else step
