"""Knowledge distillation: the loss against its formula, the temperature's gradient (and why the teacher
runs under no_grad, not inference_mode), the optimizer groups, and the teacher-logit cache."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hotloop.config import TrainConfig
from hotloop.distill import (
    Distiller,
    DistillError,
    StudentWithTemperature,
    Temperature,
    build_cache,
    kd_loss,
    open_cache,
)
from hotloop.optim import build_optimizer

V = 16


def reference(s, t, y, T, alpha):
    """alpha * T^2 * KL(p_t || p_s) + (1 - alpha) * CE, with torch's own kl_div."""
    log_q = F.log_softmax(s.double() / T, -1).reshape(-1, V)
    log_p = F.log_softmax(t.double() / T, -1).reshape(-1, V)
    kl = F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")
    return alpha * T * T * kl + (1 - alpha) * F.cross_entropy(s.double().reshape(-1, V), y.reshape(-1))


def test_kd_loss_matches_the_formula():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(3, 5, V, generator=g), torch.randn(3, 5, V, generator=g) * 3
    y = torch.randint(V, (3, 5), generator=g)
    out = kd_loss(s, y, 2.5, 0.7, teacher_logits=t)
    assert out["loss"].item() == pytest.approx(reference(s, t, y, 2.5, 0.7).item(), rel=1e-5)


def test_topk_with_k_equal_to_vocab_is_the_full_loss_and_small_k_renormalises():
    g = torch.Generator().manual_seed(1)
    s, t = torch.randn(4, 6, V, generator=g), torch.randn(4, 6, V, generator=g) * 4
    y = torch.randint(V, (4, 6), generator=g)
    full = kd_loss(s, y, 2.0, 1.0, teacher_logits=t)["loss"]
    top = torch.topk(t, V, dim=-1)
    assert kd_loss(s, y, 2.0, 1.0, teacher_topk=(top.values, top.indices))["loss"].item() == pytest.approx(
        full.item(), rel=1e-6
    )
    # a peaked teacher: its top 4 tokens hold almost all the mass, so top-4 is close to the full loss
    peaked = t * 4
    ref = kd_loss(s, y, 1.0, 1.0, teacher_logits=peaked)["loss"].item()
    top4 = torch.topk(peaked, 4, dim=-1)
    got = kd_loss(s, y, 1.0, 1.0, teacher_topk=(top4.values.half(), top4.indices.int()))["loss"].item()
    assert got == pytest.approx(ref, rel=2e-2)


def test_padding_is_masked_out():
    g = torch.Generator().manual_seed(2)
    s, t = torch.randn(2, 4, V, generator=g), torch.randn(2, 4, V, generator=g)
    y = torch.randint(V, (2, 4), generator=g)
    y[:, -1] = -100  # padding
    a = kd_loss(s, y, 2.0, 0.5, teacher_logits=t)["loss"]
    s2, t2 = s.clone(), t.clone()
    s2[:, -1] += 100.0
    t2[:, -1] -= 50.0
    assert kd_loss(s2, y, 2.0, 0.5, teacher_logits=t2)["loss"].item() == pytest.approx(a.item(), rel=1e-6)


def test_half_precision_logits_are_handled_in_fp32():
    g = torch.Generator().manual_seed(3)
    s, t = torch.randn(2, 3, V, generator=g) * 60, torch.randn(2, 3, V, generator=g) * 60
    y = torch.randint(V, (2, 3), generator=g)
    ref = kd_loss(s.bfloat16().float(), y, 1.0, 0.5, teacher_logits=t.bfloat16().float())["loss"]
    low = kd_loss(s.bfloat16(), y, 1.0, 0.5, teacher_logits=t.bfloat16())["loss"]
    assert torch.isfinite(low) and low.dtype == torch.float32
    assert low.item() == pytest.approx(ref.item(), rel=1e-6)


class Tiny(nn.Module):
    def __init__(self, vocab=V, width=8):
        super().__init__()
        self.emb, self.norm, self.head = nn.Embedding(vocab, width), nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, x):
        return self.head(self.norm(self.emb(x)))


def test_learnable_temperature_gets_a_gradient_under_no_grad_but_not_inference_mode():
    torch.manual_seed(0)
    teacher, student, temp = Tiny(), Tiny(), Temperature(2.0)
    x = torch.randint(V, (4, 5))
    y = torch.randint(V, (4, 5))
    with torch.no_grad():
        t_logits = teacher(x)
    kd_loss(student(x), y, temp(), 0.5, teacher_logits=t_logits)["loss"].backward()
    assert temp.log_t.grad is not None and temp.log_t.grad.abs().item() > 0
    with torch.inference_mode():
        frozen = teacher(x)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        kd_loss(student(x), y, temp(), 0.5, teacher_logits=frozen)["loss"].backward()


def test_temperature_is_positive_clamped_and_reports_its_bounds():
    t = Temperature(2.0, t_min=1.0, t_max=4.0)
    with torch.no_grad():
        t.log_t.fill_(-30.0)
    assert t().item() == 1.0 and t.at_bound(t().item()) == "lower"
    with torch.no_grad():
        t.log_t.fill_(30.0)
    assert t().item() == 4.0 and t.at_bound(4.0) == "upper" and t.at_bound(2.0) is None
    with pytest.raises(DistillError, match="outside"):
        Temperature(0.5, t_min=1.0)
    fixed = Temperature(3.0, learnable=False)
    assert not list(fixed.parameters()) and fixed().item() == pytest.approx(3.0)


def test_optimizer_holds_the_temperature_without_decay_and_never_the_teacher():
    teacher = Tiny()
    model = StudentWithTemperature(Tiny(), Temperature(2.0))
    Distiller(teacher, alpha=0.5)
    opt = build_optimizer(model, TrainConfig(weight_decay=0.1), torch.device("cpu"))
    groups = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert groups[id(model.temperature.log_t)] == 0.0
    assert not any(id(p) in groups for p in teacher.parameters())
    assert not any(p.requires_grad for p in teacher.parameters()) and not teacher.training


def test_distiller_runs_the_teacher_once_per_batch_and_checks_vocabularies():
    teacher = Tiny()
    d = Distiller(teacher, alpha=0.5, vocab=V)
    model = StudentWithTemperature(Tiny(), Temperature(2.0))
    batch = {"x": torch.randint(V, (2, 3)), "y": torch.randint(V, (2, 3))}
    out = d(model, batch)
    assert d.teacher_forwards == 1 and set(out) == {"loss", "kd_loss", "ce_loss", "temperature"}
    model.eval()
    assert set(d(model, batch)) == {"loss"} and d.teacher_forwards == 1  # evaluation: the student's CE only
    wrong = StudentWithTemperature(Tiny(vocab=V + 4), Temperature(2.0))
    with pytest.raises(DistillError, match=f"teacher vocabulary {V} != student vocabulary {V + 4}"):
        d(wrong, batch)
    with pytest.raises(DistillError, match="teacher vocabulary"):
        kd_loss(torch.randn(2, V), None, 2.0, 1.0, teacher_logits=torch.randn(2, V + 1))


class Flaky(Tiny):
    """Raises on its `fail_at`-th call: an interrupted cache build."""

    def __init__(self, fail_at):
        super().__init__()
        self.calls, self.fail_at = 0, fail_at

    def forward(self, x):
        self.calls += 1
        if self.calls == self.fail_at:
            raise KeyboardInterrupt
        return super().forward(x)


def test_cache_holds_topk_per_sample_resumes_and_rebuilds_when_stale(tmp_path):
    torch.manual_seed(0)
    teacher = Flaky(fail_at=4)  # call 1 probes the vocabulary; batches are calls 2, 3, ...
    x = torch.randint(V, (40, 6))
    msgs = []
    with pytest.raises(KeyboardInterrupt):
        build_cache(teacher, x, tmp_path, k=4, teacher_id="t1", device=torch.device("cpu"), batch_size=8,
                    say=msgs.append)  # fmt: skip
    assert json.loads((tmp_path / "progress.json").read_text())["done"] == 8  # the first batch was committed
    teacher.fail_at = -1
    forwards = build_cache(teacher, x, tmp_path, k=4, teacher_id="t1", device=torch.device("cpu"), batch_size=8,
                           say=msgs.append)  # fmt: skip
    assert forwards == 4 and any("resuming the build at sample 8/40" in m for m in msgs)
    cached = open_cache(tmp_path, expect_n=40, vocab=V)
    with torch.no_grad():
        ref = torch.topk(Tiny.forward(teacher, x), 4, dim=-1)
    assert torch.equal(cached["t_indices"].long(), ref.indices)
    assert torch.allclose(cached["t_values"].float(), ref.values, atol=1e-2)
    # complete and current: no teacher forward at all
    assert build_cache(teacher, x, tmp_path, k=4, teacher_id="t1", device=torch.device("cpu"), say=msgs.append) == 0
    # other data: rebuilt, and said so
    msgs.clear()
    build_cache(teacher, x[:32], tmp_path, k=4, teacher_id="t1", device=torch.device("cpu"), say=msgs.append)
    assert any("was built for other data: rebuilding" in m for m in msgs)
    with pytest.raises(DistillError, match="holds 32 samples, the data has 40"):
        open_cache(tmp_path, expect_n=40, vocab=V)
    with pytest.raises(DistillError, match=f"teacher vocabulary {V}"):
        open_cache(tmp_path, expect_n=32, vocab=V * 2)


def test_small_vocabularies_are_cached_whole(tmp_path):
    teacher = Tiny()
    x = torch.randint(V, (10, 3))
    build_cache(teacher, x, tmp_path, k=64, teacher_id="t", device=torch.device("cpu"), say=lambda m: None)
    cached = open_cache(tmp_path, expect_n=10, vocab=V)
    assert set(cached) == {"t_logits"} and cached["t_logits"].shape == (10, 3, V)


def test_default_teacher_is_trained_once_and_kept_in_the_cache(monkeypatch, tmp_path):
    from hotloop.config import build_config
    from hotloop.recipes import distill
    from hotloop.recipes import gpt as gpt_recipe

    tiny = {**gpt_recipe.CPU_DEFAULTS, "max_steps": 4, "batch_size": 4, "log_every": 2, "eval_every": 4,
            "eval_batches": 1, "ckpt_every": 4, "progress": "off", "tensorboard": False,
            "gpt": {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16}}  # fmt: skip
    monkeypatch.setattr(gpt_recipe, "defaults", lambda device: tiny)
    monkeypatch.setenv("HOTLOOP_CACHE_DIR", str(tmp_path))
    cfg = build_config(distill.CPU_DEFAULTS, {"progress": "off"})
    said: list[str] = []
    first = distill.default_teacher(cfg, said.append)
    assert any("training the default teacher" in s for s in said)
    assert first.parent == tmp_path / "teachers"
    said.clear()
    assert distill.default_teacher(cfg, said.append) == first and not said  # reused, not retrained
    tiny["gpt"] = {**tiny["gpt"], "n_embd": 32}  # another teacher config: another directory
    assert distill.default_teacher(cfg, said.append) != first


def test_a_temperature_collapsed_to_its_bound_is_reported():
    from hotloop.recipes.distill import TemperatureWatch

    watch = TemperatureWatch(Temperature(2.0, t_min=1.0, t_max=5.0))
    watch.on_log(None, {"step": 10, "temperature": 1.7})
    with pytest.warns(UserWarning, match="collapsed to its lower bound 1.0 at step 20"):
        watch.on_log(None, {"step": 20, "temperature": 1.0})
