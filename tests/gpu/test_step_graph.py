"""`cuda_graph="step"` (`hotloop/graphs.py`): the whole step captured in one CUDA graph trains like the eager
step, never syncs between boundaries, re-captures after the optimizer's state is replaced, and resumes."""

from __future__ import annotations

import pytest
import torch

from hotloop import Callback, Trainer

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from tests.gpu.test_capabilities import SyncErrors, _cfg, resumed_weight_diff  # noqa: E402
from tests.unit.helpers import Regressor, regression_data  # noqa: E402


def _max_diff(a: Trainer, b: Trainer) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True))


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


@pytest.mark.parametrize("kw", [{}, {"compile": True, "precision": "bf16", "grad_accum": 2}])
def test_step_graph_has_no_sync_between_boundaries(tmp_path, kw, record_property):
    """Checked from step 5: the capture itself (step 4) synchronises once, inside `torch.cuda.graph`."""
    x, y = regression_data(4096)
    guard = SyncErrors(6, warmup=5)
    try:
        t = Trainer(Regressor(), _cfg(tmp_path, cuda_graph="step", **kw), callbacks=[guard])
        t.fit((x, y))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    record_property("figure", f"0 syncs in {guard.checked_steps} checked steps, {t._step_fn.replays} replays")
    assert guard.checked_steps >= 12 and t._step_fn.replays >= 18


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
