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


class FitsEight(torch.nn.Module):
    """Raises the out-of-memory error a GPU would above 8 samples per forward (in training and evaluation)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.forwards: list[int] = []

    def forward(self, x, y):
        self.forwards.append(x.shape[0])
        if x.shape[0] > 8:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)


def test_auto_micro_batch_keeps_the_global_batch_and_the_math(tmp_path):
    from .helpers import regression_data

    x, y = regression_data(512)
    vx, vy = regression_data(64, seed=1)
    runs = {}
    for name, kw in {"oom": {"batch_size": 16, "auto_micro_batch": True},
                     "small": {"batch_size": 8, "grad_accum": 2}}.items():  # fmt: skip
        torch.manual_seed(0)
        cfg = TrainConfig(device="cpu", max_steps=30, log_every=10, eval_every=15, progress="off", tensorboard=False,
                          run_dir=str(tmp_path / name), **kw)  # fmt: skip
        runs[name] = Trainer(FitsEight(), cfg).fit((x, y), (vx, vy))
    for a, b in zip(runs["oom"].model.parameters(), runs["small"].model.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    events = [r for r in runs["oom"].history if r.get("event") == "micro_batch"]
    assert len(events) == 1 and events[0]["split"] == 2 and runs["oom"]._micro.split == 2
    assert runs["oom"].state.samples == runs["small"].state.samples == 30 * 16
    val = [r["val_loss"] for r in runs["oom"].history if "val_loss" in r]
    assert val == pytest.approx([r["val_loss"] for r in runs["small"].history if "val_loss" in r], abs=1e-6)


def test_without_auto_micro_batch_an_oom_is_raised(tmp_path):
    from .helpers import regression_data

    cfg = TrainConfig(
        device="cpu", batch_size=16, max_steps=3, progress="off", tensorboard=False, run_dir=str(tmp_path)
    )
    with pytest.raises(torch.OutOfMemoryError):
        Trainer(FitsEight(), cfg).fit(regression_data(64))


def test_memory_check_runs_one_step_and_leaves_no_trace(tmp_path, capsys):
    """memory_check=true (auto: on CUDA): one step at the first batch's shape, then the run is exactly the
    run without it (RNG forked, BatchNorm statistics put back, gradients dropped)."""
    from .helpers import regression_data

    class WithNorm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Dropout(0.2),
                                           torch.nn.Linear(16, 1))  # fmt: skip

        def forward(self, x, y):
            return torch.nn.functional.mse_loss(self.net(x).squeeze(-1), y)

    runs = {}
    for check in (True, False):
        torch.manual_seed(0)
        cfg = TrainConfig(device="cpu", batch_size=16, max_steps=10, log_every=5, eval_every=0, progress="off",
                          tensorboard=False, run_dir=str(tmp_path / str(check)), memory_check=check)  # fmt: skip
        runs[check] = Trainer(WithNorm(), cfg).fit(regression_data(256))
    assert "memory check: one step at batch 16x8 peaks at" in capsys.readouterr().out
    for a, b in zip(runs[True].model.state_dict().values(), runs[False].model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_memory_check_that_does_not_fit_stops_before_training(tmp_path):
    from hotloop.memory import OutOfMemory

    from .helpers import regression_data

    cfg = TrainConfig(device="cpu", batch_size=16, max_steps=3, progress="off", tensorboard=False,
                      run_dir=str(tmp_path), memory_check=True)  # fmt: skip
    t = Trainer(FitsEight(), cfg)
    with pytest.raises(OutOfMemory, match=r"batch shape 16x8 does not fit.*batch_size \(now 16\).*grad_accum"):
        t.fit(regression_data(64))
    assert t.state.step == 0 and not list((tmp_path / "checkpoints").glob("*.pt"))


@pytest.mark.parametrize("mode", ["full", "selective"])
def test_checkpointing_composes_with_compile(tmp_path, mode):
    """compile=true with activation checkpointing trains like the plain eager model (no dropout: compiled
    dropout draws its own masks)."""
    cfg_model = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32, dropout=0.0)
    g = torch.Generator().manual_seed(2)
    data = torch.randint(0, 256, (32, 33), generator=g)
    runs = {}
    for name, ac, compiled in (("eager", "none", False), ("compiled", mode, True)):
        torch.manual_seed(0)
        cfg = TrainConfig(device="cpu", batch_size=8, max_steps=3, log_every=3, eval_every=0, progress="off",
                          tensorboard=False, run_dir=str(tmp_path / name), activation_checkpointing=ac,
                          compile=compiled)  # fmt: skip
        runs[name] = Trainer(GPT(cfg_model), cfg).fit((data[:, :-1], data[:, 1:]))
    assert runs["compiled"].forward_model is not runs["compiled"].model  # it really compiled
    for a, b in zip(runs["eager"].model.parameters(), runs["compiled"].model.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
