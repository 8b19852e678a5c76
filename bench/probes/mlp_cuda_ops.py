"""Which ops and kernel launches a step of hotloop spends beyond the best hand loop (mlp workload, CUDA).

    python3 bench/probes/mlp_cuda_ops.py

Profiles steps (30, 70] of `plain` and `hotloop` from `hotloop bench --workload mlp` and prints, per step,
the CUDA runtime launches and the aten ops each loop calls, largest differences first. The mlp step is
launch-bound on an H100 (GPU work is about 50 us of a 2 ms step), so every extra op costs host time.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from hotloop.benchmarks.variants import Window, run_hotloop, run_plain
from hotloop.benchmarks.workloads import make_workload

WARMUP, STEPS = 30, 40


class ProfiledWindow(Window):
    def __init__(self, device: torch.device) -> None:
        super().__init__(device, WARMUP, STEPS)
        self.prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])

    def tick(self, step: int) -> None:
        super().tick(step)
        if step == WARMUP:
            self.prof.__enter__()
        elif step == WARMUP + STEPS:
            self.prof.__exit__(None, None, None)


def counts(run) -> tuple[Counter, float]:
    device = torch.device("cuda")
    w = make_workload("mlp", "cuda")
    win = ProfiledWindow(device)
    run(w, device, win)
    c: Counter = Counter()
    for e in win.prof.events():
        if e.device_type == torch.autograd.DeviceType.CPU:
            c[e.name] += 1
    return c, win.seconds / STEPS * 1e6


def main() -> None:
    (p, p_us), (h, h_us) = counts(run_plain), counts(run_hotloop)
    print(f"us/step under the profiler: plain {p_us:.0f}, hotloop {h_us:.0f}")
    for name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaEventRecord"):
        print(f"{name:28s} plain {p[name] / STEPS:6.1f}  hotloop {h[name] / STEPS:6.1f}")
    diff = {k: (h[k] - p[k]) / STEPS for k in set(p) | set(h)}
    print("op                                              plain/step  hotloop/step")
    for k in sorted(diff, key=lambda k: -abs(diff[k]))[:45]:
        if diff[k]:
            print(f"{k[:48]:48s} {p[k] / STEPS:9.2f} {h[k] / STEPS:12.2f}")


if __name__ == "__main__":
    main()
