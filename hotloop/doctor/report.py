"""`hotloop doctor`: run a training script in a child interpreter under the detector, then explain it.

    hotloop doctor [--steps N] [--json FILE] [--trace FILE] -- python train.py [ARGS...]

Each host read is reported at the user's line with how often it happens ("every step", "every 10th
step", "once"), next to a per-step time breakdown and recommendations that name their rule and the
number that triggered them. Static findings of `hotloop lint` on the script are added as evidence too.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from typing import Any

READ_FIX = {
    "item": "keep it on the device (`running += x.detach()`) and read once per log interval",
    "__float__": "keep it on the device and read once per log interval",
    "__bool__": "use torch.where / decide at a log boundary instead of branching on a tensor",
    "__format__": "format an already-read value at a log boundary",
    "__repr__": "print an already-read value at a log boundary",
    "tolist": "concatenate on the device and copy once per interval",
    "boolean-mask index": "use torch.where(mask, x, 0) (static shape)",
    "nonzero": "use a mask with torch.where (static shape)",
}


def frequency(labels: list[int], steps: int) -> str:
    """'every step', 'every 10th step', 'once', or 'N times' from the step labels of a site's reads."""
    if len(labels) == 1:
        return "once"
    uniq = sorted(set(labels))
    if len(uniq) == 1:
        return f"{len(labels)} times in one step"  # a burst: a loop over a tensor's elements at one boundary
    if steps and len(uniq) >= max(1, steps - 1) and len(labels) >= len(uniq):
        per = len(labels) / len(uniq)
        return "every step" if per < 1.5 else f"{round(per)} times every step"
    if len(uniq) >= 2:
        gaps = {b - a for a, b in zip(uniq, uniq[1:], strict=False)}
        if len(gaps) == 1:
            k = gaps.pop()
            suffix = {1: "st", 2: "nd", 3: "rd"}.get(k % 10 if k % 100 not in (11, 12, 13) else 0, "th")
            return "every step" if k == 1 else f"every {k}{suffix} step"
    return f"{len(labels)} times"


def worker_frequency(labels: list[int], steps: int) -> str:
    """Frequency of a site in DataLoader workers, whose step labels restart with each epoch's workers."""
    per = len(labels) / steps if steps else 0.0
    if per >= 0.9:
        return "every step" if per < 1.5 else f"{round(per)} times every step"
    return frequency(labels, steps)


def _marked(path: str, line: int) -> bool:
    """The line carries `# sync: <why>`: a read placed at a boundary on purpose."""
    import linecache

    return "# sync:" in linecache.getline(path, line)


HOST_ONLY = "host tensor (no device sync)"


SCALAR_READS = {"item", "__int__", "__float__", "__bool__", "__index__", "__format__", "__complex__"}
"""Reads of one element: many of them in one step are a Python loop over a device tensor's elements."""


def _spread(s: dict[str, Any]) -> bool:
    """Half a read per step or more, and not all in one step (a burst at one boundary is not every step)."""
    return (s["per_step"] or 0) >= 0.5 and not s["frequency"].endswith("in one step")


def _site_order(s: dict[str, Any]) -> tuple[bool, bool, int]:
    """Device syncs before host-only reads; among them the reads of every step before those at boundaries."""
    per_step = s["frequency"].startswith("every step") or _spread(s)
    return s.get("where") == HOST_ONLY, not per_step, -s["count"]


def build_report(raw: dict[str, Any]) -> dict[str, Any]:
    steps = raw["steps"]
    groups: dict[tuple[str, int, str, bool, bool], list[int]] = defaultdict(list)
    for r in raw["reads"]:
        op = r["op"].replace(" (aten)", "")
        groups[(r["file"], r["line"], op, bool(r.get("worker")), bool(r.get("host_only")))].append(r["step"])
    sites = []
    for (f, line, op, worker, host_only), labels in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        site = {
            "file": f,
            "line": line,
            "op": op,
            "count": len(labels),
            "per_step": round(len(labels) / steps, 4) if steps else None,
            "frequency": (worker_frequency if worker else frequency)(labels, steps),
            "boundary": _marked(f, line),
        }
        if worker:
            site["where"] = "dataloader worker"
        if host_only:
            site["where"] = HOST_ONLY
        sites.append(site)  # fmt: skip
    # device syncs before host-only reads; among them, the ones in every step first
    sites.sort(key=_site_order)
    timings = raw["timings"][1:] or raw["timings"]  # the first step carries one-time costs
    keys = ("data", "forward", "backward", "optimizer", "other")
    breakdown = {k: round(statistics.mean(t[k] for t in timings) * 1e3, 3) for k in keys} if timings else {}
    total = sum(breakdown.values()) or 1.0
    recs = []
    for s in sites:
        if s["boundary"] or s.get("where") == HOST_ONLY:
            continue  # an intended boundary read (`# sync:` marker), or no device sync at all
        if s.get("where") == "dataloader worker":
            recs.append(
                {
                    "rule": "worker-read",
                    "message": f"{os.path.basename(s['file'])}:{s['line']} `{s['op']}` "
                    f"{s['frequency']} in a DataLoader worker: not a device sync, but Python work per sample; "
                    "keep samples as tensors and let collate stack them",
                    "evidence": f"{s['count']} reads",
                }
            )
            continue
        if s["op"] == "non_blocking copy from unpinned memory":
            recs.append(
                {
                    "rule": "HL012",
                    "message": f"{os.path.basename(s['file'])}:{s['line']} non_blocking=True "
                    "from pageable memory is a synchronous copy: pin the source (DataLoader(pin_memory=True) "
                    "or tensor.pin_memory())",
                    "evidence": f"{s['count']} copies in {steps} steps",
                }
            )
            continue
        where = f"{os.path.basename(s['file'])}:{s['line']} `{s['op']}`"
        periodic = s["frequency"].startswith("every") and not s["frequency"].endswith("every step")
        if s["frequency"].endswith("every step") or not periodic and _spread(s):
            fix = READ_FIX.get(s["op"], "move it behind a log boundary or keep it on the device")
            recs.append({"rule": "HL001", "message": f"{where} {s['frequency']}: a host-device sync in every step; "
                         f"{fix}", "evidence": f"{s['count']} reads in {steps} steps"})  # fmt: skip
        elif s["frequency"].endswith("in one step") and s["count"] >= 10 and s["op"] in SCALAR_READS:
            recs.append({"rule": "element-reads", "message": f"{where} {s['frequency']}: a loop that reads a "
                         "device tensor one element at a time, one sync per element; copy it to the host once "
                         "(`.tolist()` or `.cpu()`) and loop over the copy",
                         "evidence": f"{s['count']} reads in one step"})  # fmt: skip
        elif s["frequency"].startswith("every"):  # a boundary the script chose: the cost is already amortised
            recs.append({"rule": "boundary-read", "message": f"{where} {s['frequency']}, at a boundary the script "
                         "chose: one sync per interval, already amortised; nothing to change unless the interval "
                         "is short (then log less often, or accumulate on the device and read once)",
                         "evidence": f"{s['count']} reads in {steps} steps"})  # fmt: skip
    # Per-step syncs first: they cost every step; boundary reads are listed after them.
    recs.sort(key=lambda r: r["rule"] == "boundary-read")
    if breakdown and breakdown["data"] / total > 0.3:
        recs.append({"rule": "data", "message": "the step waits on data: pass in-memory tensors to hotloop (sliced "
                     "a batch at a time) or raise num_workers, with pin_memory=True and persistent_workers=True",
                     "evidence": f"data wait {100 * breakdown['data'] / total:.0f}% of step time"})  # fmt: skip
    recs += _runtime_recommendations(raw, steps)
    if raw.get("script") and os.path.isfile(raw["script"]):
        from hotloop.lint import lint_paths

        for f in lint_paths([raw["script"]], select=["HL009", "HL010", "HL011", "HL013", "HL014", "HL015", "HL016",
                                                     "HL017", "HL018", "HL021"]):  # fmt: skip
            recs.append({"rule": f.code, "message": f"{os.path.basename(f.path)}:{f.line} {f.message}",
                         "evidence": "static (hotloop lint)"})  # fmt: skip
    if raw.get("gpu"):
        g = raw["gpu"]
        if g.get("idle_pct", 0) > 30:
            recs.append({"rule": "gpu-idle", "message": "the GPU waits on the host: remove per-step syncs, keep data "
                         "on the device or prefetch it, and try torch.compile(mode='reduce-overhead')",
                         "evidence": f"GPU idle {g['idle_pct']}% over steps 2-4 (torch.profiler)"})  # fmt: skip
    return {"steps": steps, "sync_sites": sites, "breakdown": breakdown, "recommendations": recs,
            "gpu": raw.get("gpu") or {}, "trace": raw.get("trace"),
            "exit_code": raw["exit_code"], "crashed": raw.get("crashed"),
            "compiled": bool(raw.get("compiled")), "manual_steps": bool(raw.get("manual_steps"))}  # fmt: skip


def _runtime_recommendations(raw: dict[str, Any], steps: int) -> list[dict[str, str]]:
    """The seeds' bottleneck table, each row triggered by something the hooks measured."""
    recs = []
    for o in raw.get("optimizers", []):
        if o["device"] == "cuda" and o["supports_fused"] and not o["fused"]:
            recs.append(
                {
                    "rule": "fused-optimizer",
                    "message": f"{o['class']} on CUDA without fused=True: one "
                    "kernel launch per parameter tensor (and GradScaler.step reads found_inf on the host); "
                    f"use {o['class']}(..., fused=True)",
                    "evidence": f"{o['class']}(fused=False) on cuda",
                }
            )
    fp32 = raw.get("fp32_matmuls", {}).get("cuda", 0)
    if raw.get("bf16_gpu") and fp32 and steps:
        recs.append({"rule": "autocast", "message": "float32 matrix multiplies on a GPU with bf16: wrap the forward "
                     "in torch.autocast('cuda', dtype=torch.bfloat16)",
                     "evidence": f"{fp32 / steps:.0f} fp32 matmuls per step"})  # fmt: skip
    if raw.get("zero_grad_keep"):
        recs.append({"rule": "HL013", "message": "zero_grad(set_to_none=False) writes zeros into every gradient "
                     "each step; the default set_to_none=True frees them instead",
                     "evidence": f"{raw['zero_grad_keep']} calls"})  # fmt: skip
    if raw.get("eval_forward_with_grad"):
        recs.append({"rule": "HL018", "message": "a model in eval() mode ran forward with autograd on (validation "
                     "or a teacher without torch.no_grad()): every activation is kept for a backward that never "
                     "comes; wrap it in torch.no_grad()",
                     "evidence": f"{raw['eval_forward_with_grad']} eval-mode forwards with grad enabled"})  # fmt: skip
    crashed = raw.get("crashed") or ""
    if "Inference tensors cannot be saved for backward" in crashed:
        recs.append({"rule": "teacher-inference-mode", "message": "a tensor made under torch.inference_mode() "
                     "(typically teacher logits) fed an operation that needs a gradient (a learnable temperature): "
                     "run the teacher under torch.no_grad() instead", "evidence": crashed[:200]})  # fmt: skip
    return recs


def format_report(rep: dict[str, Any]) -> str:
    if rep.get("manual_steps"):  # no torch.optim optimizer: each backward() ended a step
        head = f"{rep['steps']} steps observed (no torch.optim optimizer: each backward() counted as a step)"
    else:
        head = f"{rep['steps']} optimizer steps observed"
    lines = ["", f"hotloop doctor: {head}"]
    if rep.get("crashed"):
        lines.append(f"the script crashed ({rep['crashed']}); this is what was seen until then")
    if rep.get("compiled"):
        lines.append("torch.compile stayed active (timings are the compiled script's): reads at the Python level are "
                     "shown, reads inside compiled graphs and the fp32-matmul count are not")  # fmt: skip
    if rep["sync_sites"]:
        lines.append("host reads (each a device sync on CUDA):")
        for s in rep["sync_sites"]:
            mark = "  (boundary: # sync:)" if s["boundary"] else ""
            if s.get("where") == HOST_ONLY:
                mark += f"  [{HOST_ONLY}]"
            lines.append(f"  {s['file']}:{s['line']}  {s['op']:<22} {s['count']:>6}x  {s['frequency']}{mark}")
    else:
        lines.append("host reads: none")
    if rep["breakdown"]:
        b = rep["breakdown"]
        total = sum(b.values()) or 1.0
        lines.append("per step (ms): " + ", ".join(f"{k} {v:.2f} ({100 * v / total:.0f}%)" for k, v in b.items()))
    if rep.get("gpu"):
        lines.append(f"GPU busy {rep['gpu']['busy_pct']}%, idle {rep['gpu']['idle_pct']}% (torch.profiler, steps 2-4)")
    if rep.get("trace"):
        lines.append(f"Chrome trace: {rep['trace']} (open in chrome://tracing or ui.perfetto.dev)")
    for r in rep["recommendations"]:
        lines.append(f"  [{r['rule']}] {r['message']} ({r['evidence']})")
    return "\n".join(lines)


def run_doctor(cmd: list[str], steps: int = 0, json_path: str | None = None, trace: str | None = None) -> int:
    """Run `cmd` (python SCRIPT ... or python -m MODULE ...) under the detector; returns its exit code."""
    trace = os.path.abspath(trace) if trace else ""
    with tempfile.TemporaryDirectory() as d:
        raw_path = os.path.join(d, "raw.json")
        child = [sys.executable, "-m", "hotloop.doctor.child", raw_path, str(steps), trace, "--", *cmd]
        proc = subprocess.run(child)
        if not os.path.isfile(raw_path):
            print("hotloop doctor: the script ended before the detector could report", file=sys.stderr)
            return proc.returncode or 1
        with open(raw_path) as f:
            raw = json.load(f)
        for name in sorted(os.listdir(d)):  # reads streamed by DataLoader workers
            if name.startswith("raw.json.worker-"):
                with open(os.path.join(d, name)) as f:
                    raw["reads"] += [{**json.loads(line), "worker": True} for line in f if line.endswith("\n")]
        rep = build_report(raw)
    print(format_report(rep))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rep, f, indent=1)
    return proc.returncode
