"""Precision: auto choice, bf16 on the CPU, and the fp16 GradScaler order (unscale before clip, skip on inf)."""

from __future__ import annotations

import math

import torch

from hotloop import TrainConfig, Trainer
from hotloop.optim import build_optimizer, build_scheduler
from hotloop.precision import BF16, FP16, Precision, resolve_precision
from hotloop.step import TrainStep, default_loss_fn

from .helpers import Regressor, regression_data


def test_auto_is_fp32_on_cpu():
    assert type(resolve_precision("auto", torch.device("cpu"))) is Precision


def _step_parts(precision_name: str, clip: float | None = 1.0):
    model = Regressor()
    cfg = TrainConfig(precision=precision_name, device="cpu", lr=1e-2, clip_grad=clip, schedule="constant")
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    prec = resolve_precision(precision_name, torch.device("cpu"))
    step = TrainStep(model, default_loss_fn, opt, build_scheduler(opt, cfg, 10), prec, clip)
    return model, opt, prec, step


def test_bf16_trains_on_cpu(tmp_path):
    x, y = regression_data()
    cfg = TrainConfig(
        precision="bf16",
        device="cpu",
        max_steps=30,
        batch_size=16,
        lr=1e-2,
        log_every=5,
        run_dir=str(tmp_path),
        progress="off",
        tensorboard=False,
    )
    trainer = Trainer(Regressor(), cfg)
    assert isinstance(trainer.precision, BF16)
    trainer.fit((x, y))
    first, last = trainer.history[0]["loss"], trainer.history[-1]["loss"]
    assert math.isfinite(last) and last < first


def test_fp16_skips_a_step_with_inf_gradient_and_keeps_weights():
    model, opt, prec, step = _step_parts("fp16")
    assert isinstance(prec, FP16)
    prec.scaler = torch.amp.GradScaler("cpu", init_scale=256.0)  # small enough that real steps never overflow
    x, y = regression_data(16)
    step([(x, y)])
    assert all(float(s["step"]) == 1 for s in opt.state.values()), "a finite step is taken"
    before = [p.detach().clone() for p in model.parameters()]
    moments = [s["exp_avg"].clone() for s in opt.state.values()]
    handle = model.net[0].weight.register_hook(lambda g: g * float("inf"))
    out = step([(x, y)])
    handle.remove()
    assert not torch.isfinite(out.grad_norm)
    for p, b in zip(model.parameters(), before, strict=True):
        assert torch.equal(p.detach(), b), "an inf step must leave every weight unchanged"
    for s, m in zip(opt.state.values(), moments, strict=True):
        assert torch.equal(s["exp_avg"], m) and float(s["step"]) == 1, "nor the optimizer state"
    assert prec.scaler.get_scale() == 128.0, "the scaler backs off after an inf step"
    step([(x, y)])
    assert not torch.equal(model.net[0].weight.detach(), before[0]), "training resumes on the next finite step"


def test_fp16_clips_unscaled_gradients():
    """The logged norm is the true gradient norm, not the 2**16-scaled one: unscale_ ran before clipping."""
    x, y = regression_data(16)
    model, _, prec, step = _step_parts("fp16", clip=1e9)
    prec.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    ref = Regressor()
    ref.load_state_dict(model.state_dict())
    with torch.autocast("cpu", dtype=torch.float16):
        loss = ref(x, y)
    loss.backward()
    true_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in ref.parameters()]))
    out = step([(x, y)])
    assert torch.allclose(out.grad_norm, true_norm, rtol=1e-2)


def test_precision_state_round_trip():
    p = FP16(torch.device("cpu"))
    p.scaler.scale(torch.ones(()))  # the scale tensor is created lazily
    p.scaler.update(1024.0)
    q = FP16(torch.device("cpu"))
    q.load_state_dict(p.state_dict())
    assert q.scaler.get_scale() == 1024.0
