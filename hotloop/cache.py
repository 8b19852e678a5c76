"""Where hotloop keeps caches: `$HOTLOOP_CACHE_DIR`, else `$XDG_CACHE_HOME/hotloop`, else `~/.cache/hotloop`.

Never the package directory or a fixed system path (read-only in sandboxes, seed 000). Every cache
writes a manifest of what it was built from and is rebuilt when that no longer matches.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """The cache directory (created on demand), optionally a sub-directory of it."""
    root = os.environ.get("HOTLOOP_CACHE_DIR")
    if root:
        base = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "hotloop"
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
