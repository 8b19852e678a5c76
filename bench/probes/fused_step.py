"""Host time of one AdamW step: `optimizer.step()` against `optim.FusedStep` (the same fused kernels).

    python3 bench/probes/fused_step.py [--device cuda]

The bench `mlp` model with decay/no-decay groups and random gradients; each call timed over 3000 calls, the
minimum of 5 rounds, with the non-finite flag handed over as the train step does (and, for reference, the
plain `optimizer.step()` the hand loops call).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from hotloop.benchmarks.workloads import MLP
from hotloop.optim import FusedStep, param_groups


def _us(fn: Callable[[], None], device: torch.device, calls: int = 3000, rounds: int = 5) -> float:
    for _ in range(100):
        fn()
    best = float("inf")
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    device = torch.device(ap.parse_args().device)
    model = MLP().to(device)
    opt = torch.optim.AdamW(param_groups(model, weight_decay=0.01), lr=1e-3, fused=True)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    fast = FusedStep(opt)
    flag = torch.zeros((), device=device)
    fast(flag)  # the optimizer's own step: creates the state and the plan

    def with_flag() -> None:  # what the train step did before FusedStep: the flag handed over as a GradScaler does
        opt.grad_scale, opt.found_inf = None, flag  # type: ignore[attr-defined]
        try:
            opt.step()
        finally:
            del opt.grad_scale, opt.found_inf  # type: ignore[attr-defined]

    print(f"optimizer.step() with found_inf: {_us(with_flag, device):7.1f} us")
    print(f"FusedStep with found_inf:        {_us(lambda: fast(flag), device):7.1f} us")
    print(f"optimizer.step():                {_us(opt.step, device):7.1f} us  (no flag: hand loops)")


if __name__ == "__main__":
    main()
