"""End to end through the `hotloop` command, on tiny settings of the default `gpt` recipe."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

TINY = ["gpt.n_layer=1", "gpt.n_embd=32", "gpt.n_head=2", "gpt.block_size=32", "batch_size=8", "eval_batches=2"]


def hotloop(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "hotloop", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    d = tmp_path_factory.mktemp("cli")
    res = hotloop("fit", *TINY, "max_steps=20", "log_every=5", "eval_every=10", "run_dir=run", cwd=d)
    return d / "run", res


def test_fit_writes_metrics_config_checkpoint_and_sample(run):
    run_dir, res = run
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "loss" in r]
    assert [r["step"] for r in train_rows] == [1, 5, 10, 15, 20]  # the recipe logs step 1 for the initial loss
    assert {"step", "loss", "lr", "grad_norm", "samples_per_s", "tokens_per_s", "elapsed_s"} <= set(train_rows[0])
    assert [r["step"] for r in rows if "val_loss" in r] == [10, 20]
    assert (run_dir / "config.yaml").is_file() and list((run_dir / "checkpoints").glob("*.pt"))
    assert "final validation loss" in res.stdout and "bits/byte" in res.stdout and "sample:" in res.stdout
    assert "hotloop: report: run/report.html" in res.stdout and (run_dir / "report.html").is_file()


def test_first_loss_is_near_ln_256(tmp_path):
    res = hotloop("fit", *TINY, "max_steps=3", "run_dir=r", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    first = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[0])["loss"]
    assert abs(first - math.log(256)) / math.log(256) < 0.05


def test_sample_and_validate_from_a_saved_run(run):
    run_dir, _ = run
    res = hotloop("sample", f"run_dir={run_dir}", "prompt=def ", "max_new_tokens=20", cwd=run_dir.parent)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("def ") and len(res.stdout) > 10
    res = hotloop("validate", f"run_dir={run_dir}", "eval_batches=2", cwd=run_dir.parent)
    assert res.returncode == 0, res.stderr
    assert "val_loss" in res.stdout


@pytest.mark.parametrize(
    "args, needle",
    [
        (["max_stepz=3"], "did you mean `max_steps`"),
        (["precision=fp9"], "`precision`"),
        (["batch_size=-1"], "`batch_size`"),
        (["--config", "nope.yaml"], "not found"),
    ],
)
def test_user_errors_exit_2_without_traceback(tmp_path, args, needle):
    res = hotloop("fit", *args, "run_dir=r", cwd=tmp_path)
    assert res.returncode == 2
    assert needle in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r").exists(), "a config error must fail before any work"


def test_sample_needs_a_run(tmp_path):
    res = hotloop("sample", f"run_dir={tmp_path / 'none'}", cwd=tmp_path)
    assert res.returncode == 2 and "no checkpoint" in res.stderr and "Traceback" not in res.stderr


def test_tensorboard_events_when_installed(run):
    pytest.importorskip("tensorboard")
    run_dir, _ = run
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))


def test_overfit_one_batch_drives_the_loss_below_a_tenth(tmp_path):
    """The seeds' overfit-a-tiny-subset check on the gpt recipe (a smaller model keeps it quick)."""
    args = ["gpt.n_layer=2", "gpt.n_embd=64", "gpt.n_head=2", "gpt.block_size=64", "batch_size=8", "eval_every=0",
            "overfit_batches=1", "max_steps=250", "log_every=25", "lr=3e-3", "run_dir=r"]  # fmt: skip
    res = hotloop("fit", *args, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert losses[-1] < 0.1 * rows[0]["initial_loss"], losses


def test_classify_recipe_fits_and_validates(tmp_path):
    res = hotloop("fit", "recipe=classify", "max_steps=20", "log_every=10", "eval_every=20", "run_dir=c",
                  "progress=plain", cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "final validation: loss" in res.stdout
    rows = [json.loads(line) for line in (tmp_path / "c" / "metrics.jsonl").read_text().splitlines()]
    first = rows[0]["initial_loss"]
    assert abs(first - math.log(10)) / math.log(10) < 0.15  # ln(classes) at initialisation
    val = hotloop("validate", "run_dir=c", cwd=tmp_path)
    assert val.returncode == 0 and "val_acc" in val.stdout
    bad = hotloop("sample", "run_dir=c", cwd=tmp_path)
    assert bad.returncode == 2 and "is a `classify` run" in bad.stderr and "Traceback" not in bad.stderr
