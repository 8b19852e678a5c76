"""`hotloop bench`: hotloop against a plain loop, Lightning and Accelerate, in one process, interleaved.

Rounds run the variants A B C D, A B C D, ... so drift of a noisy machine (thermal, other load) hits
all of them alike; each variant's steps/s is the median over rounds. Host reads per step are counted
the same way for every variant, in a separate untimed pass: a `TorchFunctionMode` on the CPU,
`torch.cuda.set_sync_debug_mode` on CUDA.

    hotloop bench --workload mlp --device cpu --json bench/mlp-cpu.json
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import warnings
from pathlib import Path
from typing import Any

import torch

from hotloop.benchmarks.variants import CUDA_GRAPH_VARIANTS, DEFAULT_VARIANTS, REQUIRES, VARIANTS, Window
from hotloop.benchmarks.workloads import make_workload
from hotloop.doctor import HostReadCounter
from hotloop.errors import ConfigError

# Dense bf16 tensor-core peaks (TFLOP/s, NVIDIA datasheets) for MFU, most specific name first; unknown devices
# get no MFU rather than a guess. H100 PCIe has fewer SMs and lower clocks than the SXM part (756 vs 989).
PEAK_BF16_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0),
                    ("A100", 312.0), ("L40S", 362.0), ("L4", 121.0), ("A10", 125.0)]  # fmt: skip

DEFAULT_STEPS = {("mlp", "cpu"): 300, ("cnn", "cpu"): 30, ("gpt", "cpu"): 20, ("mlp", "cuda"): 1000,
                 ("cnn", "cuda"): 300, ("gpt", "cuda"): 200, ("gpt2", "cuda"): 30}  # fmt: skip


def available(variant: str) -> bool:
    mod = REQUIRES.get(variant)
    return mod is None or importlib.util.find_spec(mod) is not None


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        import os

        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return float("nan")


def _peak_bf16(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    return peak_flops(torch.cuda.get_device_name(device))


def peak_flops(device_name: str) -> float | None:
    """Dense bf16 peak FLOP/s of a GPU by its name ("NVIDIA H100 80GB HBM3" is the SXM part), or None."""
    return next((v * 1e12 for k, v in PEAK_BF16_TFLOPS if k in device_name), None)


def _count_reads(fn: Any, w: Any, device: torch.device, warmup: int, steps: int) -> float:
    """Host reads per measured step, counted the same way for every variant."""
    if device.type == "cuda":
        # Sync debug mode is on for the measured steps only (Window turns it on and off), so compilation,
        # warmup and the window's own two synchronisations are not counted.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            window = Window(device, warmup, steps, cuda_syncs=True)
            try:
                fn(w, device, window)
            finally:
                torch.cuda.set_sync_debug_mode(0)
        n = sum("synchroniz" in str(c.message).lower() for c in caught)
        return n / steps
    counter = HostReadCounter()
    window = Window(device, warmup, steps, counter=counter)
    with counter:
        fn(w, device, window)
    return sum(1 for r in counter.reads if r.label == "window") / steps


def check_variants(variants: list[str] | None, device: str) -> None:
    """Each asked-for variant exists, and the CUDA-graph variants only on CUDA: refused before any
    variant runs, for the CLI and for `run_bench` alike."""
    for v in variants or []:
        if v not in VARIANTS:
            raise ConfigError(f"unknown variant `{v}`; choose from {', '.join(VARIANTS)}")
        if v in CUDA_GRAPH_VARIANTS and not device.startswith("cuda"):
            raise ConfigError(f"variant `{v}` (CUDA graphs) needs --device cuda")


def run_bench(
    workload: str,
    device: str = "cpu",
    variants: list[str] | None = None,
    rounds: int = 5,
    steps: int | None = None,
    warmup: int = 10,
    json_path: str | None = None,
    say: Any = print,
) -> list[dict[str, Any]]:
    dev = torch.device(device)
    w = make_workload(workload, device)
    steps = steps or DEFAULT_STEPS[(workload, dev.type)]
    check_variants(variants, device)
    names = [v for v in (variants or DEFAULT_VARIANTS) if available(v)]
    skipped = [v for v in (variants or DEFAULT_VARIANTS) if v not in names]
    if skipped:
        say(f"not installed, skipped: {', '.join(skipped)} (pip install 'hotloop[bench]')")
    speeds: dict[str, list[float]] = {v: [] for v in names}
    mem: dict[str, float] = {v: 0.0 for v in names}
    for r in range(rounds):
        for v in names:
            window = Window(dev, warmup, steps)
            VARIANTS[v](w, dev, window)
            speeds[v].append(steps / window.seconds)
            used = window.peak_mb if dev.type == "cuda" else _rss_mb()
            mem[v] = max(mem[v], used)
        say(f"round {r + 1}/{rounds}: " + ", ".join(f"{v} {speeds[v][-1]:.1f}" for v in names) + " steps/s")
    reads = {v: _count_reads(VARIANTS[v], w, dev, warmup, min(steps, 100)) for v in names}
    peak = _peak_bf16(dev)
    base = statistics.median(speeds["plain"]) if "plain" in speeds else None
    rows = []
    for v in names:
        sps = statistics.median(speeds[v])
        row: dict[str, Any] = {"workload": workload, "variant": v, "device": dev.type, "steps_per_s": round(sps, 3)}
        if w.tokens_per_sample:
            row["tokens_per_s"] = round(sps * w.batch_size * w.tokens_per_sample, 1)
        if w.flops_per_step and peak:
            row["mfu"] = round(sps * w.flops_per_step / peak, 4)
        row["ratio_vs_plain"] = round(sps / base, 3) if base else None
        row["host_reads_per_step"] = round(reads[v], 4)
        row["peak_mem_mb"] = round(mem[v], 1)
        row["rounds"] = rounds
        row["steps"] = steps
        rows.append(row)
    say(format_table(rows))
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(rows, indent=1) + "\n")
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    cols = ["variant", "steps_per_s", "tokens_per_s", "mfu", "ratio_vs_plain", "host_reads_per_step", "peak_mem_mb"]
    cols = [c for c in cols if any(c in r for r in rows)]
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    head = "  ".join(c.ljust(widths[c]) for c in cols)
    lines = [head, "-" * len(head)]
    lines += ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols) for r in rows]
    return "\n".join(lines)
