"""`hotloop doctor`: run a training script in a child interpreter under the detector, then explain it.

    hotloop doctor [--steps N] [--json FILE] -- python train.py [ARGS...]

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


def _marked(path: str, line: int) -> bool:
    """The line carries `# sync: <why>`: a read placed at a boundary on purpose."""
    import linecache

    return "# sync:" in linecache.getline(path, line)


def build_report(raw: dict[str, Any]) -> dict[str, Any]:
    steps = raw["steps"]
    groups: dict[tuple[str, int, str], list[int]] = defaultdict(list)
    for r in raw["reads"]:
        op = r["op"].replace(" (aten)", "")
        groups[(r["file"], r["line"], op)].append(r["step"])
    sites = [
        {"file": f, "line": line, "op": op, "count": len(labels), "per_step": round(len(labels) / steps, 4) if steps
         else None, "frequency": frequency(labels, steps), "boundary": _marked(f, line)}
        for (f, line, op), labels in sorted(groups.items(), key=lambda kv: -len(kv[1]))
    ]  # fmt: skip
    timings = raw["timings"][1:] or raw["timings"]  # the first step carries one-time costs
    keys = ("data", "forward", "backward", "optimizer", "other")
    breakdown = {k: round(statistics.mean(t[k] for t in timings) * 1e3, 3) for k in keys} if timings else {}
    total = sum(breakdown.values()) or 1.0
    recs = []
    for s in sites:
        if s["boundary"]:
            continue  # an intended read at a log/eval/checkpoint boundary (`# sync:` marker)
        if s["frequency"].startswith("every") or (s["per_step"] or 0) >= 0.5:
            fix = READ_FIX.get(s["op"], "move it behind a log boundary or keep it on the device")
            recs.append({"rule": "HL001", "message": f"{os.path.basename(s['file'])}:{s['line']} `{s['op']}` "
                         f"{s['frequency']}: a host-device sync; {fix}",
                         "evidence": f"{s['count']} reads in {steps} steps"})  # fmt: skip
    if breakdown and breakdown["data"] / total > 0.3:
        recs.append({"rule": "data", "message": "the step waits on data: pass in-memory tensors to hotloop (sliced "
                     "a batch at a time) or raise num_workers, with pin_memory=True and persistent_workers=True",
                     "evidence": f"data wait {100 * breakdown['data'] / total:.0f}% of step time"})  # fmt: skip
    if raw.get("script") and os.path.isfile(raw["script"]):
        from hotloop.lint import lint_paths

        for f in lint_paths([raw["script"]], select=["HL009", "HL010", "HL011", "HL013", "HL014", "HL015", "HL016",
                                                     "HL017", "HL018", "HL021"]):  # fmt: skip
            recs.append({"rule": f.code, "message": f"{os.path.basename(f.path)}:{f.line} {f.message}",
                         "evidence": "static (hotloop lint)"})  # fmt: skip
    return {"steps": steps, "sync_sites": sites, "breakdown": breakdown, "recommendations": recs,
            "exit_code": raw["exit_code"], "crashed": raw.get("crashed")}  # fmt: skip


def format_report(rep: dict[str, Any]) -> str:
    lines = ["", f"hotloop doctor: {rep['steps']} optimizer steps observed"]
    if rep.get("crashed"):
        lines.append(f"the script crashed ({rep['crashed']}); this is what was seen until then")
    if rep["sync_sites"]:
        lines.append("host reads (each a device sync on CUDA):")
        for s in rep["sync_sites"]:
            mark = "  (boundary: # sync:)" if s["boundary"] else ""
            lines.append(f"  {s['file']}:{s['line']}  {s['op']:<22} {s['count']:>6}x  {s['frequency']}{mark}")
    else:
        lines.append("host reads: none")
    if rep["breakdown"]:
        b = rep["breakdown"]
        total = sum(b.values()) or 1.0
        lines.append("per step (ms): " + ", ".join(f"{k} {v:.2f} ({100 * v / total:.0f}%)" for k, v in b.items()))
    for r in rep["recommendations"]:
        lines.append(f"  [{r['rule']}] {r['message']} ({r['evidence']})")
    return "\n".join(lines)


def run_doctor(cmd: list[str], steps: int = 0, json_path: str | None = None) -> int:
    """Run `cmd` (python SCRIPT ... or python -m MODULE ...) under the detector; returns its exit code."""
    with tempfile.TemporaryDirectory() as d:
        raw_path = os.path.join(d, "raw.json")
        proc = subprocess.run([sys.executable, "-m", "hotloop.doctor.child", raw_path, str(steps), "--", *cmd])
        if not os.path.isfile(raw_path):
            print("hotloop doctor: the script ended before the detector could report", file=sys.stderr)
            return proc.returncode or 1
        with open(raw_path) as f:
            rep = build_report(json.load(f))
    print(format_report(rep))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rep, f, indent=1)
    return proc.returncode
