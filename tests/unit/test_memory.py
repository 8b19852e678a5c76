"""Activation checkpointing: the gradients are those of the plain model (dropout included: the RNG is
replayed), the activations held after the forward shrink, and a Trainer run is unchanged by it.
Reference: the same model without checkpointing. Run: `python -m pytest tests/unit/test_memory.py`."""

from __future__ import annotations

import copy

import pytest
import torch

from hotloop import ConfigError, TrainConfig, Trainer
from hotloop.config import GPTConfig
from hotloop.memory import activation_bytes, apply_activation_checkpointing
from hotloop.recipes.gptmodel import GPT

CFG = GPTConfig(n_layer=4, n_head=4, n_embd=64, block_size=64, dropout=0.1)


def _batch():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (8, 64), generator=g), torch.randint(0, 256, (8, 64), generator=g)


def _grads(model, x, y):
    torch.manual_seed(123)  # the same dropout masks for every variant
    model(x, y).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_gradients_equal_the_plain_model_with_dropout(mode):
    torch.manual_seed(0)
    base = GPT(CFG)
    x, y = _batch()
    ref = _grads(copy.deepcopy(base), x, y)
    model = copy.deepcopy(base)
    assert apply_activation_checkpointing(model, mode) == 4
    got = _grads(model, x, y)
    for n in ref:
        torch.testing.assert_close(got[n], ref[n], atol=1e-6, rtol=0), n


def test_activations_held_after_forward_shrink():
    torch.manual_seed(0)
    base = GPT(CFG)
    x, y = _batch()
    held = {}
    for mode in ("none", "full", "selective"):
        model = copy.deepcopy(base)
        apply_activation_checkpointing(model, mode)
        held[mode] = activation_bytes(lambda m=model: m(x, y))
    assert held["full"] < 0.25 * held["none"] and held["full"] < held["selective"] < held["none"], held


def test_trainer_run_is_unchanged_by_checkpointing(tmp_path):
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, 256, (64, 65), generator=g)
    runs = {}
    for mode in ("none", "full"):
        torch.manual_seed(0)
        cfg = TrainConfig(device="cpu", batch_size=8, max_steps=6, log_every=3, eval_every=0, progress="off",
                          tensorboard=False, run_dir=str(tmp_path / mode), activation_checkpointing=mode)  # fmt: skip
        runs[mode] = Trainer(GPT(CFG), cfg).fit((data[:, :-1], data[:, 1:]))
    for a, b in zip(runs["none"].model.parameters(), runs["full"].model.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_a_model_without_blocks_is_a_clear_error():
    with pytest.raises(ConfigError, match="hotloop_blocks"):
        apply_activation_checkpointing(torch.nn.Linear(2, 2), "full")
