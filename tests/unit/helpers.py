"""Small models and data for unit tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch
from torch import nn


class Regressor(nn.Module):
    """MLP whose forward(x, y) returns the MSE loss, or a dict with an extra metric."""

    def __init__(self, d_in: int = 8, hidden: int = 16, extra: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 1))
        self.extra = extra

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        pred = self.net(x).squeeze(-1)
        loss = nn.functional.mse_loss(pred, y)
        if self.extra:
            return {"loss": loss, "mae": (pred - y).abs().mean()}
        return loss


def regression_data(n: int = 64, d_in: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    w = torch.randn(d_in, generator=g)
    return x, x @ w + 0.1 * torch.randn(n, generator=g)


def lint_project(tmp_path: Path, files: dict[str, str], script: str) -> list[tuple[int, str]]:
    """(line, code) of `hotloop lint train.py` in a project made of `files` beside `script` (a README marks its
    root, as in a user's checkout)."""
    from hotloop.lint import lint_paths

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "README.md").write_text("x\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    return [(f.line, f.code) for f in lint_paths([tmp_path / "train.py"])]
