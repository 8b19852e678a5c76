"""The child side of `hotloop doctor`: install the detector, run the user's script unmodified, dump what was seen.

    python -m hotloop.doctor.child REPORT.json MAX_STEPS TRACE -- [python] SCRIPT [ARGS...]
    python -m hotloop.doctor.child REPORT.json MAX_STEPS TRACE -- [python] -m MODULE [ARGS...]

(TRACE is a Chrome-trace path or "".) Steps are found with a global optimizer step hook; the host-read
counter labels each read with the number of optimizer steps completed when it happened. A script that never
builds a `torch.optim.Optimizer` (it updates parameters by hand, `p.data.add_(p.grad, alpha=-lr)`, as
pytorch/examples' word_language_model does) has no optimizer step to hook: there each `backward()` ends a step,
and the report says so. Timings per
step come from hooks too: the DataLoader iterator (data wait), outermost module calls (forward),
`backward`, and the optimizer step. The report is written even when the script crashes, and the child
exits with the script's exit code.

DataLoader workers are forked with the detector already installed; each streams its reads to
`REPORT.json.worker-PID` as it records them (a worker may be terminated rather than return), labelled
with the step that consumes the batch: batch i of an epoch goes to worker i mod num_workers, so a
worker's j-th batch is batch `id + j * num_workers`. Workers started with "spawn" (not Linux's default)
do not inherit the detector and are not seen.

On CUDA, `torch.cuda.set_sync_debug_mode("warn")` cross-checks the two modes, and the syncs it does not
flag are patched in: `torch.cuda.synchronize`, `Event.synchronize` and `Stream.synchronize`.
`torch.profiler` records steps 2-4 to measure GPU busy time (and writes TRACE when asked, on any device).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import sysconfig
import time
import traceback
from typing import Any


class StopDoctor(BaseException):
    """Raised from the step hook after --steps optimizer steps: unwinds the script cleanly."""


class Timers:
    def __init__(self) -> None:
        self.steps = 0
        self.manual = False
        """Steps were ended by `backward()`: the script built no optimizer (it updates parameters by hand)."""
        self.cur = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
        self.per_step: list[dict[str, float]] = []
        self.step_start = time.perf_counter()
        self.depth = 0
        self.fwd_start = 0.0
        self.opt_start = 0.0
        self.in_backward = False

    def end_step(self) -> None:
        now = time.perf_counter()
        total = now - self.step_start
        row = dict(self.cur)
        row["other"] = max(0.0, total - sum(self.cur.values()))
        row["total"] = total
        self.per_step.append(row)
        self.cur = dict.fromkeys(self.cur, 0.0)
        self.step_start = now


def _user_dirs_to_skip() -> tuple[str, ...]:
    import hotloop

    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], sysconfig.get_paths()["stdlib"]}
    dirs.add(os.path.dirname(hotloop.__file__))
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs if d)


class Facts:
    """What the hooks notice besides reads and times: evidence for doctor's recommendations."""

    def __init__(self) -> None:
        self.optimizers: dict[int, dict[str, Any]] = {}
        self.zero_grad_keep = 0
        """`zero_grad(set_to_none=False)` calls (a memset of every gradient each step)."""
        self.eval_forward_with_grad = 0
        """Outermost forwards of a module in eval() mode with autograd recording (validation without no_grad)."""
        self.gpu: dict[str, float] = {}
        self.compiled = False
        """The script called torch.compile (doctor then leaves its dispatch-level detector off)."""
        self.optimizer_built = False
        """A `torch.optim.Optimizer` was constructed: its steps, not `backward()` calls, count the steps."""

    def note_optimizer(self, opt: Any) -> None:
        if id(opt) in self.optimizers:
            return
        params = [p for g in opt.param_groups for p in g["params"]]
        device = params[0].device.type if params else "cpu"
        fused = bool(opt.defaults.get("fused"))
        self.optimizers[id(opt)] = {"class": type(opt).__name__, "fused": fused, "device": device,
                                    "supports_fused": "fused" in opt.defaults}  # fmt: skip


class Profiled:
    """torch.profiler over optimizer steps 2-4 (after warm-up): GPU busy share, and the Chrome trace if asked."""

    FIRST, LAST = 2, 5

    def __init__(self, trace: str, cuda: bool, counter: Any) -> None:
        import torch

        self.trace, self.cuda, self.prof, self.t0 = trace, cuda, None, 0.0
        self.counter = counter
        """The profiler's own synchronize calls run with `counter.depth` raised: they are not the script's."""
        self.busy: dict[str, float] = {}
        acts = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        self.activities = acts

    def on_step(self, steps: int) -> None:
        import torch

        if steps == self.FIRST:
            self.counter.depth += 1
            try:
                if self.cuda:
                    torch.cuda.synchronize()
                self.prof = torch.profiler.profile(activities=self.activities)
                self.prof.__enter__()
            finally:
                self.counter.depth -= 1
            self.t0 = time.perf_counter()
        elif steps == self.LAST:
            self.finish()

    def finish(self) -> None:
        import torch

        if self.prof is None:
            return
        prof, self.prof = self.prof, None
        self.counter.depth += 1
        try:
            if self.cuda:
                torch.cuda.synchronize()
            wall_us = (time.perf_counter() - self.t0) * 1e6
            prof.__exit__(None, None, None)
        finally:
            self.counter.depth -= 1
        if self.cuda:
            kernel_us = sum(getattr(e, "self_device_time_total", 0.0) for e in prof.key_averages())
            busy = min(100.0, 100.0 * kernel_us / wall_us) if wall_us else 0.0
            self.busy = {"busy_pct": round(busy, 1), "idle_pct": round(100.0 - busy, 1),
                         "steps": self.LAST - self.FIRST}  # fmt: skip
        if self.trace:
            prof.export_chrome_trace(self.trace)


def install(max_steps: int, report_path: str, trace: str = "") -> tuple[Any, Any, Timers, Facts, Profiled | None]:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from torch.utils.data import dataloader

    from hotloop.doctor.hostreads import DispatchReads, HostReadCounter

    counter = HostReadCounter(skip_dirs=_user_dirs_to_skip())
    counter.label = 0
    counter.provenance = True  # tell reads of host-only tensors from device syncs
    timers = Timers()
    facts = Facts()
    cuda = torch.cuda.is_available()
    profiled = Profiled(trace, cuda, counter) if (trace or cuda) else None

    def pre(opt: Any, args: Any, kwargs: Any) -> None:
        timers.opt_start = time.perf_counter()

    def step_done() -> None:
        timers.steps += 1
        counter.label = timers.steps
        timers.end_step()
        if profiled is not None:
            profiled.on_step(timers.steps)
        if max_steps and timers.steps >= max_steps:
            raise StopDoctor

    def post(opt: Any, args: Any, kwargs: Any) -> None:
        timers.cur["optimizer"] += time.perf_counter() - timers.opt_start
        facts.note_optimizer(opt)
        step_done()

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)
    original_optimizer_init = torch.optim.Optimizer.__init__

    def optimizer_init(self: Any, *args: Any, **kwargs: Any) -> None:
        facts.optimizer_built = True
        original_optimizer_init(self, *args, **kwargs)

    torch.optim.Optimizer.__init__ = optimizer_init  # type: ignore[method-assign]

    original_next = dataloader._BaseDataLoaderIter.__next__

    def timed_next(self: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original_next(self)
        finally:
            timers.cur["data"] += time.perf_counter() - t0

    dataloader._BaseDataLoaderIter.__next__ = timed_next  # type: ignore[method-assign]
    _watch_workers(counter, report_path)

    original_zero_grad = torch.optim.Optimizer.zero_grad

    def zero_grad(self: Any, set_to_none: bool = True) -> None:
        if not set_to_none:
            facts.zero_grad_keep += 1
        return original_zero_grad(self, set_to_none)

    torch.optim.Optimizer.zero_grad = zero_grad  # type: ignore[method-assign]
    if cuda:
        _watch_cuda_syncs(counter)

    original_backward = torch.Tensor.backward

    def timed_backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Tensor.backward re-enters itself through the host-read counter's __torch_function__ (which calls the
        # attribute it finds, this wrapper): only the outermost call is timed and counted.
        if timers.in_backward:
            return original_backward(self, *args, **kwargs)
        t0 = time.perf_counter()
        timers.in_backward = True
        try:
            out = original_backward(self, *args, **kwargs)
        finally:
            timers.in_backward = False
            timers.cur["backward"] += time.perf_counter() - t0
        if not facts.optimizer_built:  # no optimizer: the parameters are updated by hand after each backward
            timers.manual = True
            step_done()
        return out

    torch.Tensor.backward = timed_backward  # type: ignore[method-assign]

    def fwd_pre(module: Any, args: Any) -> None:
        if timers.depth == 0:
            timers.fwd_start = time.perf_counter()
            if not module.training and torch.is_grad_enabled() and any(p.requires_grad for p in module.parameters()):
                facts.eval_forward_with_grad += 1
        timers.depth += 1

    def fwd_post(module: Any, args: Any, out: Any) -> None:
        timers.depth -= 1
        if timers.depth == 0:
            timers.cur["forward"] += time.perf_counter() - timers.fwd_start

    torch.nn.modules.module.register_module_forward_pre_hook(fwd_pre)
    torch.nn.modules.module.register_module_forward_hook(fwd_post)
    dispatch = Stoppable(DispatchReads(counter))
    real_compile = torch.compile

    def compile_under_doctor(*args: Any, **kwargs: Any) -> Any:
        # A TorchDispatchMode makes torch.compile fall back to eager for the whole run, so the script would be
        # measured as it never runs. Leave the dispatch half off from here on: compile stays active, and the
        # Python-level detector (a TorchFunctionMode, which dynamo traces through) still sees the reads.
        facts.compiled = True
        dispatch.stop()
        return real_compile(*args, **kwargs)

    torch.compile = compile_under_doctor
    return counter, dispatch, timers, facts, profiled


class Stoppable:
    """A context manager that can be left early (`stop()`), before the `with` block ends."""

    def __init__(self, mode: Any) -> None:
        self.mode, self.active = mode, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.mode, name)

    def __enter__(self) -> Stoppable:
        self.mode.__enter__()
        self.active = True
        return self

    def stop(self) -> None:
        if self.active:
            self.active = False
            self.mode.__exit__(None, None, None)

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _watch_workers(counter: Any, report_path: str) -> None:
    """Label and stream the reads made in forked DataLoader workers (see the module docstring)."""
    from torch.utils.data import get_worker_info
    from torch.utils.data._utils import fetch

    parent = os.getpid()
    state: dict[str, Any] = {"pid": parent, "fetched": 0}

    def wrap(cls: Any) -> None:
        original = cls.fetch

        def fetch_batch(self: Any, index: Any) -> Any:
            info = get_worker_info()
            if info is not None:
                if state["pid"] != os.getpid():  # first batch in this worker: start its own record
                    state.update(pid=os.getpid(), fetched=0)
                    counter.reads = []
                    out = open(f"{report_path}.worker-{os.getpid()}", "a", buffering=1)  # noqa: SIM115
                    counter.sink = lambda r: out.write(json.dumps({"file": r.filename, "line": r.lineno,
                                                                   "op": r.kind, "step": r.label}) + "\n")  # fmt: skip
                counter.label = info.id + state["fetched"] * info.num_workers
                state["fetched"] += 1
            return original(self, index)

        cls.fetch = fetch_batch

    wrap(fetch._MapDatasetFetcher)
    wrap(fetch._IterableDatasetFetcher)


def _watch_cuda_syncs(counter: Any) -> None:
    """CUDA only: the sync-debug cross-check, and the explicit syncs it does not flag."""
    import warnings

    import torch

    torch.cuda.set_sync_debug_mode("warn")
    # "always": the default filter shows a warning once per line, which would hide a per-step sync
    warnings.filterwarnings("always", message=".*synchronizing CUDA operation.*")
    shown = warnings.showwarning

    def showwarning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None):
        if "synchronizing CUDA operation" in str(message):
            counter.record_here("cuda sync (sync_debug_mode)")
            return
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning

    def patch(owner: Any, attr: str, kind: str) -> None:
        original = getattr(owner, attr)

        def synced(*args: Any, **kwargs: Any) -> Any:
            counter.record_here(kind)
            counter.depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                counter.depth -= 1

        setattr(owner, attr, synced)

    patch(torch.cuda, "synchronize", "torch.cuda.synchronize")
    patch(torch.cuda.Event, "synchronize", "Event.synchronize")
    patch(torch.cuda.Stream, "synchronize", "Stream.synchronize")


def main(argv: list[str]) -> int:
    report_path, max_steps, trace = argv[0], int(argv[1]), argv[2]
    cmd = argv[argv.index("--") + 1 :] if "--" in argv else argv[3:]
    if cmd and os.path.basename(cmd[0]).startswith("python"):
        cmd = cmd[1:]
    if not cmd:
        print("hotloop doctor: nothing to run (expected: -- python SCRIPT [ARGS] or -- python -m MODULE)",
              file=sys.stderr)  # fmt: skip
        return 2
    counter, dispatch, timers, facts, profiled = install(max_steps, report_path, trace)
    code, stopped, crashed = 0, False, None
    script = None
    try:
        with counter, dispatch:
            if cmd[0] == "-m":
                sys.argv = cmd[1:]
                runpy.run_module(cmd[1], run_name="__main__", alter_sys=True)
            else:
                script = os.path.abspath(cmd[0])
                sys.argv = cmd
                sys.path.insert(0, os.path.dirname(script))
                runpy.run_path(script, run_name="__main__")
    except StopDoctor:
        stopped = True
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:  # the script crashed: report what was seen anyway
        traceback.print_exc()
        crashed, code = f"{type(e).__name__}: {e}", 1
    if profiled is not None:
        profiled.finish()  # fewer steps than the profiled window: keep what was recorded
    import torch

    reads = [{"file": r.filename, "line": r.lineno, "op": r.kind, "step": r.label, "host_only": r.host_only}
             for r in counter.reads]  # fmt: skip
    cuda = torch.cuda.is_available()
    with open(report_path, "w") as f:
        json.dump({"steps": timers.steps, "manual_steps": timers.manual, "reads": reads, "timings": timers.per_step,
                   "exit_code": code,
                   "stopped": stopped, "crashed": crashed, "script": script,
                   "optimizers": list(facts.optimizers.values()), "zero_grad_keep": facts.zero_grad_keep,
                   "eval_forward_with_grad": facts.eval_forward_with_grad, "compiled": facts.compiled,
                   "fp32_matmuls": dict(dispatch.fp32_matmuls), "gpu": profiled.busy if profiled else {},
                   "bf16_gpu": bool(cuda and torch.cuda.is_bf16_supported()),
                   "trace": trace or None}, f)  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
