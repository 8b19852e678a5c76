"""Every CUDA capability hotloop claims, each as one test that records its measured figure.

`make gpu-check` runs this directory and prints one table (capability, pass/fail, figure); by hand:
`python -m pytest tests/gpu -q`. Skipped without a GPU. References: the uninterrupted or eager run, and
`torch.cuda.set_sync_debug_mode("error")` for the hot-loop contract (any sync between two boundaries
raises inside the step that made it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from hotloop import Callback, TrainConfig, Trainer
from hotloop import checkpoint as ckpt_io

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from tests.unit.helpers import Regressor, regression_data  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _cfg(run_dir, **kw) -> TrainConfig:
    base = dict(device="cuda", max_steps=24, batch_size=64, log_every=6, eval_every=0, run_dir=str(run_dir),
                progress="off", tensorboard=False, compile=False, schedule="constant")  # fmt: skip
    base.update(kw)
    return TrainConfig(**base)


class SyncErrors(Callback):
    """`set_sync_debug_mode("error")` from step `warmup` on, lifted around each boundary's one read."""

    def __init__(self, boundary_every: int, warmup: int = 3) -> None:
        self.every, self.warmup = boundary_every, warmup
        self.checked_steps = 0

    def on_step_end(self, trainer, output) -> None:
        s = trainer.state.step
        at_boundary = s % self.every == 0 or s == trainer.cfg.max_steps
        torch.cuda.set_sync_debug_mode(0 if at_boundary or s < self.warmup else "error")
        self.checked_steps += 0 if at_boundary or s < self.warmup else 1

    def on_log(self, trainer, row) -> None:
        # Re-armed after the log read, except at the last step: the final checkpoint that follows is a
        # boundary too (its one finiteness read is allowed).
        if self.warmup <= trainer.state.step < trainer.cfg.max_steps:
            torch.cuda.set_sync_debug_mode("error")

    def on_fit_end(self, trainer) -> None:
        torch.cuda.set_sync_debug_mode(0)


CONTRACT = {
    "fp32-eager": {"precision": "fp32"},
    "bf16": {"precision": "bf16"},
    "fp16-gradscaler-fused": {"precision": "fp16"},
    "compile-default": {"compile": True},
    "prefetch": {"data_on_device": False},
    "data-on-device": {"data_on_device": True},
    "grad-accum-2": {"grad_accum": 2},
}


@pytest.mark.parametrize("name", list(CONTRACT))
def test_no_sync_between_boundaries(tmp_path, name, record_property):
    x, y = regression_data(4096)
    guard = SyncErrors(6)
    try:
        Trainer(Regressor(), _cfg(tmp_path, **CONTRACT[name]), callbacks=[guard]).fit((x, y))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    record_property("figure", f"0 syncs in {guard.checked_steps} checked steps")
    assert guard.checked_steps >= 12


def test_expected_sync_is_reported(tmp_path, record_property):
    """fp16 with a non-fused optimizer: GradScaler.step reads found_inf on the host every step."""
    x, y = regression_data(2048)
    with pytest.raises(RuntimeError, match="synchroniz"):
        try:
            Trainer(Regressor(), _cfg(tmp_path, precision="fp16", optim={"implementation": "foreach"}),
                    callbacks=[SyncErrors(6)]).fit((x, y))  # fmt: skip
        finally:
            torch.cuda.set_sync_debug_mode(0)
    record_property("figure", "sync raised as expected")


def test_no_recompiles_with_short_batches_and_evaluation(tmp_path, record_property):
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    x, y = regression_data(1000)  # 15 full batches of 64 and one of 40
    vx, vy = regression_data(100, seed=1)
    t = Trainer(Regressor(), _cfg(tmp_path, compile=True, drop_last=False, epochs=3, max_steps=None, eval_every=16))
    t.fit((x, y), (vx, vy))
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    record_property("figure", f"{graphs} graphs, {sum(torch._dynamo.utils.counters['recompiles'].values())} recompiles")
    assert graphs <= 2 and not torch._dynamo.utils.counters["recompiles"]


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_cuda_graphs_with_accumulation_match_eager(tmp_path, mode, record_property):
    x, y = regression_data(4096)
    runs = {}
    for m in (False, mode):
        torch.manual_seed(0)
        t = Trainer(Regressor(), _cfg(tmp_path / str(m), compile=m, grad_accum=2, precision="fp32"))
        t.fit((x, y))
        runs[m] = t
    diff = max((a - b).abs().max().item() for a, b in zip(runs[False].model.parameters(),
                                                           runs[mode].model.parameters(), strict=True))  # fmt: skip
    losses = [(a["loss"], b["loss"]) for a, b in zip(runs[False].history, runs[mode].history, strict=True)]
    record_property("figure", f"max weight diff vs eager {diff:.2e}")
    assert diff < 1e-4 and all(abs(a - b) < 1e-4 * max(1.0, abs(a)) for a, b in losses)


def test_distill_recipe_with_cached_logits_has_no_sync_between_boundaries(tmp_path, monkeypatch, record_property):
    """The distill recipe reading its teacher's cached top-k logits: no teacher forward and no sync per step."""
    from hotloop.config import load_config
    from hotloop.recipes import distill

    monkeypatch.setenv("HOTLOOP_CACHE_DIR", str(tmp_path / "cache"))
    tiny = ["device=cuda", "gpt.n_layer=1", "gpt.n_embd=32", "gpt.n_head=2", "gpt.block_size=32", "batch_size=8",
            "eval_batches=2", "progress=off", "tensorboard=false"]  # fmt: skip
    teacher = tmp_path / "teacher"
    fit = [sys.executable, "-m", "hotloop", "fit", *tiny, "max_steps=20", "eval_every=0", f"run_dir={teacher}"]
    subprocess.run(fit, check=True, cwd=ROOT, capture_output=True, timeout=300)
    cfg = load_config(overrides=["recipe=distill", *tiny, "gpt.n_embd=16", "max_steps=24", "log_every=6",
                                 "eval_every=0", "distill.samples=256", "distill.top_k=8", f"teacher={teacher}",
                                 f"run_dir={tmp_path / 'student'}"])  # fmt: skip
    trainer, data, _, distiller = distill.build(cfg, say=lambda *a, **k: None)
    assert "t_values" in data or "t_logits" in data, "the teacher cache was not used"
    built = distiller.teacher_forwards
    guard = SyncErrors(6)
    trainer.callbacks.append(guard)
    try:
        trainer.fit(data)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert distiller.teacher_forwards == built  # training read the cache only
    record_property("figure", f"0 syncs in {guard.checked_steps} checked steps, 0 teacher forwards in training")


def killed_after(run_dir: Path, into: Path, step: int) -> None:
    """`into`: a copy of the finished run `run_dir` as if killed after its checkpoint at `step`."""
    shutil.copytree(run_dir, into)
    for f in ckpt_io.committed(into):
        if f.step > step:
            ckpt_io._manifest_path(f.path).unlink()
            f.path.unlink()


def resumed_weight_diff(tmp_path: Path, **kw) -> float:
    """A 40-step deterministic run killed at step 20 and resumed, against the uninterrupted one: the largest
    weight difference."""
    x, y = regression_data(4096)

    def run(run_dir, **more):
        torch.manual_seed(0)
        t = Trainer(Regressor(dropout=0.1), _cfg(run_dir, max_steps=40, ckpt_every=10, keep_last=5,
                                                 deterministic=True, **kw, **more))  # fmt: skip
        t.fit((x, y))
        return t

    full = run(tmp_path / "full")
    killed_after(tmp_path / "full", tmp_path / "res", 20)
    res = run(tmp_path / "res", resume="auto")
    return max((a - b).abs().max().item() for a, b in zip(full.model.parameters(), res.model.parameters(), strict=True))


def test_resume_tensor_source_is_bit_exact(tmp_path, record_property):
    diff = resumed_weight_diff(tmp_path)
    record_property("figure", f"max weight diff {diff:.1e}")
    assert diff == 0.0


def test_resume_gpt_recipe_is_bit_exact(tmp_path, record_property):
    env = dict(os.environ, HOTLOOP_CACHE_DIR=str(tmp_path / "cache"))
    common = ["max_steps=30", "ckpt_every=10", "keep_last=5", "eval_every=0", "deterministic=true", "progress=plain"]

    def fit(run_dir, *extra):
        cmd = [sys.executable, "-m", "hotloop", "fit", f"run_dir={run_dir}", *common, *extra]
        subprocess.run(cmd, check=True, env=env, cwd=ROOT, capture_output=True, timeout=300)

    fit(tmp_path / "full")
    killed_after(tmp_path / "full", tmp_path / "res", 10)
    fit(tmp_path / "res", "resume=auto")
    a = ckpt_io.load_checkpoint(tmp_path / "full")["model"]
    b = ckpt_io.load_checkpoint(tmp_path / "res")["model"]
    diff = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    record_property("figure", f"max weight diff {diff:.1e}")
    assert diff == 0.0


def test_nonfinite_step_leaves_weights_and_moments_unchanged(tmp_path, record_property):
    # Armed by step, not by call count: the start-up memory check runs the loss once more.
    poison = {"on": False}

    def poisoned(model, batch):
        loss = model(*batch)
        return loss * float("nan") if poison["on"] else loss

    snap = {}

    class Snapshot(Callback):
        def on_step_end(self, trainer, output):
            poison["on"] = trainer.state.step == 4  # step 5's loss is NaN
            if trainer.state.step in (4, 5):
                st = trainer.optimizer.state
                tensors = [(p, st[p]["exp_avg"], st[p]["exp_avg_sq"]) for p in trainer.model.parameters()]
                snap[trainer.state.step] = [t.detach().clone() for group in tensors for t in group]

    x, y = regression_data(2048)
    t = Trainer(Regressor(), _cfg(tmp_path, max_steps=8, precision="bf16"), loss_fn=poisoned, callbacks=[Snapshot()])
    assert t.optimizer.defaults.get("fused")
    with pytest.warns(UserWarning, match="non-finite loss or gradients at steps"):
        t.fit((x, y))
    same = all(torch.equal(a, b) for a, b in zip(snap[4], snap[5], strict=True))
    record_property("figure", f"step 5 skipped: weights and moments {'unchanged' if same else 'CHANGED'}")
    assert same and 5 in t.guard_state.nonfinite_steps


DOCTOR_COMPILED = textwrap.dedent("""
    import torch, torch._dynamo
    from torch import nn
    model = torch.compile(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1)).cuda())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    x, y = torch.randn(512, 64, device="cuda"), torch.randn(512, device="cuda")
    for step in range(12):
        loss = ((model(x[step * 32:(step + 1) * 32]).squeeze(-1) - y[step * 32:(step + 1) * 32]) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    print("GRAPHS", torch._dynamo.utils.counters["stats"]["unique_graphs"])
""")


def test_doctor_keeps_compile_active(tmp_path, record_property):
    script = tmp_path / "train.py"
    script.write_text(DOCTOR_COMPILED)
    cmd = [sys.executable, "-m", "hotloop", "doctor", "--json", str(tmp_path / "r.json"), "--", sys.executable]
    out = subprocess.run([*cmd, str(script)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    graphs = [int(line.split()[1]) for line in out.stdout.splitlines() if line.startswith("GRAPHS")]
    report = json.loads((tmp_path / "r.json").read_text())
    record_property("figure", f"graphs compiled under doctor: {graphs}")
    assert (graphs and graphs[0] >= 1) or "compile" in json.dumps(report).lower()


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_activation_checkpointing_peak_memory(dtype, record_property):
    """Issue 16 on CUDA: the peak of one forward+backward of the GPU-sized gpt recipe model with each mode."""
    import copy

    from hotloop.config import GPTConfig
    from hotloop.memory import apply_activation_checkpointing
    from hotloop.recipes.gptmodel import GPT

    torch.manual_seed(0)
    base = GPT(GPTConfig(n_layer=6, n_head=6, n_embd=384, block_size=256, dropout=0.1)).cuda()
    x = torch.randint(0, 256, (32, 256), device="cuda")
    y = torch.randint(0, 256, (32, 256), device="cuda")
    peak = {}
    for mode in ("none", "full", "selective"):
        model = copy.deepcopy(base)
        apply_activation_checkpointing(model, mode)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = model(x, y)
        loss.backward()
        torch.cuda.synchronize()
        peak[mode] = (torch.cuda.max_memory_allocated() - before) / 2**20
        del model, loss
    record_property("figure", ", ".join(f"{m} {v:.0f} MiB" for m, v in peak.items()))
    assert peak["full"] < peak["selective"] <= peak["none"], peak


def test_async_checkpoint_host_buffers_are_pinned_and_reused(tmp_path, record_property):
    """Issue 16 on CUDA: the background save's host copy goes into pinned buffers, the same ones every save,
    and the step loop pays for the copy only (ckpt_block_s against a synchronous save)."""
    from hotloop.checkpointer import _to_host

    pool: dict = {}
    state = {"w": torch.randn(1024, 1024, device="cuda"), "opt": {"m": torch.zeros(4096, device="cuda")}}
    first = _to_host(state, pool)
    torch.cuda.synchronize()
    ptrs = {k: v.data_ptr() for k, v in pool.items()}
    state["w"].add_(1)
    second = _to_host(state, pool)
    torch.cuda.synchronize()
    assert all(v.is_pinned() for v in pool.values())
    assert {k: v.data_ptr() for k, v in pool.items()} == ptrs and first["w"].data_ptr() == second["w"].data_ptr()
    assert torch.equal(second["w"], state["w"].cpu())
    blocked = {}
    for background in (True, False):
        cfg = _cfg(tmp_path / str(background), max_steps=40, ckpt_every=10, async_checkpoint=background)
        t = Trainer(Regressor(), cfg).fit(regression_data(2048))
        blocked[background] = [r["ckpt_block_s"] for r in t.history if "ckpt_block_s" in r]
    record_property("figure", f"ckpt_block_s async {blocked[True]} vs sync {blocked[False]}")
    assert blocked[True] and blocked[False]
