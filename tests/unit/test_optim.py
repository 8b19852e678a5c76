"""Parameter groups (decay by module type, LLRD) and schedules against their closed forms."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from hotloop import Callback, GPTConfig, TrainConfig, Trainer
from hotloop.optim import LRFactor, build_optimizer, find_blocks, onecycle_factor, param_groups
from hotloop.recipes.gptmodel import GPT

from .helpers import Regressor, regression_data


def _names(groups, decay: bool) -> set[str]:
    return {n for g in groups if (g["weight_decay"] > 0) == decay for n in g["names"]}


def test_decay_groups_on_a_small_transformer():
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8))
    groups = param_groups(model, weight_decay=0.1)
    decay, no_decay = _names(groups, True), _names(groups, False)
    linear = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert decay == {f"{n}.weight" for n in linear}
    assert {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias", "blocks.0.ln1.weight"} <= no_decay
    assert all(n in no_decay for n, _ in model.named_parameters() if n.endswith("bias"))
    # every trainable parameter is in exactly one group
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


class OddNorm(nn.Module):
    """A norm layer whose parameter name gives nothing away."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d, d))  # 2-D on purpose: shape alone would decay it

    def forward(self, x):
        return x @ self.gamma


def test_no_decay_is_decided_by_module_type_not_name():
    model = nn.Sequential(nn.Linear(4, 4), OddNorm(4), nn.Embedding(10, 4), nn.RMSNorm(4))
    no_decay = _names(param_groups(model, 0.1), False)
    assert {"1.gamma", "2.weight", "3.weight", "0.bias"} <= no_decay
    assert _names(param_groups(model, 0.1), True) == {"0.weight"}


def test_layer_decay_scales_by_block_order():
    model = GPT(GPTConfig(n_layer=3, n_head=2, n_embd=16, block_size=8))
    assert find_blocks(model) == list(model.blocks)
    d = 0.8
    groups = param_groups(model, 0.1, layer_decay=d)
    scale = {n: g["lr_scale"] for g in groups for n in g["names"]}
    assert scale["wte.weight"] == pytest.approx(d**4)
    assert scale["blocks.0.attn.qkv.weight"] == pytest.approx(d**3)
    assert scale["blocks.2.mlp.fc.bias"] == pytest.approx(d**1)
    assert scale["ln_f.weight"] == pytest.approx(1.0)
    opt = build_optimizer(model, TrainConfig(lr=1.0, layer_decay=d), torch.device("cpu"))
    assert sorted({round(g["lr"], 6) for g in opt.param_groups}) == sorted({round(d**k, 6) for k in range(5)})


def test_fused_where_available_on_cpu():
    opt = build_optimizer(Regressor(), TrainConfig(), torch.device("cpu"))
    assert opt.defaults.get("fused") is True


@pytest.mark.parametrize(
    "kind, step, expected",
    [
        ("constant", 0, 0.1),  # warmup 10: (0+1)/10
        ("constant", 50, 1.0),
        ("linear", 10, 1.0),
        ("linear", 55, 0.5),
        ("cosine", 55, 0.5),
        ("cosine", 100, 0.0),
        ("warmup_cosine", 4, 0.5),
        ("warmup_cosine", 55, 0.1 + 0.9 * 0.5),
        ("warmup_cosine", 100, 0.1),
    ],
)
def test_schedule_closed_forms(kind, step, expected):
    assert LRFactor(kind, total=100, warmup=10, min_ratio=0.1)(step) == pytest.approx(expected)


def test_onecycle_shape():
    assert onecycle_factor(0, 100, 30) == pytest.approx(1 / 25)
    assert onecycle_factor(30, 100, 30) == pytest.approx(1.0)
    assert onecycle_factor(100, 100, 30) == pytest.approx(1 / 25e4)


class LRRecorder(Callback):
    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_step_end(self, trainer, output) -> None:
        self.lrs.append(output.lr)


@pytest.mark.parametrize("schedule", ["warmup_cosine", "linear", "onecycle"])
def test_schedule_steps_once_per_optimizer_step_with_accumulation(schedule, tmp_path):
    x, y = regression_data(8 * 4 * 12)  # 12 optimizer steps of 4 micro-batches
    rec = LRRecorder()
    cfg = TrainConfig(
        max_steps=12,
        batch_size=8,
        grad_accum=4,
        lr=0.5,
        schedule=schedule,
        warmup_steps=3,
        min_lr_ratio=0.1,
        run_dir=str(tmp_path),
        progress="off",
        tensorboard=False,
        device="cpu",
    )
    trainer = Trainer(Regressor(), cfg, callbacks=[rec])
    trainer.fit((x, y))
    assert trainer.state.step == 12
    f = LRFactor(schedule, total=12, warmup=3, min_ratio=0.1)
    assert rec.lrs == pytest.approx([0.5 * f(s) for s in range(12)])
    if schedule == "warmup_cosine":
        assert rec.lrs[2] == pytest.approx(0.5) and rec.lrs[7] == pytest.approx(
            0.5 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 4 / 9)))
        )
