"""`hotloop report RUN_DIR [RUN_DIR ...]`: one self-contained HTML page a person would rather look at than read.

    hotloop report runs/gpt                       -> runs/gpt/report.html (+ report_*.png beside it)
    hotloop report runs/a runs/b --out cmp.html   -> the runs' curves overlaid

Everything comes from what a run directory already holds: metrics.jsonl (the rows and the events:
rollbacks, skipped non-finite steps, resumes, preemptions), config.yaml and the checkpoint manifests.
The page opens with a verdict - "did this run go well?" - built from the rows: the initial loss against
ln(C), loss spikes and rollbacks, skipped steps, the share of clipped steps against the seeds' 10%, the
time spent in evaluation, throughput stability, the final and the best validation loss. Then the plots
(matplotlib, an optional extra: PNGs beside the page and embedded in it as data URIs, so the page needs
no network, no script and no font), the resolved config and the checkpoints with their hashes. A
Content-Security-Policy forbids every network request.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import statistics
from pathlib import Path
from typing import Any

import yaml

from hotloop.errors import ConfigError

CSS = """body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
font-variant-numeric:tabular-nums}th{background:#f4f4f4}.ok{color:#1a7f37}.warn{color:#b35900}.bad{color:#c62828}
img{max-width:100%;border:1px solid #eee;margin:6px 0}pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:8px}"""


def read_run(run_dir: Path) -> dict[str, Any]:
    """Rows, events, config and checkpoints of a run directory."""
    if not (run_dir / "metrics.jsonl").is_file():
        raise ConfigError(f"{run_dir} holds no metrics.jsonl: pass the run_dir of a `hotloop fit` run")
    rows, events = [], []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line torn by a kill
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            continue  # not a row hotloop wrote
        (events if "event" in row else rows).append(row)
    config: dict[str, Any] = {}
    if (run_dir / "config.yaml").is_file():
        config = yaml.safe_load((run_dir / "config.yaml").read_text()) or {}
    from hotloop.checkpoint import best_checkpoint

    key = config.get("keep_best") if isinstance(config, dict) else None
    best = best_checkpoint(run_dir, key, config.get("best_mode", "min")) if key else None
    checkpoints = []
    for m in sorted((run_dir / "checkpoints").glob("step_*.json")):
        try:
            manifest = json.loads(m.read_text())
            files = manifest.get("files", {}) if isinstance(manifest, dict) else {}
            if not isinstance(files, dict):
                continue
            files = {n: f for n, f in files.items() if isinstance(f, dict)}
            is_best = best is not None and best.name.split(".")[0] == m.stem
            label = f"best {key} = {manifest.get('metrics', {}).get(key):.4g}" if is_best else ""
            checkpoints.append({"name": m.stem, "step": manifest.get("step"), "best": label, "files": files})
        except (ValueError, TypeError, AttributeError):
            continue
    return {
        "dir": run_dir,
        "name": run_dir.name,
        "rows": rows,
        "events": events,
        "config": config,
        "checkpoints": checkpoints,
    }


def _num(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if v in ("nan", "inf", "-inf"):
        return float(v)
    return None


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], _num(r[key])) for r in rows if key in r and _num(r[key]) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def verdict(run: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(status, check, finding) lines answering "did this run go well?" (status: ok, warn, bad)."""
    rows, events, cfg = run["rows"], run["events"], run["config"]
    out: list[tuple[str, str, str]] = []
    first = next((r["initial_loss"] for r in rows if "initial_loss" in r), None)
    if first is None:
        first = next((r["loss"] for r in rows if _num(r.get("loss")) is not None), None)
    classes = cfg.get("num_classes")
    if first is not None and classes:
        expected = math.log(classes)
        off = abs(first - expected) / expected
        out.append(
            (
                "ok" if off <= 0.2 else "bad",
                "initial loss",
                f"{first:.3f} against ln({classes}) = {expected:.3f} ({off:.0%} off)",
            )
        )
    rollbacks = [e for e in events if e.get("event") == "rollback"]
    out.append(
        (
            "ok" if not rollbacks else "warn",
            "loss spikes",
            f"{len(rollbacks)} rollback(s)" + "".join(f"; step {e['from_step']}: {e['reason']}" for e in rollbacks[:3]),
        )
    )
    skipped = sorted({s for r in rows for s in r.get("nonfinite_steps", [])})
    out.append(
        (
            "ok" if not skipped else "bad",
            "non-finite steps",
            f"{len(skipped)} skipped" + (f" (first at step {skipped[0]})" if skipped else ""),
        )
    )
    _, clip = _series(rows, "clip_frac")
    if clip:
        mean = statistics.mean(clip)
        out.append(
            (
                "ok" if mean <= 0.1 else "warn",
                "gradient clipping",
                f"{mean:.0%} of steps clipped (the seeds' threshold: 10%; above it, lower the LR)",
            )
        )
    eval_s = sum(_num(r.get("eval_s")) or 0.0 for r in rows)
    total = max((_num(r.get("elapsed_s")) or 0.0 for r in rows), default=0.0)
    if total > 0:
        share = eval_s / total
        out.append(
            (
                "ok" if share <= 0.15 else "warn",
                "time in evaluation",
                f"{eval_s:.1f} s of {total:.1f} s ({share:.0%}); raise eval_every if this is high",
            )
        )
    _, tput = _series(rows, "samples_per_s")
    steady = tput[1:] if len(tput) > 2 else tput
    if len(steady) >= 2 and statistics.mean(steady) > 0:
        cv = statistics.pstdev(steady) / statistics.mean(steady)
        out.append(
            (
                "ok" if cv <= 0.15 else "warn",
                "throughput stability",
                f"{statistics.mean(steady):,.1f} samples/s, varying {cv:.0%} between log rows",
            )
        )
    vs, vl = _series(rows, "val_loss")
    if vl:
        best = min(range(len(vl)), key=lambda i: vl[i])
        status = "ok" if vl[-1] <= vl[best] * 1.02 else "warn"
        out.append(
            (status, "validation loss", f"final {vl[-1]:.4f} (step {vs[-1]}), best {vl[best]:.4f} (step {vs[best]})")
        )
    return out


def _plots(runs: list[dict[str, Any]], out_dir: Path, stem: str) -> list[tuple[str, Path, bytes]] | None:
    """The report's figures as (title, png path, png bytes), or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    byte_level = all(r["config"].get("recipe") in ("gpt", "distill") for r in runs)
    panels = [
        ("loss", ["loss", "val_loss"], "nats"),
        ("learning rate", ["lr"], ""),
        ("gradient norm", ["grad_norm"], ""),
        ("throughput", ["tokens_per_s", "samples_per_s", "mfu"], ""),
        ("peak memory", ["peak_mem_mb"], "MiB"),
    ]
    figures = []
    for title, keys, unit in panels:
        if not any(_series(r["rows"], k)[0] for r in runs for k in keys):
            continue
        fig, ax = plt.subplots(figsize=(6.4, 3.4), dpi=110)
        for run in runs:
            for k in keys:
                xs, ys = _series(run["rows"], k)
                if not xs or (k == "samples_per_s" and _series(run["rows"], "tokens_per_s")[0]):
                    continue
                if k == "mfu":
                    ax2 = ax.twinx()
                    ax2.plot(xs, [y * 100 for y in ys], "--", label=f"{run['name']} MFU %")
                    ax2.set_ylabel("MFU %")
                    continue
                label = k if len(runs) == 1 else f"{run['name']} {k}"
                ax.plot(xs, ys, marker="o" if k.startswith("val_") else None, ms=3, label=label)
            if title == "gradient norm" and run["config"].get("clip_grad"):
                ax.axhline(run["config"]["clip_grad"], color="grey", ls=":", label="clip_grad")
            _markers(ax, run)
        if title == "loss" and byte_level:
            lo, hi = ax.get_ylim()
            sec = ax.secondary_yaxis("right", functions=(lambda v: v / math.log(2), lambda v: v * math.log(2)))
            sec.set_ylabel("bits per byte")
            ax.set_ylim(lo, hi)
        ax.set_title(title)
        ax.set_xlabel("step")
        if unit:
            ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        path = out_dir / f"{stem}_{title.replace(' ', '_')}.png"
        path.write_bytes(buf.getvalue())
        figures.append((title, path, buf.getvalue()))
    return figures


def _markers(ax: Any, run: dict[str, Any]) -> None:
    """Vertical lines where a rollback, a skipped step, a resume or a preemption happened."""
    styles = {
        "rollback": ("tab:red", "rollback"),
        "resume": ("tab:green", "resume"),
        "preempt": ("tab:purple", "preempted"),
    }
    seen: set[str] = set()
    for e in run["events"]:
        color, name = styles.get(e.get("event"), ("grey", e.get("event", "event")))
        ax.axvline(e.get("from_step", e["step"]), color=color, ls="--", lw=1, label=None if name in seen else name)
        seen.add(name)
    for r in run["rows"]:
        for s in r.get("nonfinite_steps", []):
            ax.axvline(s, color="black", ls=":", lw=1, label=None if "skipped" in seen else "skipped (non-finite)")
            seen.add("skipped")


def _table(rows: list[list[Any]], head: list[str]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def write_report(run_dirs: list[str | Path], out: str | Path | None = None) -> Path:
    runs = [read_run(Path(d)) for d in run_dirs]
    out_path = Path(out) if out else runs[0]["dir"] / "report.html"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    figures = _plots(runs, out_path.parent, out_path.stem)
    parts = [f"<h1>hotloop report: {html.escape(', '.join(r['name'] for r in runs))}</h1>"]
    for run in runs:
        v = verdict(run)
        good = all(s == "ok" for s, _, _ in v)
        steps = run["rows"][-1]["step"] if run["rows"] else 0
        parts.append(
            f"<h2>{html.escape(run['name'])}: {'this run went well' if good else 'look at the flagged lines'}"
            f" ({steps} steps)</h2>"
        )
        parts.append(
            _table(
                [[f"<span class='{s}'>{s}</span>", html.escape(c), html.escape(f)] for s, c, f in v],
                ["", "check", "finding"],
            )
        )
    parts.append("<h2>Curves</h2>")
    if figures is None:
        parts.append("<p class='warn'>matplotlib is not installed (pip install 'hotloop[report]'): tables only.</p>")
    else:
        imgs = "".join(
            f"<img alt='{html.escape(t)}' src='data:image/png;base64,{base64.b64encode(b).decode()}'>"
            for t, _, b in figures
        )
        parts.append(f"<div class='grid'>{imgs}</div>")
    for run in runs:
        if run["events"]:
            parts.append(f"<h2>Events: {html.escape(run['name'])}</h2>")
            parts.append(
                _table(
                    [
                        [e["step"], html.escape(str(e["event"])), html.escape(str(e.get("reason", "")))]
                        for e in run["events"]
                    ],
                    ["step", "event", "detail"],
                )
            )
        last = run["rows"][-1] if run["rows"] else {}
        parts.append(f"<h2>Last row: {html.escape(run['name'])}</h2>")
        parts.append(_table([[html.escape(k), html.escape(str(v))] for k, v in last.items()], ["key", "value"]))
        parts.append(f"<h2>Checkpoints: {html.escape(run['name'])}</h2>")
        ck = [
            [
                c["step"],
                html.escape(name),
                meta.get("size"),
                f"<code>{meta.get('sha256', '')[:16]}</code>",
                html.escape(c.get("best", "")),
            ]
            for c in run["checkpoints"]
            for name, meta in c["files"].items()
        ]
        parts.append(_table(ck, ["step", "file", "bytes", "sha256", ""]) if ck else "<p>none kept</p>")
        cfg = yaml.safe_dump(run["config"], sort_keys=False)
        parts.append(f"<h2>Config: {html.escape(run['name'])}</h2><pre>{html.escape(cfg)}</pre>")
    csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
    page = (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{csp}\"><title>hotloop report</title>"
        f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>"
    )
    out_path.write_text(page, encoding="utf-8")
    return out_path
