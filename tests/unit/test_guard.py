"""Guardrails: on-device non-finite skip, spike rollback, initial-loss and gradient-health checks, debug mode.

References: a run without the bad batch (bit-exact), warnings/events read from the Trainer and metrics.jsonl.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from hotloop import TrainConfig, Trainer
from hotloop.guard import GuardError

from .helpers import Regressor, regression_data


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(device="cpu", batch_size=8, lr=1e-2, schedule="constant", warmup_steps=0, log_every=2,
                run_dir=str(tmp_path), progress="off", tensorboard=False, epochs=1)  # fmt: skip
    base.update(kw)
    return TrainConfig(**base)


def _batches(n=8, seed=0):
    x, y = regression_data(8 * n, seed=seed)
    return [(x[i : i + 8], y[i : i + 8]) for i in range(0, 8 * n, 8)]


def _poison(batch):
    x, y = batch
    return (x * float("nan"), y)


@pytest.mark.parametrize("impl", ["auto", "foreach"])
def test_nonfinite_step_is_skipped_on_device(tmp_path, impl):
    init = Regressor()
    data = _batches()
    bad = data[:2] + [_poison(data[2])] + data[3:]
    skipped = Trainer(copy.deepcopy(init), _cfg(tmp_path / "a", optim={"implementation": impl}))
    with pytest.warns(UserWarning, match=r"steps \[3\].*skipped"):
        skipped.fit(bad)
    ref = Trainer(copy.deepcopy(init), _cfg(tmp_path / "b", optim={"implementation": impl}))
    ref.fit(data[:2] + data[3:])
    for p, q in zip(skipped.model.parameters(), ref.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert skipped.history[1]["nonfinite_steps"] == [3] and skipped.guard_state.nonfinite_steps == [3]
    assert all(torch.isfinite(p).all() for p in skipped.model.parameters())


def test_nonfinite_raise_names_the_step(tmp_path):
    data = _batches()
    data[4] = _poison(data[4])
    with pytest.raises(GuardError, match=r"steps \[5\]"):
        Trainer(Regressor(), _cfg(tmp_path, nonfinite="raise")).fit(data)


class SpikyLoss:
    """Multiplies the loss of chosen batches (by identity) by a large factor."""

    def __init__(self, spiky: list[torch.Tensor], factor: float = 1e4) -> None:
        self.spiky, self.factor = spiky, factor

    def __call__(self, model, batch):
        loss = model(*batch)
        if any(batch[0] is s for s in self.spiky):
            loss = loss * self.factor
        return loss


def test_loss_spike_rolls_back_backs_off_and_continues(tmp_path):
    data = _batches(40)
    spike = data[21][0]
    cfg = _cfg(tmp_path, max_steps=30, epochs=None, ckpt_every=4, log_every=2, lr=5e-3)
    t = Trainer(Regressor(), cfg, loss_fn=SpikyLoss([spike]))
    t.fit(data)
    events = [r for r in t.history if r.get("event") == "rollback"]
    assert len(events) == 1
    ev = events[0]
    assert ev["from_step"] == 22 and ev["step"] == 20 and ev["lr_scale"] == 0.5 and "spike" in ev["reason"]
    assert t.state.step == 30 and t.guard_state.rollbacks == 1
    assert t.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-3)
    rows = [r for r in t.history if "loss" in r and r["step"] > 22]
    assert rows and all(r["loss"] < 10 for r in rows), "the spike's window is not replayed"


def test_too_many_rollbacks_raise(tmp_path):
    data = _batches(40)
    cfg = _cfg(tmp_path, max_steps=30, epochs=None, ckpt_every=4, max_rollbacks=0)
    with pytest.raises(GuardError, match="max_rollbacks=0"):
        Trainer(Regressor(), cfg, loss_fn=SpikyLoss([data[21][0]])).fit(data)


class Classifier(nn.Module):
    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 10)
        with torch.no_grad():
            self.lin.weight.mul_(scale)

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.lin(x), y)


def _class_data():
    x, _ = regression_data(64)
    return (x, torch.arange(64) % 10)


def test_initial_loss_check_warns_far_from_ln_c(tmp_path):
    with pytest.warns(UserWarning, match=r"initial loss .* ln\(10\) = 2\.3026"):
        Trainer(Classifier(scale=200.0), _cfg(tmp_path / "a", num_classes=10, max_steps=2)).fit(_class_data())
    t = Trainer(Classifier(scale=0.01), _cfg(tmp_path / "b", num_classes=10, max_steps=2))
    t.fit(_class_data())  # warnings are errors in this suite: a good init must pass silently
    assert abs(t.history[0]["initial_loss"] - math.log(10)) < 0.2 * math.log(10)


def test_loss_function_can_declare_num_classes(tmp_path):
    class CE:
        num_classes = 10

        def __call__(self, model, batch):
            return model(*batch)

    with pytest.warns(UserWarning, match=r"ln\(10\)"):
        Trainer(Classifier(scale=200.0), _cfg(tmp_path, max_steps=2), loss_fn=CE()).fit(_class_data())


class Unhealthy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(8, 1)
        self.unused = nn.Linear(8, 1)
        self.dead = nn.Linear(8, 1)

    def forward(self, x, y):
        return ((self.used(x).squeeze(-1) + 0 * self.dead(x).squeeze(-1) - y) ** 2).mean()


def test_gradient_health_names_unused_and_zero_grad_parameters(tmp_path):
    with pytest.warns(UserWarning) as record:
        Trainer(Unhealthy(), _cfg(tmp_path, max_steps=2)).fit(regression_data(32))
    text = " ".join(str(w.message) for w in record)
    assert "no gradient for unused.weight, unused.bias" in text and "DDP" in text
    assert "all-zero gradient for dead.weight, dead.bias" in text


class SqrtAtZero(nn.Module):
    def forward(self, x):
        return torch.sqrt(x - x)  # finite forward, infinite gradient


def test_debug_anomaly_names_the_module(tmp_path):
    model = nn.Sequential(nn.Linear(8, 8), SqrtAtZero(), nn.Linear(8, 1))
    t = Trainer(model, _cfg(tmp_path, max_steps=1, debug_anomaly=True),
                loss_fn=lambda m, b: (m(b[0]).squeeze(-1) - b[1]).pow(2).mean())  # fmt: skip
    with pytest.raises(GuardError, match=r"module `1` \(SqrtAtZero\)"):
        t.fit(regression_data(16))


def test_an_eval_only_boundary_does_not_drop_the_log_interval(tmp_path):
    data = _batches()
    data[1] = _poison(data[1])  # step 2; evaluation at step 3 (not a log step), the log at step 4
    trainer = Trainer(Regressor(), _cfg(tmp_path, log_every=4, eval_every=3))
    with pytest.warns(UserWarning, match=r"steps \[2\]"):
        trainer.fit(data, val_data=_batches(2, seed=1))
    logged = [r for r in trainer.history if "loss" in r]
    assert logged[0]["step"] == 4 and logged[0]["nonfinite_steps"] == [2]
    assert "val_loss" in trainer.history[0] and trainer.history[0]["step"] == 3
