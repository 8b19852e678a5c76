"""`hotloop lint`: static rules HL001... for the training-loop anti-patterns of the seeds.

    hotloop lint train.py src/          # path:line:col: HL001 message; exit 1 when anything is found
    hotloop lint --format json .        # [{"path", "line", "col", "code", "message", "severity"}]
    hotloop lint --fix .                # the mechanical, safe fixes (HL003, HL012, HL013)
    hotloop lint --explain HL001

Suppress a line with `# noqa: HL001` (or a bare `# noqa`); mark an intended host read with
`# sync: <why>`. `[tool.hotloop.lint]` in pyproject.toml takes `select`, `ignore` and `exclude`.
See `analysis.py` for what counts as a hot loop, `imports.py` for helpers of the script's own project.
"""

from __future__ import annotations

import codecs
import fnmatch
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hotloop.lint.analysis import ModuleInfo
from hotloop.lint.callers import analysed, linting, parse
from hotloop.lint.checks import Edit, check
from hotloop.lint.rules import RULES, explain

__all__ = ["Finding", "FixReport", "RULES", "explain", "fix_report", "fix_source", "lint_paths", "lint_source",
           "load_settings"]  # fmt: skip

NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*))?", re.I)
DEFAULT_EXCLUDE = [".git", ".venv", "venv", "site-packages", "__pycache__", "build", "dist", ".tox", "node_modules",
                   "*.egg-info"]  # fmt: skip


@dataclass
class Finding:
    path: str
    line: int
    col: int
    code: str
    message: str
    severity: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _suppressed(line_text: str, code: str) -> bool:
    m = NOQA.search(line_text)
    if not m:
        return False
    codes = m.group("codes")
    return codes is None or code in {c.strip().upper() for c in codes.split(",")}


def _selected(code: str, select: list[str] | None, ignore: list[str] | None) -> bool:
    if select and not any(code.startswith(s) for s in select):
        return False
    return not (ignore and any(code.startswith(s) for s in ignore))


def _analyse(source: str, path: str) -> tuple[ModuleInfo | None, Finding | None]:
    source = source.removeprefix("\ufeff")  # a byte-order mark decoded as text: Python skips it, so do we
    if (mi := analysed(path, source)) is not None:  # made for this run already (`callers.linting`)
        return mi, None
    try:
        return parse(source, path), None
    except (SyntaxError, ValueError) as e:
        line = getattr(e, "lineno", 1) or 1
        col = (getattr(e, "offset", 1) or 1) - 1
        return None, Finding(path, line, col + 1, "HL000", f"cannot parse: {getattr(e, 'msg', e)}", "error")


def lint_source(
    source: str, path: str = "<string>", select: list[str] | None = None, ignore: list[str] | None = None
) -> list[Finding]:
    mi, err = _analyse(source, path)
    if err is not None:
        return [err] if _selected("HL000", select, ignore) else []
    assert mi is not None
    lines = source.splitlines()
    out = []
    seen = set()
    failed: Exception | None = None
    try:
        hits = list(check(mi))
    except Exception as e:  # an analysis bug (or a file deep enough to exhaust recursion): say so, lint the rest
        if os.environ.get("HOTLOOP_LINT_RAISE"):  # (our own debugging: the traceback)
            raise
        hits, failed = [], e
    if failed is not None and _selected("HL000", select, ignore):
        out.append(Finding(path, 1, 1, "HL000", f"cannot analyse: internal error ({type(failed).__name__}: "
                                                f"{failed}); please report it with this file", "error"))  # fmt: skip
    for hit in hits:
        line, col = hit.node.lineno, hit.node.col_offset + 1
        key = (line, col, hit.code, hit.message)
        if key in seen or not _selected(hit.code, select, ignore):
            continue
        seen.add(key)
        if 0 < line <= len(lines) and _suppressed(lines[line - 1], hit.code):
            continue
        out.append(Finding(path, line, col, hit.code, hit.message, RULES[hit.code].severity))
    return sorted(out, key=lambda f: (f.line, f.col, f.code))


@dataclass
class FixReport:
    """What `--fix` did to one file: each change, and each fixable finding it left alone with the reason."""

    changed: list[tuple[int, str, str]] = field(default_factory=list)  # (line, code, what)
    skipped: list[tuple[int, str, str]] = field(default_factory=list)  # (line, code, why)


def fix_source(source: str, select: list[str] | None = None, ignore: list[str] | None = None) -> tuple[str, int]:
    """Apply the mechanical fixes; returns the new source and how many were applied."""
    new, report = fix_report(source, select, ignore)
    return new, len(report.changed)


def fix_report(source: str, select: list[str] | None = None, ignore: list[str] | None = None) -> tuple[str, FixReport]:
    report = FixReport()
    mi, err = _analyse(source, "<fix>")
    if mi is None:
        return source, report
    lines = source.splitlines(keepends=True)
    edits: list[tuple[Edit, str]] = []
    for hit in check(mi):
        if not RULES[hit.code].fixable or not _selected(hit.code, select, ignore):
            continue
        line = hit.node.lineno
        if _suppressed(lines[line - 1], hit.code):
            report.skipped.append((line, hit.code, "suppressed with # noqa"))
        elif hit.edit is None:
            report.skipped.append((line, hit.code, hit.no_fix or "no mechanical fix for this form"))
        else:
            edits.append((hit.edit, hit.code))
    # Apply from the end so earlier offsets stay valid; skip overlapping edits (the next run gets them).
    last_start = (float("inf"), float("inf"))
    for e, code in sorted(edits, key=lambda x: (x[0].line, x[0].col), reverse=True):
        if (e.end_line, e.end_col) > last_start:
            report.skipped.append((e.line, code, "overlaps another fix on this line: run --fix again"))
            continue
        start = _offset(lines, e.line, e.col)
        end = _offset(lines, e.end_line, e.end_col)
        text = "".join(lines)
        text = text[:start] + e.text + text[end:]
        lines = text.splitlines(keepends=True)
        last_start = (e.line, e.col)
        report.changed.append((e.line, code, e.what))
    report.changed.reverse()
    report.skipped.sort()
    return "".join(lines), report


def _offset(lines: list[str], line: int, col: int) -> int:
    # ast columns are UTF-8 byte offsets
    prefix = "".join(lines[: line - 1])
    return len(prefix) + len(lines[line - 1].encode()[:col].decode(errors="ignore"))


def load_settings(start: Path) -> dict[str, Any]:
    """`[tool.hotloop.lint]` of the nearest pyproject.toml at or above `start`."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        return {}
    for d in [start, *start.parents]:
        f = d / "pyproject.toml"
        if f.is_file():
            try:
                data = tomllib.loads(f.read_text())
            except (tomllib.TOMLDecodeError, OSError):
                return {}
            return data.get("tool", {}).get("hotloop", {}).get("lint", {})
    return {}


def iter_files(paths: list[str], exclude: list[str]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            files.append(p)
            continue
        for f in sorted(p.rglob("*.py")):
            parts = f.relative_to(p).parts
            if any(fnmatch.fnmatch(part, pat) for part in parts for pat in exclude) or any(
                fnmatch.fnmatch(str(f), pat) for pat in exclude
            ):
                continue
            files.append(f)
    return files


def lint_paths(
    paths: list[str], select: list[str] | None = None, ignore: list[str] | None = None,
    exclude: list[str] | None = None, fix: bool = False, fixes: dict[str, FixReport] | None = None,
) -> list[Finding]:  # fmt: skip
    """Lint files and directories; with `fix`, apply the mechanical fixes first and record, per file, what
    changed and what was left alone in `fixes`."""
    findings: list[Finding] = []
    files = iter_files(paths, DEFAULT_EXCLUDE + list(exclude or []))
    with linting(files):
        for f in files:
            findings += _lint_file(f, select, ignore, fix, fixes)
    return findings


def _lint_file(f: Path, select: list[str] | None, ignore: list[str] | None, fix: bool,
               fixes: dict[str, FixReport] | None) -> list[Finding]:  # fmt: skip
    try:
        raw = f.read_bytes()
        bom = raw.startswith(codecs.BOM_UTF8)  # valid Python (the interpreter skips it): kept on --fix
        source = raw.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        return [Finding(str(f), 1, 1, "HL000", f"cannot read: {e}", "error")]
    if fix:
        new, report = fix_report(source, select, ignore)
        if report.changed:
            f.write_bytes((codecs.BOM_UTF8 if bom else b"") + new.encode("utf-8"))
            source = new
        if fixes is not None and (report.changed or report.skipped):
            fixes[str(f)] = report
    return lint_source(source, str(f), select, ignore)
