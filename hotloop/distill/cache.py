"""Offline distillation: the teacher's logits for every training sample, computed once, memory-mapped.

    directory/
        manifest.json   what the cache was built from: teacher, data, k, vocabulary, shape
        progress.json   samples done (the build resumes from here after an interruption)
        values.f16      (N, L, k) float16 top-k logits, or (N, L, V) full logits when k >= V
        indices.i32     (N, L, k) int32 token ids of those logits (absent for full logits)

Rows are keyed by sample index: row i holds the logits of sample i. `open_cache` returns CPU tensors
over the memory maps (nothing is read until a batch gathers its rows), which go into the training
batches next to the inputs: training then makes no teacher forward at all.

A manifest that does not match (another teacher, other data, another k) means the cache is stale: it is
rebuilt, and the reason is printed, never silently used. Under torchrun rank 0 builds while the other
ranks wait at a barrier, then every rank maps the same files.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from hotloop.distill.loss import DistillError, logits_of

FORMAT = 1


def fingerprint_tensor(t: torch.Tensor) -> str:
    """sha256 of a CPU tensor's bytes (the data: every input token of every sample)."""
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:24]  # sync: once, at setup


def fingerprint_module(module: nn.Module) -> str:
    """sha256 over a module's state (names, shapes and values): a cheap stand-in for 'the same teacher'."""
    h = hashlib.sha256()
    for name, v in sorted(module.state_dict().items()):
        h.update(f"{name}:{tuple(v.shape)}:{v.dtype}".encode())
        h.update(v.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())  # sync: once, at setup
    return h.hexdigest()[:24]


def _atomic_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def _stale_reason(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if not changed:
        return None
    names = {"teacher": "another teacher", "data": "other data", "n": "other data", "length": "other data",
             "k": "another top_k", "full": "another top_k", "vocab": "another teacher"}  # fmt: skip
    return ", ".join(dict.fromkeys(names.get(k, f"another {k}") for k in changed))


def build_cache(
    teacher: nn.Module,
    inputs: torch.Tensor,
    directory: str | Path,
    *,
    k: int,
    teacher_id: str,
    device: torch.device,
    batch_size: int = 64,
    say: Callable[[str], None] = print,
) -> int:
    """Make `directory` hold the teacher's logits for every row of `inputs` (N, L); resume a partial build.

    Returns the number of teacher forward passes made (0 when the cache was already complete).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    n, length = int(inputs.shape[0]), int(inputs.shape[1])
    teacher.eval()
    with torch.no_grad():
        vocab = int(logits_of(teacher(inputs[:1].to(device))).shape[-1])
    full = k >= vocab
    kept = vocab if full else k
    manifest = {"format": FORMAT, "teacher": teacher_id, "data": fingerprint_tensor(inputs), "k": kept,
                "vocab": vocab, "n": n, "length": length, "full": full}  # fmt: skip
    mpath, ppath = directory / "manifest.json", directory / "progress.json"
    done = 0
    if mpath.is_file():
        old = json.loads(mpath.read_text())
        reason = _stale_reason(old, manifest)
        if reason is None:
            done = json.loads(ppath.read_text()).get("done", 0) if ppath.is_file() else 0
            if done >= n:
                return 0
            say(f"teacher cache {directory}: resuming the build at sample {done}/{n}")
        else:
            say(f"teacher cache {directory} was built for {reason}: rebuilding it")
            for f in ("progress.json", "values.f16", "indices.i32", "manifest.json"):
                (directory / f).unlink(missing_ok=True)
    if done == 0:
        _atomic_json(ppath, {"done": 0})
        _atomic_json(mpath, manifest)
    mode = "r+" if done else "w+"
    vals = np.memmap(directory / "values.f16", dtype=np.float16, mode=mode, shape=(n, length, kept))
    idxs = None if full else np.memmap(directory / "indices.i32", dtype=np.int32, mode=mode, shape=(n, length, kept))
    forwards, t0, last_report = 0, time.perf_counter(), 0.0
    with torch.no_grad():  # not inference_mode (see loss.py); no autograd state is kept either way
        for start in range(done, n, batch_size):
            end = min(n, start + batch_size)
            logits = logits_of(teacher(inputs[start:end].to(device))).float()
            forwards += 1
            if full:
                vals[start:end] = logits.half().cpu().numpy()  # sync: writing the cache is the point
            else:
                top = torch.topk(logits, kept, dim=-1)
                vals[start:end] = top.values.half().cpu().numpy()  # sync: writing the cache is the point
                idxs[start:end] = top.indices.int().cpu().numpy()  # type: ignore[index]  # sync: the cache
            now = time.perf_counter()
            if end == n or now - last_report > 5.0 or start == done:
                vals.flush()
                if idxs is not None:
                    idxs.flush()
                _atomic_json(ppath, {"done": end})
                rate = (end - done) / max(now - t0, 1e-9)
                say(f"teacher cache: {end}/{n} samples ({100 * end / n:.0f}%, {rate:.0f} samples/s)")
                last_report = now
    return forwards


def open_cache(directory: str | Path, expect_n: int, vocab: int) -> dict[str, torch.Tensor]:
    """The cache as CPU tensors over its memory maps: {'t_values', 't_indices'} or {'t_logits'}."""
    directory = Path(directory)
    m = json.loads((directory / "manifest.json").read_text())
    if m["n"] != expect_n:
        raise DistillError(f"teacher cache {directory} holds {m['n']} samples, the data has {expect_n}")
    if m["vocab"] != vocab:
        raise DistillError(
            f"teacher vocabulary {m['vocab']} (cache {directory}) != student vocabulary {vocab}: the student must "
            "predict over the teacher's tokens"
        )
    shape = (m["n"], m["length"], m["k"])
    # mode "c" (copy-on-write): a writable view for torch.from_numpy that never changes the files
    vals = torch.from_numpy(np.memmap(directory / "values.f16", dtype=np.float16, mode="c", shape=shape))
    if m["full"]:
        return {"t_logits": vals}
    idxs = torch.from_numpy(np.memmap(directory / "indices.i32", dtype=np.int32, mode="c", shape=shape))
    return {"t_values": vals, "t_indices": idxs}
