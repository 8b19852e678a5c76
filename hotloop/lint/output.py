"""Output formats: ruff-like text, a JSON array, and SARIF 2.1.0 for code-scanning UIs."""

from __future__ import annotations

import json

from hotloop.lint import Finding
from hotloop.lint.rules import RULES


def text(findings: list[Finding]) -> str:
    lines = [f"{f.path}:{f.line}:{f.col}: {f.code} {f.message}" for f in findings]
    n = len(findings)
    lines.append(f"Found {n} error{'s' if n != 1 else ''}." if n else "All checks passed!")
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
