"""`FusedStep` (optim.py) must train exactly like `optimizer.step()`, bit for bit, and really skip it."""

from __future__ import annotations

import copy
import types

import pytest
import torch
from torch import nn

from hotloop.optim import FusedStep


def _pair(kind: type, **kw: object) -> tuple[nn.Module, torch.optim.Optimizer, nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    twin = copy.deepcopy(model)

    def groups(m: nn.Module) -> list[dict]:
        return [{"params": [m[0].weight, m[2].weight], "weight_decay": 0.1},
                {"params": [m[0].bias, m[2].bias], "weight_decay": 0.0, "lr": 3e-3}]  # fmt: skip

    return model, kind(groups(model), lr=1e-2, fused=True, **kw), twin, kind(groups(twin), lr=1e-2, fused=True, **kw)


def _reference_step(opt: torch.optim.Optimizer, found_inf: torch.Tensor) -> None:
    opt.grad_scale, opt.found_inf = None, found_inf
    try:
        opt.step()
    finally:
        del opt.grad_scale, opt.found_inf


def _grads(model: nn.Module, seed: int, skip_bias: bool = False) -> None:
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        p.grad = None if (skip_bias and name == "2.bias") else torch.randn(p.shape, generator=g)


def _same(a: nn.Module, oa: torch.optim.Optimizer, b: nn.Module, ob: torch.optim.Optimizer) -> None:
    for (n, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), n
    sa, sb = oa.state_dict()["state"], ob.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        for key in sa[k]:
            assert torch.equal(sa[k][key], sb[k][key]), (k, key)


@pytest.mark.parametrize(("kind", "kw"), [(torch.optim.AdamW, {}), (torch.optim.Adam, {"amsgrad": True}),
                                          (torch.optim.Adam, {"weight_decay": 0.05, "maximize": True})])  # fmt: skip
def test_bit_identical_to_optimizer_step(kind: type, kw: dict) -> None:
    ref, ref_opt, model, opt = _pair(kind, **kw)
    calls = []
    real_step = opt.step

    def counted(self: torch.optim.Optimizer, *a: object, **k: object) -> object:
        calls.append(1)
        return real_step(*a, **k)

    opt.step = types.MethodType(counted, opt)  # type: ignore[method-assign]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    ref_sched = torch.optim.lr_scheduler.LambdaLR(ref_opt, lambda s: 1.0 / (s + 1))
    fast = FusedStep(opt)
    for s in range(12):
        bad = torch.tensor(1.0 if s in (3, 7) else 0.0)  # skipped updates: no change, counters kept
        skip_bias = s == 5  # a parameter without a gradient: the optimizer's own step serves it
        _grads(ref, s, skip_bias)
        _grads(model, s, skip_bias)
        _reference_step(ref_opt, bad)
        fast(bad)
        ref_sched.step()
        sched.step()
        _same(ref, ref_opt, model, opt)
        if s == 8:  # state replaced under the plan: the next step must use the loaded tensors
            saved = copy.deepcopy(ref_opt.state_dict())
            ref_opt.load_state_dict(saved)
            opt.load_state_dict(copy.deepcopy(saved))
    assert len(calls) == 3, "steps 0 (creates the state), 5 (a missing gradient) and 9 (state loaded) only"


def test_plain_step_where_plan_cannot_serve() -> None:
    _, _, model, opt = _pair(torch.optim.AdamW)
    fast = FusedStep(opt)
    calls = []
    opt.register_step_post_hook(lambda *a: calls.append(1))  # a hook must run: no fast path
    for s in range(3):
        _grads(model, s)
        fast(None)
    assert len(calls) == 3
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)
    assert not FusedStep(sgd).applies


def test_the_trainer_steps_through_the_fused_lists(tmp_path):
    """`Trainer.fit` with its default fused AdamW calls `optimizer.step()` once (it creates the state), then
    the planned kernels, and every step counter ends at the number of steps."""
    from hotloop import TrainConfig, Trainer

    torch.manual_seed(0)
    x, y = torch.randn(64, 6), torch.randn(64, 1)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))
    cfg = TrainConfig(max_steps=6, batch_size=8, lr=1e-2, run_dir=str(tmp_path), progress="off", tensorboard=False,
                      device="cpu", eval_every=0, log_every=3)  # fmt: skip
    trainer = Trainer(model, cfg, loss_fn=lambda m, b: nn.functional.mse_loss(m(b[0]), b[1]))
    calls = []
    real_step = trainer.optimizer.step

    def counted(self: torch.optim.Optimizer, *a: object, **k: object) -> object:
        calls.append(1)
        return real_step(*a, **k)

    trainer.optimizer.step = types.MethodType(counted, trainer.optimizer)  # type: ignore[method-assign]
    trainer.fit((x, y))
    assert trainer.optimizer.defaults.get("fused")
    assert len(calls) == 1, calls
    steps = {float(st["step"]) for st in trainer.optimizer.state.values()}
    assert steps == {6.0}
