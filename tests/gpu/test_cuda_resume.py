"""Resume across devices: a checkpoint written on the CPU resumes on CUDA and one written on CUDA resumes
on the CPU (RNG and data state load as CPU tensors whatever the device), and CUDA resume equals the
uninterrupted CUDA run. Skipped without a GPU: `python -m pytest tests/gpu -q`."""

from __future__ import annotations

import shutil

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from hotloop import TrainConfig, Trainer
from hotloop import checkpoint as ckpt_io

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from tests.unit.helpers import Regressor, regression_data  # noqa: E402


def _run(run_dir, device, **kw) -> Trainer:
    torch.manual_seed(0)
    base = dict(device=device, max_steps=40, batch_size=16, log_every=10, eval_every=0, ckpt_every=10,
                keep_last=5, run_dir=str(run_dir), progress="off", tensorboard=False, compile=False,
                precision="fp32")  # fmt: skip
    cfg = TrainConfig(**{**base, **kw})
    x, y = regression_data(512)
    trainer = Trainer(Regressor(dropout=0.1), cfg)
    trainer.fit(DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True))
    return trainer


def _keep_until(run_dir, step):
    for f in ckpt_io.committed(run_dir):
        if f.step > step:
            ckpt_io._manifest_path(f.path).unlink()
            f.path.unlink()


@pytest.mark.parametrize("first,then", [("cpu", "cuda"), ("cuda", "cpu"), ("cuda", "cuda")])
def test_resume_across_devices(tmp_path, first, then):
    # One 40-step run on `first`; its checkpoints after step 20 are removed, as if it died there; the
    # copy resumes on `then` from step 20 (same schedule, same shuffled order) and must finish.
    full = _run(tmp_path / "a", first)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    _keep_until(tmp_path / "b", 20)
    resumed = _run(tmp_path / "b", then, resume="auto")
    assert resumed.state.step == 40
    if first == then:  # same device and deterministic kernels for this model: bit-exact
        for a, b in zip(full.model.parameters(), resumed.model.parameters(), strict=True):
            assert torch.equal(a, b)
