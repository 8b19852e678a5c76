"""The configuration's schema: one dataclass tree, set from defaults < recipe < YAML < `key=value`.

Every field carries a docstring and is validated in `__post_init__`, so a bad value fails before any
work starts with a message that names the field, the value and what is allowed. Unknown keys get the
closest valid key suggested (`max_stepz` -> `max_steps`). Common fields are flat (`lr=3e-4` on the
command line); advanced ones live in sections addressed with dotted keys (`gpt.n_layer=6`).

Values from the command line arrive as strings and are converted by the field's declared type, not
by YAML's guessing (PyYAML reads `3e-4` as a string).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hotloop.errors import ConfigError

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
SCHEDULES = ("constant", "linear", "cosine", "warmup_cosine", "onecycle")
OPTIMIZERS = ("adamw", "adam", "sgd")
COMPILE_MODES = ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
PROGRESS = ("auto", "rich", "plain", "off")
RECIPES = ("gpt", "classify", "distill")


def _fail(name: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"invalid value for `{name}`: {value!r}; allowed: {allowed}")


def _positive(name: str, value: Any, optional: bool = False, zero: bool = False) -> None:
    if value is None and optional:
        return
    ok = value is not None and (value >= 0 if zero else value > 0)
    if not ok:
        what = "an integer >= 0" if zero else "a positive number"
        _fail(name, value, what + (" or null" if optional else ""))


def _sections(cls: type) -> dict[str, type]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])}


@dataclass(kw_only=True)
class GPTConfig:
    """Section `gpt`: the byte-level GPT of the `gpt` recipe (vocabulary 256)."""

    n_layer: int = 4
    """Transformer blocks."""
    n_head: int = 4
    """Attention heads; must divide `n_embd`."""
    n_embd: int = 128
    """Width of the residual stream."""
    block_size: int = 128
    """Context length in bytes."""
    dropout: float = 0.0
    """Dropout on attention/MLP outputs and embeddings."""

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "block_size"):
            _positive(f"gpt.{name}", getattr(self, name))
        if self.n_embd % self.n_head:
            _fail("gpt.n_head", self.n_head, f"a divisor of gpt.n_embd={self.n_embd}")
        if not 0.0 <= self.dropout < 1.0:
            _fail("gpt.dropout", self.dropout, "a float in [0, 1)")


@dataclass(kw_only=True)
class ClassifyConfig:
    """Section `classify`: the MLP and the synthetic in-memory dataset of the `classify` recipe."""

    samples: int = 8192
    """Samples in the dataset (10% held out for validation)."""
    features: int = 32
    """Input features per sample."""
    classes: int = 10
    """Classes (Gaussian clusters, drawn from a fixed seed: the same data in every run)."""
    hidden: int = 256
    """Width of the residual MLP."""
    n_layer: int = 3
    """Residual blocks (FSDP2 shards each one)."""
    dropout: float = 0.0
    """Dropout inside the blocks (0: the run is deterministic, as the equivalence checks need)."""

    def __post_init__(self) -> None:
        for name in ("samples", "features", "classes", "hidden", "n_layer"):
            _positive(f"classify.{name}", getattr(self, name))
        if self.classes < 2:
            _fail("classify.classes", self.classes, "an integer >= 2")
        if not 0.0 <= self.dropout < 1.0:
            _fail("classify.dropout", self.dropout, "a float in [0, 1)")


@dataclass(kw_only=True)
class DistillConfig:
    """Section `distill`: knowledge distillation (the `distill` recipe; `gpt.*` is the student there)."""

    alpha: float = 0.5
    """Weight of the KD term: alpha * T^2 * KL + (1 - alpha) * CE. 0 trains without the teacher."""
    temperature: float = 2.0
    """Initial (or fixed) softmax temperature T."""
    learn_temperature: bool = True
    """Learn T (a positive parameterisation, in the optimizer without weight decay)."""
    t_min: float = 1.0
    """Lower clamp of T; reaching it is reported."""
    t_max: float = 10.0
    """Upper clamp of T; reaching it is reported."""
    top_k: int = 64
    """Teacher logits kept per position in the cache (values fp16, indices int32); >= vocabulary: all."""
    samples: int = 4096
    """Fixed training windows (the cache holds the teacher's logits for each one)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            _fail("distill.alpha", self.alpha, "a float in [0, 1]")
        _positive("distill.temperature", self.temperature)
        _positive("distill.t_min", self.t_min)
        if self.t_max <= self.t_min:
            _fail("distill.t_max", self.t_max, f"a number > distill.t_min={self.t_min}")
        if not self.t_min <= self.temperature <= self.t_max:
            _fail("distill.temperature", self.temperature, f"a number in [t_min, t_max] = [{self.t_min}, {self.t_max}]")
        _positive("distill.top_k", self.top_k)
        _positive("distill.samples", self.samples)


@dataclass(kw_only=True)
class GuardConfig:
    """Section `guard`: the guardrails beyond `nonfinite`, `spike_factor` and `max_rollbacks`."""

    max_nonfinite_streak: int = 20
    """Non-finite steps in a row after which training has diverged (also: every step of a log interval). Then
    nonfinite=skip stops with an error naming the first bad step and its LR, and nonfinite=rollback rolls back
    with an LR backoff. Checked at log boundaries."""

    def __post_init__(self) -> None:
        _positive("guard.max_nonfinite_streak", self.max_nonfinite_streak)


@dataclass(kw_only=True)
class OptimConfig:
    """Section `optim`: optimizer details beyond `optimizer`, `lr` and `weight_decay`."""

    beta1: float = 0.9
    """Adam(W) beta1."""
    beta2: float = 0.95
    """Adam(W) beta2 (0.95 is the usual choice for transformers; torch's default is 0.999)."""
    eps: float = 1e-8
    """Adam(W) epsilon."""
    momentum: float = 0.9
    """SGD momentum."""
    implementation: str = "auto"
    """`auto` (fused where the device supports it, else foreach), `fused`, `foreach`, or `loop`."""

    def __post_init__(self) -> None:
        for name in ("beta1", "beta2", "momentum"):
            if not 0.0 <= getattr(self, name) < 1.0:
                _fail(f"optim.{name}", getattr(self, name), "a float in [0, 1)")
        _positive("optim.eps", self.eps)
        if self.implementation not in ("auto", "fused", "foreach", "loop"):
            _fail("optim.implementation", self.implementation, "auto, fused, foreach, loop")


@dataclass(kw_only=True)
class TrainConfig:
    """Everything a run needs. Set from YAML (`--config FILE`) and `key=value` overrides."""

    recipe: str | None = None
    """Built-in recipe that supplies model and data (`gpt`); None when you pass your own model."""
    max_steps: int | None = None
    """Optimizer steps to run. Training stops at whichever of `max_steps`/`epochs` comes first."""
    epochs: int | None = None
    """Passes over the training data (default 1 when `max_steps` is not set either)."""
    batch_size: int = 32
    """Samples per micro-batch (per process)."""
    lr: float = 3e-4
    """Peak learning rate."""
    weight_decay: float = 0.01
    """Decoupled weight decay; never applied to biases, normalization weights or embeddings."""
    optimizer: str = "adamw"
    """`adamw`, `adam` or `sgd`."""
    warmup_steps: int | None = None
    """Linear warmup steps; None: 5% of the schedule for `warmup_cosine`/`onecycle`, else 0."""
    schedule: str = "warmup_cosine"
    """LR schedule, stepped once per optimizer step: constant, linear, cosine, warmup_cosine, onecycle."""
    min_lr_ratio: float = 0.1
    """Floor of `warmup_cosine`, as a fraction of `lr`."""
    schedule_steps: int | None = None
    """Span of the LR schedule in optimizer steps (default: the run's total steps)."""
    layer_decay: float | None = None
    """Layer-wise LR decay: block k of L gets lr * layer_decay**(L + 1 - k). None or 1.0: off."""
    grad_accum: int = 1
    """Micro-batches per optimizer step. A short final window divides by its true size."""
    clip_grad: float | None = 1.0
    """Clip the global gradient norm to this value; None: no clipping (the norm is still logged)."""
    precision: str = "auto"
    """auto (bf16 on capable CUDA, fp16+GradScaler on older CUDA, fp32 on CPU), bf16, fp16, fp32."""
    compile: bool | str = "auto"
    """torch.compile the model: auto (on for CUDA, off for CPU), true/false, or a mode name."""
    cuda_graph: str = "auto"
    """step: capture the whole train step (forward, backward, clipping, fused optimizer) in one CUDA graph
    after 3 eager warm-up steps and replay it - for launch-bound models (`graphs.py`). auto: the same where it
    can work, pays (the step is launch-bound) and is safe (warm-up steps 3 and 4 dispatch the same work),
    otherwise eager; always eager on the CPU. off: eager launches."""
    log_every: int = 50
    """Optimizer steps between log boundaries (one host read each)."""
    log_first_step: bool = False
    """Make step 1 a log boundary too (one extra read, once), to see the initial loss against ln(C) at once."""
    eval_every: int | None = 500
    """Optimizer steps between evaluations; None or 0: only at the end."""
    eval_batches: int | None = None
    """Cap on validation batches per evaluation; None: the whole validation set."""
    ckpt_every: int | None = None
    """Optimizer steps between checkpoints (each also a log boundary); None: only at the end and on a signal."""
    keep_last: int = 3
    """Committed checkpoints to keep; older ones are deleted after a new one is committed."""
    async_checkpoint: bool = True
    """Write checkpoints in a background thread after a host copy of the state (buffers reused save after save,
    pinned on CUDA), so training does not stop for the write, hash and fsync: one process and DDP (rank 0 writes)
    through the one-file writer, FSDP through DCP's `async_save`. At most one save is in flight. `ckpt_block_s`
    in the row is the time the step loop spent on it."""
    keep_best: str | None = None
    """A logged metric (val_loss, or any other): the checkpoint with its best value is kept beside the last
    `keep_last`, never deleted by retention, and named in the report. None: off."""
    best_mode: str = "min"
    """Whether `keep_best` is best at its `min` or its `max`."""
    resume: str | None = None
    """None: start fresh; `auto`: the newest valid checkpoint of run_dir if there is one; or a checkpoint path."""
    resume_strict: bool = False
    """Fail instead of falling back to an older checkpoint when the newest is corrupt."""
    on_save_error: str = "stop"
    """When a checkpoint cannot be written (disk full, permission): `stop` the run cleanly, or `warn` and go on."""
    preempt_signals: str = "SIGTERM,SIGUSR1"
    """Signals that save a checkpoint at the next step boundary and exit with 128 + signal number."""
    nonfinite: str = "skip"
    """Non-finite loss/gradient: `skip` the update on the device, `rollback` to the last checkpoint, or `raise`."""
    spike_factor: float | None = 3.0
    """Roll back when a logged loss exceeds this multiple of the EMA of earlier logged losses; None: off."""
    lr_backoff: float = 0.5
    """LR multiplier applied at each rollback."""
    max_rollbacks: int = 3
    """Rollbacks allowed before training stops with an error."""
    num_classes: int | None = None
    """Classes of the loss, for the initial-loss check against ln(C) (recipes set it); None: no check."""
    overfit_batches: int | None = None
    """Train repeatedly on the first N batches (the overfit-a-tiny-subset check); None: off."""
    doctor: bool = False
    """`hotloop fit ... doctor=true`: run this fit under `hotloop doctor` and print its report at the end."""
    debug_anomaly: bool = False
    """Name the first module that produces a non-finite gradient (debug: syncs every step)."""
    run_dir: str = "runs/hotloop"
    """Where config.yaml, metrics.jsonl, checkpoints and TensorBoard events go."""
    seed: int = 0
    """Seed for Python, NumPy and torch RNGs and the data order."""
    deterministic: bool = False
    """Deterministic kernels (`torch.use_deterministic_algorithms`, cuBLAS workspace config): a resumed CUDA
    run then equals the uninterrupted one bit for bit, at some speed cost. CPU kernels already are. The switch is
    process-wide and stays on after the run (as with Lightning's `deterministic=True`): on an H100 it slowed a
    later, non-deterministic GPT-2 run in the same process by a third - start a new process for speed runs."""
    device: str = "auto"
    """auto (cuda if available, else cpu), cpu, cuda, cuda:N."""
    num_workers: int | None = None
    """DataLoader workers for map-style datasets; None: from the core count on CUDA, 0 on CPU."""
    data_on_device: bool | str = "auto"
    """Keep in-memory tensor datasets on the GPU (no host-to-device copy per step); auto: when they take
    under 10% of free device memory."""
    memory_check: bool | str = "auto"
    """Before step 1, run one forward/backward at the first batch's shape and report its peak memory; on CUDA a
    step that does not fit stops the run before any training, naming the fixes. auto: on for CUDA."""
    auto_micro_batch: bool = False
    """On an out-of-memory step, retry the same window with each micro-batch halved (accumulation doubled, so
    the optimizer sees the same global batch); the split is kept, logged and checkpointed."""
    activation_checkpointing: str = "none"
    """none, full (recompute each block's forward in backward: activation memory ~ one block's inputs per block)
    or selective (save matmul and attention outputs, recompute the rest). Gradients are unchanged."""
    prefetch: bool = True
    """On CUDA, copy the next batch on a side stream while the current step runs."""
    drop_last: bool = True
    """Drop the last partial training batch of an epoch (keeps shapes static)."""
    tensorboard: bool = True
    """Write TensorBoard events when the `tensorboard` package is installed (with `loggers=auto`)."""
    loggers: str = "auto"
    """Sinks for each log row, each behind its own writer thread (never blocking the loop): auto (metrics.jsonl,
    plus TensorBoard when installed), or a comma-separated list of jsonl, csv, tensorboard, wandb, mlflow.
    metrics.jsonl is always written."""
    flops_per_token: float | None = None
    """Training FLOPs per token (6N + attention for a transformer; recipes set it): rows then carry `mfu`
    against the GPU's dense bf16 peak."""
    progress: str = "auto"
    """Console display: auto (rich on a terminal, plain lines otherwise), rich, plain, off."""
    strategy: str = "auto"
    """Under torchrun: auto (ddp with several processes, none with one), ddp, fsdp (FSDP2), none."""
    shard_modules: str | None = None
    """fsdp: comma-separated module class names to shard one by one (default: the model's
    `hotloop_shard_modules()`/`hotloop_blocks()`, else its largest block list), then the root."""
    dist_timeout: float = 600.0
    """Seconds a collective may wait for the other ranks before every rank stops with an error."""
    gpt: GPTConfig = field(default_factory=GPTConfig)
    """Section: the `gpt` recipe's model."""
    classify: ClassifyConfig = field(default_factory=ClassifyConfig)
    """Section: the `classify` recipe's model and data."""
    teacher: str | None = None
    """distill: run directory of a trained `gpt` run to distill from; unset: a default teacher trained once
    and kept in the cache directory (keyed by its config)."""
    teacher_cache: str = "auto"
    """distill: auto (teacher logits cached under the cache directory, keyed by teacher, data and top_k),
    a directory, or off (run the teacher every step)."""
    distill: DistillConfig = field(default_factory=DistillConfig)
    """Section: knowledge distillation."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Section: optimizer details."""
    guard: GuardConfig = field(default_factory=GuardConfig)
    """Section: guardrails."""

    def __post_init__(self) -> None:
        from hotloop.config.load import _build

        for name, cls in _sections(type(self)).items():  # sections may be given as dicts in Python too
            value = getattr(self, name)
            if isinstance(value, dict):
                setattr(self, name, _build(cls, value, name + "."))
            elif not isinstance(value, cls):
                _fail(name, value, f"a {cls.__name__} or a dict of its fields")
        if self.recipe is not None and self.recipe not in RECIPES:
            _fail("recipe", self.recipe, ", ".join(RECIPES) + " or null")
        _positive("max_steps", self.max_steps, optional=True)
        _positive("epochs", self.epochs, optional=True)
        _positive("batch_size", self.batch_size)
        _positive("lr", self.lr)
        _positive("weight_decay", self.weight_decay, zero=True)
        if self.optimizer not in OPTIMIZERS:
            _fail("optimizer", self.optimizer, ", ".join(OPTIMIZERS))
        _positive("warmup_steps", self.warmup_steps, optional=True, zero=True)
        if self.schedule not in SCHEDULES:
            _fail("schedule", self.schedule, ", ".join(SCHEDULES))
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            _fail("min_lr_ratio", self.min_lr_ratio, "a float in [0, 1]")
        _positive("schedule_steps", self.schedule_steps, optional=True)
        if self.layer_decay is not None and not 0.0 < self.layer_decay <= 1.0:
            _fail("layer_decay", self.layer_decay, "a float in (0, 1] or null")
        _positive("grad_accum", self.grad_accum)
        _positive("clip_grad", self.clip_grad, optional=True)
        if self.precision not in PRECISIONS:
            _fail("precision", self.precision, ", ".join(PRECISIONS))
        if not isinstance(self.compile, bool) and self.compile not in COMPILE_MODES:
            _fail("compile", self.compile, "true, false, " + ", ".join(COMPILE_MODES))
        if self.cuda_graph not in ("auto", "off", "step"):
            _fail("cuda_graph", self.cuda_graph, "auto, off, step")
        if self.cuda_graph == "step":
            for key, bad, why in (("compile", ("reduce-overhead", "max-autotune"), "captures CUDA graphs itself"),
                                  ("precision", ("fp16",), "keeps GradScaler state on the host"),
                                  ("strategy", ("ddp", "fsdp"), "is multi-process")):  # fmt: skip
                if getattr(self, key) in bad:
                    raise ConfigError(f"cuda_graph=step cannot be combined with {key}={getattr(self, key)} (it {why}); "
                                      f"change {key} or set cuda_graph=off")  # fmt: skip
        _positive("log_every", self.log_every)
        _positive("eval_every", self.eval_every, optional=True, zero=True)
        _positive("eval_batches", self.eval_batches, optional=True)
        _positive("ckpt_every", self.ckpt_every, optional=True)
        _positive("keep_last", self.keep_last)
        if self.best_mode not in ("min", "max"):
            _fail("best_mode", self.best_mode, "min, max")
        if self.strategy not in ("auto", "none", "ddp", "fsdp"):
            _fail("strategy", self.strategy, "auto, none, ddp, fsdp")
        _positive("dist_timeout", self.dist_timeout)
        if self.on_save_error not in ("stop", "warn"):
            _fail("on_save_error", self.on_save_error, "stop, warn")
        import signal

        for name in filter(None, (n.strip() for n in self.preempt_signals.split(","))):
            if not isinstance(getattr(signal, name, None), signal.Signals):
                _fail("preempt_signals", self.preempt_signals, "comma-separated signal names such as SIGTERM,SIGUSR1")
        if self.nonfinite not in ("skip", "rollback", "raise"):
            _fail("nonfinite", self.nonfinite, "skip, rollback, raise")
        if self.spike_factor is not None and self.spike_factor <= 1.0:
            _fail("spike_factor", self.spike_factor, "a number > 1 or null")
        if not 0.0 < self.lr_backoff <= 1.0:
            _fail("lr_backoff", self.lr_backoff, "a float in (0, 1]")
        _positive("max_rollbacks", self.max_rollbacks, zero=True)
        if self.num_classes is not None and self.num_classes < 2:
            _fail("num_classes", self.num_classes, "an integer >= 2 or null")
        _positive("overfit_batches", self.overfit_batches, optional=True)
        if not self.run_dir:
            _fail("run_dir", self.run_dir, "a directory path")
        d = self.device
        if not (d in ("auto", "cpu", "cuda") or (d.startswith("cuda:") and d[5:].isdigit())):
            _fail("device", d, "auto, cpu, cuda, cuda:N")
        _positive("num_workers", self.num_workers, optional=True, zero=True)
        if not isinstance(self.memory_check, bool) and self.memory_check != "auto":
            _fail("memory_check", self.memory_check, "auto, true, false")
        if self.activation_checkpointing not in ("none", "full", "selective"):
            _fail("activation_checkpointing", self.activation_checkpointing, "none, full, selective")
        if not isinstance(self.data_on_device, bool) and self.data_on_device != "auto":
            _fail("data_on_device", self.data_on_device, "auto, true, false")
        if self.progress not in PROGRESS:
            _fail("progress", self.progress, ", ".join(PROGRESS))
        from hotloop.logging.sinks import parse_loggers

        parse_loggers(self.loggers)
        _positive("flops_per_token", self.flops_per_token, optional=True)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with `changes` applied (dotted keys allowed), validated like any other config."""
        from hotloop.config.load import build_config, nest

        return build_config(nest(changes), base=self.to_dict())

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))
