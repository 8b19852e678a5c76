"""Process-wide switches a test may flip (`deterministic=true` turns on `torch.use_deterministic_algorithms`,
the sync guards set the sync debug mode) are put back after each test, so one test cannot slow or break
the next: on an H100 a leaked deterministic mode slowed every later GPT-2 step by a third."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _restore_global_torch_state():
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    benchmark = torch.backends.cudnn.benchmark
    yield
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.backends.cudnn.benchmark = benchmark
    if torch.cuda.is_available():
        torch.cuda.set_sync_debug_mode(0)
