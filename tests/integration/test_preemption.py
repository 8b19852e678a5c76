"""Preemption and crashes through the CLI: SIGTERM saves and exits 143; SIGKILL at random moments, then
`resume=auto` with the same command, ends with weights bit-identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from hotloop import load_checkpoint

TINY = [
    *("gpt.n_layer=1", "gpt.n_embd=32", "gpt.n_head=2", "gpt.block_size=32", "gpt.dropout=0.1"),
    *("batch_size=8", "grad_accum=2", "eval_batches=2", "log_every=20", "eval_every=100"),
    *("progress=plain", "tensorboard=false"),
]


def _cmd(run_dir: Path, steps: int, ckpt_every: int) -> list[str]:
    return [sys.executable, "-m", "hotloop", "fit", *TINY, f"max_steps={steps}", f"ckpt_every={ckpt_every}",
            "resume=auto", f"run_dir={run_dir}"]  # fmt: skip


def _final_model(run_dir: Path) -> dict:
    return load_checkpoint(run_dir)["model"]


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _wait_for_training(run_dir: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until this process has logged something: metrics.jsonl grows past its size at launch."""
    metrics = run_dir / "metrics.jsonl"
    size0 = metrics.stat().st_size if metrics.exists() else 0
    start = time.time()
    while time.time() - start < timeout and proc.poll() is None:
        if metrics.exists() and metrics.stat().st_size > size0:
            return
        time.sleep(0.02)


def test_signals_save_and_exit_128_plus_signal_then_resume_exactly(tmp_path):
    """SIGTERM, then SIGUSR1, each at a random moment; the third launch finishes the run."""
    ref = tmp_path / "ref"
    assert subprocess.run(_cmd(ref, 400, 1000), capture_output=True).returncode == 0
    run = tmp_path / "run"
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        proc = subprocess.Popen(_cmd(run, 400, 1000), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for_training(run, proc)
        time.sleep(random.uniform(0.0, 0.3))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        if proc.returncode == 0:  # the run finished before the signal landed
            break
        assert proc.returncode == 128 + sig, err
        assert f"received {sig.name}" in err and "resume=auto" in err and "Traceback" not in err
    assert subprocess.run(_cmd(run, 400, 1000), capture_output=True).returncode == 0
    assert load_checkpoint(run)["step"] == 400
    assert _same(_final_model(run), _final_model(ref))
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps), "rows logged after the checkpoint are dropped on resume, not duplicated"


def test_sigkill_five_times_then_resume_is_bit_exact(tmp_path):
    steps, every = 1500, 25
    ref = tmp_path / "ref"
    assert subprocess.run(_cmd(ref, steps, every), capture_output=True).returncode == 0
    run = tmp_path / "run"
    rng = random.Random(os.getpid())
    kills = 0
    for _ in range(12):
        proc = subprocess.Popen(_cmd(run, steps, every), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for_training(run, proc)
        time.sleep(rng.uniform(0.05, 0.8))
        if proc.poll() is not None:
            break
        proc.kill()
        proc.wait()
        kills += 1
        if kills == 5:
            break
    assert kills >= 5, "the run finished before it could be killed 5 times; make it longer"
    res = subprocess.run(_cmd(run, steps, every), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert load_checkpoint(run)["step"] == steps
    assert _same(_final_model(run), _final_model(ref))
