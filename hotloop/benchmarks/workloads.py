"""Benchmark workloads: the same model, data and optimizer settings for every variant.

- `mlp`: a small classifier, batch 256 - overhead-bound, so it shows what the data path and the loop cost.
- `cnn`: a small ResNet on synthetic 32x32 RGB images, batch 64 on the CPU, 256 on CUDA.
- `gpt`: the `gpt` recipe's byte-level model on random bytes (0.9M on the CPU, 6x384 on CUDA); its 256-entry
  head makes it incomparable with published GPT-2 figures.
- `gpt2`: GPT-2 small with its real shape - vocabulary 50257, tied embeddings, 12 layers x 768, context
  1024, 124M parameters - at batch 16 x 1024 in bf16: the workload whose MFU compares with published
  GPT-2 runs (38-41%). CUDA only.

Data is synthetic and made here (no downloads); every variant gets the same tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from hotloop.config import GPTConfig
from hotloop.recipes.gptmodel import GPT


@dataclass
class Workload:
    name: str
    make_model: Callable[[], nn.Module]
    """A fresh model; forward(x, y) returns the mean loss."""
    x: torch.Tensor
    y: torch.Tensor
    batch_size: int
    lr: float
    precision: str
    """fp32 or bf16 (autocast), identical for every variant."""
    tokens_per_sample: int = 0
    flops_per_step: float = 0.0
    """Training FLOPs of one step (for MFU), 0 when not computed."""


class MLP(nn.Module):
    """Small on purpose: its compute is a fraction of a millisecond, so the loop and the data path show."""

    def __init__(self, d_in: int = 32, hidden: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(x), y)


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.short = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
            if stride != 1 or c_in != c_out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.short(x))


class SmallResNet(nn.Module):
    """ResNet-ish for 32x32 inputs: a stem and three stages of one basic block each."""

    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.Sequential(
            BasicBlock(width, width, 1), BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 4 * width, 2)
        )
        self.head = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.blocks(self.stem(x)).mean(dim=(2, 3))
        return F.cross_entropy(self.head(h), y)


def gpt_flops_per_token(cfg: GPTConfig, n_params: int) -> float:
    """Training FLOPs per token: 6 N for the matmuls (forward + backward; N without the position
    embedding, which is a lookup) plus attention's 12 L T C (PaLM, appendix B)."""
    return 6 * n_params + 12 * cfg.n_layer * cfg.block_size * cfg.n_embd


def _gpt_workload(name: str, cfg: GPTConfig, vocab: int, tie: bool, batch: int, n: int, cuda: bool) -> Workload:
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, vocab, (n, cfg.block_size + 1), generator=g)
    probe = GPT(cfg, vocab, tie)
    n_params = sum(p.numel() for p in probe.parameters()) - probe.wpe.weight.numel()  # tied: counted once
    flops = batch * cfg.block_size * gpt_flops_per_token(cfg, n_params)
    return Workload(name, lambda: GPT(cfg, vocab, tie), data[:, :-1].contiguous(), data[:, 1:].contiguous(),
                    batch_size=batch, lr=3e-4, precision="bf16" if cuda else "fp32",
                    tokens_per_sample=cfg.block_size, flops_per_step=flops)  # fmt: skip


def make_workload(name: str, device: str) -> Workload:
    g = torch.Generator().manual_seed(0)
    cuda = device.startswith("cuda")
    if name == "mlp":
        x = torch.randn(16384, 32, generator=g)
        y = torch.randint(0, 10, (16384,), generator=g)
        return Workload("mlp", MLP, x, y, batch_size=256, lr=1e-3, precision="fp32")
    if name == "cnn":
        n = 8192 if cuda else 2048
        x = torch.randn(n, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (n,), generator=g)
        return Workload("cnn", SmallResNet, x, y, batch_size=256 if cuda else 64, lr=1e-3,
                        precision="bf16" if cuda else "fp32")  # fmt: skip
    if name == "gpt":
        cfg = GPTConfig(n_layer=6, n_head=6, n_embd=384, block_size=256) if cuda else GPTConfig()
        return _gpt_workload("gpt", cfg, 256, False, 32, 32 * 64, cuda)
    if name == "gpt2":
        if not cuda:
            raise ValueError("the gpt2 workload (124M, 16x1024) is for CUDA; on the CPU use --workload gpt")
        cfg = GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024)
        return _gpt_workload("gpt2", cfg, 50257, True, 16, 16 * 32, cuda)
    raise ValueError(f"unknown workload {name!r}; choose mlp, cnn, gpt or gpt2")
