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


def test_gpt2_workload_has_gpt2_small_shape():
    from hotloop.benchmarks.workloads import GPT, GPTConfig, gpt_flops_per_token

    cfg = GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024)
    model = GPT(cfg, 50257, tie_weights=True)
    n = sum(p.numel() for p in model.parameters())
    assert model.head.weight is model.wte.weight and 124.0e6 < n < 124.5e6  # GPT-2 small: 124M
    # 6N + 12 L T C per token (N without position embeddings): ~0.73 GFLOP/token for GPT-2 small at T=1024
    assert gpt_flops_per_token(cfg, n - 1024 * 768) == pytest.approx(6 * (n - 1024 * 768) + 12 * 12 * 1024 * 768)


def test_mfu_peaks_tell_h100_pcie_from_sxm():
    from hotloop.benchmarks import peak_flops

    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA H200") == 989e12 and peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_flops("Some Future GPU") is None


def test_overhead_probe_counts_ops():
    from hotloop.benchmarks.overhead import LOOPS, ops_per_step

    assert ops_per_step(LOOPS["bare"], steps=20) == pytest.approx(21, abs=1)
    assert ops_per_step(LOOPS["hotloop"], steps=20) <= 40  # the host-cost target of issue 13


@pytest.mark.parametrize("variant", ["hotloop-graphs", "hotloop-step-graph", "hotloop-eager"])
def test_cuda_graph_variants_are_refused_off_cuda_before_any_variant_runs(variant):
    from hotloop.errors import ConfigError

    with pytest.raises(ConfigError, match=f"`{variant}` .*needs --device cuda"):
        run_bench("mlp", "cpu", ["plain", variant], rounds=1, steps=5)
