"""CUDA-only paths: zero syncs between boundaries under `set_sync_debug_mode`, data kept on the device,
the side-stream prefetcher, CUDA graphs. Skipped without a GPU (run them on a lent GPU machine:
`python -m pytest tests/gpu -q`)."""

from __future__ import annotations

import warnings

import pytest
import torch

from hotloop import Callback, TrainConfig, Trainer
from hotloop.data import CudaPrefetcher, TensorSlices

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from tests.unit.helpers import Regressor, regression_data  # noqa: E402


class Label(Callback):
    def __init__(self) -> None:
        self.step = 0

    def on_step_end(self, trainer, output) -> None:
        self.step = trainer.state.step


def _cfg(tmp_path, **kw):
    base = dict(device="cuda", max_steps=24, batch_size=32, log_every=6, eval_every=0, run_dir=str(tmp_path),
                progress="off", tensorboard=False, compile=False)  # fmt: skip
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.parametrize("kw", [{}, {"precision": "fp16"}, {"data_on_device": False}, {"grad_accum": 2}])
def test_no_sync_between_boundaries(tmp_path, kw):
    x, y = regression_data(2048)
    label = Label()
    t = Trainer(Regressor(), _cfg(tmp_path, **kw), callbacks=[label])
    seen: list[int] = []

    def record(message, *args, **kwargs):
        if "synchroniz" in str(message).lower():
            seen.append(label.step)

    with warnings.catch_warnings():
        warnings.simplefilter("always")  # repeats at one line would be swallowed otherwise
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            t.fit((x, y))
        finally:
            torch.cuda.set_sync_debug_mode(0)
    off_boundary = [s for s in seen if s % 6 != 0 and s < 24]
    assert not off_boundary, f"syncs at steps {sorted(set(off_boundary))}"


def test_tensor_dataset_stays_on_device(tmp_path):
    x, y = regression_data(256)
    t = Trainer(Regressor(), _cfg(tmp_path, max_steps=2))
    t.fit((x, y))
    src = t._train_source
    assert isinstance(src, TensorSlices) and src.device.type == "cuda"


def test_prefetcher_yields_the_same_batches():
    batches = [(torch.randn(4, 3), torch.arange(4)) for _ in range(5)]
    got = list(CudaPrefetcher(iter(batches), torch.device("cuda")))
    assert len(got) == 5
    for (a, b), (c, d) in zip(got, batches, strict=True):
        assert a.is_cuda and torch.equal(a.cpu(), c) and torch.equal(b.cpu(), d)


def test_auto_precision_and_compile_defaults(tmp_path):
    t = Trainer(Regressor(), _cfg(tmp_path, compile="auto"))
    assert t.precision.name in ("bf16", "fp16") and t.compile_mode == "default"


def test_reduce_overhead_trains(tmp_path):
    x, y = regression_data(1024)
    t = Trainer(Regressor(), _cfg(tmp_path, compile="reduce-overhead", max_steps=12))
    t.fit((x, y))
    assert t.state.step == 12 and all(torch.isfinite(p).all() for p in t.model.parameters())
