"""Where boundary metrics go, without ever making the training loop wait.

Sinks only receive rows of Python values, after the boundary's single host read, so no sink can add a
sync. And no sink can add a stall either (seed 003, section 5: users of other trainers lose half their
steps/s to a blocking `wandb.log` or a remote MLflow server): `Loggers` gives each sink its own bounded
queue and writer thread, and the training thread only enqueues. A slow sink falls behind on its own;
the others (metrics.jsonl, the source of truth, first) keep up. If a sink's queue ever fills, the
next boundary waits for room and says which sink is slow - nothing is dropped. A sink that raises is
reported once and disabled; training goes on and metrics.jsonl still gets every row.

Flushing: `flush()` (end of `fit`, preemption, an exception) waits until the sinks marked `fast` have
written everything - metrics.jsonl, CSV, TensorBoard, the console - so the run directory is complete
when `fit` returns; slower sinks (W&B, MLflow, a user's) keep draining in their non-daemon threads, which
the interpreter joins before the process exits, so every queued row still arrives. `close()` waits for
all of them.

Sinks: `jsonl`, `csv`, `tensorboard`, `wandb`, `mlflow` (`loggers=` config key; see `sinks.py`), the
console, and any user object with `log(row)` and an optional `close()` (`Trainer(loggers=[...])`).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from hotloop.logging.console import Console
from hotloop.logging.jsonl import JsonlSink
from hotloop.logging.tensorboard import TensorBoardSink, tensorboard_available

_STOP = object()


class _Worker(threading.Thread):
    """One sink, its bounded queue and the thread that feeds it."""

    def __init__(self, sink: Any, maxsize: int) -> None:
        self.sink, self.name_ = sink, getattr(sink, "name", type(sink).__name__)
        super().__init__(name=f"hotloop-logger-{self.name_}", daemon=False)
        self.queue: queue.Queue = queue.Queue(maxsize)
        self.failed: str | None = None
        self.busy_s = 0.0
        """Time spent inside the sink (to name the slow one)."""
        self.written = 0

    def run(self) -> None:
        while True:
            row = self.queue.get()
            try:
                if row is _STOP:
                    self._close()
                    return
                if self.failed is None:
                    t0 = time.perf_counter()
                    try:
                        self.sink.log(row)
                        self.written += 1
                    except Exception as e:  # reported once; the sink is off from now on
                        self.failed = f"{type(e).__name__}: {e}"
                        print(f"hotloop: logger {self.name_} failed ({self.failed}); it is disabled, training goes "
                              "on and metrics.jsonl keeps every row", file=sys.stderr, flush=True)  # fmt: skip
                    self.busy_s += time.perf_counter() - t0
            finally:
                self.queue.task_done()

    def _close(self) -> None:
        close = getattr(self.sink, "close", None)
        if close is not None:
            try:
                close()
            except Exception as e:
                print(f"hotloop: logger {self.name_} failed to close: {e}", file=sys.stderr, flush=True)


class Loggers:
    """Fan one row out to every sink, each behind its own queue and thread."""

    def __init__(self, sinks: Sequence[Any], maxsize: int = 10_000) -> None:
        self.workers = [_Worker(s, maxsize) for s in sinks]
        for w in self.workers:
            w.start()
        self.closed = False

    def log(self, row: dict[str, Any]) -> None:
        """Enqueue a copy of `row` for every sink; never blocks unless a sink's queue is full."""
        for w in self.workers:
            try:
                w.queue.put_nowait(dict(row))
            except queue.Full:
                print(f"hotloop: logger {w.name_} is {w.queue.qsize()} rows behind (it spent {w.busy_s:.1f} s "
                      "writing): training waits for it at this boundary", file=sys.stderr, flush=True)  # fmt: skip
                w.queue.put(dict(row))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until the fast sinks have written every queued row (slow ones drain before exit)."""
        for w in self.workers:
            if getattr(w.sink, "fast", False):
                w.queue.join()
        pending = [(w.name_, w.queue.qsize()) for w in self.workers if w.queue.unfinished_tasks]
        if pending:
            what = ", ".join(f"{name} ({n} rows)" for name, n in pending)
            print(f"hotloop: still writing in the background: {what}; they finish before the process exits",
                  file=sys.stderr, flush=True)  # fmt: skip

    def close(self, wait: bool = True) -> None:
        """Stop the writers after they wrote everything queued (joined now when `wait`, else at exit)."""
        if not self.closed:
            self.closed = True
            for w in self.workers:
                w.queue.put(_STOP)
        if wait:
            for w in self.workers:
                w.join()

    @property
    def sinks(self) -> list[Any]:
        return [w.sink for w in self.workers]


__all__ = ["Console", "JsonlSink", "Loggers", "TensorBoardSink", "tensorboard_available"]
