"""Where a launch-bound step's time goes, by hand, CUDA only: the `mlp` bench model (batch 256, data on the
device, fused AdamW, clipping, one loss read every 50 steps) as an eager loop, a compiled loop, and the whole
step captured by hand in one CUDA graph (PyTorch's whole-network recipe); then a `torch.profiler` table of
the compiled loop's host time. The measurement behind `cuda_graph="step"` (`hotloop/graphs.py`).

    python3 bench/probes/hand_step_graph.py
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile

from hotloop.benchmarks.variants import _groups
from hotloop.benchmarks.workloads import make_workload

DEV = torch.device("cuda")
W = make_workload("mlp", "cuda")
X, Y = W.x.to(DEV), W.y.to(DEV)
B = W.batch_size
Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def batches(g: torch.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    while True:
        order = torch.randperm(X.shape[0], generator=g).to(DEV, non_blocking=True)
        for i in range(X.shape[0] // B):
            idx = order[i * B : (i + 1) * B]
            yield X.index_select(0, idx), Y.index_select(0, idx)


def measure(step: Step, label: str, steps: int = 2000, warm: int = 50) -> None:
    it = batches(torch.Generator().manual_seed(0))
    running = torch.zeros((), device=DEV)
    for _ in range(warm):
        running += step(*next(it))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for s in range(1, steps + 1):
        running += step(*next(it))
        if s % 50 == 0:
            _ = running.item()  # noqa: HL001 - the one read of a log interval
            running.zero_()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"{label}: {steps / dt:.0f} steps/s, {dt / steps * 1e6:.0f} us/step", flush=True)


def eager_step(compiled: bool) -> Step:
    torch.manual_seed(0)
    model = W.make_model().to(DEV)
    opt = torch.optim.AdamW(_groups(model), lr=W.lr, fused=True)
    fwd = torch.compile(model) if compiled else model

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        loss = fwd(xb, yb)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def graphed_step() -> Step:
    torch.manual_seed(0)
    model = W.make_model().to(DEV)
    opt = torch.optim.AdamW(_groups(model), lr=W.lr, fused=True, capturable=True)
    sx = torch.zeros(B, X.shape[1], device=DEV)
    sy = torch.zeros(B, dtype=torch.long, device=DEV)

    def body() -> torch.Tensor:
        loss = model(sx, sy)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = body()

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        sx.copy_(xb)
        sy.copy_(yb)
        graph.replay()
        return static_loss.detach().clone()

    return step


def main() -> None:
    measure(eager_step(False), "eager hand loop")
    measure(eager_step(True), "compiled hand loop")
    measure(graphed_step(), "whole step in one CUDA graph (captured by hand)")
    step = eager_step(True)
    it = batches(torch.Generator().manual_seed(0))
    for _ in range(20):
        step(*next(it))
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(100):
            step(*next(it))
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))


if __name__ == "__main__":
    main()
