"""The doctor's building blocks that need no child process: the read classifier, the matmul counter and
the recommendations computed from what the hooks saw (CUDA facts included, which this machine cannot make)."""

from __future__ import annotations

import torch

from hotloop.doctor.hostreads import DispatchReads, HostReadCounter, _read_kind
from hotloop.doctor.report import build_report


def test_non_blocking_copy_from_unpinned_memory_is_a_sync():
    x = torch.randn(4)
    assert _read_kind(torch.Tensor.to, (x, "cuda"), {"non_blocking": True}) == "non_blocking copy from unpinned memory"
    assert _read_kind(torch.Tensor.cuda, (x,), {"non_blocking": True}) == "non_blocking copy from unpinned memory"
    assert _read_kind(torch.Tensor.to, (x, torch.device("cuda", 0)), {"non_blocking": True}) is not None
    assert "blocking" in _read_kind(torch.Tensor.to, (x, "cuda"), {})  # the host waits for a blocking copy too
    assert _read_kind(torch.Tensor.to, (x, "cpu"), {"non_blocking": True}) is None
    assert _read_kind(torch.Tensor.to, (x, torch.float16), {"non_blocking": True}) is None


def test_fp32_matmuls_are_counted_per_device_and_reads_once():
    counter = HostReadCounter()
    dispatch = DispatchReads(counter)
    a = torch.randn(4, 4)
    with counter, dispatch:
        torch.nn.functional.linear(a, a, torch.zeros(4))
        a @ a
        (a.bfloat16() @ a.bfloat16()).sum().item()
    assert dispatch.fp32_matmuls["cpu"] == 2
    assert counter.total == 1  # .item() seen at the Python level is not counted again at aten level


def raw(**extra):
    base = {"steps": 10, "reads": [], "timings": [], "exit_code": 0, "crashed": None, "script": None}
    return {**base, **extra}


def rules(report):
    return {r["rule"]: r for r in report["recommendations"]}


def test_cuda_recommendations_name_their_evidence():
    adamw = {"class": "AdamW", "fused": False, "device": "cuda", "supports_fused": True}
    gpu = {"busy_pct": 40.0, "idle_pct": 60.0}
    rep = build_report(raw(optimizers=[adamw], fp32_matmuls={"cuda": 120}, bf16_gpu=True, gpu=gpu))
    r = rules(rep)
    assert "fused=True" in r["fused-optimizer"]["message"]
    assert r["autocast"]["evidence"] == "12 fp32 matmuls per step"
    assert "60.0%" in r["gpu-idle"]["evidence"]
    assert rep["gpu"]["busy_pct"] == 40.0


def test_no_cuda_recommendations_on_a_cpu_run():
    rep = build_report(raw(optimizers=[{"class": "AdamW", "fused": False, "device": "cpu", "supports_fused": True}],
                           fp32_matmuls={"cpu": 120}, bf16_gpu=False))  # fmt: skip
    assert not {"fused-optimizer", "autocast", "gpu-idle"} & set(rules(rep))


def test_teacher_under_inference_mode_is_explained():
    crash = "RuntimeError: Inference tensors cannot be saved for backward. To work around ..."
    rec = rules(build_report(raw(crashed=crash, exit_code=1)))["teacher-inference-mode"]
    assert "torch.no_grad()" in rec["message"]


def test_per_step_reads_come_first_and_boundary_reads_are_not_told_to_move():
    # an evaluation every 5th step reading 4 values: more reads than every other step, still a boundary
    reads = [{"file": "/t/train.py", "line": 50, "op": "item", "step": s} for s in range(0, 20, 5) for _ in range(4)]
    reads += [{"file": "/t/train.py", "line": 40, "op": "item", "step": s} for s in range(20)]
    reads += [{"file": "/t/train.py", "line": 30, "op": "__index__", "step": s, "host_only": True} for s in range(20)]
    rep = build_report(raw(steps=20, reads=reads))
    recs = [r for r in rep["recommendations"] if r["rule"] in ("HL001", "boundary-read")]
    assert [r["rule"] for r in recs] == ["HL001", "boundary-read"]
    assert "train.py:40" in recs[0]["message"] and "every step" in recs[0]["message"]
    assert "train.py:50" in recs[1]["message"] and "every 5th step" in recs[1]["message"]
    assert "boundary the script chose" in recs[1]["message"] and "keep it on the device" not in recs[1]["message"]
    assert not any("train.py:30" in r["message"] for r in rep["recommendations"])  # host tensor: no sync at all
    assert [s["line"] for s in rep["sync_sites"]] == [40, 50, 30]  # per-step sync, boundary sync, host-only


def test_a_burst_of_reads_in_one_step_is_not_called_every_step():
    # minGPT's adder evaluates at step 0 and reads 10000 elements one by one: 10000 reads in 30 steps is
    # not "a sync in every step" but one loop over a tensor's elements, at one boundary.
    burst = [{"file": "t.py", "line": 9, "op": "__int__", "step": 0} for _ in range(500)]
    copies = [{"file": "t.py", "line": 7, "op": ".cpu() to host", "step": 0} for _ in range(20)]
    every = [{"file": "t.py", "line": 5, "op": "item", "step": k} for k in range(10)]
    rep = build_report(raw(reads=burst + copies + every))
    freq = {s["line"]: s["frequency"] for s in rep["sync_sites"]}
    assert freq == {9: "500 times in one step", 7: "20 times in one step", 5: "every step"}
    assert [s["line"] for s in rep["sync_sites"]][0] == 5  # the per-step read is listed first
    by_line = {r["message"].split()[0]: r["rule"] for r in rep["recommendations"]}
    assert by_line == {"t.py:5": "HL001", "t.py:9": "element-reads"}  # one copy per eval batch: no advice


def test_a_copy_back_to_the_host_is_a_read_and_its_result_is_host_only():
    # On a CPU run .cpu() returns the same tensor; in the GPU run it is a device-to-host copy, and reading
    # the copy afterwards is host work. Provenance must see both.
    counter = HostReadCounter()
    counter.provenance = True
    w = torch.nn.Parameter(torch.randn(3))
    with counter:
        out = (w * 2).detach()
        host = out.cpu()
        int(host[0] > 0)
        also = out.to("cpu")
        float(also[1])
        float(out[2])
    kinds = [(r.kind, r.host_only) for r in counter.reads]
    assert kinds == [(".cpu() to host", False), ("__int__", True), (".to() to host", False), ("__float__", True),
                     ("__float__", False)]  # fmt: skip
