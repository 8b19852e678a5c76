"""Checkpoints written in the background: the step loop pays for the host copy, not for the write; a
SIGKILL in the middle of a background write leaves the previous checkpoint valid and `resume=auto` picks it.
Run: `python -m pytest tests/integration/test_async_checkpoint.py`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import torch

from hotloop import TrainConfig, Trainer
from hotloop import checkpoint as ckpt_io

from ..unit.helpers import Regressor, regression_data

ROOT = Path(__file__).resolve().parents[2]


def test_a_slow_writer_does_not_stop_the_steps(tmp_path, monkeypatch):
    real = torch.save

    def slow_save(obj, f):
        time.sleep(0.6)  # a slow disk: 0.6 s per checkpoint file
        real(obj, f)

    monkeypatch.setattr(ckpt_io.torch, "save", slow_save)
    blocked = {}
    for background in (True, False):
        cfg = TrainConfig(device="cpu", batch_size=16, max_steps=40, log_every=10, eval_every=0, ckpt_every=10,
                          run_dir=str(tmp_path / str(background)), progress="off", tensorboard=False,
                          async_checkpoint=background)  # fmt: skip
        t = Trainer(Regressor(), cfg).fit(regression_data(512))
        blocked[background] = [r.get("ckpt_block_s") for r in t.history if r["step"] in (20, 30, 40)]
        assert [f.step for f in ckpt_io.committed(cfg.run_dir)] == [20, 30, 40]  # committed, retention as before
        assert ckpt_io.latest_valid(cfg.run_dir) is not None
    assert all(b is not None and b < 0.3 for b in blocked[True]), blocked  # the host copy, not the 0.6 s write
    assert all(b is not None and b >= 0.6 for b in blocked[False]), blocked  # the whole write, in the loop


SCRIPT = textwrap.dedent("""
    import sys, time, torch
    from hotloop import Trainer, TrainConfig
    import hotloop.checkpoint as ck
    sys.path.insert(0, sys.argv[2])
    from tests.unit.helpers import Regressor, regression_data

    real = torch.save
    calls = {"n": 0}
    def stalled_save(obj, f):
        calls["n"] += 1
        if calls["n"] == 2:  # the second checkpoint: half written, then the process is killed
            f.write(b"partial")
            print("writing", flush=True)
            time.sleep(60)
        real(obj, f)
    ck.torch.save = stalled_save
    cfg = TrainConfig(device="cpu", batch_size=16, max_steps=1000, log_every=5, eval_every=0, ckpt_every=5,
                      run_dir=sys.argv[1], progress="off", tensorboard=False)
    Trainer(Regressor(), cfg).fit(regression_data(512))
""")


def test_sigkill_during_a_background_write_keeps_the_previous_checkpoint(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(script), str(run_dir), str(ROOT)], stdout=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    assert proc.stdout.readline().strip() == b"writing"
    time.sleep(0.5)  # the loop went on meanwhile
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert ckpt_io.latest_valid(run_dir) == ckpt_io.checkpoint_path(run_dir, 5)
    cfg = TrainConfig(device="cpu", batch_size=16, max_steps=12, log_every=5, eval_every=0, ckpt_every=5,
                      run_dir=str(run_dir), progress="off", tensorboard=False, resume="auto")  # fmt: skip
    t = Trainer(Regressor(), cfg).fit(regression_data(512))
    assert t.state.step == 12 and [r for r in t.history if r.get("event") == "resume"][0]["step"] == 5
