"""The child side of `hotloop doctor`: install the detector, run the user's script unmodified, dump what was seen.

    python -m hotloop.doctor.child REPORT.json MAX_STEPS -- [python] SCRIPT [ARGS...]
    python -m hotloop.doctor.child REPORT.json MAX_STEPS -- [python] -m MODULE [ARGS...]

Steps are found with a global optimizer step hook; the host-read counter labels each read with the
number of optimizer steps completed when it happened. Timings per step come from hooks too: the
DataLoader iterator (data wait), outermost module calls (forward), `backward`, and the optimizer step.
The report is written even when the script crashes, and the child exits with the script's exit code.
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
        self.cur = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
        self.per_step: list[dict[str, float]] = []
        self.step_start = time.perf_counter()
        self.depth = 0
        self.fwd_start = 0.0
        self.opt_start = 0.0

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


def install(max_steps: int) -> tuple[Any, Any, Timers]:
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from torch.utils.data import dataloader

    from hotloop.doctor.hostreads import DispatchReads, HostReadCounter

    counter = HostReadCounter(skip_dirs=_user_dirs_to_skip())
    counter.label = 0
    timers = Timers()

    def pre(opt: Any, args: Any, kwargs: Any) -> None:
        timers.opt_start = time.perf_counter()

    def post(opt: Any, args: Any, kwargs: Any) -> None:
        timers.cur["optimizer"] += time.perf_counter() - timers.opt_start
        timers.steps += 1
        counter.label = timers.steps
        timers.end_step()
        if max_steps and timers.steps >= max_steps:
            raise StopDoctor

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)

    original_next = dataloader._BaseDataLoaderIter.__next__

    def timed_next(self: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original_next(self)
        finally:
            timers.cur["data"] += time.perf_counter() - t0

    dataloader._BaseDataLoaderIter.__next__ = timed_next  # type: ignore[method-assign]

    original_backward = torch.Tensor.backward

    def timed_backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original_backward(self, *args, **kwargs)
        finally:
            timers.cur["backward"] += time.perf_counter() - t0

    torch.Tensor.backward = timed_backward  # type: ignore[method-assign]

    def fwd_pre(module: Any, args: Any) -> None:
        if timers.depth == 0:
            timers.fwd_start = time.perf_counter()
        timers.depth += 1

    def fwd_post(module: Any, args: Any, out: Any) -> None:
        timers.depth -= 1
        if timers.depth == 0:
            timers.cur["forward"] += time.perf_counter() - timers.fwd_start

    torch.nn.modules.module.register_module_forward_pre_hook(fwd_pre)
    torch.nn.modules.module.register_module_forward_hook(fwd_post)
    return counter, DispatchReads(counter), timers


def main(argv: list[str]) -> int:
    report_path, max_steps = argv[0], int(argv[1])
    cmd = argv[argv.index("--") + 1 :] if "--" in argv else argv[2:]
    if cmd and os.path.basename(cmd[0]).startswith("python"):
        cmd = cmd[1:]
    if not cmd:
        print("hotloop doctor: nothing to run (expected: -- python SCRIPT [ARGS] or -- python -m MODULE)",
              file=sys.stderr)  # fmt: skip
        return 2
    counter, dispatch, timers = install(max_steps)
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
    reads = [{"file": r.filename, "line": r.lineno, "op": r.kind, "step": r.label} for r in counter.reads]
    with open(report_path, "w") as f:
        json.dump({"steps": timers.steps, "reads": reads, "timings": timers.per_step, "exit_code": code,
                   "stopped": stopped, "crashed": crashed, "script": script}, f)  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
