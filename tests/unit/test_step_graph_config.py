"""`cuda_graph=step` is refused, before any step runs, wherever it cannot work - with the setting to change;
`cuda_graph=auto` (the default) is quietly eager there, and elsewhere captures only a launch-bound step that
dispatches the same work every step. (Their behaviour on a GPU: tests/gpu/test_step_graph.py.)"""

from __future__ import annotations

import pytest
import torch

from hotloop import TrainConfig, Trainer, graphs
from hotloop.errors import ConfigError
from tests.unit.helpers import Regressor, regression_data


@pytest.mark.parametrize(
    "kw, says",
    [
        ({"cuda_graph": "always"}, "allowed: auto, off, step"),
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


def test_resolve_refuses_step_where_it_cannot_work_and_keeps_auto_quiet_there():
    cuda = torch.device("cuda")  # only the device's type is looked at: no GPU needed
    fused = torch.optim.AdamW(Regressor().parameters(), fused=True)
    plain = torch.optim.AdamW(Regressor().parameters(), foreach=True)
    assert graphs.resolve("step", cuda, "bf16", False, fused) == "step"
    assert graphs.resolve("auto", cuda, "bf16", False, fused) == "auto"
    assert graphs.resolve("off", torch.device("cpu"), "fp16", True, plain) == "off"  # off: nothing to check
    refused = [
        ((cuda, "bf16", False, plain), "fused=True"),
        ((cuda, "bf16", True, fused), "torchrun"),
        ((cuda, "fp16", False, fused), "precision=bf16"),
        ((torch.device("cpu"), "fp32", False, fused), "needs a CUDA device"),
        ((cuda, "bf16", False, fused, True), "compile mode that captures CUDA graphs"),
    ]
    for args, says in refused:
        with pytest.raises(ConfigError, match=says):
            graphs.resolve("step", *args)
        assert graphs.resolve("auto", *args) == "off"


def test_the_default_is_auto_and_eager_on_the_cpu(tmp_path):
    assert TrainConfig().cuda_graph == "auto"
    t = Trainer(Regressor(), TrainConfig(device="cpu", run_dir=str(tmp_path)))
    assert t.cuda_graph == "off"


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

    def capture_begin(self, **kw) -> None:
        pass

    def capture_end(self) -> None:
        if _FakeGraph.fail:
            raise RuntimeError("operation not permitted when stream is capturing")

    def replay(self) -> None:
        self.replays += 1


class _FakeEvent:
    """Warm-up step 2's timing: the GPU "took" `gpu_ms`, against a host issue time stretched to `host_ms`."""

    gpu_ms = 1.0

    def __init__(self, **kw) -> None:
        pass

    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, other) -> float:
        return _FakeEvent.gpu_ms


@pytest.fixture
def fake_cuda(monkeypatch):
    from contextlib import nullcontext

    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: _FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: _FakeStream())
    monkeypatch.setattr(torch.cuda, "set_stream", lambda s: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    _FakeGraph.fail = False
    yield
    _FakeGraph.fail = False


def _captured(notes, schedule="warmup_cosine", extra=False, auto=False, loss_fn=None):
    from hotloop.optim import build_optimizer, build_scheduler
    from hotloop.precision import resolve_precision
    from hotloop.step import TrainStep, default_loss_fn

    torch.manual_seed(0)
    model = Regressor(extra=extra)
    cfg = TrainConfig(device="cpu", lr=1e-2, schedule=schedule, warmup_steps=2)
    opt = build_optimizer(model, cfg, torch.device("cpu"))
    assert opt.defaults.get("fused")
    step = TrainStep(model, loss_fn or default_loss_fn, opt, build_scheduler(opt, cfg, 50),
                     resolve_precision("fp32", torch.device("cpu")), 1.0)  # fmt: skip
    return graphs.CapturedStep(step, torch.device("cpu"), note=notes.append, auto=auto), opt


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


# -- cuda_graph=auto ------------------------------------------------------------------------------


def _run(cap, n, first_seed=0):
    return [cap(_window(seed=first_seed + i)) for i in range(n)]


def test_auto_captures_a_launch_bound_step_that_does_the_same_work_every_step(fake_cuda):
    """The LR moves every step (warmup_cosine) and meets the weight decay (0.01) on its way up: the recorder
    leaves the optimizer's `lr` out, as the graph writes it itself."""
    notes: list[str] = []
    cap, _ = _captured(notes, auto=True)
    _FakeEvent.gpu_ms = 0.0  # the GPU finished as soon as the host had issued the step
    outs = _run(cap, 9)
    assert (cap.eager_steps, cap.captures, cap.replays) == (4, 1, 5)
    assert outs[2].lr != outs[3].lr  # the two recorded steps
    assert len(notes) == 1 and "cuda_graph=auto captures the whole step" in notes[0]


def test_auto_keeps_a_gpu_bound_step_eager_with_a_note(fake_cuda):
    notes: list[str] = []
    cap, _ = _captured(notes, auto=True)
    _FakeEvent.gpu_ms = 1e6
    _run(cap, 8)
    assert (cap.eager_steps, cap.captures, cap.replays) == (8, 0, 0)
    assert len(notes) == 1 and "GPU-bound" in notes[0]


def _annealed(calls):
    def loss_fn(model, batch):  # a weight annealed by a Python float: a graph would freeze it
        calls.append(1)
        return model(*batch) * (1.0 / len(calls))

    loss_fn.graph_safe = True  # wrongly: the recorder still sees it
    return loss_fn


def _layer_drop(calls):
    def loss_fn(model, batch):  # an extra term on some steps only (random layer drop, a curriculum)
        calls.append(1)
        loss = model(*batch)
        return loss + 0.01 * model.net[0].weight.square().sum() if len(calls) % 2 else loss

    loss_fn.graph_safe = True
    return loss_fn


def test_auto_keeps_a_users_loss_function_eager_unless_marked_graph_safe(fake_cuda):
    """A loss function switching on a term at step 5 - just when the capture runs - would be frozen into the
    graph; no record of steps 3 and 4 can see it coming."""
    calls: list[int] = []

    def loss_fn(model, batch):
        calls.append(1)
        loss = model(*batch)
        return loss * 2.0 if len(calls) >= 5 else loss

    notes: list[str] = []
    cap, _ = _captured(notes, auto=True, loss_fn=loss_fn)
    _FakeEvent.gpu_ms = 0.0
    _run(cap, 8)
    assert (cap.eager_steps, cap.captures) == (8, 0) and len(calls) == 8
    assert len(notes) == 1 and "launch-bound" in notes[0] and "graph_safe" in notes[0]
    loss_fn.graph_safe = True  # the user's word: captured
    cap, _ = _captured([], auto=True, loss_fn=loss_fn)
    _run(cap, 8)
    assert cap.captures == 1


@pytest.mark.parametrize("make_loss, says", [(_annealed, "aten.mul.Tensor"), (_layer_drop, "op ")])
def test_auto_keeps_a_step_whose_work_changes_between_steps_eager(fake_cuda, make_loss, says):
    notes: list[str] = []
    cap, _ = _captured(notes, auto=True, loss_fn=make_loss([]))
    _FakeEvent.gpu_ms = 0.0
    _run(cap, 8)
    assert (cap.eager_steps, cap.captures, cap.replays) == (8, 0, 0)
    assert len(notes) == 1 and "warm-up steps 3 and 4 differ" in notes[0] and says in notes[0]
    assert "cuda_graph=off" in notes[0]


def test_auto_checks_a_replayed_step_against_the_reference_and_ends_graphs_when_it_changed(fake_cuda, monkeypatch):
    monkeypatch.setattr(graphs, "VERIFY_EVERY", 3)
    notes: list[str] = []
    scale = {"value": 1.0}

    def loss_fn(model, batch):
        return model(*batch) * scale["value"]

    loss_fn.graph_safe = True
    cap, _ = _captured(notes, auto=True, loss_fn=loss_fn)
    _FakeEvent.gpu_ms = 0.0
    _run(cap, 12)  # 4 warm-up, capture + 2 replays, 1 checked eager step, 3 replays, 1 checked
    assert (cap.eager_steps, cap.captures, cap.replays) == (6, 1, 6) and cap.enabled and len(notes) == 1
    scale["value"] = 2.0  # e.g. a callback changing the loss at an epoch
    _run(cap, 5, first_seed=20)  # 3 replays (stale until the check, every 3), the check finds it, then eager
    assert not cap.enabled and cap.replays == 9 and cap.eager_steps == 8
    assert "changed after 9 replays" in notes[1] and "aten.mul.Tensor" in notes[1]


def test_the_recorder_runs_compiled_code_as_compiled():
    """A step recorded for auto trains exactly as an unrecorded one: torch.compile's code is not swapped for
    eager ops under the recorder (which would also break bit-exact resume), and nothing recompiles."""
    torch.manual_seed(0)
    model = torch.compile(Regressor())
    x, y = regression_data(64)
    plain = model(x, y)
    frames = graphs._frames_compiled()
    rec = graphs.OpStream()
    with rec:
        recorded = model(x, y)
    assert torch.equal(plain, recorded) and graphs._frames_compiled() == frames
    assert rec.ops and not any("relu" in op[0] for op in rec.ops)  # the ReLU is inside a compiled kernel
