"""Recipe `classify`: a residual MLP on an in-memory synthetic classification set.

    hotloop fit recipe=classify
    torchrun --standalone --nproc_per_node=2 -m hotloop fit recipe=classify strategy=ddp
    torchrun --standalone --nproc_per_node=2 -m hotloop fit recipe=classify strategy=fsdp

The data are Gaussian clusters drawn from a fixed generator (nothing downloaded, the same on every
machine), held as tensors and sliced a batch at a time. No dropout by default, so a run is a pure
function of its config: the distributed equivalence checks compare a 2-rank run with per-rank batch b
against one process with batch 2b, step by step.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from hotloop.config import ClassifyConfig, TrainConfig
from hotloop.trainer import Trainer, seed_everything

DATA_SEED = 1234
"""The dataset does not depend on the run's `seed` (that one sets the initialisation and the order)."""

CPU_DEFAULTS: dict[str, Any] = {
    "recipe": "classify",
    "max_steps": 300,
    "batch_size": 64,
    "lr": 3e-3,
    "weight_decay": 0.01,
    "schedule": "warmup_cosine",
    "warmup_steps": 20,
    "log_every": 10,
    "log_first_step": True,
    "eval_every": 100,
    "ckpt_every": 100,
    "run_dir": "runs/classify",
}


def defaults(device: str) -> dict[str, Any]:
    return CPU_DEFAULTS


class Block(nn.Module):
    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)
        self.drop = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.drop(self.fc2(F.gelu(self.fc1(self.norm(h)))))


class MLP(nn.Module):
    """Input projection, `n_layer` pre-norm residual blocks, a norm and a linear head."""

    def __init__(self, c: ClassifyConfig) -> None:
        super().__init__()
        self.inp = nn.Linear(c.features, c.hidden)
        self.blocks = nn.ModuleList(Block(c.hidden, c.dropout) for _ in range(c.n_layer))
        self.norm = nn.LayerNorm(c.hidden)
        self.head = nn.Linear(c.hidden, c.classes)

    def hotloop_blocks(self) -> list[nn.Module]:
        return list(self.blocks)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> Any:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        logits = self.head(self.norm(h))
        if y is None:
            return logits
        return {"loss": F.cross_entropy(logits, y), "acc": (logits.argmax(-1) == y).float().mean()}


def make_data(c: ClassifyConfig) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """(train, val) tensors: clusters around random centres, overlapping enough that the task is not trivial."""
    g = torch.Generator().manual_seed(DATA_SEED)
    centres = torch.randn(c.classes, c.features, generator=g) * 1.5
    y = torch.randint(c.classes, (c.samples,), generator=g)
    x = centres[y] + torch.randn(c.samples, c.features, generator=g) * 2.0
    n_val = max(1, c.samples // 10)
    return (x[n_val:], y[n_val:]), (x[:n_val], y[:n_val])


def build(cfg: TrainConfig) -> tuple[Trainer, tuple, tuple]:
    c = cfg.classify
    if cfg.num_classes is None:
        cfg = cfg.replace(num_classes=c.classes)  # the initial-loss check expects ln(classes)
    train, val = make_data(c)
    seed_everything(cfg.seed)
    trainer = Trainer(MLP(c), cfg)
    return trainer, train, val


def load_for_validation(run_dir: str, device: str) -> tuple[MLP, TrainConfig, tuple]:
    """A finished run's model, config and validation split (for `hotloop validate`)."""
    from hotloop.checkpoint import config_of, load_checkpoint, load_weights, resolve
    from hotloop.config import build_config

    path = resolve(run_dir)
    state = load_checkpoint(path)
    cfg = build_config({"device": device, "strategy": "none"}, base=config_of(state, path).to_dict())
    model = MLP(cfg.classify)
    load_weights(model, state["model"], path)
    return model, cfg, make_data(cfg.classify)[1]


def run(cfg: TrainConfig, say: Any = print) -> Trainer:
    trainer, train, val = build(cfg)
    if trainer.dist.main:
        n_params = sum(p.numel() for p in trainer.model.parameters())
        d = trainer.dist
        where = f", {d.world} ranks ({d.strategy})" if d.active else ""
        say(f"classify: {n_params / 1e3:.0f}k parameters, device={trainer.device}{where}, run_dir={cfg.run_dir}")
    trainer.fit(train, val)
    final = next((r for r in reversed(trainer.history) if "val_loss" in r), None)
    if final is not None and trainer.dist.main:
        say(f"final validation: loss {final['val_loss']:.4f}, accuracy {final['val_acc']:.4f} (step {final['step']})")
    return trainer
