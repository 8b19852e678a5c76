"""DataLoaders that resume exactly, and skip to a mid-epoch position without loading a sample.

A user's `DataLoader(dataset, shuffle=True)` is not resumable as PyTorch builds it: its `RandomSampler`
draws each epoch's permutation from the *global* RNG when the epoch starts, and its workers seed
themselves from a base seed drawn the same way; a resumed run restores a mid-epoch RNG state, so it
draws another permutation. Random augmentation inside `__getitem__` depends on how many samples a
worker has loaded before. And skipping the first k batches of an epoch by iterating them loads and
collates every one of them (hours, for the users of other trainers).

hotloop therefore *adopts* a plain `DataLoader` over a map-style dataset: it builds an equivalent
loader (same batch size, sampler, workers, collate_fn, pinning, ...) whose

- sampler draws epoch e's order from a generator seeded from (seed, e), not from the global RNG;
- index keys are `(epoch, index)` pairs, and the dataset wrapper (`SeededSamples`) seeds torch's RNG
  (and, in a worker, Python's and NumPy's) from (seed, epoch, index) before loading each sample, so a
  sample's random augmentation is a function of the sample, whatever worker loads it and whatever
  came before;
- batch sampler drops the first k batches of an epoch as *index lists*: no `__getitem__`, no collate.

A resumed run then takes exactly the batches of the uninterrupted one. The user's own loader object is
left untouched. Loaders with their own state (`torchdata.stateful_dataloader.StatefulDataLoader`, any
loader with `state_dict`) are checkpointed through that state instead. Other loaders (subclasses,
iterable datasets) are iterated as given, skipped by iteration, with a warning that resume replays and
may not be exact.
"""

from __future__ import annotations

import copy
import random
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    Sampler,
    SequentialSampler,
    get_worker_info,
)

_MASK = (1 << 63) - 1


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of epoch `epoch`'s order (the same rule as hotloop's in-memory tensor slicing)."""
    return (seed * 1_000_003 + epoch) & _MASK


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """A well-mixed 63-bit seed for loading sample `index` in `epoch` (splitmix64's finaliser)."""
    z = (epoch_seed(seed, epoch) * 0x9E3779B97F4A7C15 + int(index) + 1) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (z ^ (z >> 31)) & _MASK


class SeededSamples(Dataset):
    """`dataset[index]`, loaded under an RNG seeded from (seed, epoch, index); keys are (epoch, index)."""

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        epoch, index = key
        s = sample_seed(self.seed, epoch, index)
        if get_worker_info() is not None:  # a worker process: its RNGs are its own
            torch.default_generator.manual_seed(s)
            random.seed(s)
            np.random.seed(s & 0xFFFFFFFF)
            return self.dataset[index]
        state = torch.default_generator.get_state()  # the main process: training's RNG is left as it was
        torch.default_generator.manual_seed(s)
        try:
            return self.dataset[index]
        finally:
            torch.default_generator.set_state(state)


class EpochKeys(Sampler):
    """The inner (batch) sampler's output for one epoch as (epoch, index) keys, after `skip` batches.

    Skipped batches are drawn from the inner sampler as index lists only; nothing is loaded.
    """

    def __init__(self, inner: Any, seed: int, batched: bool) -> None:
        self.inner, self.seed, self.batched = inner, seed, batched
        self.epoch, self.skip = 0, 0
        base = inner.sampler if batched and isinstance(inner, BatchSampler) else inner
        self.random_source = base if hasattr(base, "generator") else None
        """A torch sampler drawing from `generator` (RandomSampler, SubsetRandomSampler, ...): seeded per epoch."""
        self.epoch_aware = [o for o in (inner, base) if hasattr(o, "set_epoch")]

    def start(self, epoch: int, skip: int) -> None:
        self.epoch, self.skip = epoch, skip
        for o in self.epoch_aware:
            o.set_epoch(epoch)
        if self.random_source is not None:
            self.random_source.generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.inner)
        for _ in range(self.skip):
            if next(it, None) is None:
                return
        e = self.epoch
        if self.batched:
            for indices in it:
                yield [(e, i) for i in indices]
        else:
            for i in it:
                yield (e, i)

    def __len__(self) -> int:
        return len(self.inner)


def _deterministic(keys: EpochKeys) -> bool:
    base = keys.inner.sampler if keys.batched and isinstance(keys.inner, BatchSampler) else keys.inner
    if keys.random_source is not None or keys.epoch_aware:
        return True
    return isinstance(base, SequentialSampler) and (not keys.batched or isinstance(keys.inner, BatchSampler))


def adopt(loader: DataLoader, seed: int) -> tuple[DataLoader, EpochKeys] | None:
    """An exact-resume equivalent of `loader` (see the module docstring), or None if it cannot be built."""
    if type(loader) is not DataLoader or isinstance(loader.dataset, IterableDataset):
        return None
    batched = loader.batch_sampler is not None
    inner = copy.copy(loader.batch_sampler if batched else loader.sampler)
    if batched and isinstance(inner, BatchSampler) and hasattr(inner.sampler, "generator"):
        inner.sampler = copy.copy(inner.sampler)  # it gets hotloop's generator; the user's loader keeps its own
    keys = EpochKeys(inner, seed, batched)
    if not _deterministic(keys):
        warnings.warn(
            f"hotloop cannot tell whether the DataLoader's sampler {type(inner).__name__} draws each epoch's order "
            "reproducibly: a resumed run is exact only if it does (give it a `generator` attribute hotloop can "
            "seed, or a `set_epoch(epoch)` method)",
            stacklevel=4,
        )
    kwargs: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": torch.Generator(),
        "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    dataset = SeededSamples(loader.dataset, seed)
    if batched:
        built = DataLoader(dataset, batch_sampler=keys, **kwargs)
    else:
        built = DataLoader(dataset, batch_size=None, sampler=keys, **kwargs)
    return built, keys


def seed_epoch(loader: DataLoader, seed: int) -> None:
    """Make a loader hotloop does not rebuild draw this epoch's order and worker seeds from `seed`, not from
    the global RNG (whose state a resumed run restores mid-epoch)."""
    sampler = getattr(loader, "sampler", None)
    if hasattr(sampler, "generator"):
        sampler.generator = torch.Generator().manual_seed(seed)
    if getattr(loader, "generator", None) is None:
        loader.generator = torch.Generator()
    loader.generator.manual_seed(seed)
