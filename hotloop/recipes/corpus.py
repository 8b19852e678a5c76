"""The `gpt` recipe's corpus: the `.py` files of the running Python's standard library, as bytes.

Present on every machine, written by nobody here, and about 30 MB: enough text for a small model to
learn Python's shape in a few minutes. Files are split into train and validation *by file* (a stable
hash of the relative path), so validation measures generalisation to unseen modules. The bytes are
written once into memory-mapped `uint8` arrays under the cache directory, next to a manifest of the
files they were built from (paths, sizes, mtimes); a changed standard library rebuilds the cache.

Batches are random windows gathered with one indexing op (`data[starts[:, None] + arange(T + 1)]`),
not collated sample by sample.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from hotloop.cache import cache_dir

VAL_PERCENT = 5
SEPARATOR = b"\n\n"


def stdlib_files(root: Path | None = None) -> list[Path]:
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        files += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
    return files


def _is_val(rel: str) -> bool:
    return int(hashlib.sha256(rel.encode()).hexdigest(), 16) % 100 < VAL_PERCENT


def _manifest(root: Path, files: list[Path]) -> dict:
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return {"python": sys.version, "root": str(root), "files": len(files), "fingerprint": h.hexdigest(), "v": 1}


def load_corpus(root: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(train, val) byte arrays, memory-mapped from the cache; built on first use."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = stdlib_files(root)
    if not files:
        raise FileNotFoundError(f"no .py files under {root}: the gpt recipe trains on the standard library's source")
    manifest = _manifest(root, files)
    key = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:16]
    d = cache_dir("corpus", f"stdlib-{key}")
    mpath = d / "manifest.json"
    if not (mpath.is_file() and json.loads(mpath.read_text()) == manifest):
        parts: dict[str, list[bytes]] = {"train": [], "val": []}
        for f in files:
            parts["val" if _is_val(str(f.relative_to(root))) else "train"].append(f.read_bytes())
        for split, chunks in parts.items():
            tmp = d / f".{split}.bin.tmp"
            tmp.write_bytes(SEPARATOR.join(chunks))
            os.replace(tmp, d / f"{split}.bin")
        mpath.write_text(json.dumps(manifest, indent=1))  # written last: its presence marks a complete cache
    # mode "c" (copy-on-write): torch can wrap the map without a copy and nothing can write the cache.
    return (np.memmap(d / "train.bin", dtype=np.uint8, mode="c"), np.memmap(d / "val.bin", dtype=np.uint8, mode="c"))


def _as_tensor(data: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(data if data.flags.writeable else np.array(data))


class RandomWindows:
    """Endless (x, y) batches of random `block_size` windows; y is x shifted by one byte."""

    def __init__(
        self, data: np.ndarray, block_size: int, batch_size: int, seed: int, device: torch.device | None = None
    ) -> None:
        if len(data) <= block_size + 1:
            raise ValueError(f"corpus of {len(data)} bytes is too short for block_size={block_size}")
        self.device = device or torch.device("cpu")
        # On a GPU the whole corpus (tens of MB) lives in device memory and windows are gathered there.
        self.data = _as_tensor(data).to(self.device)
        self.block_size, self.batch_size = block_size, batch_size
        self.generator = torch.Generator().manual_seed(seed)  # on the CPU: the same windows on every device
        self.offsets = torch.arange(block_size + 1, device=self.device)
        self.rank_aware = False
        """Set when each rank was seeded differently (the recipe does): the Trainer then does not warn."""

    def state_dict(self) -> dict:
        """The sampler's position: its generator state (checkpointed for exact resume)."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        high = len(self.data) - self.block_size - 1
        while True:
            starts = torch.randint(high, (self.batch_size,), generator=self.generator)
            if self.device.type == "cuda":
                starts = starts.pin_memory().to(self.device, non_blocking=True)
            w = self.data[starts[:, None] + self.offsets].long()
            yield w[:, :-1], w[:, 1:]


def eval_windows(data: np.ndarray, block_size: int, batch_size: int, n_batches: int) -> list[tuple[torch.Tensor, ...]]:
    """A fixed validation set: `n_batches` batches of windows spread evenly over the split."""
    t = _as_tensor(data)
    n = n_batches * batch_size
    starts = torch.linspace(0, len(t) - block_size - 2, n).long()
    offsets = torch.arange(block_size + 1)
    out = []
    for i in range(n_batches):
        w = t[starts[i * batch_size : (i + 1) * batch_size, None] + offsets].long()
        out.append((w[:, :-1], w[:, 1:]))
    return out
