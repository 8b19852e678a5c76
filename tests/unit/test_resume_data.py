"""Resume is bit-exact for every kind of data a user brings, and skipping to mid-epoch loads nothing.

Reference: the same run without interruption. Each case trains 60 steps with a checkpoint every 20;
the resumed run restarts from step 40 (mid-epoch: 24 batches per epoch) and its final weights must
equal the uninterrupted run's bit for bit (CPU, fp32). Run: `python -m pytest tests/unit/test_resume_data.py`.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from hotloop import TrainConfig, Trainer
from hotloop import checkpoint as ckpt_io

N, B = 192, 8  # 24 batches per epoch


def _data(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, 8, generator=g)
    return x, x @ torch.randn(8, generator=g) + 0.1 * torch.randn(N, generator=g)


class Net(nn.Module):
    """Dropout on purpose: the training RNG must be where the uninterrupted run had it."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(self.body(x).squeeze(-1), y)


class Augmented(Dataset):
    """Draws random augmentation from torch's global RNG inside __getitem__, and counts its calls."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y, self.calls = x, y, 0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        self.calls += 1
        return self.x[i] + 0.05 * torch.randn(8), self.y[i]


def _make(kind: str):
    x, y = _data()
    if kind == "tensors":
        return (x, y)
    if kind == "dataset":
        return Augmented(x, y)
    if kind == "dataloader-shuffle":
        return DataLoader(TensorDataset(x, y), batch_size=B, shuffle=True)
    if kind == "dataloader-workers-augment":
        return DataLoader(Augmented(x, y), batch_size=B, shuffle=True, num_workers=2)
    if kind == "stateful-dataloader":
        sdl = pytest.importorskip("torchdata.stateful_dataloader")
        return sdl.StatefulDataLoader(TensorDataset(x, y), batch_size=B, shuffle=True)
    raise AssertionError(kind)


def _cfg(run_dir, **kw) -> TrainConfig:
    base = dict(device="cpu", batch_size=B, max_steps=60, lr=1e-2, log_every=10, eval_every=0, ckpt_every=20,
                keep_last=5, run_dir=str(run_dir), progress="off", tensorboard=False, seed=3)  # fmt: skip
    base.update(kw)
    return TrainConfig(**base)


def _train(run_dir, kind: str, **kw) -> Trainer:
    torch.manual_seed(0)
    trainer = Trainer(Net(), _cfg(run_dir, **kw))
    trainer.fit(_make(kind))
    return trainer


def _resume_from(src, dst, step: int, kind: str) -> Trainer:
    shutil.copytree(src, dst)
    for f in ckpt_io.committed(dst):
        if f.step > step:
            ckpt_io._manifest_path(f.path).unlink()
            f.path.unlink()
    return _train(dst, kind, resume="auto")


KINDS = ["tensors", "dataset", "dataloader-shuffle", "dataloader-workers-augment", "stateful-dataloader"]


@pytest.mark.parametrize("kind", KINDS)
def test_resume_mid_epoch_is_bit_exact(tmp_path, kind):
    full = _train(tmp_path / "full", kind)
    resumed = _resume_from(tmp_path / "full", tmp_path / "resumed", 40, kind)
    assert resumed.state.step == 60
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), (kind, name, (a - b).abs().max().item())


def test_negative_control_plain_torch_loader_is_not_exact_without_hotloop(tmp_path):
    """The bug this fixes: a shuffled DataLoader iterated as PyTorch builds it draws its order from the
    global RNG, so a run restarted mid-epoch from a restored RNG state takes other batches."""
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=B, shuffle=True)
    torch.manual_seed(0)
    first = [b[1].clone() for b in loader]
    torch.manual_seed(1)  # another RNG state at the epoch's start, as a resumed run has
    assert not all(torch.equal(a, b[1]) for a, b in zip(first, loader, strict=True))


class Counting(Dataset):
    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        self.calls += 1
        return torch.full((4,), float(i)), torch.tensor(float(i))


def test_skipping_to_batch_1000_loads_no_skipped_sample():
    from hotloop.data import LoaderSource

    ds = Counting(8 * 2000)
    source = LoaderSource(DataLoader(ds, batch_size=8, shuffle=True), seed=0)
    full = list(source.epoch(0))
    ds.calls = 0
    it = source.epoch(0, skip=1000)
    first = next(it)
    assert ds.calls == 8  # only the batch that is used
    assert torch.equal(first[1], full[1000][1])
    rest = list(it)
    assert ds.calls == 8 * 1000 and len(rest) == 999


def test_user_loader_is_left_untouched(tmp_path):
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=B, shuffle=True)
    sampler = loader.sampler
    Trainer(Net(), _cfg(tmp_path, max_steps=5, ckpt_every=None)).fit(loader)
    assert loader.sampler is sampler and sampler.generator is None


def test_checkpoint_rng_and_data_state_load_as_cpu_whatever_the_map_location(tmp_path):
    """A run on CUDA loads the same file a CPU run wrote: model/optimizer tensors follow map_location,
    RNG and data state stay CPU tensors (torch.set_rng_state accepts nothing else)."""
    trainer = _train(tmp_path, "stateful-dataloader" if _has_torchdata() else "dataloader-shuffle", max_steps=20)
    state = ckpt_io.load_checkpoint(tmp_path, map_location="meta")
    assert next(iter(state["model"].values())).device.type == "meta"
    assert state["rng"]["torch"].device.type == "cpu" and state["rng"]["torch"].dtype == torch.uint8
    ckpt_io.restore_rng(state["rng"])  # would raise "RNG state must be a torch.ByteTensor" on meta/cuda
    assert trainer.state.step == 20


def _has_torchdata() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchdata") is not None
