"""What a run's checkpoint holds, and the run-level operations on it: save, resume, rollback, preemption.

`checkpoint.py` owns the files (atomic writes, manifests, retention, the newest valid checkpoint, DCP);
this module owns what goes into them and what a Trainer does with them:

- `state_dict`: model, optimizer, schedule, precision (the GradScaler), counters, data position (epoch,
  batch, and each rank's source state), every rank's RNG states, history, guard state and config.
- `resume`: `resume=auto` continues from the newest valid checkpoint (or starts fresh, first moving a
  previous run's files aside); the result equals the uninterrupted run.
- `rollback`: after a loss spike or a non-finite step (`nonfinite=rollback`), restore the last good
  checkpoint, back every LR off (`optim.scale_lr`) and go on with the data after the bad window.
- preemption: SIGTERM/SIGUSR1 set a flag; the loop saves at the next step (all ranks agree at a log
  boundary under torchrun) and exits with 128 + the signal number.

The Trainer calls a `Checkpointer` built on itself; its public `state_dict()` and `save_checkpoint()`
delegate here.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from hotloop import checkpoint as ckpt_io
from hotloop import guard, sharded
from hotloop.data import BatchSource
from hotloop.errors import Preempted
from hotloop.logging.jsonl import truncate_metrics
from hotloop.optim import load_scheduler_state, scale_lr

if TYPE_CHECKING:
    from hotloop.trainer import Trainer


class Checkpointer:
    """The run-level checkpoint operations of one Trainer (`t`)."""

    def __init__(self, trainer: Trainer) -> None:
        self.t = trainer
        self.events: list[dict[str, Any]] = []
        """Event rows (a resume) that happen before the run's loggers exist; `fit` logs them first."""

    def rollback(self, reason: str) -> None:
        """Restore the last good checkpoint, back the LR off, and go on with the data after the bad window."""
        self.wait()
        self.t.dist.barrier()  # rank 0 committed the in-flight save: every rank now sees the same newest one
        cfg, gs = self.t.cfg, self.t.guard_state
        path = ckpt_io.latest_valid(self.t.run_dir)
        if path is None:
            guard.warn(f"{reason}: no checkpoint to roll back to (set ckpt_every); training continues")
            return
        if gs.rollbacks >= cfg.max_rollbacks:
            raise guard.GuardError(
                f"{reason}; already rolled back {gs.rollbacks} time(s) (max_rollbacks={cfg.max_rollbacks}): "
                "lower lr, raise warmup_steps or clip_grad, or inspect the data around these steps"
            )
        state = self.load_into(path)
        from_step = self.t.state.step
        self.t.state.step = state["step"]  # the data position stays: the window that caused it is skipped
        gs.rollbacks += 1
        gs.lr_scale *= cfg.lr_backoff
        gs.streak = 0  # the weights are the good ones again
        scale_lr(self.t.optimizer, self.t.scheduler, cfg.lr_backoff)
        self.t._interval.reset(self.t.state.step)
        row = {"step": self.t.state.step, "event": "rollback", "reason": reason, "from_step": from_step,
               "checkpoint": str(path), "lr_scale": gs.lr_scale}  # fmt: skip
        self.t.history.append(row)
        self.t._loggers.log(row)

    # -- saving and resuming ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The complete training state. Taken at a boundary, so no on-device accumulator is pending.

        Under torchrun every rank must call it (each rank's RNG and data position are gathered)."""
        return {"model": self.t.model.state_dict(), "optimizer": self.t.optimizer.state_dict(), **self.meta_state()}

    def meta_state(self) -> dict[str, Any]:
        """Everything but the model and optimizer tensors (those go through DCP when sharded)."""
        source = getattr(self.t, "_train_source", None)
        ranks = self.t.dist.gather_objects(
            {"rng": ckpt_io.capture_rng(), "source": source.state_dict() if source is not None else {}}
        )
        return {
            "scheduler": self.t.scheduler.state_dict() if self.t.scheduler is not None else None,
            "precision": self.t.precision.state_dict(),
            "step": self.t.state.step,
            "epoch": self.t.state.epoch,
            "samples": self.t.state.samples,
            "tokens": self.t.state.tokens,
            "data": {
                "epoch": self.t.state.epoch,
                "batches": getattr(self.t, "_epoch_batches", 0),
                "seed": self.t.cfg.seed,
                "source": ranks[0]["source"],
                "ranks": [r["source"] for r in ranks],
            },
            "rng": ranks[0]["rng"],
            "rank_rng": [r["rng"] for r in ranks],
            "world": self.t.dist.world,
            "micro_split": self.t._micro.split,
            "history": list(self.t.history),
            "guard": self.t.guard_state.state_dict(),
            "config": self.t.cfg.to_dict(),
        }

    def save(self, path: str | Path | None = None) -> Path:
        """Commit the full training state to `path`, or as the run's checkpoint of the current step.

        strategy=fsdp writes a sharded checkpoint through torch.distributed.checkpoint (every rank its
        shard, reshardable to any world size); otherwise rank 0 writes one file. Under torchrun every
        rank must call this. Weights that are not finite are never saved: the newest valid checkpoint stays
        the last good one."""
        d = self.t.dist
        self.refuse_nonfinite()
        if d.strategy == "fsdp":
            meta = self.meta_state()
            if path is not None:
                return sharded.save_sharded_to(Path(path), self.t.model, self.t.optimizer, meta, d.main, d.barrier)
            return sharded.save_sharded(
                self.t.model,
                self.t.optimizer,
                meta,
                self.t.run_dir,
                self.t.state.step,
                self.t.cfg.keep_last,
                d.main,
                d.barrier,
                *self._retention(),
            )
        state = self.t.state_dict()
        target = Path(path) if path is not None else ckpt_io.checkpoint_path(self.t.run_dir, self.t.state.step)
        if d.main:
            if path is not None:
                ckpt_io.atomic_save(state, path)
            else:
                ckpt_io.save_checkpoint(state, self.t.run_dir, self.t.state.step, self.t.cfg.keep_last,
                                        *self._retention())  # fmt: skip
        d.barrier()  # no rank goes on (or reads the checkpoint) before it is committed
        return target

    def _retention(self) -> tuple[dict[str, float] | None, tuple[str, str] | None]:
        """(the manifest's metrics, the keep-best rule): the latest logged value of `keep_best`, if any."""
        key = self.t.cfg.keep_best
        if key is None:
            return None, None
        value = next((r[key] for r in reversed(self.t.history) if isinstance(r.get(key), (int, float))), None)
        return ({key: float(value)} if value is not None else None), (key, self.t.cfg.best_mode)

    def refuse_nonfinite(self) -> None:
        """Raise instead of saving weights that are not finite (the newest valid checkpoint stays the good one)."""
        if not self.weights_finite():
            last = ckpt_io.latest_valid(self.t.run_dir)
            raise guard.GuardError(
                f"the weights are not finite at step {self.t.state.step}: not saved (the last good checkpoint is "
                f"{last or 'none'}); the run diverged - lower lr, set clip_grad, or use nonfinite=rollback"
            )

    def weights_finite(self) -> bool:
        """All parameters finite, on every rank (a checkpoint boundary: one read)."""
        params = [p.to_local() if hasattr(p, "to_local") else p for p in self.t.model.parameters()]
        params = [p for p in params if p.numel() and p.is_floating_point()]
        if not params:
            return True
        ok = torch.stack([p.detach().isfinite().all() for p in params]).all().float().reshape(1)
        if self.t.dist.active:
            ok = self.t.dist.reduce_vector(ok) / self.t.dist.world
        return bool(ok.item() == 1.0)  # sync: checkpoint boundary

    # -- checkpoints written in the background (async_checkpoint) -------------------------------------

    _thread: threading.Thread | None = None
    _error: BaseException | None = None
    _pending_step = 0
    _host: dict[str, torch.Tensor] | None = None  # the host buffers of the one-file save, reused save after save
    _stager: sharded.HostStager | None = None  # the same for DCP (strategy=fsdp)
    _group: Any = None  # DCP's gloo group for its background collectives

    def async_enabled(self) -> bool:
        return bool(self.t.cfg.async_checkpoint)

    def save_in_background(self) -> None:
        """Copy the state to host memory, hand it to a writer thread, and return: training goes on while the
        file is written, hashed and committed with the same atomic protocol (temp file, fsync, rename,
        manifest). At most one save is in flight: a new one first waits for the previous. Under DDP rank 0
        writes the one file; under FSDP every rank stages its shards and DCP writes them (`sharded`)."""
        self.wait()
        t0 = time.perf_counter()
        self.refuse_nonfinite()
        step, retention = self.t.state.step, self._retention()
        self._pending_step = step
        d = self.t.dist
        if d.strategy == "fsdp":
            write = self._start_sharded(step, retention)
        else:
            live = self.t.state_dict()  # every rank: it gathers each rank's data position and RNG states
            write = None  # DDP: rank 0 writes the one file; the other ranks have nothing in flight
            if d.main:
                if self._host is None:
                    self._host = {}
                state = _to_host(live, self._host)  # a copy: the live tensors keep changing
                if self.t.device.type == "cuda":
                    torch.cuda.synchronize(self.t.device)  # sync: checkpoint boundary (the host copy is complete)

                def write() -> None:
                    ckpt_io.save_checkpoint(state, self.t.run_dir, step, self.t.cfg.keep_last, *retention)

        if write is not None:
            self._thread = threading.Thread(target=self._guarded(write), name=f"hotloop-checkpoint-{step}",
                                            daemon=False)  # fmt: skip
            self._thread.start()
        self.t._interval.ckpt_block_s += time.perf_counter() - t0

    def _start_sharded(self, step: int, retention: tuple[Any, Any]) -> Callable[[], None]:
        d, cfg = self.t.dist, self.t.cfg
        if self._stager is None:
            self._stager, self._group = sharded.HostStager(self.t.device), sharded.checkpoint_group()
        meta = self.meta_state()
        path = sharded.sharded_path(self.t.run_dir, step)
        future = sharded.save_sharded_async(path, self.t.model, self.t.optimizer, d.main, d.barrier, self._stager,
                                            self._group)  # fmt: skip

        def write() -> None:
            future.result()  # on the coordinator: every rank's shards are written
            if d.main:
                sharded.commit_sharded(path, meta, step, retention[0])
                if cfg.keep_last:
                    ckpt_io.purge(self.t.run_dir, cfg.keep_last, retention[1])

        return write

    def _guarded(self, write: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                write()
            except BaseException as e:  # handed to the training thread at its next wait
                self._error = e

        return run

    def failed(self) -> bool:
        """The background save finished with an error (cheap: polled every step). Under torchrun only at the
        next boundary every rank reaches (`wait`), so the ranks never disagree about stopping."""
        if self.t.dist.active:
            return False
        return self._thread is not None and self._error is not None and not self._thread.is_alive()

    def wait(self) -> None:
        """Block until the in-flight save is committed; its error, if any, is raised here."""
        if self._thread is None:
            return
        self._thread.join()
        self._thread, error, self._error = None, self._error, None
        if error is not None:
            self._save_failed(error, self._pending_step)

    def close(self) -> None:
        """At the end of fit: the in-flight save is committed (by `wait`); release DCP's host buffers."""
        if self._stager is not None:
            self._stager.close()
            self._stager = None
        self._host = None

    def wait_quietly(self) -> None:
        """`wait()` on the way out of an exception: the save is committed; a second error is only printed."""
        try:
            self.wait()
        except Exception as e:
            print(f"hotloop: the background checkpoint also failed: {e}", file=sys.stderr)

    def save_or_stop(self, background: bool = False) -> None:
        if background and self.async_enabled():
            self.save_in_background()
            return
        t0 = time.perf_counter()
        try:
            self.t.save_checkpoint()
        except OSError as e:
            self._save_failed(e, self.t.state.step)
        interval = getattr(self.t, "_interval", None)
        if interval is not None:
            interval.ckpt_block_s += time.perf_counter() - t0

    def _save_failed(self, error: BaseException, step: int) -> None:
        """A save that failed: a disk problem stops the run cleanly (or warns, `on_save_error=warn`)."""
        if not isinstance(error, OSError):
            raise error
        last = ckpt_io.latest_valid(self.t.run_dir)
        msg = (
            f"could not write the checkpoint of step {step} to {self.t.run_dir / ckpt_io.CKPT_DIR}: "
            f"{error.strerror or error}. The last good checkpoint is {last or 'none'}; free space or fix "
            "permissions, then resume with resume=auto"
        )
        if self.t.cfg.on_save_error == "warn":
            warnings.warn(msg, stacklevel=2)
            return
        raise ckpt_io.CheckpointError(msg) from None

    def resume(self, source: BatchSource) -> None:
        spec = self.t.cfg.resume
        if spec is None or (spec == "auto" and not ckpt_io.committed(self.t.run_dir)):
            if self.t.state.step == 0:
                self.set_aside_previous_run()
            return  # resume=auto starts fresh when there is nothing to resume
        path = ckpt_io.resolve(self.t.run_dir if spec == "auto" else spec, strict=self.t.cfg.resume_strict)
        state = self.load_into(path)
        self.check_compatible(state, path)
        st = self.t.state
        try:  # a file that passed its hash and the schema check can still hold inconsistent internals
            self.t.guard_state.load_state_dict(dict(state.get("guard", {})))  # the LR scale is in the saved LRs
            st.step, st.epoch = state["step"], state["epoch"]
            st.samples, st.tokens = state.get("samples", 0), state.get("tokens", 0)
            self.t._micro.split = int(state.get("micro_split", 1))
            self.t._epoch_batches = state["data"]["batches"]
            same_world = state.get("world", 1) == self.t.dist.world
            r = self.t.dist.rank if same_world else 0
            ranks = state["data"].get("ranks") or [state["data"].get("source", {})]
            source.load_state_dict(ranks[r] if r < len(ranks) else ranks[0])
            ckpt_io.restore_rng((state.get("rank_rng") or [state["rng"]])[r] if same_world else state["rng"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as e:
            raise ckpt_io.CheckpointError(
                f"checkpoint {path} is not a valid hotloop state: {type(e).__name__}: {str(e)[:200]}"
            ) from None
        self.t.history = list(state.get("history", []))
        if self.t.dist.main:
            truncate_metrics(self.t.run_dir / "metrics.jsonl", st.step)
            print(f"hotloop: resumed from {path} at step {st.step} (epoch {st.epoch}, batch {self.t._epoch_batches})")
        self.events.append({"step": st.step, "event": "resume", "reason": f"from {path.name}"})

    def set_aside_previous_run(self) -> None:
        """A fresh run in a run_dir holding another run's checkpoints or metrics moves them to
        `previous/<time>/` first: nothing is lost, and neither metrics.jsonl nor a later resume=auto mixes
        the two runs."""
        if self.t.dist.main:
            ckpts, metrics = self.t.run_dir / ckpt_io.CKPT_DIR, self.t.run_dir / "metrics.jsonl"
            old = [p for p in (ckpts, metrics) if p.is_file() or (p.is_dir() and any(p.iterdir()))]
            if old:
                stamp = time.strftime("%Y%m%d-%H%M%S")
                dest = self.t.run_dir / "previous" / stamp
                n = 1
                while dest.exists():
                    n += 1
                    dest = self.t.run_dir / "previous" / f"{stamp}-{n}"
                dest.mkdir(parents=True)
                for p in old:
                    p.rename(dest / p.name)
                print(
                    f"hotloop: {self.t.run_dir} held a previous run; moved its {' and '.join(p.name for p in old)} to "
                    f"{dest} (to continue a run instead, pass resume=auto)"
                )
        self.t.dist.barrier()

    def load_into(self, path: Path) -> dict[str, Any]:
        """Load a checkpoint (one file, or sharded through DCP, from any world size) into the model,
        optimizer, schedule and precision; return the rest of its state."""
        if ckpt_io.is_sharded(path):
            meta = sharded.load_sharded_into(path, self.t.model, self.t.optimizer)
            self.load_training_state(meta, path, tensors=False)
            return meta
        # Model and optimizer tensors are copied into this run's (on its device) by load_state_dict; the RNG
        # and data state must stay CPU tensors, whatever device the run is on.
        state = ckpt_io.load_checkpoint(path, map_location="cpu")
        ckpt_io.check_state(state, path, full=True)  # everything a resume needs, or one line naming what is not
        if self.t.dist.strategy == "fsdp" and self.t.dist.active:  # a one-file checkpoint into a sharded model
            sharded.load_full_into_sharded(state, self.t.model, self.t.optimizer)
            self.load_training_state(state, path, tensors=False)
        else:
            self.load_training_state(state, path)
        return state

    def load_training_state(self, state: dict[str, Any], path: Path | None = None, tensors: bool = True) -> None:
        """Model, optimizer (unless already loaded: `tensors=False`), schedule position and precision."""
        try:
            if tensors:
                self.t.model.load_state_dict(state["model"])
                self.t.optimizer.load_state_dict(state["optimizer"])
            if self.t.scheduler is not None and state.get("scheduler"):
                load_scheduler_state(self.t.scheduler, state["scheduler"])
            self.t.precision.load_state_dict(state["precision"])
        except (RuntimeError, ValueError, KeyError, TypeError, AttributeError) as e:
            first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            raise ckpt_io.CheckpointError(
                f"checkpoint {path or ''} does not fit this run (another model, optimizer or schedule?): {first}"
            ) from None

    MATH_KEYS = ("batch_size", "grad_accum", "optimizer", "gpt", "classify", "seed")

    def check_compatible(self, state: dict[str, Any], path: Path) -> None:
        old, new = dict(state.get("config", {})), self.t.cfg.to_dict()
        if "batch_size" in old:
            old["batch_size"] = old["batch_size"] * state.get("world", 1)
            new["batch_size"] = new["batch_size"] * self.t.dist.world
        label = {"batch_size": "batch_size x ranks"}  # per rank: what must match is the global batch
        changed = [f"{label.get(k, k)}: {old[k]} -> {new[k]}" for k in self.MATH_KEYS if k in old and old[k] != new[k]]
        if changed:
            warnings.warn(
                f"resuming {path} with a config that changes the math ({'; '.join(changed)}): the run will not "
                "equal an uninterrupted one",
                stacklevel=3,
            )

    # -- preemption -----------------------------------------------------------------------------

    def install_signal_handlers(self) -> Callable[[], None]:
        """The handler only sets a flag; the loop saves at the next step boundary (never mid-backward)."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        names = [n.strip() for n in self.t.cfg.preempt_signals.split(",") if n.strip()]
        previous = {}
        for name in names:
            sig = getattr(signal, name)
            previous[sig] = signal.signal(sig, self.on_signal)

        def restore() -> None:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def on_signal(self, signum: int, frame: Any) -> None:
        self.t._signal = signum

    def preempt(self) -> None:
        signum = self.t._signal or signal.SIGTERM
        self.t._boundary(log=self.t._interval.steps > 0, val_source=None)
        self.wait()
        self.save_or_stop()
        name = signal.Signals(signum).name
        event = {"step": self.t.state.step, "event": "preempt", "reason": name}
        self.t.history.append(event)
        self.t._loggers.log(event)
        msg = (
            f"hotloop: received {name}: saved the checkpoint of step {self.t.state.step} in "
            f"{self.t.run_dir / ckpt_io.CKPT_DIR}; run the same command with resume=auto to continue"
        )
        if self.t.dist.main:
            print(msg, file=sys.stderr, flush=True)
        raise Preempted(msg, 128 + signum)


def _to_host(obj: Any, pool: dict[str, torch.Tensor], key: str = "") -> Any:
    """A copy of a state dict with every tensor on the CPU, into `pool`'s buffers (by position in the state
    dict) when shape and dtype still match: after the first save, none is allocated. On CUDA the buffers
    are pinned and filled without blocking (the caller synchronizes once)."""
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        buf = pool.get(key)
        if buf is None or buf.shape != t.shape or buf.dtype != t.dtype:
            buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.device.type == "cuda")
            pool[key] = buf
        return buf.copy_(t, non_blocking=t.device.type == "cuda")
    if isinstance(obj, dict):
        return {k: _to_host(v, pool, f"{key}/{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(v, pool, f"{key}/{i}") for i, v in enumerate(obj))
    return obj
