"""The hot-loop contract: zero host reads between boundaries, one read per log boundary.

Reads are counted with `hotloop.doctor.HostReadCounter` (a TorchFunctionMode) while the Trainer runs on
the CPU. Each read is labelled with the last completed step, so label k covers the boundary after step
k and the computation of step k + 1: a label must show exactly one read at a boundary and none elsewhere.
"""

from __future__ import annotations

import pytest
import torch

from hotloop import Callback, TrainConfig, Trainer
from hotloop.doctor import HostReadCounter

from .helpers import Regressor, regression_data


class Label(Callback):
    def __init__(self, counter: HostReadCounter) -> None:
        self.counter = counter

    def on_step_end(self, trainer, output) -> None:
        self.counter.label = trainer.state.step


class LabelledTrainer(Trainer):
    """The checkpoint written at the end is its own boundary; label its reads apart."""

    counter: HostReadCounter

    def save_checkpoint(self, path=None):
        self.counter.label = "checkpoint"
        return super().save_checkpoint(path)


def _run(tmp_path, loss_fn=None, **kw):
    x, y = regression_data(512)
    vx, vy = regression_data(64, seed=1)
    cfg = dict(
        device="cpu",
        max_steps=24,
        batch_size=16,
        grad_accum=2,
        log_every=6,
        eval_every=12,
        clip_grad=1.0,
        run_dir=str(tmp_path),
        progress="off",
        tensorboard=False,
    )
    cfg.update(kw)
    counter = HostReadCounter()
    counter.label = 0
    trainer = LabelledTrainer(Regressor(extra=True), TrainConfig(**cfg), loss_fn=loss_fn, callbacks=[Label(counter)])
    trainer.counter = counter
    with counter:
        trainer.fit((x, y), (vx, vy))
    return trainer, counter


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"precision": "fp16"},
        {"precision": "bf16"},
        {"optim": {"implementation": "foreach"}},
        {"clip_grad": None},
        {"log_first_step": True},
    ],
    ids=["fp32-fused", "fp16-scaler", "bf16", "fp32-foreach", "no-clip", "log-first-step"],
)
def test_one_read_per_log_boundary_and_none_elsewhere(tmp_path, variant):
    trainer, counter = _run(tmp_path, **variant)
    per_label = counter.by_label()
    boundaries = {6, 12, 18, 24} | ({1} if variant.get("log_first_step") else set())
    for label in range(0, 25):  # eval at 12 and at the end shares the log boundary's read
        expected = 1 if label in boundaries else 0
        assert per_label.get(label, 0) == expected, (label, [r for r in counter.reads if r.label == label])
    assert [r["step"] for r in trainer.history] == sorted(boundaries)
    assert all("val_loss" in r for r in trainer.history if r["step"] in (12, 24))


def test_counter_sees_a_sync_in_user_code(tmp_path):
    """Negative control: a loss function that calls .item() shows up on every step, at its own line."""

    def chatty_loss(model, batch):
        loss = model(*batch)["loss"]
        if loss.item() > 1e9:  # a classic hidden sync
            raise RuntimeError
        return loss

    _, counter = _run(tmp_path, loss_fn=chatty_loss)
    per_label = counter.by_label()
    assert all(per_label[k] >= 2 for k in range(0, 24))  # 2 micro-batches per step
    import linecache

    boundary = {r for r in counter.reads if "# sync:" in linecache.getline(r.filename, r.lineno)}  # hotloop's own
    sites = {(r.filename, r.kind) for r in counter.reads if r.kind == "item" and r not in boundary}
    assert sites == {(__file__, "item")}


def test_counter_catches_each_kind_of_read():
    t = torch.tensor([1.0, -2.0])
    with HostReadCounter() as c:
        t[0].item()
        float(t[0])
        bool(t[0] > 0)
        t.tolist()
        f"{t[0]:.2f}"
        t[t > 0]
        torch.nonzero(t)
        torch.tensor([t[0], t[1]])
        max(t[0], t[1])
    kinds = [r.kind for r in c.reads]
    assert kinds[:8] == [
        "item",
        "__float__",
        "__bool__",
        "tolist",
        "__format__",
        "boolean-mask index",
        "nonzero",
        "torch.tensor over tensors",
    ]
    assert kinds[8] == "__bool__"  # Python max() compares tensors with bool()


def test_counter_sees_blocking_host_to_device_copies():
    """Classified by the target device named in the call, so a CPU machine checks it (the call itself
    then fails without a GPU, after the counter saw it)."""
    t = torch.ones(3)
    calls = [
        lambda: torch.tensor(2.0, device="cuda"),
        lambda: t.to("cuda"),
        lambda: t.to(torch.device("cuda:0")),
        lambda: t.cuda(),
        lambda: t.to("cuda", non_blocking=True),  # unpinned: still synchronous
    ]
    with HostReadCounter() as c:
        for call in calls:
            try:
                call()
            except (RuntimeError, AssertionError):
                pass
        t.to("cpu")  # none of these is a host-device copy
        t.to(torch.float64)
        torch.tensor(2.0)
        torch.full((), 2.0)
    kinds = [r.kind for r in c.reads]
    assert len(kinds) == 5, kinds
    assert "blocking host-to-device copy" in kinds[0]
    assert all("without non_blocking" in k for k in kinds[1:4])
    assert kinds[4] == "non_blocking copy from unpinned memory"
