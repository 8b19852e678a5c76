"""Trainer: the data it accepts, when it stops, what it logs, evaluation mode, and its error messages."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from hotloop import DataError, LossError, TrainConfig, Trainer

from .helpers import Regressor, regression_data


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(device="cpu", batch_size=8, log_every=2, run_dir=str(tmp_path), progress="off", tensorboard=False)
    base.update(kw)
    return TrainConfig(**base)


class PairDataset(Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


@pytest.mark.parametrize("kind", ["tuple", "dict", "tensordataset", "dataset", "dataloader", "list", "generator"])
def test_fit_accepts_every_kind_of_data(tmp_path, kind):
    x, y = regression_data(64)
    data = {
        "tuple": lambda: (x, y),
        "dict": lambda: {"x": x, "y": y},
        "tensordataset": lambda: TensorDataset(x, y),
        "dataset": lambda: PairDataset(x, y),
        "dataloader": lambda: DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True),
        "list": lambda: [(x[i : i + 8], y[i : i + 8]) for i in range(0, 64, 8)],
        "generator": lambda: ((x[i : i + 8], y[i : i + 8]) for i in range(0, 64, 8)),
    }[kind]()
    model = Regressor()
    trainer = Trainer(model, _cfg(tmp_path, epochs=2, schedule="constant"))
    trainer.fit(data)
    expected = 8 if kind == "generator" else 16  # a one-shot generator ends after its single pass
    assert trainer.state.step == expected and isinstance(trainer.state.step, int)
    assert trainer.model is model


def test_stops_at_max_steps_or_epochs_whichever_first(tmp_path):
    x, y = regression_data(64)
    t = Trainer(Regressor(), _cfg(tmp_path / "a", max_steps=5, epochs=3))
    t.fit((x, y))
    assert t.state.step == 5
    t = Trainer(Regressor(), _cfg(tmp_path / "b", max_steps=100, epochs=2))
    t.fit((x, y))
    assert t.state.step == 16 and t.state.epoch == 2


def test_metrics_jsonl_rows(tmp_path):
    x, y = regression_data(64)
    vx, vy = regression_data(32, seed=1)
    t = Trainer(
        Regressor(extra=True),
        _cfg(tmp_path, max_steps=8, log_every=4, eval_every=4),
        batch_tokens=lambda b: b[0].shape[0] * 3,
    )
    t.fit((x, y), (vx, vy))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [4, 8]
    for r in rows:
        for key in (
            "step",
            "loss",
            "lr",
            "grad_norm",
            "samples_per_s",
            "tokens_per_s",
            "elapsed_s",
            "mae",
            "val_loss",
            "val_mae",
        ):
            assert key in r, key
        assert isinstance(r["loss"], float)
    assert (tmp_path / "config.yaml").is_file()
    assert TrainConfig(**__import__("yaml").safe_load((tmp_path / "config.yaml").read_text())) == t.cfg


class ModeProbe(nn.Module):
    """Records (training, grad_enabled) at every forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 1)
        self.temperature = nn.Parameter(torch.ones(()))
        self.seen: list[tuple[bool, bool]] = []

    def forward(self, x, y):
        self.seen.append((self.training, torch.is_grad_enabled()))
        return ((self.lin(x).squeeze(-1) / self.temperature - y) ** 2).mean()


def test_validate_uses_eval_and_no_grad_then_returns_to_train(tmp_path):
    x, y = regression_data(32)
    model = ModeProbe()
    t = Trainer(model, _cfg(tmp_path, max_steps=2, eval_every=1))
    t.fit((x, y), (x, y))
    assert (False, False) in model.seen and (True, True) in model.seen
    assert model.training
    model.seen.clear()
    out = t.validate((x, y))
    assert set(out) == {"val_loss"} and isinstance(out["val_loss"], float)
    assert model.seen and all(s == (False, False) for s in model.seen)
    assert model.training and model.temperature.grad is None


def test_non_scalar_loss_is_a_clear_error(tmp_path):
    x, y = regression_data(32)
    t = Trainer(Regressor(), _cfg(tmp_path, max_steps=1), loss_fn=lambda m, b: (m.net(b[0]).squeeze(-1) - b[1]) ** 2)
    with pytest.raises(LossError, match=r"shape \(8,\).*scalar.*\.mean\(\)"):
        t.fit((x, y))


def test_loss_fn_returning_logits_is_a_clear_error(tmp_path):
    x, y = regression_data(32)
    t = Trainer(nn.Linear(8, 1), _cfg(tmp_path, max_steps=1), loss_fn=lambda m, b: (m(b[0]),))
    with pytest.raises(LossError, match="scalar loss tensor"):
        t.fit((x, y))


def test_empty_data_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="yielded no batch"):
        Trainer(Regressor(), _cfg(tmp_path, max_steps=3)).fit([])


@pytest.mark.parametrize("wrap", [lambda x, y: (x, y), lambda x, y: PairDataset(x, y)])
def test_batch_larger_than_dataset_with_drop_last(tmp_path, wrap):
    x, y = regression_data(10)
    with pytest.raises(DataError, match=r"batch_size=32.*10 samples.*drop_last"):
        Trainer(Regressor(), _cfg(tmp_path, batch_size=32, max_steps=3)).fit(wrap(x, y))


def test_unsized_data_needs_max_steps_for_a_decaying_schedule(tmp_path):
    x, y = regression_data(32)
    from hotloop import ConfigError

    gen = ((x[i : i + 8], y[i : i + 8]) for i in range(0, 32, 8))
    with pytest.raises(ConfigError, match="set max_steps"):
        Trainer(Regressor(), _cfg(tmp_path)).fit(gen)


def test_compiled_path_on_cpu(tmp_path):
    x, y = regression_data(64)
    init = Regressor()
    eager = Trainer(copy.deepcopy(init), _cfg(tmp_path / "e", max_steps=4, seed=3))
    eager.fit((x, y))
    compiled = Trainer(copy.deepcopy(init), _cfg(tmp_path / "c", max_steps=4, seed=3, compile=True))
    assert compiled.forward_model is not compiled.model
    compiled.fit((x, y))
    for p, q in zip(eager.model.parameters(), compiled.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)


def test_final_checkpoint_loads(tmp_path):
    from hotloop import load_checkpoint

    x, y = regression_data(32)
    t = Trainer(Regressor(), _cfg(tmp_path, max_steps=3))
    t.fit((x, y))
    ckpt = load_checkpoint(tmp_path)
    assert ckpt["step"] == 3 and {"model", "optimizer", "config"} <= set(ckpt)
    m = Regressor()
    m.load_state_dict(ckpt["model"])
    for p, q in zip(m.parameters(), t.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_short_batches_never_send_the_compiled_model_onto_dynamic_shapes(tmp_path):
    """drop_last=false (a short last training batch) and a short last validation batch: the compiled model
    keeps its two static graphs (train mode, eval mode); the short batches run eagerly."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    x, y = regression_data(70)  # 8 full batches of 8 and one of 6
    vx, vy = regression_data(20, seed=1)  # 2 of 8 and one of 4
    t = Trainer(Regressor(), _cfg(tmp_path, epochs=3, compile=True, drop_last=False, eval_every=9))
    t.fit((x, y), (vx, vy))
    assert t.state.step == 27
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    assert not torch._dynamo.utils.counters["recompiles"]
