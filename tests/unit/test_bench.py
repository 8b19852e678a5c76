"""`hotloop bench`: rows carry the contract's fields, variants run the same workload, reads are counted.

Speed is never asserted here (noisy machines); the ratios are checked by running the benchmark itself.
"""

from __future__ import annotations

import json

import pytest
import torch

from hotloop.benchmarks import format_table, run_bench
from hotloop.benchmarks.variants import Window, run_hotloop, run_plain
from hotloop.benchmarks.workloads import make_workload

FIELDS = {"workload", "variant", "device", "steps_per_s", "ratio_vs_plain", "host_reads_per_step", "peak_mem_mb"}


def test_rows_and_json(tmp_path):
    out = tmp_path / "b.json"
    rows = run_bench("mlp", "cpu", ["plain", "hotloop"], rounds=2, steps=60, warmup=5, json_path=str(out),
                     say=lambda *a: None)  # fmt: skip
    assert json.loads(out.read_text()) == rows
    assert [r["variant"] for r in rows] == ["plain", "hotloop"]
    for r in rows:
        assert FIELDS <= set(r) and r["steps_per_s"] > 0 and r["device"] == "cpu"
    assert rows[0]["ratio_vs_plain"] == 1.0
    # plain reads its loss every 50 steps, plus the DataLoader's per-epoch sampler reads; hotloop only at boundaries
    assert rows[1]["host_reads_per_step"] <= 1 / 50 + 1e-9
    assert "hotloop" in format_table(rows)


def test_gpt_rows_report_tokens(tmp_path):
    rows = run_bench("gpt", "cpu", ["hotloop"], rounds=1, steps=2, warmup=1, say=lambda *a: None)
    w = make_workload("gpt", "cpu")
    assert rows[0]["tokens_per_s"] == pytest.approx(rows[0]["steps_per_s"] * w.batch_size * 128, rel=1e-3)


@pytest.mark.parametrize("run", [run_plain, run_hotloop])
def test_variants_train_the_same_workload(run):
    w = make_workload("cnn", "cpu")
    window = Window(torch.device("cpu"), 1, 2)
    run(w, torch.device("cpu"), window)
    assert window.seconds > 0
