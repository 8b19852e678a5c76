"""Untrusted and broken input: a checkpoint never runs code, a malformed one is one line, a diverged run stops.

Every entry point that loads a checkpoint (`resume`, `hotloop sample`, `hotloop validate`, `teacher=`,
`hotloop.load_checkpoint`) is handed a pickle whose `__reduce__` would create a marker file, with a
manifest holding its correct size and sha256 (anyone who hands over a run directory can write both):
the file must be refused with one line and exit 2, and the marker must not exist.
Run: `python -m pytest tests/unit/test_untrusted.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hotloop
from hotloop import TrainConfig, Trainer
from hotloop import checkpoint as ckpt_io
from hotloop.guard import GuardError

from ..unit.helpers import Regressor, regression_data

ROOT = Path(__file__).resolve().parents[2]


class Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _plant(run_dir: Path, marker: Path, recipe: str = "gpt") -> Path:
    """A run directory whose only checkpoint is hostile but passes its manifest check."""
    cfg = TrainConfig(recipe=recipe).to_dict()
    path = ckpt_io.checkpoint_path(run_dir, 10)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {}, "step": 10, "config": cfg, "payload": Evil(marker)}, path)
    manifest = {"format": 1, "step": 10, "files": {path.name: {"size": path.stat().st_size,
                                                                 "sha256": ckpt_io.sha256_file(path)}}}  # fmt: skip
    path.with_suffix(".json").write_text(json.dumps(manifest))
    assert ckpt_io.verify(path) is None  # the manifest protects against corruption, not against a hostile file
    return path


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hotloop", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)  # fmt: skip


@pytest.mark.parametrize(
    "entry",
    [
        ["sample", "run_dir={run}"],
        ["validate", "run_dir={run}"],
        ["fit", "max_steps=2", "run_dir={run}", "resume=auto", "gpt.n_layer=1", "gpt.n_embd=32", "gpt.block_size=32"],
        [
            "fit",
            "recipe=distill",
            "teacher={run}",
            "max_steps=2",
            "run_dir={tmp}/student",
            "distill.samples=64",
            "gpt.n_layer=1",
            "gpt.n_embd=32",
            "gpt.block_size=32",
        ],
    ],
    ids=["sample", "validate", "resume", "teacher"],
)
def test_hostile_checkpoint_is_refused_at_every_cli_entry_point(tmp_path, entry):
    run, marker = tmp_path / "run", tmp_path / "PWNED"
    hostile = _plant(run, marker)
    res = _cli(*[a.format(run=run, tmp=tmp_path) for a in entry], cwd=tmp_path)
    assert not marker.exists(), "the checkpoint ran code"
    assert res.returncode == 2, res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("hotloop: error:")]
    assert len(errors) == 1 and "refused to load" in errors[0] and str(hostile) in errors[0], res.stderr
    assert "Traceback" not in res.stderr


def test_hostile_checkpoint_is_refused_by_the_library(tmp_path):
    marker = tmp_path / "PWNED"
    _plant(tmp_path, marker)
    with pytest.raises(ckpt_io.CheckpointError, match="refused to load"):
        hotloop.load_checkpoint(tmp_path)
    trainer = Trainer(Regressor(), TrainConfig(device="cpu", run_dir=str(tmp_path), resume="auto", progress="off",
                                               tensorboard=False, max_steps=2))  # fmt: skip
    with pytest.raises(ckpt_io.CheckpointError, match="refused to load"):
        trainer.fit(regression_data(64))
    assert not marker.exists()


def _run(tmp_path, **kw) -> Trainer:
    cfg = dict(device="cpu", batch_size=16, max_steps=10, log_every=5, eval_every=0, ckpt_every=5,
               run_dir=str(tmp_path), progress="off", tensorboard=False)  # fmt: skip
    cfg.update(kw)
    t = Trainer(Regressor(), TrainConfig(**cfg))
    t.fit(regression_data(256))
    return t


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda s: s.pop("optimizer"), "`optimizer` is missing"),
        (lambda s: s.update(step="ten"), "`step` is a str, not a int"),
        (lambda s: s["data"].pop("batches"), "data position"),
        (lambda s: s.update(history=s["history"][:1] + [3.0]), "`history` holds entries"),
        (lambda s: s["model"].update({k: torch.zeros(3) for k in s["model"]}), "does not fit this run"),
    ],
    ids=["missing-key", "mistyped", "no-position", "bad-history", "other-shapes"],
)
def test_a_valid_file_that_is_not_a_hotloop_state_is_one_clear_error(tmp_path, mutate, needle):
    _run(tmp_path)
    path = ckpt_io.latest_valid(tmp_path)
    state = torch.load(path, weights_only=True)
    mutate(state)
    ckpt_io.save_checkpoint(state, tmp_path, 10, keep_last=3)  # a correct manifest for the bad state
    with pytest.raises(ckpt_io.CheckpointError, match=needle) as err:
        _run(tmp_path, resume="auto", max_steps=15)
    assert str(path) in str(err.value)


def test_checkpoints_of_the_previous_format_still_load(tmp_path):
    """Before this change NumPy's RNG state was pickled as a tuple holding an ndarray: allowed, nothing more."""
    import numpy as np

    _run(tmp_path)
    path = ckpt_io.latest_valid(tmp_path)
    state = torch.load(path, weights_only=True)
    state["rng"]["numpy"] = np.random.get_state()
    torch.save(state, path)
    ckpt_io.save_checkpoint(torch.load(path, weights_only=False), tmp_path, 10, keep_last=3)
    assert _run(tmp_path, resume="auto", max_steps=15).state.step == 15


def test_a_diverged_run_stops_and_keeps_its_last_good_checkpoint(tmp_path):
    x, y = regression_data(256)
    cfg = TrainConfig(device="cpu", batch_size=16, max_steps=40, lr=1e9, log_every=10, eval_every=0, ckpt_every=40,
                      run_dir=str(tmp_path), progress="off", tensorboard=False, clip_grad=None)  # fmt: skip
    trainer = Trainer(Regressor(), cfg)
    with pytest.raises(GuardError, match=r"diverged: \d+ non-finite steps in a row since step \d+ \(lr ") as err:
        with pytest.warns(UserWarning, match="skipped"):  # the first interval still had a finite step: skip, warn
            trainer.fit((x, y))
    assert "lower lr" in str(err.value)
    assert ckpt_io.latest_valid(tmp_path) is None  # nothing poisoned was saved


def test_a_diverged_cli_run_is_one_line(tmp_path):
    res = _cli("fit", "recipe=classify", "lr=1e9", "max_steps=30", "clip_grad=null", "run_dir=r", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "training diverged" in res.stderr and not list((tmp_path / "r" / "checkpoints").glob("*.pt"))


def test_sample_on_non_finite_weights_says_so(tmp_path):
    run = tmp_path / "run"
    res = _cli("fit", "max_steps=2", f"run_dir={run}", "gpt.n_layer=1", "gpt.n_embd=32", "gpt.block_size=32",
               "eval_every=0", cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    path = ckpt_io.latest_valid(run)
    state = torch.load(path, weights_only=True)
    state["model"]["head.weight"][0, 0] = float("nan")
    ckpt_io.save_checkpoint(state, run, state["step"], keep_last=3)
    res = _cli("sample", f"run_dir={run}", cwd=tmp_path)
    assert res.returncode == 2 and "non-finite weights" in res.stderr and "Traceback" not in res.stderr
