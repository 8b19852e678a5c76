"""`hotloop doctor` on plain PyTorch scripts with reads planted at known lines and frequencies, a crashing
script, a clean one, and --steps. Reference: the planted line numbers below."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(256, 8), torch.randn(256)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=True)


    def helper(t):
        return float(t)  # PLANT helper every-step


    def validate():
        model.eval()
        with torch.no_grad():
            total = torch.zeros(())
            for xb, yb in loader:
                total += ((model(xb).squeeze(-1) - yb) ** 2).mean()
            print(total.item())  # PLANT validation once-per-epoch
        model.train()


    running = torch.zeros(())
    for epoch in range(2):
        for step, (xb, yb) in enumerate(loader):
            loss = ((model(xb).squeeze(-1) - yb) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            running += loss.detach()
            v = loss.item()  # PLANT every-step
            h = helper(loss)
            if step % 4 == 0:
                print(f"loss {{running / 4:.3f}}")  # PLANT every-4th
                running.zero_()
        validate()
    {tail}
""")


def line_of(src: str, marker: str) -> int:
    return next(i for i, line in enumerate(src.splitlines(), 1) if marker in line)


def doctor(tmp_path: Path, src: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    script = tmp_path / "train.py"
    script.write_text(src)
    out = tmp_path / "report.json"
    res = subprocess.run([sys.executable, "-m", "hotloop", "doctor", "--json", str(out), *extra, "--", "python",
                          str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    return res, json.loads(out.read_text()) if out.exists() else {}


def sites(report: dict) -> dict[int, str]:
    return {s["line"]: s["frequency"] for s in report["sync_sites"] if s["file"].endswith("train.py")}


def test_planted_reads_are_found_with_their_frequency(tmp_path):
    src = SCRIPT.format(tail='print("done")')
    res, rep = doctor(tmp_path, src)
    assert res.returncode == 0, res.stderr
    assert "done" in res.stdout  # the script's own output still appears
    assert rep["steps"] == 32
    found = sites(rep)
    assert found[line_of(src, "PLANT every-step")] == "every step"
    assert found[line_of(src, "PLANT helper")] == "every step"
    assert found[line_of(src, "PLANT every-4th")] == "every 4th step"
    assert found[line_of(src, "PLANT validation")] == "every 16th step"  # once per epoch of 16 steps
    assert len(found) == 4, found  # nothing else: DataLoader and optimizer bookkeeping are not syncs
    assert set(rep["breakdown"]) == {"data", "forward", "backward", "optimizer", "other"}
    assert any(r["rule"] == "HL001" and "every step" in r["message"] for r in rep["recommendations"])


def test_steps_stops_cleanly(tmp_path):
    res, rep = doctor(tmp_path, SCRIPT.format(tail='print("done")'), "--steps", "5")
    assert res.returncode == 0 and rep["steps"] == 5 and "done" not in res.stdout


def test_crashing_script_still_reports_and_keeps_its_exit_code(tmp_path):
    src = SCRIPT.format(tail="raise RuntimeError('boom')")
    res, rep = doctor(tmp_path, src)
    assert res.returncode == 1 and "boom" in res.stderr
    assert rep["crashed"] and rep["steps"] == 32 and sites(rep)


def test_clean_script_has_no_findings(tmp_path):
    src = textwrap.dedent("""
        import torch
        from torch import nn
        model = nn.Linear(4, 1)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
        x, y = torch.randn(64, 4), torch.randn(64)
        running = torch.zeros(())
        for step in range(20):
            loss = ((model(x).squeeze(-1) - y) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            running += loss.detach()
        print(running.item() / 20)  # once, after training
    """)
    res, rep = doctor(tmp_path, src)
    assert res.returncode == 0
    assert [s["frequency"] for s in rep["sync_sites"]] == ["once"]
    assert not [r for r in rep["recommendations"] if r["rule"] == "HL001"]


def test_hotloops_own_loop_has_no_sync_site_between_boundaries(tmp_path):
    out = tmp_path / "r.json"
    tiny = ["gpt.n_layer=1", "gpt.n_embd=32", "gpt.n_head=2", "gpt.block_size=32", "batch_size=8",
            "eval_batches=2", "log_every=5", "eval_every=10", "max_steps=20", "run_dir=run"]  # fmt: skip
    cmd = [sys.executable, "-m", "hotloop", "doctor", "--json", str(out), "--", "python", "-m", "hotloop", "fit", *tiny]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rep = json.loads(out.read_text())
    assert rep["steps"] == 20 and rep["sync_sites"]
    assert all(s["boundary"] for s in rep["sync_sites"]), rep["sync_sites"]  # only the `# sync:` boundary reads
    assert not [r for r in rep["recommendations"] if r["rule"] == "HL001"]
    # doctor never changes the numbers: the same run without it ends with the same weights, bit for bit
    ref = [*tiny[:-1], "run_dir=ref"]
    done = subprocess.run([sys.executable, "-m", "hotloop", "fit", *ref], cwd=tmp_path, capture_output=True)
    assert done.returncode == 0
    import torch

    from hotloop import load_checkpoint

    a, b = load_checkpoint(tmp_path / "run")["model"], load_checkpoint(tmp_path / "ref")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_fit_with_doctor_true_prints_the_report(tmp_path):
    tiny = ["gpt.n_layer=1", "gpt.n_embd=32", "gpt.n_head=2", "gpt.block_size=32", "batch_size=8",
            "eval_batches=2", "log_every=5", "eval_every=10", "max_steps=10", "run_dir=run", "doctor=true"]  # fmt: skip
    res = subprocess.run([sys.executable, "-m", "hotloop", "fit", *tiny], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "hotloop doctor: 10 optimizer steps observed" in res.stdout
    assert "(boundary: # sync:)" in res.stdout and "[HL001]" not in res.stdout


WORKER_SCRIPT = textwrap.dedent("""
    import torch
    from torch import nn


    class Samples(torch.utils.data.Dataset):
        def __init__(self):
            self.x, self.y = torch.randn(128, 8), torch.randn(128)

        def __len__(self):
            return 128

        def __getitem__(self, i):
            return self.x[i], torch.tensor(self.y[i].item())  # PLANT worker per-sample


    if __name__ == "__main__":
        model = nn.Linear(8, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(Samples(), batch_size=16, num_workers=2)
        for epoch in range(2):
            model.train()
            for xb, yb in loader:
                loss = ((model(xb).squeeze(-1) - yb) ** 2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=False)
            model.eval()
            model(xb)  # validation without no_grad
""")


def test_reads_in_dataloader_workers_and_runtime_recommendations(tmp_path):
    trace = tmp_path / "trace.json"
    res, rep = doctor(tmp_path, WORKER_SCRIPT, "--trace", str(trace))
    assert res.returncode == 0, res.stderr
    assert rep["steps"] == 16
    (site,) = [s for s in rep["sync_sites"] if s["file"].endswith("train.py")]
    assert site["line"] == line_of(WORKER_SCRIPT, "PLANT worker")
    assert site["where"] == "dataloader worker" and site["count"] == 256
    assert site["frequency"] == "16 times every step"  # once per sample, 16 samples per batch
    evidence = {(r["rule"], r["evidence"]) for r in rep["recommendations"]}
    assert ("worker-read", "256 reads") in evidence
    assert ("HL013", "16 calls") in evidence  # zero_grad(set_to_none=False), counted at run time
    assert ("HL018", "2 eval-mode forwards with grad enabled") in evidence
    events = json.loads(trace.read_text())["traceEvents"]
    assert any("aten::" in e.get("name", "") for e in events)


def test_lightning_script(tmp_path):
    import pytest

    pytest.importorskip("lightning")
    src = textwrap.dedent("""
        import lightning as L
        import torch
        from torch import nn


        class Module(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = nn.Linear(8, 1)

            def training_step(self, batch, batch_idx):
                x, y = batch
                loss = ((self.net(x).squeeze(-1) - y) ** 2).mean()
                self.log("loss", loss.item())  # PLANT lightning
                return loss

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), lr=1e-2)


        if __name__ == "__main__":
            ds = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randn(256))
            trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False)
            trainer.fit(Module(), torch.utils.data.DataLoader(ds, batch_size=16))
    """)
    res, rep = doctor(tmp_path, src)
    assert res.returncode == 0, res.stderr
    assert rep["steps"] == 16
    assert sites(rep)[line_of(src, "PLANT lightning")] == "every step"


COMPILED = textwrap.dedent("""
    import torch, torch._dynamo
    from torch import nn

    model = torch.compile(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x, y = torch.randn(256, 8), torch.randn(256)
    for step in range(8):
        loss = ((model(x[step * 32:(step + 1) * 32]).squeeze(-1) - y[step * 32:(step + 1) * 32]) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(loss.item())  # PLANT: a read every step, seen under compile too
    print("GRAPHS", torch._dynamo.utils.counters["stats"]["unique_graphs"])
""")


def test_compile_stays_active_under_doctor(tmp_path):
    res, rep = doctor(tmp_path, COMPILED)
    graphs = [int(line.split()[1]) for line in res.stdout.splitlines() if line.startswith("GRAPHS")]
    assert graphs and graphs[0] >= 1, res.stdout + res.stderr  # compiled, not silently eager
    assert rep["compiled"] and "torch.compile stayed active" in res.stdout
    plant = [s for s in rep["sync_sites"] if s["op"] == "item"]
    assert plant and plant[0]["frequency"] == "every step"


NANOGPT_LIKE = textwrap.dedent("""
    import numpy as np, torch
    from torch import nn

    data = np.arange(10_000, dtype=np.int64) % 50
    model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 50))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    device = "cpu"
    for step in range(6):
        ix = torch.randint(len(data) - 9, (4,))
        x = torch.stack([torch.from_numpy(data[i:i + 8]) for i in ix])  # HOST: ix indexes a NumPy array
        x = x.to(device)
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 3 == 0:
            print(loss.item())  # DEVICE: a model output, every 3rd step
""")


def test_host_only_reads_are_told_apart_from_device_syncs(tmp_path):
    res, rep = doctor(tmp_path, NANOGPT_LIKE)
    by_line = {s["line"]: s for s in rep["sync_sites"] if s["file"].endswith("train.py")}
    host = next(ln for ln, s in by_line.items() if s["op"] == "__index__")
    assert by_line[host]["where"] == "host tensor (no device sync)"
    item = next(s for s in by_line.values() if s["op"] == "item")
    assert "where" not in item and item["frequency"] == "every 3rd step"
    assert rep["sync_sites"].index(item) < rep["sync_sites"].index(by_line[host])  # device syncs listed first
    assert not any(str(host) in r["message"] for r in rep["recommendations"])


MANUAL_SGD = textwrap.dedent("""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    x, y = torch.randn(128, 8), torch.randn(128)
    total = 0.0
    for epoch in range(2):
        for i in range(0, 128, 16):
            model.zero_grad()
            loss = ((model(x[i:i + 16]).squeeze(-1) - y[i:i + 16]) ** 2).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.1)
            total += loss.item()  # PLANT manual every-step
            if i == 0:
                print(loss.item())  # PLANT manual every-8th
    print("done")
""")


def test_script_without_an_optimizer_counts_backward_calls_as_steps(tmp_path):
    # pytorch/examples' word_language_model updates its parameters by hand: no optimizer step to hook, so
    # doctor used to report "0 optimizer steps" and could neither tell frequencies nor stop at --steps.
    res, rep = doctor(tmp_path, MANUAL_SGD)
    assert res.returncode == 0, res.stderr
    assert rep["steps"] == 16 and rep["manual_steps"]
    found = sites(rep)
    assert found[line_of(MANUAL_SGD, "PLANT manual every-step")] == "every step"
    assert found[line_of(MANUAL_SGD, "PLANT manual every-8th")] == "every 8th step"
    assert "each backward() counted as a step" in res.stdout
    res, rep = doctor(tmp_path, MANUAL_SGD, "--steps", "3")
    assert rep["steps"] == 3 and "done" not in res.stdout


def test_accumulating_script_with_an_optimizer_counts_optimizer_steps_only(tmp_path):
    src = SCRIPT.replace(
        "            opt.step()\n            opt.zero_grad()\n",
        "            if step % 2 == 1:\n                opt.step()\n                opt.zero_grad()\n",
    )
    res, rep = doctor(tmp_path, src.format(tail='print("done")'), "--steps", "3")
    assert res.returncode == 0, res.stderr
    assert rep["steps"] == 3 and not rep["manual_steps"]  # 6 backward calls, 3 optimizer steps
