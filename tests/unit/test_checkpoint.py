"""Checkpoints: commit protocol under injected crashes, corrupt-file fallback, ENOSPC, bit-exact resume.

Reference for resume: an uninterrupted run of the same config; weights and optimizer state compared bit for bit.
"""

from __future__ import annotations

import copy
import errno

import pytest
import torch
from torch import nn

from hotloop import TrainConfig, Trainer, load_checkpoint
from hotloop import checkpoint as ck
from hotloop.checkpointer import Checkpointer

from .helpers import Regressor, regression_data


class DropNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))

    def forward(self, x, y):
        return nn.functional.mse_loss(self.net(x).squeeze(-1), y)


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(device="cpu", batch_size=8, grad_accum=3, lr=1e-2, schedule="warmup_cosine", warmup_steps=10,
                schedule_steps=100, log_every=10, eval_every=20, run_dir=str(tmp_path), progress="off",
                tensorboard=False, seed=7)  # fmt: skip
    base.update(kw)
    return TrainConfig(**base)


DATA = regression_data(200)  # 25 micro-batches an epoch: windows of 3,3,...,3,1 (9 steps an epoch)
VAL = regression_data(32, seed=1)


def _assert_same_state(a: Trainer, b: Trainer) -> None:
    assert a.state.step == b.state.step
    for (n, p), q in zip(a.model.named_parameters(), b.model.parameters(), strict=True):
        assert torch.equal(p, q), n
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    for k in sa:
        for name in sa[k]:
            assert torch.equal(sa[k][name], sb[k][name]), (k, name)


@pytest.fixture(scope="module")
def init_model():
    torch.manual_seed(3)
    return DropNet()


@pytest.fixture(scope="module")
def uninterrupted(init_model, tmp_path_factory):
    t = Trainer(copy.deepcopy(init_model), _cfg(tmp_path_factory.mktemp("full"), max_steps=100))
    t.fit(DATA, VAL)
    return t


def _interrupted(init_model, tmp_path, trainer_cls=Trainer, stop=37):
    first = Trainer(copy.deepcopy(init_model), _cfg(tmp_path, max_steps=stop))
    first.fit(DATA, VAL)
    assert first.state.step == stop
    resumed = trainer_cls(copy.deepcopy(init_model), _cfg(tmp_path, max_steps=100, resume="auto"))
    resumed.fit(DATA, VAL)
    return resumed


@pytest.mark.parametrize("stop", [37, 45, 9])  # mid-epoch inside windows, mid-epoch, exactly at an epoch's end
def test_resume_is_bit_exact(init_model, uninterrupted, tmp_path, stop):
    resumed = _interrupted(init_model, tmp_path, stop=stop)
    assert resumed.state.step == 100
    _assert_same_state(resumed, uninterrupted)


class _ForgetsDataPosition(Checkpointer):
    def resume(self, source):
        super().resume(source)
        self.t._epoch_batches = 0


class _ForgetsRNG(Checkpointer):
    def resume(self, source):
        super().resume(source)
        torch.manual_seed(1234)


class ForgetsDataPosition(Trainer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.checkpointer = _ForgetsDataPosition(self)


class ForgetsRNG(Trainer):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.checkpointer = _ForgetsRNG(self)


@pytest.mark.parametrize("broken", [ForgetsDataPosition, ForgetsRNG])
def test_negative_controls_fail_without_data_position_or_rng(init_model, uninterrupted, tmp_path, broken):
    resumed = _interrupted(init_model, tmp_path, trainer_cls=broken)
    assert resumed.state.step == 100
    with pytest.raises(AssertionError):
        _assert_same_state(resumed, uninterrupted)


def test_resume_auto_starts_fresh_without_checkpoint(init_model, tmp_path):
    t = Trainer(copy.deepcopy(init_model), _cfg(tmp_path, max_steps=3, resume="auto"))
    t.fit(DATA)
    assert t.state.step == 3


def _run_with_ckpts(init_model, tmp_path, steps=8, **kw):
    t = Trainer(copy.deepcopy(init_model), _cfg(tmp_path, max_steps=steps, ckpt_every=2, keep_last=3, **kw))
    t.fit(DATA)
    return t


def test_keep_last_and_manifests(init_model, tmp_path):
    _run_with_ckpts(init_model, tmp_path)
    assert [f.step for f in ck.committed(tmp_path)] == [4, 6, 8]
    assert all(ck.verify(f.path) is None for f in ck.committed(tmp_path))
    assert load_checkpoint(tmp_path)["step"] == 8
    assert {"model", "optimizer", "step", "rng", "data", "scheduler", "precision", "history", "config"} <= set(
        load_checkpoint(tmp_path / "checkpoints" / "step_00000006.pt")
    )


@pytest.mark.parametrize("damage", ["truncate", "zero", "flip", "no-manifest"])
def test_corrupt_newest_falls_back_with_a_warning(init_model, tmp_path, damage):
    _run_with_ckpts(init_model, tmp_path)
    newest = ck.checkpoint_path(tmp_path, 8)
    data = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(data[: len(data) // 2])
    elif damage == "zero":
        newest.write_bytes(b"")
    elif damage == "flip":
        newest.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    else:
        newest.with_suffix(".json").unlink()
    if damage != "no-manifest":
        with pytest.warns(UserWarning, match=r"step_00000008\.pt"):
            assert ck.latest_valid(tmp_path) == ck.checkpoint_path(tmp_path, 6)
        with pytest.raises(ck.CheckpointError, match="resume_strict"):
            ck.latest_valid(tmp_path, strict=True)
    with pytest.warns(UserWarning) if damage != "no-manifest" else _nullwarn():
        t = Trainer(DropNet(), _cfg(tmp_path, max_steps=9, resume="auto", ckpt_every=2))
        t.fit(DATA)
    assert t.history and t.state.step == 9


class _nullwarn:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class Boom(Exception):
    pass


def test_crash_mid_file_keeps_previous(init_model, tmp_path, monkeypatch):
    t = _run_with_ckpts(init_model, tmp_path, steps=4)

    def torn_save(obj, f):
        f.write(b"partial bytes")
        raise Boom

    monkeypatch.setattr(ck.torch, "save", torn_save)
    t.state.step = 6
    with pytest.raises(Boom):
        t.save_checkpoint()
    assert ck.latest_valid(tmp_path) == ck.checkpoint_path(tmp_path, 4)
    assert not list((tmp_path / "checkpoints").glob(".step_*.tmp")), "the temporary file is removed"


def test_crash_before_manifest_keeps_previous(init_model, tmp_path, monkeypatch):
    t = _run_with_ckpts(init_model, tmp_path, steps=4)
    real = ck._atomic_write

    def no_manifest(path, write):
        if path.suffix == ".json":
            raise Boom
        return real(path, write)

    monkeypatch.setattr(ck, "_atomic_write", no_manifest)
    t.state.step = 6
    with pytest.raises(Boom):
        t.save_checkpoint()
    assert ck.checkpoint_path(tmp_path, 6).exists()  # the state is there, but uncommitted
    assert ck.latest_valid(tmp_path) == ck.checkpoint_path(tmp_path, 4)
    assert load_checkpoint(tmp_path)["step"] == 4


def test_crash_during_purge_keeps_newest(init_model, tmp_path, monkeypatch):
    t = _run_with_ckpts(init_model, tmp_path, steps=6)  # 2, 4, 6 committed
    monkeypatch.setattr(ck, "purge", lambda *a, **k: (_ for _ in ()).throw(Boom()))
    t.state.step = 8
    with pytest.raises(Boom):
        t.save_checkpoint()
    assert ck.latest_valid(tmp_path) == ck.checkpoint_path(tmp_path, 8)
    assert [f.step for f in ck.committed(tmp_path)] == [2, 4, 6, 8]  # nothing deleted before the commit


@pytest.mark.parametrize("background, stop", [(False, {4}), (True, {5, 6})])
def test_disk_full_stops_cleanly_and_keeps_last_good(init_model, tmp_path, monkeypatch, background, stop):
    """A synchronous save fails at step 4 and stops there; a background one stops at the first step after its
    write is known to have failed (polled every step; at the latest, the next save waits for it: step 6).
    Either way the checkpoint of step 2 stays the newest valid."""
    real_save = torch.save
    calls = {"n": 0}

    def full_disk(obj, f):
        calls["n"] += 1
        if calls["n"] >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f)

    monkeypatch.setattr(ck.torch, "save", full_disk)
    t = Trainer(copy.deepcopy(init_model), _cfg(tmp_path, max_steps=10, ckpt_every=2, async_checkpoint=background))
    with pytest.raises(ck.CheckpointError, match=r"No space left on device.*step_00000002\.pt.*resume=auto"):
        t.fit(DATA)
    assert t.state.step in stop
    monkeypatch.setattr(ck.torch, "save", real_save)
    assert load_checkpoint(tmp_path)["step"] == 2


def test_resuming_a_finished_run_takes_no_extra_step(init_model, tmp_path):
    _run_with_ckpts(init_model, tmp_path, steps=4)
    again = Trainer(copy.deepcopy(init_model), _cfg(tmp_path, max_steps=4, ckpt_every=2, resume="auto"))
    again.fit(DATA)
    assert again.state.step == 4


def test_config_change_that_alters_the_math_is_reported(init_model, tmp_path):
    _run_with_ckpts(init_model, tmp_path, steps=4)
    t = Trainer(copy.deepcopy(init_model), _cfg(tmp_path, max_steps=6, batch_size=4, resume="auto"))
    with pytest.warns(UserWarning, match=r"changes the math \(batch_size x ranks: 8 -> 4\)"):
        t.fit(DATA)


def test_resume_into_a_different_model_is_a_clear_error(init_model, tmp_path):
    _run_with_ckpts(init_model, tmp_path, steps=4)
    other = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    t = Trainer(other, _cfg(tmp_path, max_steps=6, resume="auto"),
                loss_fn=lambda m, b: (m(b[0]).squeeze(-1) - b[1]).pow(2).mean())  # fmt: skip
    with pytest.raises(ck.CheckpointError, match="does not fit this run"):
        t.fit(DATA)


def test_a_fresh_run_sets_the_previous_one_aside(tmp_path, capsys):
    Trainer(DropNet(), _cfg(tmp_path, max_steps=20, ckpt_every=10)).fit(DATA, VAL)
    first = (tmp_path / "metrics.jsonl").read_text()
    second = Trainer(DropNet(), _cfg(tmp_path, max_steps=10, seed=8)).fit(DATA, VAL)
    assert "held a previous run" in capsys.readouterr().out
    (old,) = (tmp_path / "previous").iterdir()
    assert (old / "metrics.jsonl").read_text() == first  # nothing lost
    assert [c.step for c in ck.committed(old)] == [10, 20]
    rows = [r for r in second.history if "loss" in r]
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == len(second.history) and rows[-1]["step"] == 10
    assert [c.step for c in ck.committed(tmp_path)] == [10]  # resume=auto now continues the new run, not the old


def test_keep_best_survives_retention_and_is_named_in_the_report(tmp_path):
    """keep_last=1 keeps only the newest, except the checkpoint with the best `loss` (here: the highest)."""
    from hotloop.report import write_report

    x, y = regression_data(512)
    cfg = TrainConfig(device="cpu", batch_size=16, max_steps=40, log_every=10, eval_every=0, ckpt_every=10,
                      keep_last=1, keep_best="loss", best_mode="max", run_dir=str(tmp_path), progress="off",
                      tensorboard=False)  # fmt: skip
    t = Trainer(Regressor(), cfg).fit((x, y))
    best = max((r for r in t.history if r["step"] < 40), key=lambda r: r["loss"])["step"]
    steps = [f.step for f in ck.committed(tmp_path)]
    assert steps == [best, 40]  # the best (highest loss, by best_mode=max) and the last
    assert ck.best_checkpoint(tmp_path, "loss", "max").name == f"step_{best:08d}.pt"
    assert "best loss = " in write_report([tmp_path]).read_text()


def test_background_saves_reuse_their_host_buffers_and_each_file_holds_its_own_step(init_model, tmp_path):
    from hotloop.checkpointer import _to_host

    pool: dict = {}
    state = {"w": torch.ones(3), "opt": {"state": {0: {"m": torch.zeros(2)}}, "lr": 0.1}, "rng": [torch.arange(4)]}
    first = _to_host(state, pool)
    ptrs = {k: v.data_ptr() for k, v in pool.items()}
    state["w"] += 1
    second = _to_host(state, pool)
    assert {k: v.data_ptr() for k, v in pool.items()} == ptrs  # the same buffers, refilled: nothing allocated
    assert second["w"].data_ptr() == first["w"].data_ptr() and torch.equal(second["w"], torch.full((3,), 2.0))
    assert second["opt"]["lr"] == 0.1 and second["w"] is not state["w"]
    # Through fit: every background checkpoint equals the synchronous one of the same step, bit for bit.
    runs = {}
    for background in (True, False):
        d = tmp_path / str(background)
        Trainer(copy.deepcopy(init_model), _cfg(d, max_steps=6, ckpt_every=2, keep_last=5,
                                                async_checkpoint=background)).fit(DATA)  # fmt: skip
        runs[background] = {f.step: load_checkpoint(f.path)["model"] for f in ck.committed(d)}
    assert sorted(runs[True]) == [2, 4, 6]
    for step, sd in runs[True].items():
        assert all(torch.equal(sd[k], runs[False][step][k]) for k in sd), step
