"""Gradient accumulation: 4 micro-batches of 8 make the same update as one batch of 32, leftovers included.

Reference: a plain PyTorch loop in fp32.
"""

from __future__ import annotations

import copy

import torch

from hotloop import TrainConfig, Trainer

from .helpers import Regressor, regression_data


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(
        device="cpu",
        lr=0.05,
        schedule="constant",
        warmup_steps=0,
        clip_grad=None,
        weight_decay=0.0,
        optimizer="sgd",
        run_dir=str(tmp_path),
        progress="off",
        tensorboard=False,
        epochs=1,
    )
    base.update(kw)
    return TrainConfig(**base)


def _batches(x, y, size):
    return [(x[i : i + size], y[i : i + size]) for i in range(0, len(x), size)]


def test_accumulated_equals_big_batch_with_leftover_window(tmp_path):
    x, y = regression_data(40)
    init = Regressor()
    # hotloop: 5 micro-batches of 8 with grad_accum=4 -> windows of 4 and 1 (the leftover still steps)
    trainer = Trainer(copy.deepcopy(init), _cfg(tmp_path, grad_accum=4, optim={"momentum": 0.0}))
    trainer.fit(_batches(x, y, 8))
    assert trainer.state.step == 2
    # reference: plain SGD on a batch of 32, then on the remaining 8
    ref = copy.deepcopy(init)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for xb, yb in ((x[:32], y[:32]), (x[32:], y[32:])):
        ref(xb, yb).backward()
        opt.step()
        opt.zero_grad()
    for p, q in zip(trainer.model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0)


def test_accumulation_matches_big_batch_with_adamw_and_clipping(tmp_path):
    x, y = regression_data(64)
    init = Regressor()
    kw = dict(optimizer="adamw", weight_decay=0.1, clip_grad=0.5, lr=1e-2)
    small = Trainer(copy.deepcopy(init), _cfg(tmp_path / "a", grad_accum=4, **kw))
    small.fit(_batches(x, y, 8))
    big = Trainer(copy.deepcopy(init), _cfg(tmp_path / "b", grad_accum=1, **kw))
    big.fit(_batches(x, y, 32))
    assert small.state.step == big.state.step == 2
    for p, q in zip(small.model.parameters(), big.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=0)


def test_logged_loss_is_the_window_mean(tmp_path):
    x, y = regression_data(32)
    init = Regressor()
    expected = torch.stack([init(xb, yb) for xb, yb in _batches(x, y, 8)]).mean().item()
    t = Trainer(copy.deepcopy(init), _cfg(tmp_path, grad_accum=4, log_every=1))
    t.fit(_batches(x, y, 8))
    assert abs(t.history[0]["loss"] - expected) < 1e-6
