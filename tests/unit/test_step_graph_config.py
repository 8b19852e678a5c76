"""`cuda_graph=step` is refused, before any step runs, wherever it cannot work - with the setting to change.
(Its behaviour on a GPU: tests/gpu/test_step_graph.py.)"""

from __future__ import annotations

import pytest
import torch

from hotloop import TrainConfig, Trainer, graphs
from hotloop.errors import ConfigError
from tests.unit.helpers import Regressor


@pytest.mark.parametrize(
    "kw, says",
    [
        ({"cuda_graph": "always"}, "allowed: off, step"),
        ({"cuda_graph": "step", "compile": "reduce-overhead"}, "compile=reduce-overhead"),
        ({"cuda_graph": "step", "compile": "max-autotune"}, "compile=max-autotune"),
        ({"cuda_graph": "step", "precision": "fp16"}, "precision=fp16"),
        ({"cuda_graph": "step", "strategy": "ddp"}, "strategy=ddp"),
    ],
)
def test_config_refuses_combinations_that_cannot_work(kw, says):
    with pytest.raises(ConfigError, match="cuda_graph") as e:
        TrainConfig(**kw)
    assert says in str(e.value)


def test_trainer_refuses_cuda_graph_on_the_cpu(tmp_path):
    with pytest.raises(ConfigError, match="cuda_graph=step needs a CUDA device"):
        Trainer(Regressor(), TrainConfig(device="cpu", cuda_graph="step", run_dir=str(tmp_path)))


def test_check_refuses_a_non_fused_optimizer_and_torchrun():
    cuda = torch.device("cuda")  # only the device's type is looked at: no GPU needed
    fused = torch.optim.AdamW(Regressor().parameters(), fused=True)
    plain = torch.optim.AdamW(Regressor().parameters(), foreach=True)
    graphs.check("step", cuda, "bf16", False, fused)  # accepted
    graphs.check("off", torch.device("cpu"), "fp16", True, plain)  # off: nothing to check
    with pytest.raises(ConfigError, match="fused=True"):
        graphs.check("step", cuda, "bf16", False, plain)
    with pytest.raises(ConfigError, match="torchrun"):
        graphs.check("step", cuda, "bf16", True, fused)
    with pytest.raises(ConfigError, match="precision=bf16"):
        graphs.check("step", cuda, "fp16", False, fused)


def test_cpu_training_is_unchanged_with_cuda_graph_off(tmp_path):
    """The step was split (`TrainStep.update` + the schedule) for capture: the default path still trains."""
    x, y = torch.randn(256, 8), torch.randn(256)
    cfg = TrainConfig(device="cpu", max_steps=8, batch_size=32, log_every=4, eval_every=0, progress="off",
                      tensorboard=False, run_dir=str(tmp_path), schedule="warmup_cosine")  # fmt: skip
    t = Trainer(Regressor(), cfg).fit((x, y))
    assert t._step_fn is not None and not isinstance(t._step_fn, graphs.CapturedStep)
    assert [r["step"] for r in t.history if "loss" in r] == [4, 8]


# -- CapturedStep's control flow on the CPU ---------------------------------------------------------
# The CUDA calls are replaced by stand-ins: the "capture" runs the step body once for real (so that window
# trains, as a real capture followed by its first replay does) and a "replay" only counts. What is checked
# is when hotloop captures, replays, falls back and re-captures - the numerics are tests/gpu's.


class _FakeStream:
    def wait_stream(self, other) -> None:
        pass


class _FakeGraph:
    fail = False

    def __init__(self) -> None:
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1


class _FakeCapture:
    def __init__(self, graph, **kw) -> None:
        self.graph = graph

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if _FakeGraph.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        return False


@pytest.fixture
def fake_cuda(monkeypatch):
    from contextlib import nullcontext

    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: _FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: _FakeStream())
    monkeypatch.setattr(torch.cuda, "set_stream", lambda s: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", _FakeCapture)
    _FakeGraph.fail = False
    yield
    _FakeGraph.fail = False


def _captured(notes, schedule="warmup_cosine", extra=False):
    from hotloop.optim import build_optimizer, build_scheduler
    from hotloop.precision import resolve_precision
    from hotloop.step import TrainStep, default_loss_fn

    torch.manual_seed(0)
    model = Regressor(extra=extra)
    cfg = TrainConfig(device="cpu", lr=1e-2, schedule=schedule, warmup_steps=2)
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    assert opt.defaults.get("fused")
    step = TrainStep(model, default_loss_fn, opt, build_scheduler(opt, cfg, 50), resolve_precision("fp32",
                     torch.device("cpu")), 1.0)  # fmt: skip
    return graphs.CapturedStep(step, torch.device("cpu"), note=notes.append), opt


def _window(n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(n, 8, generator=g), torch.randn(n, generator=g)),)


def test_warm_up_then_one_capture_then_replays_with_the_lr_written_in(fake_cuda):
    notes: list[str] = []
    cap, opt = _captured(notes)
    outs = [cap(_window(seed=i)) for i in range(8)]
    assert (cap.eager_steps, cap.captures, cap.replays) == (3, 1, 5)
    assert cap.graph.replays == 5 and not notes
    # the graph's LR tensors hold the LR of the last replayed step (the schedule has moved since), which moved
    # every step; the groups keep Python floats and their own `capturable`
    assert [float(t) for t in cap.lrs] == pytest.approx([outs[-1].lr] * len(opt.param_groups))
    assert len({o.lr for o in outs}) == 7  # warm-up ends at 1.0, where the cosine starts
    assert all(isinstance(g["lr"], float) and not g["capturable"] for g in opt.param_groups)
    assert all(set(o.metrics) == {"loss"} and o.grad_norm.dim() == 0 and o.samples == 32 for o in outs)


def test_a_window_of_another_shape_runs_eagerly_and_keeps_the_graph(fake_cuda):
    cap, _ = _captured([])
    for i in range(5):
        cap(_window(seed=i))
    cap(_window(n=20))  # a short last batch
    cap(_window(seed=9) + _window(seed=10))  # a window of two micro-batches
    cap(_window(seed=11))
    assert (cap.eager_steps, cap.captures, cap.replays) == (5, 1, 3)


def test_a_replaced_optimizer_state_is_captured_again(fake_cuda):
    cap, opt = _captured([])
    for i in range(5):
        cap(_window(seed=i))
    opt.load_state_dict(opt.state_dict())  # what a rollback or a resume does
    cap(_window(seed=6))
    assert cap.captures == 2 and cap.enabled


def test_a_moved_hyperparameter_or_a_metric_object_ends_graphs_with_a_note(fake_cuda):
    notes: list[str] = []
    cap, opt = _captured(notes)
    for i in range(5):
        cap(_window(seed=i))
    opt.param_groups[0]["betas"] = (0.85, 0.99)  # OneCycleLR's momentum cycling does this every step
    cap(_window(seed=6))
    cap(_window(seed=7))
    assert not cap.enabled and cap.replays == 2 and cap.eager_steps == 5
    assert len(notes) == 1 and "other than the LR" in notes[0]

    notes.clear()
    cap, _ = _captured(notes)
    cap.step.metric_objects["acc"] = object()  # a torchmetrics object returned by the loss function
    for i in range(5):
        cap(_window(seed=i))
    assert cap.captures == 0 and cap.eager_steps == 5 and "metric objects" in notes[0]


def test_a_step_that_cannot_be_captured_trains_that_window_eagerly(fake_cuda):
    notes: list[str] = []
    cap, opt = _captured(notes)
    for i in range(3):
        cap(_window(seed=i))
    before = [p.detach().clone() for p in cap.step.params]
    _FakeGraph.fail = True
    out = cap(_window(seed=3))
    assert not cap.enabled and cap.replays == 0 and "could not be captured" in notes[0]
    assert out.samples == 32 and any(not torch.equal(a, b) for a, b in zip(before, cap.step.params, strict=True))
    assert all(isinstance(g["lr"], float) and not g["capturable"] for g in opt.param_groups)


def test_an_lr_given_as_a_tensor_keeps_the_run_eager_with_a_note(fake_cuda):
    notes: list[str] = []
    cap, opt = _captured(notes, schedule="constant")
    cap.step.step_scheduler = False  # a user's scheduler would fill the tensor in place; hotloop's sets floats
    for g in opt.param_groups:
        g["lr"] = torch.tensor(g["lr"])
    for i in range(5):
        cap(_window(seed=i))
    assert cap.captures == 0 and cap.eager_steps == 5 and "LR is a tensor" in notes[0]
