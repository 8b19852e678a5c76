"""`hotloop lint` as a tool: formats, exit codes, noqa, select/ignore, pyproject config, --explain, --fix,
unparsable files, and hotloop's own code linting clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hotloop.cli import main
from hotloop.lint import fix_source, lint_paths, lint_source

BAD = """import torch
def train(model, loader, opt, device):
    for x, y in loader:
        x = x.to(device)
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        print(loss.item())
        s = torch.tensor([loss, loss])
"""


def run(capsys, *args: str) -> tuple[int, str]:
    code = main(["lint", *args])
    return code, capsys.readouterr().out


def test_text_output_and_exit_codes(tmp_path, capsys):
    f = tmp_path / "train.py"
    f.write_text(BAD)
    code, out = run(capsys, str(f))
    assert code == 1
    assert f"{f}:4:13: HL012 " in out and f"{f}:9:15: HL001 " in out
    n = len(lint_source(BAD))
    assert out.strip().endswith(f"Found {n} warnings."), out  # the severity JSON and SARIF carry (warning)
    (tmp_path / "clean.py").write_text("import torch\nx = torch.zeros(3)\n")
    code, out = run(capsys, str(tmp_path / "clean.py"))
    assert code == 0 and "All checks passed" in out


def test_text_json_and_sarif_agree_on_severity(tmp_path, capsys):
    f = tmp_path / "train.py"
    f.write_text(BAD)
    (tmp_path / "broken.py").write_text("def f(:\n")
    _, text = run(capsys, str(tmp_path))
    _, js = run(capsys, "--format", "json", str(tmp_path))
    _, sf = run(capsys, "--format", "sarif", str(tmp_path))
    rows = json.loads(js)
    errors = sum(r["severity"] == "error" for r in rows)
    warnings = len(rows) - errors
    assert errors == 1 and warnings > 1
    assert text.strip().endswith(f"Found 1 error and {warnings} warnings.")
    levels = [r["level"] for r in json.loads(sf)["runs"][0]["results"]]
    assert levels.count("error") == errors and levels.count("warning") == warnings


def test_messages_name_the_offending_expression():
    by_code = {f.code: f.message for f in lint_source(BAD)}
    assert "`loss.item()`" in by_code["HL001"]
    hl002 = [f.message for f in lint_source(BAD.replace("print(loss.item())", "print(out)\n        out = loss * 2"))
             if f.code == "HL002"]  # fmt: skip
    assert hl002 and "`out`" in hl002[0]
    assert "`x.to(device)`" in by_code["HL012"]
    assert "`torch.tensor([loss, loss])`" in by_code["HL003"]
    src = (
        "import torch\nfrom torch.utils.data import DataLoader\nx = torch.zeros(1).cuda()\n"
        "dl = DataLoader(ds, num_workers=4)\nfor epoch in range(3):\n    for b in dl:\n        pass\n"
    )
    (msg,) = [f.message for f in lint_source(src) if f.code == "HL011"]
    assert "pin_memory=True" in msg and "persistent_workers=True" in msg  # both missing options named


def test_usage_errors_exit_2(tmp_path, capsys):
    assert main(["lint", str(tmp_path / "missing.py")]) == 2
    assert main(["lint", "--explain", "HL999"]) == 2


def test_json_and_sarif(tmp_path, capsys):
    f = tmp_path / "train.py"
    f.write_text(BAD)
    _, out = run(capsys, "--format", "json", str(f))
    rows = json.loads(out)
    assert {r["code"] for r in rows} >= {"HL001", "HL003", "HL012", "HL013"}
    assert set(rows[0]) == {"path", "line", "col", "code", "message", "severity"}
    _, out = run(capsys, "--format", "sarif", str(f))
    doc = json.loads(out)
    assert doc["version"] == "2.1.0" and len(doc["runs"][0]["results"]) == len(rows)


def test_noqa_select_ignore():
    src = "import torch\n" + "\n".join(BAD.splitlines()[1:]).replace(
        "print(loss.item())", "print(loss.item())  # noqa: HL001"
    )
    codes = {f.code for f in lint_source(src)}
    assert "HL001" not in codes and "HL012" in codes
    assert {f.code for f in lint_source(BAD.replace("print(loss.item())", "print(loss.item())  # noqa"))} >= {"HL012"}
    assert not any(f.line == 9 for f in lint_source(BAD.replace("print(loss.item())", "print(loss.item())  # noqa")))
    assert {f.code for f in lint_source(BAD, select=["HL01"])} == {"HL012", "HL013"}
    assert "HL012" not in {f.code for f in lint_source(BAD, ignore=["HL012"])}


def test_pyproject_settings(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text('[tool.hotloop.lint]\nignore = ["HL012"]\nexclude = ["gen_*"]\n')
    (tmp_path / "train.py").write_text(BAD)
    (tmp_path / "gen_data.py").write_text(BAD)
    _, out = run(capsys, "--format", "json", str(tmp_path))
    rows = json.loads(out)
    assert rows and all(r["code"] != "HL012" and "gen_data" not in r["path"] for r in rows)


def test_explain(capsys):
    code, out = run(capsys, "--explain", "HL001")
    assert code == 0 and "Why:" in out and "Bad:" in out and "Good:" in out and "noqa: HL001" in out
    assert "# sync: <why>" in out and "does not change it" in out


def test_explain_says_what_fix_does_and_leaves(capsys):
    _, out = run(capsys, "--explain", "HL003")
    assert "dtype=/device=" in out and "torch.as_tensor" in out
    kept = "import torch\ndef f(a: torch.Tensor, b: torch.Tensor):\n    return torch.tensor([a, b], device='cuda')\n"
    assert fix_source(kept) == (kept, 0)  # what --explain says is left alone, is
    assert any(f.code == "HL003" for f in lint_source(kept))


def test_fix_prints_what_it_changed_and_skipped(tmp_path, capsys):
    f = tmp_path / "train.py"
    extra = "        y = y.to(\n            device)\n        z = torch.tensor([loss, loss], dtype=torch.float32)\n"
    f.write_text(BAD + extra)
    code = main(["lint", "--fix", str(f)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"fixed   {f}:4: HL012 `x.to(device)`: `non_blocking=True` added" in err
    assert f"fixed   {f}:8: HL013" in err and f"fixed   {f}:10: HL003" in err
    assert f"skipped {f}:11: HL012 the call spans several lines" in err
    assert f"skipped {f}:13: HL003 dtype=/device= keywords" in err
    assert err.strip().endswith("--fix: 3 changes in 1 file, 2 fixable findings left to you.")


def test_help_documents_the_sync_marker(capsys):
    with pytest.raises(SystemExit):
        main(["lint", "--help"])
    out = capsys.readouterr().out
    assert "# sync: <why>" in out and "# noqa: HL001" in out


def test_unparsable_file_is_reported_and_the_run_continues(tmp_path):
    (tmp_path / "a.py").write_text("def f(:\n")
    (tmp_path / "b.py").write_text(BAD)
    found = lint_paths([str(tmp_path)])
    assert any(f.code == "HL000" and f.path.endswith("a.py") for f in found)
    assert any(f.code == "HL001" and f.path.endswith("b.py") for f in found)


def test_fix_is_safe_and_idempotent(tmp_path, capsys):
    fixed, n = fix_source(BAD)
    assert n == 3
    assert "x = x.to(device, non_blocking=True)" in fixed
    assert "opt.zero_grad()" in fixed and "set_to_none" not in fixed
    assert "torch.stack([loss, loss])" in fixed
    assert fix_source(fixed) == (fixed, 0)
    compile(fixed, "fixed", "exec")
    remaining = {f.code for f in lint_source(fixed)}
    assert remaining.isdisjoint({"HL003", "HL012", "HL013"}) and "HL001" in remaining
    f = tmp_path / "train.py"
    f.write_text(BAD)
    run(capsys, "--fix", str(f))
    assert f.read_text() == fixed


def test_generator_argument_becomes_a_list_when_fixed():
    src = "import torch\ndef f(grads):\n    return torch.tensor(g.norm() for g in grads)\n"
    fixed, n = fix_source(src)
    assert n == 1 and "torch.stack([g.norm() for g in grads])" in fixed


@pytest.mark.parametrize("package", ["hotloop"])
def test_hotloop_lints_clean(package):
    root = Path(__file__).resolve().parents[2] / package
    assert lint_paths([str(root)]) == []


def test_a_file_starting_with_a_byte_order_mark_is_linted_and_keeps_it(tmp_path, capsys):
    f = tmp_path / "train.py"
    f.write_bytes(b"\xef\xbb\xbf" + BAD.encode())
    found = lint_paths([str(f)])
    assert "HL000" not in {x.code for x in found} and "HL001" in {x.code for x in found}
    assert lint_source("\ufeff" + BAD) == lint_source(BAD)
    main(["lint", "--fix", str(f)])
    capsys.readouterr()
    data = f.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b"non_blocking=True" in data
