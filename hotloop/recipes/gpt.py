"""Recipe `gpt`: a byte-level GPT trained on the Python standard library's source.

    hotloop fit                                  # CPU: ~1M parameters, a few minutes on 2 cores
    hotloop fit max_steps=60 run_dir=runs/quick  # a quick look
    hotloop fit gpt.n_layer=8 batch_size=64      # bigger
    hotloop sample run_dir=runs/gpt prompt="def "

On a GPU the same command picks a larger model, bf16 autocast and torch.compile by itself.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from hotloop.checkpoint import config_of, load_checkpoint, load_weights, resolve
from hotloop.config import TrainConfig
from hotloop.errors import ConfigError
from hotloop.recipes.corpus import RandomWindows, eval_windows, load_corpus
from hotloop.recipes.gptmodel import GPT
from hotloop.trainer import Trainer, resolve_device, seed_everything

CPU_DEFAULTS: dict[str, Any] = {
    "recipe": "gpt",
    "max_steps": 600,
    "batch_size": 32,
    "lr": 2e-3,
    "weight_decay": 0.1,
    "schedule": "warmup_cosine",
    "warmup_steps": 30,
    "log_every": 25,
    "log_first_step": True,
    "eval_every": 200,
    "eval_batches": 16,
    "ckpt_every": 200,
    "num_classes": 256,
    "run_dir": "runs/gpt",
    "gpt": {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 128, "dropout": 0.0},
}

GPU_DEFAULTS: dict[str, Any] = {
    **CPU_DEFAULTS,
    "max_steps": 3000,
    "batch_size": 64,
    "lr": 1e-3,
    "warmup_steps": 100,
    "log_every": 50,
    "eval_every": 500,
    "eval_batches": 32,
    "gpt": {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "dropout": 0.0},
}


def resolves_to_cuda(device: str) -> bool:
    """Whether `device` names a usable GPU (a bad name is left for the Trainer to report)."""
    try:
        return resolve_device(device).type == "cuda"
    except Exception:
        return False


def defaults(device: str) -> dict[str, Any]:
    """CPU or GPU defaults, by where `device` resolves."""
    return GPU_DEFAULTS if resolves_to_cuda(device) else CPU_DEFAULTS


def tokens_in(batch: tuple[torch.Tensor, torch.Tensor]) -> int:
    return batch[0].numel()  # shape metadata: no device read


def build(cfg: TrainConfig) -> tuple[Trainer, RandomWindows, list]:
    train, val = load_corpus()
    g = cfg.gpt
    seed_everything(cfg.seed)  # the model's initialisation depends on the seed too
    trainer = Trainer(GPT(g), cfg, batch_tokens=tokens_in)
    on_device = trainer.device if trainer.device.type == "cuda" and cfg.data_on_device is not False else None
    # Under torchrun each rank draws its own windows (seed + rank): the ranks' batches together are one global batch.
    seed = cfg.seed + 1_000_003 * trainer.dist.rank
    train_batches = RandomWindows(train, g.block_size, cfg.batch_size, seed=seed, device=on_device)
    train_batches.rank_aware = True
    val_batches = eval_windows(val, g.block_size, cfg.batch_size, cfg.eval_batches or 16)
    return trainer, train_batches, val_batches


def run(cfg: TrainConfig, say: Any = print) -> Trainer:
    """Train, evaluate, save, and print the final validation loss and a sample."""
    trainer, train_batches, val_batches = build(cfg)
    if not trainer.dist.main:
        say = _silent
    n_params = sum(p.numel() for p in trainer.model.parameters())
    say(
        f"gpt: {n_params / 1e6:.2f}M parameters, device={trainer.device}, precision={trainer.precision.name}, "
        f"{len(train_batches.data) / 1e6:.1f} MB of stdlib source, run_dir={cfg.run_dir}"
    )
    trainer.fit(train_batches, val_batches)
    final = next((r for r in reversed(trainer.history) if "val_loss" in r), None)
    if final is not None:
        nats = final["val_loss"]
        say(f"final validation loss: {nats:.4f} nats/byte = {nats / math.log(2):.4f} bits/byte (step {final['step']})")
    say(f"saved: {Path(cfg.run_dir) / 'checkpoints'}")
    text = sample_text(trainer.model, "def ", 200, device=trainer.device, seed=cfg.seed)
    say("sample:\n" + text)
    return trainer


def _silent(*args: Any) -> None:
    """Ranks other than 0 say nothing."""


def sample_text(
    model: GPT,
    prompt: str,
    max_new_tokens: int,
    device: torch.device,
    temperature: float = 0.8,
    top_k: int | None = 50,
    seed: int = 0,
) -> str:
    model.eval()
    data = prompt.encode("utf-8") or b"\n"
    idx = torch.tensor([list(data)], dtype=torch.long, device=device)
    g = torch.Generator(device=device).manual_seed(seed)
    out = model.generate(idx, max_new_tokens, temperature=temperature, top_k=top_k, generator=g)
    return bytes(out[0].tolist()).decode("utf-8", errors="replace")  # sync: the sample is the output


def load_model(run_dir: str | Path, device: str = "auto") -> tuple[GPT, TrainConfig, torch.device]:
    path = resolve(run_dir)
    ckpt = load_checkpoint(path)
    cfg = config_of(ckpt, path)
    if cfg.recipe not in (None, "gpt", "distill"):
        raise ConfigError(
            f"run_dir={run_dir} is a `{cfg.recipe}` run; sampling needs a byte-level model (a gpt or distill run)"
        )
    dev = resolve_device(device)
    model = GPT(cfg.gpt)
    state = ckpt["model"]
    if cfg.recipe == "distill":  # the student of a distill run (its state also holds the temperature)
        state = {k.removeprefix("student."): v for k, v in state.items() if k.startswith("student.")}
    load_weights(model, state, path)
    return model.to(dev), cfg, dev
