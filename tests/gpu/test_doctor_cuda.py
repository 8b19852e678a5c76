"""`hotloop doctor` on CUDA: the syncs only a GPU shows (explicit synchronize, non_blocking copies from
pageable memory), the set_sync_debug_mode cross-check, GPU busy/idle and the CUDA recommendations.
Skipped without a GPU (run on a lent GPU machine: `python -m pytest tests/gpu -q`)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

SCRIPT = textwrap.dedent("""
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # not fused: a recommendation
    x, y = torch.randn(512, 64), torch.randn(512)  # pageable host memory
    for step in range(12):
        xb = x[step * 32:(step + 1) * 32].to("cuda", non_blocking=True)  # PLANT unpinned
        yb = y[step * 32:(step + 1) * 32].cuda()
        loss = ((model(xb).squeeze(-1) - yb) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        torch.cuda.synchronize()  # PLANT synchronize
        if step % 3 == 0:
            print(loss.item())  # PLANT every-3rd
""")


def line_of(marker: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if marker in line)


def test_cuda_syncs_and_recommendations(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    out = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "-m", "hotloop", "doctor", "--json", str(out), "--", "python", "train.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr
    rep = json.loads(out.read_text())
    sites = {(s["line"], s["op"]): s["frequency"] for s in rep["sync_sites"] if s["file"].endswith("train.py")}
    assert sites[(line_of("PLANT unpinned"), "non_blocking copy from unpinned memory")] == "every step"
    assert sites[(line_of("PLANT synchronize"), "torch.cuda.synchronize")] == "every step"
    assert sites[(line_of("PLANT every-3rd"), "item")] == "every 3rd step"
    rules = {r["rule"] for r in rep["recommendations"]}
    assert {"fused-optimizer", "autocast"} <= rules if torch.cuda.is_bf16_supported() else "fused-optimizer" in rules
    assert 0.0 <= rep["gpu"]["busy_pct"] <= 100.0
