"""Recipe `distill`: a `gpt` teacher distilled into a smaller student on the same corpus.

    hotloop fit recipe=distill                         # default teacher (trained once, then cached)
    hotloop fit recipe=distill teacher=runs/gpt        # distill a teacher you trained
    hotloop fit recipe=distill distill.alpha=0         # the same student without distillation
    hotloop fit recipe=distill teacher_cache=off       # run the teacher every step instead

`gpt.*` configures the *student* here. Training uses `distill.samples` fixed windows of the training
split; the teacher's top-k logits for each of them are computed once into a memory-mapped cache keyed
by (teacher, data, k) and reused by every later run, which then makes no teacher forward at all
(`teacher_forwards` in metrics.jsonl stays at 0). Without `teacher=`, the default teacher - the `gpt`
recipe with its defaults for this device - is trained once into the cache directory, keyed by its
config, and reused. `val_loss` is the student's plain cross-entropy, comparable with a student
trained with `distill.alpha=0`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from hotloop import checkpoint as ckpt_io
from hotloop import guard
from hotloop.cache import cache_dir
from hotloop.callbacks import Callback
from hotloop.config import TrainConfig, build_config
from hotloop.distill import Distiller, DistillError, StudentWithTemperature, Temperature, build_cache, open_cache
from hotloop.distill.cache import fingerprint_tensor
from hotloop.recipes import gpt as gpt_recipe
from hotloop.recipes.corpus import eval_windows, load_corpus
from hotloop.recipes.gptmodel import GPT, VOCAB
from hotloop.trainer import Trainer, seed_everything

CPU_DEFAULTS: dict[str, Any] = {
    **gpt_recipe.CPU_DEFAULTS,
    "recipe": "distill",
    "max_steps": 400,
    "lr": 3e-3,
    "warmup_steps": 20,
    "eval_every": 200,
    "ckpt_every": 200,
    "num_classes": None,  # the first loss mixes KD and CE: ln(256) is not its expected value
    "run_dir": "runs/distill",
    "gpt": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 128, "dropout": 0.0},
}

GPU_DEFAULTS: dict[str, Any] = {
    **gpt_recipe.GPU_DEFAULTS,
    "recipe": "distill",
    "max_steps": 1500,
    "num_classes": None,
    "run_dir": "runs/distill",
    "gpt": {"n_layer": 3, "n_head": 4, "n_embd": 128, "block_size": 256, "dropout": 0.0},
}


def defaults(device: str) -> dict[str, Any]:
    return GPU_DEFAULTS if gpt_recipe.resolves_to_cuda(device) else CPU_DEFAULTS


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def default_teacher(cfg: TrainConfig, say: Any) -> Path:
    """The default teacher's run directory, training it first if no complete run is cached."""
    tcfg = build_config(gpt_recipe.defaults(cfg.device), {"device": cfg.device})
    ident = {k: v for k, v in tcfg.to_dict().items() if k not in ("run_dir", "progress", "tensorboard", "resume")}
    run_dir = cache_dir("teachers", _key(ident))
    last = ckpt_io.latest_valid(run_dir)
    if last is not None and ckpt_io.load_checkpoint(last)["step"] >= (tcfg.max_steps or 0):
        return run_dir
    say(f"distill: training the default teacher (the gpt recipe, {tcfg.max_steps} steps) once into {run_dir}")
    gpt_recipe.run(tcfg.replace(run_dir=str(run_dir), resume="auto", progress=cfg.progress), say=say)
    return run_dir


def load_teacher(run_dir: Path) -> tuple[GPT, str]:
    """The teacher model and an identity for the cache manifest (its checkpoint's sha256s)."""
    path = ckpt_io.resolve(run_dir)
    manifest = path.with_suffix(".json") if path.suffix == ".pt" else path.parent / (path.name + ".json")
    ident = manifest.read_text() if manifest.is_file() else str(path.stat().st_mtime_ns)
    state = ckpt_io.load_checkpoint(path)
    tcfg = ckpt_io.config_of(state, path)
    if tcfg.recipe not in (None, "gpt"):
        raise DistillError(f"teacher={run_dir} is a `{tcfg.recipe}` run; the distill recipe needs a `gpt` teacher")
    model = GPT(tcfg.gpt)
    ckpt_io.load_weights(model, state["model"], path)
    return model, _key({"teacher": ident})


def samples(train: Any, length: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` fixed windows spread evenly over the training split: inputs (n, L) and next-byte labels."""
    windows = eval_windows(train, length, n, 1)[0]
    return windows[0], windows[1]


class TemperatureWatch(Callback):
    """Say once when the learned temperature sits on a bound (where the clamp stops its gradient)."""

    def __init__(self, temperature: Temperature) -> None:
        self.temperature, self.said = temperature, False

    def on_log(self, trainer: Trainer, row: dict[str, Any]) -> None:
        if self.said or "temperature" not in row or not self.temperature.learnable:
            return
        side = self.temperature.at_bound(row["temperature"])
        if side:
            bound = self.temperature.t_min if side == "lower" else self.temperature.t_max
            self.said = True
            guard.warn(
                f"distill: the temperature collapsed to its {side} bound {bound} at step {row['step']}: the KD term "
                f"keeps pushing it there and the clamp stops it learning; fix it (distill.learn_temperature=false "
                f"distill.temperature=2) or move the bound (distill.t_min / distill.t_max)"
            )


def build(cfg: TrainConfig, say: Any = print) -> tuple[Trainer, dict[str, torch.Tensor], list, Distiller]:
    d, g = cfg.distill, cfg.gpt
    use_teacher = d.alpha > 0  # alpha=0: the baseline, the same student on the labels alone
    teacher: GPT | None = None
    if use_teacher:
        if cfg.teacher and not Path(cfg.teacher).exists():
            raise DistillError(f"teacher={cfg.teacher} does not exist: pass the run_dir of a `hotloop fit` gpt run")
        teacher, teacher_id = load_teacher(Path(cfg.teacher) if cfg.teacher else default_teacher(cfg, say))
        if teacher.cfg.block_size < g.block_size:
            raise DistillError(
                f"the teacher's context is {teacher.cfg.block_size} bytes, shorter than the student's "
                f"gpt.block_size={g.block_size}; lower gpt.block_size to at most {teacher.cfg.block_size}"
            )
    train, val = load_corpus()
    x, y = samples(train, g.block_size, d.samples)
    seed_everything(cfg.seed)
    temperature = Temperature(d.temperature, d.learn_temperature and use_teacher, d.t_min, d.t_max)
    model = StudentWithTemperature(GPT(g), temperature)
    distiller = Distiller(teacher, d.alpha, vocab=VOCAB)
    trainer = Trainer(model, cfg, loss_fn=distiller, batch_tokens=lambda b: b["x"].numel(),
                      callbacks=[TemperatureWatch(temperature)])  # fmt: skip
    data: dict[str, torch.Tensor] = {"x": x, "y": y}
    if teacher is not None:
        teacher.to(trainer.device)
    if teacher is not None and cfg.teacher_cache != "off":
        where = (
            cache_dir("teacher-logits", _key([teacher_id, fingerprint_tensor(x), d.top_k]))
            if cfg.teacher_cache == "auto"
            else Path(cfg.teacher_cache)
        )
        if trainer.dist.main:  # rank 0 builds; the others wait, then map the same files
            distiller.teacher_forwards += build_cache(
                teacher, x, where, k=d.top_k, teacher_id=teacher_id, device=trainer.device,
                batch_size=max(cfg.batch_size, 32), say=say,
            )  # fmt: skip
        trainer.dist.barrier()
        data.update(open_cache(where, expect_n=d.samples, vocab=VOCAB))
    trainer.host_metrics["teacher_forwards"] = lambda: distiller.teacher_forwards
    val_batches = [{"x": a, "y": b} for a, b in eval_windows(val, g.block_size, cfg.batch_size, cfg.eval_batches or 16)]
    return trainer, data, val_batches, distiller


def run(cfg: TrainConfig, say: Any = print) -> Trainer:
    trainer, data, val, distiller = build(cfg, say)
    if not trainer.dist.main:
        say = gpt_recipe._silent
    student = trainer.model.student
    n_params = sum(p.numel() for p in student.parameters())
    cached = "t_values" in data or "t_logits" in data
    source = "cached top-k logits" if cached else ("teacher every step" if distiller.teacher else "no teacher")
    say(f"distill: student {n_params / 1e6:.2f}M parameters, alpha={cfg.distill.alpha}, {source}, "
        f"{cfg.distill.samples} windows, run_dir={cfg.run_dir}")  # fmt: skip
    trainer.fit(data, val)
    final = next((r for r in reversed(trainer.history) if "val_loss" in r), None)
    last = next((r for r in reversed(trainer.history) if "temperature" in r), None)
    if final is not None:
        say(f"final validation loss: {final['val_loss']:.4f} nats/byte (step {final['step']})")
    if last is not None:
        say(f"temperature: {cfg.distill.temperature} -> {last['temperature']:.4f}; "
            f"teacher forwards this run: {distiller.teacher_forwards}")  # fmt: skip
    return trainer
