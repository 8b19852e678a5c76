"""Loggers never block the loop: each sink behind its own queue and thread; a slow sink falls behind alone,
a failing one is disabled with one message, and every queued row is written before the process exits.
Run: `python -m pytest tests/unit/test_loggers.py`."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hotloop import TrainConfig, Trainer

from .helpers import Regressor, regression_data

ROOT = Path(__file__).resolve().parents[2]


def _cfg(run_dir, **kw) -> TrainConfig:
    base = dict(device="cpu", batch_size=16, max_steps=60, log_every=5, eval_every=0, run_dir=str(run_dir),
                progress="off", tensorboard=False)  # fmt: skip
    base.update(kw)
    return TrainConfig(**base)


class SlowSink:
    def __init__(self, delay: float) -> None:
        self.delay, self.rows, self.closed = delay, [], False

    def log(self, row):
        time.sleep(self.delay)
        self.rows.append(row)

    def close(self):
        self.closed = True


def _rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def test_a_slow_sink_does_not_slow_training_and_still_gets_every_row(tmp_path):
    x, y = regression_data(512)
    t0 = time.perf_counter()
    Trainer(Regressor(), _cfg(tmp_path / "fast")).fit((x, y))
    plain_s = time.perf_counter() - t0
    slow = SlowSink(0.25)  # 12 rows x 0.25 s = 3 s of writing
    t0 = time.perf_counter()
    trainer = Trainer(Regressor(), _cfg(tmp_path / "slow"), loggers=[slow])
    trainer.fit((x, y))
    slow_s = time.perf_counter() - t0
    assert slow_s < plain_s + 1.5, (plain_s, slow_s)  # fit returned long before the sink finished
    assert len(_rows(tmp_path / "slow")) == 12  # metrics.jsonl is complete when fit returns
    trainer._loggers.close()  # what the interpreter's exit does: wait for the slow sink
    assert len(slow.rows) == 12 and slow.closed


def test_a_failing_sink_is_reported_once_and_disabled(tmp_path, capfd):
    class Broken:
        def log(self, row):
            raise ConnectionError("tracking server unreachable")

    Trainer(Regressor(), _cfg(tmp_path), loggers=[Broken()]).fit(regression_data(512))
    err = capfd.readouterr().err
    assert err.count("tracking server unreachable") == 1 and "disabled" in err
    assert len(_rows(tmp_path)) == 12


def test_csv_sink_and_new_row_fields(tmp_path):
    Trainer(Regressor(), _cfg(tmp_path, loggers="jsonl,csv", clip_grad=0.01)).fit(regression_data(512))
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12 and float(rows[-1]["loss"]) == pytest.approx(_rows(tmp_path)[-1]["loss"])
    last = _rows(tmp_path)[-1]
    assert last["clip_frac"] == 1.0  # every step's norm exceeded 0.01
    assert 0.0 <= last["data_wait_frac"] <= 1.0 and last["peak_mem_mb"] > 0


def test_unknown_or_missing_logger_is_one_clear_line(tmp_path):
    from hotloop import ConfigError

    with pytest.raises(ConfigError, match="loggers"):
        _cfg(tmp_path, loggers="jsonl,neptune")


SCRIPT = textwrap.dedent("""
    import sys, time, json, torch
    from hotloop import Trainer, TrainConfig
    from torch import nn

    class FileSink:  # slow, and its rows go to a file the test counts after the process is gone
        def __init__(self, path):
            self.f = open(path, "a")
        def log(self, row):
            time.sleep(0.05)
            self.f.write(json.dumps(row) + "\\n"); self.f.flush()
        def close(self):
            self.f.close()

    class Slow(nn.Module):
        def __init__(self):
            super().__init__(); self.lin = nn.Linear(8, 1)
        def forward(self, x, y):
            time.sleep(0.01)
            return ((self.lin(x).squeeze(-1) - y) ** 2).mean()

    run_dir = sys.argv[1]
    cfg = TrainConfig(device="cpu", batch_size=8, max_steps=100000, log_every=2, eval_every=0, run_dir=run_dir,
                      progress="off", tensorboard=False, loggers="jsonl,csv")
    print("ready", flush=True)
    Trainer(Slow(), cfg, loggers=[FileSink(run_dir + "/sink.jsonl")]).fit((torch.randn(4096, 8), torch.randn(4096)))
""")


def test_sigterm_flushes_every_row_to_every_sink(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(run_dir)], stdout=subprocess.PIPE, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    assert proc.stdout.readline().strip() == b"ready"
    deadline = time.monotonic() + 120  # training has started (its signal handlers are installed): rows exist
    while time.monotonic() < deadline and proc.poll() is None:
        rows = run_dir / "metrics.jsonl"
        if rows.is_file() and len(rows.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    jsonl = _rows(run_dir)
    sink = [json.loads(line) for line in (run_dir / "sink.jsonl").read_text().splitlines()]
    with open(run_dir / "metrics.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(jsonl) >= 5 and len(sink) == len(jsonl) == len(csv_rows)


def _fit_twice(tmp_path, loggers, between=lambda: None):
    """A run to step 30 with a checkpoint, then the same run resumed to step 60."""
    x, y = regression_data(512)
    for i, kw in enumerate(({"max_steps": 30}, {"max_steps": 60, "resume": "auto"})):
        trainer = Trainer(Regressor(), _cfg(tmp_path, ckpt_every=30, loggers=loggers, **kw))
        trainer.fit((x, y))
        trainer._loggers.close()  # as the process's exit does: the remote sinks finish writing
        if i == 0:
            between()


def test_wandb_offline_logs_config_and_resume_continues_the_same_run(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    first = {}

    def record():
        first["id"] = (tmp_path / "wandb_run_id").read_text().strip()
        first["bytes"] = sum(f.stat().st_size for f in (tmp_path / "wandb").rglob("*.wandb"))

    _fit_twice(tmp_path, "jsonl,wandb", between=record)
    run_id = (tmp_path / "wandb_run_id").read_text().strip()
    assert run_id == first["id"]  # the resumed process continued the same W&B run
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert runs and all(run_id in r.name for r in runs)  # wandb suffixes "-1" when both start in one second
    assert sum(f.stat().st_size for f in (tmp_path / "wandb").rglob("*.wandb")) > first["bytes"]


def test_mlflow_local_store_gets_rows_params_and_one_run(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    _fit_twice(tmp_path, "jsonl,mlflow")
    client = mlflow.tracking.MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}")
    run_id = (tmp_path / "mlflow_run_id").read_text().strip()
    run = client.get_run(run_id)
    assert run.data.params["lr"] == "0.0003" and run.data.params["optim.beta2"] == "0.95"
    history = client.get_metric_history(run_id, "loss")
    assert sorted(m.step for m in history) == list(range(5, 61, 5))  # both processes, one run
    exp = client.get_experiment(run.info.experiment_id)
    assert len(client.search_runs([exp.experiment_id])) == 1
