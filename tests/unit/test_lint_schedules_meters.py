"""HL014 and meters on real code (batch AG's BigVGAN and ImageCaptioning.pytorch, batch AF's SimMIM), in our own
words: an ExponentialLR is a per-epoch schedule only when its gamma says so; a project's own class named like a
scheduler that wraps the optimizer is stepped as the optimizer; timm's AverageMeter keeps tensors on the device."""

from __future__ import annotations

import textwrap

from hotloop.lint import lint_source

LOOP = """
import torch
import utils

{build}
for epoch in range(100):
    for x, y in loader:
        loss = model(x.cuda(non_blocking=True)).mean()
        loss.backward()
        optimizer.step()
        scheduler.step()
"""


def hl014(build: str) -> list[int]:
    return [f.line for f in lint_source(textwrap.dedent(LOOP.format(build=build))) if f.code == "HL014"]


def test_an_exponential_decay_per_epoch_stepped_every_batch_is_reported():
    assert hl014("scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.95)") == [11]


def test_an_exponential_decay_close_to_one_is_a_per_step_schedule():
    assert hl014("scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9999996)") == []
    assert hl014("scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=h.lr_decay)") == []


def test_a_project_class_named_like_a_scheduler_is_not_pytorchs():
    assert hl014("scheduler = utils.ReduceLROnPlateau(optimizer, factor=0.5)") == []
    assert hl014("scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)") == [11]


def test_timms_average_meter_keeps_a_tensor_on_the_device():
    """SimMIM (batch AF): `norm_meter.update(grad_norm)` with timm's AverageMeter is arithmetic on the device; a
    project meter whose `update` calls `float()` is not."""
    src = """
    import torch
    from timm.utils import AverageMeter

    def train(model, loader, opt):
        norm_meter = AverageMeter()
        for x, y in loader:
            loss = model(x.cuda(non_blocking=True)).mean()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            norm_meter.update(grad_norm)
    """
    hits = [(f.line, f.code) for f in lint_source(textwrap.dedent(src))]
    assert (12, "HL002") not in hits, hits
    assert (12, "HL002") in [(f.line, f.code) for f in lint_source(textwrap.dedent(src.replace("timm.utils", "mine")))]
