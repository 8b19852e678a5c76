"""Output formats: ruff-like text, a JSON array, and SARIF 2.1.0 for code-scanning UIs."""

from __future__ import annotations

import json

from hotloop.lint import Finding, FixReport
from hotloop.lint.rules import RULES


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def text(findings: list[Finding]) -> str:
    """ruff-like lines; the summary counts by the same severity JSON and SARIF carry."""
    lines = [f"{f.path}:{f.line}:{f.col}: {f.code} {f.message}" for f in findings]
    if not findings:
        return "All checks passed!"
    errors = sum(f.severity == "error" for f in findings)
    parts = [_count(errors, "error")] if errors else []
    if len(findings) - errors:
        parts.append(_count(len(findings) - errors, "warning"))
    lines.append(f"Found {' and '.join(parts)}.")
    return "\n".join(lines)


def fix_summary(fixes: dict[str, FixReport]) -> str:
    """What `--fix` changed and what it left alone (and why), file by file."""
    lines = []
    for path, r in fixes.items():
        lines += [f"fixed   {path}:{line}: {code} {what}" for line, code, what in r.changed]
        lines += [f"skipped {path}:{line}: {code} {why}" for line, code, why in r.skipped]
    changed = sum(len(r.changed) for r in fixes.values())
    skipped = sum(len(r.skipped) for r in fixes.values())
    lines.append(f"--fix: {_count(changed, 'change')} in {_count(sum(bool(r.changed) for r in fixes.values()), 'file')}"
                 f", {skipped} fixable finding{'s' if skipped != 1 else ''} left to you.")  # fmt: skip
    return "\n".join(lines)


def as_json(findings: list[Finding]) -> str:
    return json.dumps([f.as_dict() for f in findings], indent=1)


def sarif(findings: list[Finding]) -> str:
    used = sorted({f.code for f in findings})
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "hotloop-lint",
                "informationUri": "https://github.com/hotloop/hotloop",
                "rules": [{"id": c, "shortDescription": {"text": RULES[c].summary},
                           "fullDescription": {"text": RULES[c].why}} for c in used],
            }},
            "results": [{
                "ruleId": f.code,
                "level": "error" if f.severity == "error" else "warning",
                "message": {"text": f.message},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": f.path},
                    "region": {"startLine": f.line, "startColumn": f.col},
                }}],
            } for f in findings],
        }],
    }  # fmt: skip
    return json.dumps(doc, indent=1)
