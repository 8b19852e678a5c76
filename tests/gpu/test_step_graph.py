"""`cuda_graph="step"` (`hotloop/graphs.py`): the whole step captured in one CUDA graph trains like the eager
step, never syncs between boundaries, re-captures after the optimizer's state is replaced, and resumes.
`cuda_graph="auto"` (the default) captures the launch-bound `Regressor` and trains like eager, keeps a
GPU-bound step and a step whose work changes between steps eager."""

from __future__ import annotations

import random

import pytest
import torch

from hotloop import Callback, Trainer

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from tests.gpu.test_capabilities import SyncErrors, _cfg, resumed_weight_diff  # noqa: E402
from tests.unit.helpers import Regressor, regression_data  # noqa: E402


def _max_diff(a: Trainer, b: Trainer) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True))


def _notes(capsys) -> list[str]:
    """The `cuda_graph` notes the runs printed so far."""
    return [ln for ln in capsys.readouterr().out.splitlines() if "cuda_graph" in ln]


def _eager_and_auto(tmp_path, **kw) -> dict[str, Trainer]:
    """The same 40-step run (a moving LR, two metrics) with `cuda_graph=off` and with `auto`, from one seed."""
    x, y = regression_data(4096)
    runs = {}
    for mode in ("off", "auto"):
        torch.manual_seed(0)
        runs[mode] = Trainer(Regressor(extra=True), _cfg(tmp_path / mode, max_steps=40, schedule="warmup_cosine",
                                                         cuda_graph=mode, **kw))  # fmt: skip
        runs[mode].fit((x, y))
    return runs


CASES = {
    "fp32": {"precision": "fp32"},
    "fp32-accum-2": {"precision": "fp32", "grad_accum": 2},
    "bf16-compile": {"precision": "bf16", "compile": True},
    "bf16-compile-accum-2": {"precision": "bf16", "compile": True, "grad_accum": 2},
}


@pytest.mark.parametrize("name", list(CASES))
def test_step_graph_trains_like_the_eager_step(tmp_path, name, record_property):
    """A moving LR (warmup_cosine), two metrics, and a short last batch (1000 = 15 x 64 + 40) that must run
    eagerly: weights and every logged loss match the eager run."""
    x, y = regression_data(1000)
    runs = {}
    for mode in ("off", "step"):
        torch.manual_seed(0)
        cfg = _cfg(tmp_path / mode, max_steps=40, drop_last=False, schedule="warmup_cosine", log_every=5,
                   cuda_graph=mode, **CASES[name])  # fmt: skip
        runs[mode] = Trainer(Regressor(extra=True), cfg)
        runs[mode].fit((x, y))
    graph = runs["step"]._step_fn
    diff = _max_diff(runs["off"], runs["step"])
    tol = 1e-5 if CASES[name]["precision"] == "fp32" else 2e-2
    rows = [[r for r in runs[m].history if "mae" in r] for m in ("off", "step")]
    losses = [(a["loss"], b["loss"], a["mae"], b["mae"]) for a, b in zip(*rows, strict=True)]
    record_property("figure", f"max weight diff vs eager {diff:.1e}; {graph.captures} capture, {graph.replays} "
                              f"replays, {graph.eager_steps} eager steps")  # fmt: skip
    assert graph.captures == 1 and graph.replays >= 25 and graph.eager_steps >= 4
    assert diff < tol
    assert losses and all(abs(a - b) < tol * max(1.0, abs(a)) and abs(c - d) < tol * max(1.0, abs(c))
                          for a, b, c, d in losses)  # fmt: skip


@pytest.mark.parametrize("mode", ["step", "auto"])
@pytest.mark.parametrize("kw", [{}, {"compile": True, "precision": "bf16", "grad_accum": 2}])
def test_step_graph_has_no_sync_between_boundaries(tmp_path, kw, mode, capsys, record_property):
    """Checked from step 4, the capture included (step 4 for `step`, 5 for `auto`): it does not synchronise
    (`torch.cuda.graph` would), nor does auto's timing of warm-up step 2, read at the decision."""
    x, y = regression_data(4096)
    guard = SyncErrors(6, warmup=3)
    try:
        t = Trainer(Regressor(), _cfg(tmp_path, cuda_graph=mode, **kw), callbacks=[guard])
        t.fit((x, y))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    notes = _notes(capsys)
    record_property("figure", f"0 syncs in {guard.checked_steps} checked steps, {t._step_fn.replays} replays; {notes}")
    assert guard.checked_steps >= 14 and t._step_fn.replays >= 17 and t._step_fn.captures == 1, notes


class ReloadOptimizer(Callback):
    """Replaces the optimizer's state tensors (as a rollback does) after step 12."""

    def on_step_end(self, trainer, output) -> None:
        if trainer.state.step == 12:
            trainer.optimizer.load_state_dict(trainer.optimizer.state_dict())


def test_step_graph_recaptures_after_the_optimizer_state_is_replaced(tmp_path, record_property):
    x, y = regression_data(4096)
    runs = {}
    for mode in ("off", "step"):
        torch.manual_seed(0)
        cfg = _cfg(tmp_path / mode, max_steps=30, precision="fp32", cuda_graph=mode)
        runs[mode] = Trainer(Regressor(), cfg, callbacks=[ReloadOptimizer()])
        runs[mode].fit((x, y))
    diff = _max_diff(runs["off"], runs["step"])
    record_property("figure", f"{runs['step']._step_fn.captures} captures, max weight diff vs eager {diff:.1e}")
    assert runs["step"]._step_fn.captures == 2 and diff < 1e-5


def test_step_graph_resume(tmp_path, record_property):
    """Killed at step 20 and resumed (its warm-up and capture happen again) against the uninterrupted run."""
    diff = resumed_weight_diff(tmp_path, cuda_graph="step")
    record_property("figure", f"max weight diff {diff:.1e}")
    assert diff < 1e-6


def test_a_step_that_cannot_be_captured_trains_eagerly(tmp_path, record_property):
    """A loss function reading `.item()` every step (a host sync) voids the capture: the run notes it and
    goes on eagerly, with the same weights as an eager run."""

    def syncing_loss(model, batch):
        loss = model(*batch)
        _ = loss.item()  # noqa: HL001 - the point of the test
        return loss

    x, y = regression_data(2048)
    runs = {}
    for mode in ("off", "step"):
        torch.manual_seed(0)
        runs[mode] = Trainer(
            Regressor(), _cfg(tmp_path / mode, precision="fp32", cuda_graph=mode), loss_fn=syncing_loss
        )
        runs[mode].fit((x, y))
    graph = runs["step"]._step_fn
    diff = _max_diff(runs["off"], runs["step"])
    record_property("figure", f"capture refused, {graph.eager_steps} eager steps, max weight diff vs eager {diff:.1e}")
    assert not graph.enabled and graph.replays == 0 and diff < 1e-6


@pytest.mark.parametrize("kw", [{"precision": "fp32"}, {"precision": "bf16", "compile": True, "grad_accum": 2}])
def test_auto_captures_a_launch_bound_step_and_trains_like_eager(tmp_path, kw, capsys, record_property):
    runs = _eager_and_auto(tmp_path, **kw)
    notes = _notes(capsys)
    graph = runs["auto"]._step_fn
    diff = _max_diff(runs["off"], runs["auto"])
    record_property("figure", f"max weight diff vs eager {diff:.1e}; {graph.captures} capture, {graph.replays} "
                              f"replays; note: {notes}")  # fmt: skip
    assert graph.captures == 1 and graph.replays >= 30 and "launch-bound" in notes[0], notes
    assert diff == 0.0


class Wide(torch.nn.Module):
    """Big matmuls: a GPU-bound step, where a graph would only cost memory."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(6)])

    def forward(self, x, y):
        return torch.nn.functional.mse_loss(self.layers(x).mean(-1), y)


def test_auto_keeps_a_gpu_bound_step_eager(tmp_path, capsys, record_property):
    x, y = torch.randn(8192 * 2, 4096), torch.randn(8192 * 2)
    t = Trainer(Wide(), _cfg(tmp_path, max_steps=8, batch_size=8192, precision="fp32"))
    t.fit((x, y))
    notes = _notes(capsys)
    record_property("figure", f"{notes}")
    assert t._step_fn.captures == 0 and "GPU-bound" in notes[0], notes


def test_auto_keeps_a_step_with_python_side_randomness_eager(tmp_path, capsys, record_property):
    """A loss function picking an extra term with `random` (as a layer-drop does), wrongly marked graph_safe:
    a graph would replay one draw forever. Seeded so that warm-up steps 3 and 4 draw differently (with or without the
    memory check's extra call first)."""
    rng = random.Random(7)

    def loss_fn(model, batch):
        loss = model(*batch)
        return loss + 1e-3 * model.net[0].weight.square().sum() if rng.random() < 0.5 else loss

    loss_fn.graph_safe = True
    x, y = regression_data(4096)
    t = Trainer(Regressor(), _cfg(tmp_path, max_steps=12, precision="fp32"), loss_fn=loss_fn)
    t.fit((x, y))
    notes = _notes(capsys)
    record_property("figure", f"{notes}")
    assert t._step_fn.captures == 0 and "warm-up steps 3 and 4 differ" in notes[0], notes


@pytest.mark.parametrize("kw", [{"precision": "fp32"}, {"precision": "bf16", "compile": True, "grad_accum": 2}])
def test_auto_checks_replays_against_the_reference_and_keeps_the_graph(tmp_path, kw, monkeypatch, record_property):
    """Every `VERIFY_EVERY` replays a step runs eagerly under the recorder (every 7th here): on an unchanged step
    it matches the warm-up's record - the graph stays - and the run still ends with the eager run's weights."""
    from hotloop import graphs

    monkeypatch.setattr(graphs, "VERIFY_EVERY", 7)
    runs = _eager_and_auto(tmp_path, **kw)
    graph = runs["auto"]._step_fn
    diff = _max_diff(runs["off"], runs["auto"])
    record_property("figure", f"max weight diff vs eager {diff:.1e}; {graph.replays} replays, {graph.eager_steps} "
                              f"eager steps (4 warm-up + checks)")  # fmt: skip
    assert graph.enabled and graph.captures == 1 and graph.eager_steps >= 4 + 4 and diff == 0.0
