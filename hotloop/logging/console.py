"""Console progress: a rich live bar on a terminal, plain lines elsewhere (CI logs, pipes, pytest).

The bar advances on every step from host-side counters (no device read); loss, lr and throughput
change only at log boundaries, when the row arrives already read.
"""

from __future__ import annotations

import sys
import time
from typing import Any


def _fmt_time(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def format_row(row: dict[str, Any], total: int | None) -> str:
    if "event" in row:
        return f"step {row['step']} | {row['event']}: {row.get('reason', '')}"
    step = f"step {row['step']}" + (f"/{total}" if total else "")
    parts = [step]
    for key, fmt in (("loss", ".4f"), ("val_loss", ".4f"), ("lr", ".2e"), ("grad_norm", ".3f")):
        if key in row and isinstance(row[key], (int, float)):
            parts.append(f"{key} {row[key]:{fmt}}")
    if "tokens_per_s" in row:
        parts.append(f"{row['tokens_per_s']:,.0f} tok/s")
    elif "samples_per_s" in row:
        parts.append(f"{row['samples_per_s']:,.1f} samples/s")
    if total and row.get("step") and row.get("elapsed_s"):
        parts.append(f"eta {_fmt_time(row['elapsed_s'] / row['step'] * (total - row['step']))}")
    return " | ".join(parts)


def short_info(row: dict[str, Any]) -> str:
    """The live bar's text: loss, lr and throughput only (the full row is in metrics.jsonl)."""
    parts = []
    if "loss" in row:
        parts.append(f"loss {row['loss']:.4f}")
    if "val_loss" in row:
        parts.append(f"val {row['val_loss']:.4f}")
    if "lr" in row:
        parts.append(f"lr {row['lr']:.1e}")
    if "tokens_per_s" in row:
        parts.append(f"{row['tokens_per_s'] / 1e3:.1f}k tok/s")
    elif "samples_per_s" in row:
        parts.append(f"{row['samples_per_s']:.0f} samples/s")
    return "  ".join(parts)


class Console:
    """`mode`: rich, plain or off (`auto` is resolved by `make_console`)."""

    fast = True
    name = "console"

    def __init__(self, mode: str, total: int | None) -> None:
        self.mode, self.total = mode, total
        self.progress = None
        self.task = None
        if mode == "rich":
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("[bold]step {task.completed}/{task.total}"),
                BarColumn(bar_width=20),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                refresh_per_second=4,
            )
            self.progress.start()
            self.task = self.progress.add_task("train", total=total, info="")

    def advance(self, steps: int = 1) -> None:
        if self.progress is not None:
            self.progress.advance(self.task, steps)

    def log(self, row: dict[str, Any]) -> None:
        if self.mode == "off":
            return
        line = format_row(row, self.total)
        if self.progress is not None and "event" in row:
            self.progress.console.print(line, markup=False, highlight=False)
        elif self.progress is not None:
            self.progress.update(self.task, completed=row["step"], info=short_info(row))
        else:
            print(line, flush=True)

    def print(self, text: str) -> None:
        if self.mode == "off":
            return
        if self.progress is not None:
            self.progress.console.print(text, markup=False, highlight=False)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def make_console(mode: str, total: int | None) -> Console:
    if mode == "auto":
        mode = "rich" if sys.stdout.isatty() else "plain"
    return Console(mode, total)


class Clock:
    """Wall time since the start and since the last boundary (host-side only)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()

    def lap(self) -> tuple[float, float]:
        now = time.perf_counter()
        elapsed, since = now - self.start, now - self.last
        self.last = now
        return elapsed, since
