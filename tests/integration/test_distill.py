"""The `distill` recipe end to end on a tiny teacher: the temperature learns, the second run makes no
teacher forward, the cache is rebuilt (and says so) when the data change, and the baseline runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TINY = ["gpt.n_layer=1", "gpt.n_embd=32", "gpt.n_head=2", "gpt.block_size=32", "batch_size=8", "eval_batches=2",
        "progress=plain", "tensorboard=false"]  # fmt: skip
STUDENT = ["recipe=distill", *TINY, "gpt.n_embd=16", "max_steps=20", "log_every=5", "eval_every=20",
           "distill.samples=96", "distill.top_k=8"]  # fmt: skip


def hotloop(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    res = subprocess.run([sys.executable, "-m", "hotloop", *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("distill")
    hotloop(d, "fit", *TINY, "max_steps=40", "log_every=20", "eval_every=40", "run_dir=teacher")
    return d


def test_cached_distillation_learns_the_temperature_and_reuses_the_cache(teacher):
    first = hotloop(teacher, "fit", *STUDENT, "teacher=teacher", "run_dir=s1")
    assert "teacher cache: 96/96 samples (100%" in first.stdout
    r1 = [r for r in rows(teacher / "s1") if "loss" in r]
    assert {"temperature", "kd_loss", "ce_loss", "teacher_forwards"} <= set(r1[-1])
    assert r1[-1]["temperature"] != pytest.approx(2.0, abs=1e-3)  # it moved from its start
    assert r1[0]["teacher_forwards"] == r1[-1]["teacher_forwards"] > 0  # the build's forwards, none in training
    second = hotloop(teacher, "fit", *STUDENT, "teacher=teacher", "run_dir=s2")
    assert "teacher cache:" not in second.stdout
    r2 = [r for r in rows(teacher / "s2") if "loss" in r]
    assert all(r["teacher_forwards"] == 0 for r in r2)
    assert [r["loss"] for r in r2] == [r["loss"] for r in r1]  # the cache gives the same numbers as its build run


def test_without_the_cache_the_teacher_runs_every_step(teacher):
    hotloop(teacher, "fit", *STUDENT, "teacher=teacher", "teacher_cache=off", "run_dir=online")
    assert rows(teacher / "online")[-1]["teacher_forwards"] == 20


def test_a_cache_built_for_other_data_is_rebuilt(teacher):
    cache = teacher / "logits"
    hotloop(teacher, "fit", *STUDENT, "teacher=teacher", f"teacher_cache={cache}", "run_dir=c1")
    res = hotloop(teacher, "fit", *STUDENT, "teacher=teacher", f"teacher_cache={cache}", "distill.samples=64",
                  "run_dir=c2")  # fmt: skip
    assert "was built for other data: rebuilding it" in res.stdout


def test_baseline_without_distillation(teacher):
    hotloop(teacher, "fit", *STUDENT, "distill.alpha=0", "run_dir=base")
    last = rows(teacher / "base")[-1]
    assert last["teacher_forwards"] == 0 and "val_loss" in last and "ce_loss" in last


def test_a_missing_teacher_is_a_clear_error(teacher):
    env = dict(os.environ)
    res = subprocess.run([sys.executable, "-m", "hotloop", "fit", *STUDENT, "teacher=nope", "run_dir=x"],
                         cwd=teacher, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 2 and "teacher=nope does not exist" in res.stderr and "Traceback" not in res.stderr


def test_sample_and_validate_a_distilled_student(teacher):
    hotloop(teacher, "fit", *STUDENT, "teacher=teacher", "run_dir=sv")
    res = hotloop(teacher, "sample", "run_dir=sv", "prompt=def ", "max_new_tokens=10")
    assert res.stdout.startswith("def ")
    assert "val_loss" in hotloop(teacher, "validate", "run_dir=sv").stdout
