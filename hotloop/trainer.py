"""The Trainer: builds the pieces, runs the loop, and decides when the host may look at the device.

It owns no math: the step (`step.py`), precision (`precision.py`), optimizer and schedule
(`optim.py`), data (`data.py`) and metrics (`metrics.py`) each live in their own module. What the
Trainer owns is the *boundaries*: between two of them a step performs no host read of a tensor value.
At a log boundary every metric of the interval, and at an eval boundary the validation metrics too,
are read with one transfer (`metrics.read_scalars`).

    trainer = hotloop.Trainer(model, hotloop.TrainConfig(max_steps=1000))
    trainer.fit(train_data, val_data)
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hotloop import distributed, graphs, guard
from hotloop.callbacks import Callback
from hotloop.checkpointer import Checkpointer
from hotloop.config import TrainConfig
from hotloop.data import (
    Batch,
    BatchSource,
    CudaPrefetcher,
    IterableSource,
    LoaderSource,
    OverfitSource,
    TensorSlices,
    fits_on_device,
    make_source,
    to_device,
    windows,
)
from hotloop.errors import ConfigError, DataError
from hotloop.evaluate import evaluate
from hotloop.interval import LogInterval
from hotloop.logging import Loggers
from hotloop.logging.console import Clock, make_console
from hotloop.logging.sinks import build_sinks, parse_loggers
from hotloop.memory import MicroBatches, apply_activation_checkpointing, memory_check
from hotloop.metrics import compute_metric_objects, note_validate_args, read_scalars
from hotloop.optim import (
    build_scheduler,
    is_plateau,
    resolve_optimizer,
    resolve_scheduler,
)
from hotloop.precision import resolve_precision
from hotloop.step import LossFn, TrainStep, default_loss_fn


@dataclass
class TrainState:
    """Host-side counters (Python ints): nothing here is ever read from the device."""

    step: int = 0
    """Optimizer steps done."""
    epoch: int = 0
    """Completed passes over the training data."""
    samples: int = 0
    tokens: int = 0


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name} but no CUDA device is available; use device=auto or device=cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"device={name} but only {torch.cuda.device_count()} CUDA device(s) exist")
    return dev


def resolve_compile(value: bool | str, device: torch.device) -> str | None:
    """The torch.compile mode to use, or None for eager."""
    if value == "auto":
        return "default" if device.type == "cuda" else None
    if value is True:
        return "default"
    if value is False:
        return None
    return str(value)


def uses_cudagraphs(mode: str | None) -> bool:
    """Compile modes whose options capture CUDA graphs (`torch._inductor.list_mode_options`)."""
    return mode in ("reduce-overhead", "max-autotune")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too


class Trainer:
    """Train `model` with `cfg`. See DESIGN.md for the public API; `state`, `model` and `history` are stable."""

    def __init__(
        self,
        model: nn.Module,
        cfg: TrainConfig | None = None,
        loss_fn: LossFn | None = None,
        callbacks: Sequence[Callback] = (),
        optimizer: Any = None,
        scheduler: Any = None,
        collate_fn: Callable[[list[Any]], Batch] | None = None,
        loggers: Sequence[Any] = (),
        batch_tokens: Callable[[Batch], int | torch.Tensor] | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise ConfigError(f"Trainer needs an nn.Module, got {type(model).__name__}")
        self.cfg = cfg = cfg or TrainConfig()
        self.dist, device = distributed.setup(cfg.strategy, cfg.device, cfg.dist_timeout)
        """This rank's place in a torchrun job (rank 0 of 1 without one); see `distributed.py`."""
        self.device = resolve_device(device)
        if cfg.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts
            torch.use_deterministic_algorithms(True)
            torch.backends.cudnn.benchmark = False
        seed_everything(cfg.seed)  # the same on every rank: identical initial weights before any sharding
        self.model = model.to(self.device)
        apply_activation_checkpointing(model, cfg.activation_checkpointing, cfg.shard_modules)  # before FSDP/compile
        self.precision = resolve_precision(cfg.precision, self.device)
        self.loss_fn = loss_fn or default_loss_fn
        self.callbacks = list(callbacks)
        self.batch_tokens = batch_tokens
        """Tokens in a batch: a Python int, or a tensor (summed on the device, read at log boundaries)."""
        self.collate_fn = collate_fn
        """Used by every DataLoader hotloop builds (training and validation)."""
        self.extra_loggers = list(loggers)
        """User sinks: anything with `log(row)` (and optionally `close()`), fed on rank 0."""
        self.compile_mode = mode = resolve_compile(cfg.compile, self.device)
        strategy, sharded = self.dist.strategy, self.dist.strategy == "fsdp" and self.dist.active
        if sharded:
            if self.precision.name == "fp16":
                raise ConfigError("precision=fp16 with strategy=fsdp is not supported; use precision=bf16 or fp32")
            bf16 = self.precision.name == "bf16"
            distributed.wrap_fsdp(model, cfg.shard_modules, bf16=bf16)
            if bf16:  # FSDP2's MixedPrecisionPolicy casts parameters itself: no autocast on top
                self.precision = resolve_precision("fp32", self.device)
                self.precision.name = "bf16 (FSDP2 mixed precision)"
        if isinstance(optimizer, torch.optim.Optimizer) and sharded:
            raise ConfigError("strategy=fsdp replaces the parameters: pass optimizer= as a factory, not an instance")
        note = print if self.dist.main else (lambda *_: None)
        self.optimizer = resolve_optimizer(optimizer, model, cfg, self.device, note=note)  # after FSDP2's DTensors
        wrapped = distributed.wrap_ddp(model, self.device) if strategy == "ddp" and self.dist.active else model
        self.no_sync = distributed.no_sync_for(strategy, wrapped) if self.dist.active else None
        self.eager_model = wrapped
        """The model as the step calls it without torch.compile (DDP-wrapped under ddp)."""
        self.forward_model: nn.Module = (
            wrapped if mode is None else torch.compile(wrapped, mode=None if mode == "default" else mode)
        )
        self.cuda_graph = graphs.resolve(cfg.cuda_graph, self.device, self.precision.name, self.dist.active,
                                         self.optimizer, uses_cudagraphs(mode))  # fmt: skip
        """The whole-step CUDA graph mode this run uses: off, step, or auto (`graphs.py`)."""
        self.precision.cache_enabled = self.cuda_graph == "off"  # before anything compiles: see CapturedStep
        self.scheduler: Any = resolve_scheduler(scheduler, self.optimizer) if scheduler is not None else None
        """Stepped once per optimizer step (ReduceLROnPlateau: at evaluations, on val_loss)."""
        self.state = TrainState()
        self.history: list[dict[str, Any]] = []
        """Every row written to metrics.jsonl by this trainer, in order."""
        self.host_metrics: dict[str, Callable[[], Any]] = {}
        """Host-side values added to every log row (e.g. a Python counter): called at log boundaries only,
        and must not read the device."""
        self.run_dir = Path(cfg.run_dir)
        if cfg.num_classes is None and getattr(self.loss_fn, "num_classes", None):
            cfg = self.cfg = cfg.replace(num_classes=self.loss_fn.num_classes)  # the loss function knows C
        self._micro = MicroBatches(cfg.auto_micro_batch)
        """auto_micro_batch: the current split of each batch after out-of-memory steps (`memory.py`)."""
        self.checkpointer = Checkpointer(self)
        """Save, resume, rollback and preemption (`checkpointer.py`)."""
        self.guard_state = guard.GuardState()
        self._spikes = guard.SpikeDetector(cfg.spike_factor, self.guard_state)
        if cfg.debug_anomaly:
            guard.install_anomaly_hooks(model)

    # -- data --------------------------------------------------------------------------------

    def _source(self, data: Any, train: bool) -> BatchSource:
        """Training data is sharded over the ranks; every rank evaluates the same validation batches."""
        cfg, d = self.cfg, self.dist
        return make_source(
            data,
            batch_size=cfg.batch_size,
            device=self.device,
            train=train,
            drop_last=cfg.drop_last,
            seed=cfg.seed,
            num_workers=cfg.num_workers,
            rank=d.rank if train else 0,
            world=d.world if train else 1,
            collate_fn=self.collate_fn,
        )

    def _place(self, source: BatchSource) -> None:
        """data_on_device: move in-memory tensor datasets to the GPU once, when asked or when they fit."""
        want = self.cfg.data_on_device
        if isinstance(source, TensorSlices) and self.device.type == "cuda":
            if want is True or (want == "auto" and fits_on_device(source, self.device)):
                source.place(self.device)

    def _batches(self, source: BatchSource, epoch: int, skip: int = 0) -> Iterator[Batch]:
        batches = source.epoch(epoch, skip)
        if self.device.type == "cpu":
            return batches  # nothing to move
        prefetch = self.cfg.prefetch and self.device.type == "cuda" and not getattr(source, "stateful", False)
        if prefetch and not (isinstance(source, TensorSlices) and source.device == self.device):
            # Looking one batch ahead is safe for the data position: positions count batches consumed by
            # steps, and sources whose own RNG is their position (`stateful`) are not prefetched.
            return CudaPrefetcher(batches, self.device)
        return (to_device(batch, self.device) for batch in batches)

    def _planned_steps(self, source: BatchSource) -> int | None:
        """Optimizer steps this fit will run, when it can be known in advance."""
        cfg = self.cfg
        per_epoch = -(-source.length // cfg.grad_accum) if source.length else None
        by_epochs = per_epoch * (cfg.epochs or 1) if per_epoch and (cfg.epochs or not cfg.max_steps) else None
        candidates = [s for s in (cfg.max_steps, by_epochs) if s]
        return min(candidates) if candidates else None

    # -- the loop ----------------------------------------------------------------------------

    def fit(self, train_data: Any, val_data: Any = None) -> Trainer:
        """Train until `max_steps` optimizer steps or `epochs` passes, whichever comes first."""
        cfg = self.cfg
        source = self._source(train_data, train=True)
        if cfg.overfit_batches:
            source = OverfitSource(source, cfg.overfit_batches)
        val_source = self._source(val_data, train=False) if val_data is not None else None
        for src in (source, val_source):
            if src is not None:
                self._place(src)
        planned = self._planned_steps(source)
        if self.scheduler is None:
            span = cfg.schedule_steps or planned
            if span is None and cfg.schedule != "constant":
                raise ConfigError(
                    f"schedule={cfg.schedule} needs to know the run's length but the data has no len(); "
                    "set max_steps (or schedule_steps)"
                )
            self.scheduler = build_scheduler(self.optimizer, cfg, span or 1)
        self._epoch_batches = 0
        self.checkpointer.resume(source)
        memory_check(self, source)
        step_fn = TrainStep(
            self.forward_model,
            self.loss_fn,
            self.optimizer,
            self.scheduler,
            self.precision,
            cfg.clip_grad,
            no_sync=self.no_sync,
            cudagraphs=uses_cudagraphs(self.compile_mode) and self.device.type == "cuda",
            eager_model=self.eager_model if self.compile_mode is not None else None,
        )
        if self.state.step == 0:
            step_fn.inspect_grads = self._probe_grad_health
        step_fn = graphs.wrap(step_fn, self.cuda_graph, self.device)  # single-process only: print is rank 0
        self._probes: dict[str, torch.Tensor] = {}
        self.run_dir.mkdir(parents=True, exist_ok=True)
        main = self.dist.main  # only rank 0 prints and writes files
        if main:
            cfg.save(self.run_dir / "config.yaml")
        console = make_console(cfg.progress if main else "off", planned)
        sinks: list[Any] = [console]
        if main:  # only rank 0 logs
            resumed = cfg.resume is not None and self.state.step > 0
            sinks += build_sinks(parse_loggers(cfg.loggers), self.run_dir, cfg.to_dict(), resumed, cfg.tensorboard)
            sinks += self.extra_loggers
        self._loggers, self._console = Loggers(sinks), console
        for row in self.checkpointer.events:
            self.history.append(row)
            self._loggers.log(row)
        self.checkpointer.events.clear()
        self._interval = LogInterval(cfg.clip_grad, self.dist.world, self.device, cfg.flops_per_token)
        self._interval.reset(self.state.step)
        self._clock = Clock()
        self._step_fn = step_fn
        self._noted: set[str] = set()
        self.model.train()
        for cb in self.callbacks:
            cb.on_fit_start(self)
        self._train_source = source
        restore_signals = self.checkpointer.install_signal_handlers()
        try:
            self._loop(step_fn, source, val_source)
            self._boundary(log=self._interval.steps > 0, val_source=val_source)
            self.checkpointer.wait()
            self.checkpointer.save_or_stop()
            for cb in self.callbacks:
                cb.on_fit_end(self)
        finally:
            self.checkpointer.wait_quietly()  # an in-flight save is committed before fit returns, whatever happened
            self.checkpointer.close()
            restore_signals()
            self._loggers.flush()  # metrics.jsonl and the other fast sinks are complete when fit returns
            self._loggers.close(wait=False)  # slow sinks finish in their threads before the process exits
        return self

    def _loop(self, step_fn: TrainStep, source: BatchSource, val_source: BatchSource | None) -> None:
        cfg, state = self.cfg, self.state
        one_shot = isinstance(source, IterableSource) and source.one_shot
        while True:
            if cfg.max_steps is not None and state.step >= cfg.max_steps:
                return  # e.g. resuming a run that already reached max_steps
            produced = False
            skip = self._epoch_batches  # > 0 only when resuming mid-epoch
            exact = source.length if isinstance(source, (TensorSlices, LoaderSource)) else None
            remaining = exact - skip if exact is not None and self.device.type == "cuda" else None
            waited = time.perf_counter()
            for window in windows(self._batches(source, state.epoch, skip), cfg.grad_accum, remaining):
                self._interval.wait_s += time.perf_counter() - waited  # the host waited for data (no sync)
                produced = True
                out = self._micro.run(step_fn, window, self.optimizer, self._event)
                self._epoch_batches += len(window)
                self._last_lr = out.lr
                samples = out.samples * self.dist.world  # every rank steps on an equal share
                self._interval.add(out.metrics, out.grad_norm, out.nonfinite, samples, out.lr)
                if state.step == 0:
                    self._probes["initial_loss"] = out.metrics["loss"]
                state.step += 1
                state.samples += samples
                if self.batch_tokens is not None:
                    self._interval.add_tokens(sum(self.batch_tokens(b) for b in window))
                self._console.advance()
                for cb in self.callbacks:
                    cb.on_step_end(self, out)
                if cfg.max_steps is not None and state.step >= cfg.max_steps:
                    return  # the final boundary (log + eval in one read) is fit's
                if self._signal is not None and not self.dist.active:
                    self.checkpointer.preempt()  # several ranks agree to stop at a log boundary instead (`_boundary`)
                save = bool(cfg.ckpt_every) and state.step % cfg.ckpt_every == 0
                log = save or state.step % cfg.log_every == 0 or (cfg.log_first_step and state.step == 1)
                do_eval = bool(cfg.eval_every) and state.step % cfg.eval_every == 0
                if log or do_eval:
                    self._boundary(log=log, val_source=val_source if do_eval else None)
                if save:
                    self.checkpointer.save_or_stop(background=True)
                elif self.checkpointer.failed():
                    self.checkpointer.wait()  # a background save failed: stop (or warn) now
                if self._stop_all:
                    self.checkpointer.preempt()
                waited = time.perf_counter()
            if not produced:
                if skip:  # resumed exactly at the end of an epoch
                    self._epoch_batches = 0
                    state.epoch += 1
                    continue
                if state.step == 0:
                    raise DataError(
                        "the training data yielded no batch: check that the dataset is not empty and that "
                        "batch_size is not larger than it with drop_last=true"
                    )
                return  # a one-shot iterator is exhausted
            state.epoch += 1
            self._epoch_batches = 0
            if (cfg.epochs and state.epoch >= cfg.epochs) or one_shot or (not cfg.epochs and not cfg.max_steps):
                return

    def _boundary(self, log: bool, val_source: BatchSource | None) -> None:
        """Read every pending metric with one host transfer, then write the row everywhere."""
        elapsed, since = self._clock.lap()
        interval = self._interval
        interval.seconds += since  # training time only: evaluation time is excluded below
        pending: dict[str, torch.Tensor] = interval.pending() if log else {}
        metric_objects = self._step_fn.metric_objects if log else {}
        if log:
            note_validate_args(metric_objects, self._noted if self.dist.main else set(metric_objects))
            pending.update(compute_metric_objects(metric_objects))  # torchmetrics, computed on the device
            for cb in self.callbacks:  # the callbacks' own device tensors ride in the same read
                pending.update(cb.log_tensors(self) or {})
            pending.update({f"_{k}": v for k, v in self._probes.items()})
        eval_start = time.perf_counter()
        if val_source is not None:
            pending.update(evaluate(self, val_source))
        if not pending:
            return
        if self.dist.active:  # did any rank receive a preemption signal? (rides along in the one collective)
            pending["_stop"] = torch.full((), float(self._signal is not None), device=self.device)
        values = read_scalars(pending, reduce=self._reduce if self.dist.active else None)  # sync: log/eval boundary
        probes = {k[1:]: values.pop(k) for k in list(values) if k.startswith("_")}
        row: dict[str, Any] = {"step": self.state.step, "epoch": self.state.epoch}
        if log:
            row.update({k: v for k, v in values.items() if not k.startswith("val_")})
            row["lr"] = self._last_lr
            row.update(interval.row(probes))
            self.state.tokens += interval.tokens
            row.update({k: fn() for k, fn in self.host_metrics.items()})
        val = {k: v for k, v in values.items() if k.startswith("val_")}
        row.update(val)
        if val:
            row["eval_s"] = round(time.perf_counter() - eval_start, 4)
        if "val_loss" in val and is_plateau(self.scheduler):
            self.scheduler.step(val["val_loss"])
        row["elapsed_s"] = round(elapsed, 3)
        flags = probes.pop("nonfinite", [])
        bad_steps = [interval.start_step + 1 + i for i, f in enumerate(flags) if f]
        if bad_steps:
            row["nonfinite_steps"] = bad_steps
        divergence = guard.diverged(self.guard_state, flags, interval.start_step, interval.lrs,
                                    self.cfg.guard.max_nonfinite_streak) if log else None  # fmt: skip
        if "initial_loss" in probes:
            row["initial_loss"] = probes["initial_loss"]
        if probes.pop("stop", 0.0) > 0 and not self._stop_all:
            self._stop_all = True
            self._signal = self._signal or signal.SIGTERM
        if log:  # an eval-only boundary leaves the log interval running (its sums and non-finite flags unread)
            for m in metric_objects.values():
                m.reset()
            interval.reset(self.state.step)
        self._clock.last = time.perf_counter()  # evaluation time does not count as training time
        self.history.append(row)
        self._loggers.log(row)
        for cb in self.callbacks:
            if log:
                cb.on_log(self, row)
            if val:
                cb.on_validation_end(self, val)
        if log:
            self._after_read(row, probes, bad_steps, divergence)

    def _event(self, row: dict[str, Any]) -> None:
        row = {"step": self.state.step, **row}
        self.history.append(row)
        self._loggers.log(row)

    def _reduce(self, flat: torch.Tensor) -> torch.Tensor:
        """Mean over ranks of the boundary vector (metrics, eval, probes, flags): one all-reduce.

        Flags (non-finite steps, the stop request) become "on any rank" as a mean > 0."""
        return self.dist.reduce_vector(flat) / self.dist.world

    # -- guardrails (decided at boundaries, on values already read) ----------------------------

    def _probe_grad_health(self) -> None:
        missing, names, flags = guard.grad_health_probe(list(self.model.named_parameters()))
        self._health = (missing, names)
        if flags is not None:
            self._probes["zero_grad"] = flags

    def _after_read(
        self, row: dict[str, Any], probes: dict[str, Any], bad_steps: list[int], divergence: str | None
    ) -> None:
        cfg = self.cfg
        if "initial_loss" in probes:
            self._probes.clear()
            if cfg.num_classes and (msg := guard.check_initial_loss(probes["initial_loss"], cfg.num_classes)):
                guard.warn(msg)
            missing, names = getattr(self, "_health", ([], []))
            zero = [n for n, z in zip(names, probes.get("zero_grad", []), strict=False) if z]
            if msg := guard.grad_health_warning(missing, zero):
                guard.warn(msg)
        if bad_steps:
            self.guard_state.nonfinite_steps.extend(bad_steps)
            what = f"non-finite loss or gradients at steps {bad_steps}"
            if cfg.nonfinite == "raise":
                raise guard.GuardError(what + " (nonfinite=raise); try a lower lr, clip_grad, or precision=bf16")
            if cfg.nonfinite == "rollback":
                self.checkpointer.rollback(divergence or what)
                return
            if divergence:  # skipping hides nothing any more: stop, keeping the last good checkpoint
                raise guard.GuardError(divergence + " (nonfinite=skip)")
            guard.warn(what + ": those updates were skipped (nonfinite=skip)")
        if "loss" in row and self._spikes.is_spike(row["loss"]):
            self.checkpointer.rollback(
                f"loss spike: {row['loss']:.4g} > {cfg.spike_factor} x EMA {self.guard_state.ema:.4g}"
            )

    # -- evaluation --------------------------------------------------------------------------

    def validate(self, val_data: Any) -> dict[str, float]:
        """Evaluate on `val_data` (`model.eval()` + `no_grad`); returns `val_loss` and the other `val_*` means."""
        return read_scalars(evaluate(self, self._source(val_data, train=False)))  # sync: the result

    # -- saving, resuming, rollback and preemption: `checkpointer.py` -------------------------

    def state_dict(self) -> dict[str, Any]:
        """The complete training state (see `Checkpointer.state_dict`). Under torchrun every rank calls it."""
        return self.checkpointer.state_dict()

    def save_checkpoint(self, path: str | Path | None = None) -> Path:
        """Commit the full training state to `path`, or as the run's checkpoint of the current step."""
        return self.checkpointer.save(path)

    _signal: int | None = None
    _stop_all = False
    """Set at a boundary where some rank had received a preemption signal: every rank saves and stops."""
