"""`make gpu-check`: prove every CUDA capability on the GPU at hand, in one command, in a few minutes.

    python3 tests/gpu/check.py [--no-bench | --quick]      (after `pip install --no-deps --no-build-isolation -e .`)

Runs `tests/gpu/` (each test records its measured figure with `record_property("figure", ...)`), then
`hotloop bench --workload gpt2` and `--workload mlp` on CUDA, and prints one table: capability,
pass/fail/skip, figure. With `$OUT` set, the same goes to `$OUT/gpu-check.json` and the bench rows to
`$OUT/bench-gpt2-cuda.json` / `$OUT/bench-mlp-cuda.json`, ready for `bench/RESULTS.md`.
Exit status: 0 when every capability passed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class Collector:
    """A pytest plugin keeping each test's outcome, duration and recorded figure."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            figure = dict(report.user_properties).get("figure", "")
            if report.outcome == "failed":
                figure = str(report.longrepr).strip().splitlines()[-1][:160] if report.longrepr else figure
            elif report.outcome == "skipped" and isinstance(report.longrepr, tuple):
                figure = report.longrepr[2][:160]
            name = report.nodeid.split("::", 1)[-1]
            self.rows.append({"capability": name, "result": report.outcome, "figure": figure,
                              "seconds": round(report.duration, 1)})  # fmt: skip


def run_tests() -> list[dict[str, Any]]:
    import pytest

    collector = Collector()
    pytest.main([str(ROOT / "tests" / "gpu"), "-q", "-p", "no:cacheprovider"], plugins=[collector])
    return collector.rows


def run_benches(out: Path | None, quick: bool = False) -> list[dict[str, Any]]:
    """Each benchmark in a fresh process: the tests leave process-wide state behind (a `deterministic=True`
    run turns on `torch.use_deterministic_algorithms`), which slowed gpt2 from 25.9 to 16.5 steps/s on an
    H100 when the benches ran in the tests' process."""
    from hotloop.benchmarks.variants import CUDA_GRAPH_VARIANTS

    rows: list[dict[str, Any]] = []
    for workload, rounds in (("gpt2", 1), ("mlp", 2)) if quick else (("gpt2", 3), ("mlp", 5)):
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            path = (out or Path(tmp)) / f"bench-{workload}-cuda.json"
            code = "from hotloop.benchmarks import run_bench; "
            # with the opt-in CUDA-graph variants for the launch-bound mlp
            variants = "None" if workload == "gpt2" else "DEFAULT_VARIANTS + list(CUDA_GRAPH_VARIANTS)"
            code = "from hotloop.benchmarks.variants import CUDA_GRAPH_VARIANTS, DEFAULT_VARIANTS; " + code
            code += f"run_bench({workload!r}, 'cuda', {variants}, rounds={rounds}, json_path={str(path)!r})"
            proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE, text=True)
            got = json.loads(path.read_text()) if proc.returncode == 0 and path.exists() else None
        if got is None:  # a failed bench is a row, not the end of the check
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append({"capability": f"bench {workload}", "result": "failed", "figure": tail[:160],
                         "seconds": round(time.perf_counter() - t0, 1)})  # fmt: skip
            continue
        by = {r["variant"]: r for r in got}
        h = by.get("hotloop", {})
        parts = [f"{h.get('steps_per_s')} steps/s", f"{h.get('ratio_vs_plain')}x plain"]
        if "mfu" in h:
            parts.append(f"MFU {h['mfu']:.1%}")
        if "lightning" in by and h:
            parts.append(f"{h['steps_per_s'] / by['lightning']['steps_per_s']:.2f}x lightning")
        for v in CUDA_GRAPH_VARIANTS:  # their rows, when the bench ran them
            if v in by and "lightning" in by:
                g = by[v]["steps_per_s"]
                parts.append(f"{v} {g} steps/s, {g / by['lightning']['steps_per_s']:.2f}x lightning")
        rows.append({"capability": f"bench {workload}", "result": "passed", "figure": ", ".join(parts),
                     "seconds": round(time.perf_counter() - t0, 1), "rows": got})  # fmt: skip
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    w = max(len(r["capability"]) for r in rows)
    lines = [f"{'capability':<{w}}  result   figure", "-" * (w + 60)]
    lines += [f"{r['capability']:<{w}}  {r['result']:<7}  {r['figure']}" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-bench", action="store_true", help="skip the gpt2/mlp benchmarks")
    parser.add_argument("--quick", action="store_true", help="one gpt2 round and two mlp rounds (about 2 min)")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device here; run it on a GPU machine", file=sys.stderr)
        return 2
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    device = torch.cuda.get_device_name(0)
    print(f"gpu-check on {device}, torch {torch.__version__}, CUDA {torch.version.cuda}", flush=True)
    rows = run_tests()
    if not args.no_bench:
        rows += run_benches(out, quick=args.quick)
    print(table(rows))
    summary = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
               "date": time.strftime("%Y-%m-%d"), "rows": rows}  # fmt: skip
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu-check.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if all(r["result"] in ("passed",) for r in rows) else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
