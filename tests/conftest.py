"""Shared fixtures. Caches go to a temporary directory (never a fixed path: seed 000)."""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["HOTLOOP_CACHE_DIR"] = str(tmp_path_factory.mktemp("hotloop-cache"))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def requires_cuda() -> pytest.MarkDecorator:
    """The one helper that gates GPU-only tests."""
    return pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
