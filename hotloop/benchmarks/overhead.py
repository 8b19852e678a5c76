"""The per-step host cost of a training loop, with the model made negligible: `Linear(8, 8)`.

    hotloop bench --workload overhead

On a GPU, a small model is launch-bound: every extra op in the step is a kernel launch and Python time
the device waits for. This probe measures, for the same 8x8 linear model and a batch of 16 sliced from
in-memory tensors:

- `bare`: forward, backward, fused AdamW step, zero_grad - nothing else;
- `nanogpt`: a nanoGPT-style loop - that, plus gradient clipping, a `LambdaLR` warmup/cosine schedule and
  the loss summed on the device (read every 50 steps);
- `hotloop`: `Trainer.fit` with its defaults (clipping, schedule, non-finite guard, on-device metrics).

It reports microseconds per step (the minimum over rounds) and aten ops per step (counted with a
`TorchDispatchMode` in a separate pass, so the counting does not slow the timed runs).
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

STEPS, BATCH, READ_EVERY = 2000, 16, 50


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(self.lin(x), y)


def _data(n: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 8, generator=g), torch.randn(n, 8, generator=g)


def bare(steps: int, tick: Callable[[int], None] = lambda s: None) -> None:
    torch.manual_seed(0)
    model, (x, y) = _Model(), _data()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    n = x.shape[0] // BATCH
    for s in range(steps):
        i = (s % n) * BATCH
        loss = model(x[i : i + BATCH], y[i : i + BATCH])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        tick(s + 1)


def nanogpt(steps: int, tick: Callable[[int], None] = lambda s: None) -> None:
    torch.manual_seed(0)
    model, (x, y) = _Model(), _data()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    warmup = steps // 20

    def factor(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    running = torch.zeros(())
    n = x.shape[0] // BATCH
    for s in range(steps):
        i = (s % n) * BATCH
        loss = model(x[i : i + BATCH], y[i : i + BATCH])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        running += loss.detach()
        if (s + 1) % READ_EVERY == 0:
            _ = running.item()  # the one read of a log interval
            running.zero_()
        tick(s + 1)


def hotloop_fit(steps: int, tick: Callable[[int], None] = lambda s: None) -> None:
    from hotloop import Callback, TrainConfig, Trainer

    class Tick(Callback):
        def on_step_end(self, trainer: Trainer, output: Any) -> None:
            tick(trainer.state.step)

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = TrainConfig(max_steps=steps, batch_size=BATCH, lr=1e-3, log_every=READ_EVERY, eval_every=0,
                          run_dir=run_dir, progress="off", tensorboard=False, device="cpu")  # fmt: skip
        Trainer(_Model(), cfg, callbacks=[Tick()]).fit(_data())


LOOPS: dict[str, Callable[..., None]] = {"bare": bare, "nanogpt": nanogpt, "hotloop": hotloop_fit}


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.n += 1
        return func(*args, **(kwargs or {}))


def ops_per_step(loop: Callable[..., None], steps: int = 400) -> float:
    """aten ops per step, the fixed setup cost removed (two lengths, the difference)."""
    counts = []
    for n in (steps, 2 * steps):
        with _OpCounter() as c:
            loop(n)
        counts.append(c.n)
    return (counts[1] - counts[0]) / steps


def us_per_step(loop: Callable[..., None], steps: int, warmup: int = 100) -> float:
    """Microseconds per step over steps (warmup, warmup + steps] (setup and first steps excluded)."""
    marks: dict[int, float] = {}

    def tick(step: int) -> None:
        if step in (warmup, warmup + steps):
            marks[step] = time.perf_counter()

    loop(warmup + steps, tick)
    return (marks[warmup + steps] - marks[warmup]) / steps * 1e6


def run_overhead(rounds: int = 5, steps: int = STEPS, say: Any = print) -> list[dict[str, Any]]:
    torch.set_num_threads(1)  # host cost, not intra-op parallelism, is what this measures
    times: dict[str, list[float]] = {k: [] for k in LOOPS}
    for r in range(rounds):  # interleaved, so drift hits every loop alike
        for name, loop in LOOPS.items():
            times[name].append(us_per_step(loop, steps))
        say(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.0f} us" for k, v in times.items()))
    rows = []
    ref = min(times["nanogpt"])
    for name, loop in LOOPS.items():
        us = min(times[name])
        rows.append({"loop": name, "us_per_step": round(us, 1), "vs_nanogpt": round(us / ref, 3),
                     "aten_ops_per_step": round(ops_per_step(loop), 1)})  # fmt: skip
    say("loop      us/step  vs nanogpt  aten ops/step")
    for row in rows:
        say(f"{row['loop']:<9} {row['us_per_step']:>7}  {row['vs_nanogpt']:>10}  {row['aten_ops_per_step']:>13}")
    return rows
