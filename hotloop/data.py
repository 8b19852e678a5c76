"""Turning whatever the user passes into batches on the device.

`fit` accepts four kinds of data, each becoming a `BatchSource` with `epoch(e)` -> iterator of batches:

- In-memory tensors - a `TensorDataset`, a tuple of tensors or a dict of tensors sharing their first
  dimension: sliced a whole batch at a time with a shuffled index tensor. Collating sample by sample
  through a DataLoader costs a Python call per sample; on this project's 2-core CPU a plain loop ran
  165 steps/s that way and 235 steps/s slicing (issue 4's numbers). A *list* is never taken for a
  dataset: a list is an iterable of batches.
- A `DataLoader`: used as is; its sampler's `set_epoch` is called every epoch.
- Any other map-style `Dataset`: wrapped in a DataLoader with the defaults of DESIGN.md (shuffle,
  pinned memory on CUDA, workers from the core count on CUDA, persistent workers, prefetching).
- Any other iterable of batches (a list, a generator, an infinite sampler): iterated as is. A
  one-shot iterator ends training when it is exhausted.

`windows()` groups micro-batches into accumulation windows; the last window of an epoch may be short
and the train step divides by its true size.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, TensorDataset

from hotloop.errors import DataError
from hotloop.loaders import epoch_seed, seed_epoch

Batch = Any


def tree_map(fn: Any, batch: Batch) -> Batch:
    """Apply `fn` to every tensor in a nested tuple/list/dict batch."""
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        mapped = {k: tree_map(fn, v) for k, v in batch.items()}
        return mapped if type(batch) is dict else type(batch)(mapped)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(tree_map(fn, v) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(tree_map(fn, v) for v in batch)
    return batch


def first_tensor(batch: Batch) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    for v in values:
        t = first_tensor(v)
        if t is not None:
            return t
    return None


def batch_size_of(batch: Batch) -> int:
    """Samples in a batch: the first dimension of its first tensor (shape metadata, no device read)."""
    t = first_tensor(batch)
    return int(t.shape[0]) if t is not None and t.ndim > 0 else 1


def _to_accelerator(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    if t.device == device:
        return t
    if t.device.type == "cpu" and not t.is_pinned():
        # A blocking copy from pageable memory synchronizes the stream: the host would wait for the
        # device every step. Staging through the caching pinned allocator keeps the copy asynchronous
        # (the allocator records the copy's event before reusing the buffer).
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def to_device(batch: Batch, device: torch.device) -> Batch:
    """Move a batch to `device` with asynchronous copies from pinned memory."""
    if device.type == "cpu":
        return tree_map(lambda t: t if t.device.type == "cpu" else t.to("cpu"), batch)
    return tree_map(lambda t: _to_accelerator(t, device), batch)


class BatchSource:
    """An epoch-indexed stream of batches. `length` is the batches per epoch, or None if unknown.

    `epoch(e, skip=k)` starts epoch `e` after its first `k` batches: that, with `state_dict()` for
    sources that carry their own RNG, is the resumable data position of a checkpoint.
    """

    length: int | None = None

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[Batch]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class TensorSlices(BatchSource):
    """Batches sliced out of in-memory tensors with a shuffled index (one gather per tensor per batch).

    With several ranks, batch i of the epoch is the global batch `order[i*B:(i+1)*B]` with
    `B = batch_size * world`, and rank r takes its r-th `batch_size` slice: the union of the ranks'
    samples at every step is exactly the batch a one-process run with batch B takes at that step.
    """

    def __init__(
        self,
        tensors: tuple | dict,
        batch_size: int,
        shuffle: bool,
        drop_last: bool,
        seed: int,
        rank: int = 0,
        world: int = 1,
    ) -> None:
        leaves = list(tensors.values()) if isinstance(tensors, dict) else list(tensors)
        n = int(leaves[0].shape[0])
        for t in leaves:
            if int(t.shape[0]) != n:
                raise DataError(
                    f"in-memory tensors must share their first dimension; got {[tuple(x.shape) for x in leaves]}"
                )
        if drop_last and batch_size * world > n:
            raise DataError(
                f"batch_size={batch_size} x {world} rank(s) is larger than the dataset ({n} samples) and "
                f"drop_last=true drops every batch; lower batch_size to at most {n // world} or set drop_last=false"
            )
        if world > 1 and not drop_last and n % (batch_size * world):
            drop_last = True  # a short last global batch cannot be split evenly: every rank must step together
        self.tensors, self.n, self.batch_size = tensors, n, batch_size
        self.shuffle, self.drop_last, self.seed = shuffle, drop_last, seed
        self.rank, self.world = rank, world
        size = batch_size * world
        self.length = n // size if drop_last else -(-n // size)
        self.device = leaves[0].device

    def place(self, device: torch.device) -> None:
        """Keep the dataset on `device` (once): a step then does no host-to-device copy at all."""
        if device != self.device:
            self.tensors = tree_map(lambda t: t.to(device), self.tensors)
            self.device = device

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[Batch]:
        if self.shuffle:
            # The order is drawn on the CPU from (seed, epoch) - the same on every device, and resumable -
            # then copied once per epoch, asynchronously from pinned memory, to where the data lives.
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(self.n, generator=g)
            if self.device.type == "cuda":
                order = order.pin_memory().to(self.device, non_blocking=True)
        else:
            order = None
        size, b = self.batch_size * self.world, self.batch_size
        tensors = self.tensors
        keys = list(tensors) if isinstance(tensors, dict) else None
        leaves = list(tensors.values()) if keys is not None else list(tensors)
        rebuild = (lambda parts: dict(zip(keys, parts, strict=True))) if keys is not None else type(tensors)
        if isinstance(tensors, tuple) and hasattr(tensors, "_fields"):
            rebuild = lambda parts: type(tensors)(*parts)  # noqa: E731 - a namedtuple
        for i in range(skip, self.length):  # one gather (or slice) per tensor: no per-batch tree walk
            start = i * size + self.rank * b
            end = min(start + b, self.n)
            if order is None:
                yield rebuild([t[start:end] for t in leaves])
            else:
                idx = order[start:end]
                yield rebuild([t.index_select(0, idx) for t in leaves])


class LoaderSource(BatchSource):
    """A DataLoader, resumable: adopted (`loaders.adopt`), stateful (its own `state_dict`), or replayed.

    - A plain `DataLoader` over a map-style dataset is rebuilt so each epoch's order and each sample's
      random augmentation come from (seed, epoch, index), and a mid-epoch start skips batches as index
      lists without loading them: resume is exact and costs nothing.
    - A loader with `state_dict`/`load_state_dict` (torchdata's `StatefulDataLoader`) is checkpointed
      through that state; it resumes without re-reading skipped batches.
    - Anything else (a DataLoader subclass, an IterableDataset without state) is iterated as given and
      a mid-epoch resume replays the skipped batches (with a warning: it loads them, and it is exact
      only if the loader is deterministic).
    Samplers' `set_epoch` is called every epoch (the classic DDP bug, fixed for everyone).
    """

    def __init__(self, loader: DataLoader, seed: int = 0) -> None:
        from hotloop.loaders import adopt

        self.loader, self.seed, self.keys = loader, seed, None
        self.stateful = callable(getattr(loader, "state_dict", None)) and callable(
            getattr(loader, "load_state_dict", None)
        )
        """The loader's own state is its position (looking ahead would move it: no prefetching)."""
        if not self.stateful:
            adopted = adopt(loader, seed)
            if adopted is not None:
                self.loader, self.keys = adopted
        try:
            self.length = len(self.loader)
        except TypeError:
            self.length = None

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[Batch]:
        if self.keys is not None:
            self.keys.start(epoch, skip)
            self.loader.generator.manual_seed(epoch_seed(self.seed, epoch))  # the workers' base seed
            return iter(self.loader)
        for obj in (self.loader.sampler, getattr(self.loader, "batch_sampler", None)):
            if hasattr(obj, "set_epoch"):
                obj.set_epoch(epoch)
        if self.stateful:  # a restored state already stands at the resumed position: no skipping here
            seed_epoch(self.loader, epoch_seed(self.seed, epoch))
            return iter(self.loader)
        if skip:
            warnings.warn(
                f"resuming inside an epoch of a {type(self.loader).__name__} hotloop cannot rebuild: the first {skip} "
                "batches are loaded again and dropped, and the run equals the uninterrupted one only if the loader "
                "is deterministic; a plain DataLoader over a map-style Dataset, or torchdata's StatefulDataLoader, "
                "resume exactly without loading them",
                stacklevel=4,
            )
        return itertools.islice(iter(self.loader), skip, None)

    def state_dict(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict()} if self.stateful else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.stateful and "loader" in state:
            self.loader.load_state_dict(state["loader"])


class IterableSource(BatchSource):
    """Any iterable of ready batches. A one-shot iterator yields nothing after its first epoch."""

    def __init__(self, data: Iterable) -> None:
        self.data = data
        self.one_shot = iter(data) is data if not isinstance(data, (list, tuple)) else False
        self.length = len(data) if isinstance(data, (list, tuple)) else None

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[Batch]:
        if hasattr(self.data, "state_dict"):
            return iter(self.data)  # a stateful sampler: its own state is the position
        return itertools.islice(iter(self.data), skip, None)

    @property
    def stateful(self) -> bool:
        """The iterable carries its own RNG state (its position); looking ahead would move it."""
        return hasattr(self.data, "state_dict")

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.data.state_dict()} if hasattr(self.data, "state_dict") else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "sampler" in state and hasattr(self.data, "load_state_dict"):
            self.data.load_state_dict(state["sampler"])


class OverfitSource(BatchSource):
    """The first `n` batches of `inner`, as every epoch (the overfit-a-tiny-subset check)."""

    def __init__(self, inner: BatchSource, n: int) -> None:
        self.batches = list(itertools.islice(inner.epoch(0), n))
        if not self.batches:
            raise DataError("overfit_batches: the training data yielded no batch")
        self.length = len(self.batches)

    def epoch(self, epoch: int, skip: int = 0) -> Iterator[Batch]:
        return iter(self.batches[skip:])


def fits_on_device(source: BatchSource, device: torch.device, fraction: float = 0.1) -> bool:
    """True for in-memory tensors that take less than `fraction` of the device's free memory."""
    if not isinstance(source, TensorSlices) or device.type != "cuda":
        return False
    leaves: list[torch.Tensor] = []
    tree_map(leaves.append, source.tensors)
    size = sum(t.numel() * t.element_size() for t in leaves)
    free, _ = torch.cuda.mem_get_info(device)
    return size < fraction * free


class CudaPrefetcher:
    """Copy batch k+1 to the GPU on a side stream while step k runs.

    The copy is issued on `self.stream` from pinned memory (`non_blocking`); before a batch is handed
    out, the compute stream waits for the copy stream (an event wait on the device, not a host sync),
    and each tensor is `record_stream`ed on the compute stream so the caching allocator does not reuse
    its memory while kernels queued there still read it.
    """

    def __init__(self, batches: Iterator[Batch], device: torch.device) -> None:
        self.batches, self.device = batches, device
        self.stream = torch.cuda.Stream(device)
        self.next: Batch | None = None
        self.done = False
        self._preload()

    def _preload(self) -> None:
        try:
            batch = next(self.batches)
        except StopIteration:
            self.done = True
            return
        with torch.cuda.stream(self.stream):
            self.next = to_device(batch, self.device)

    def __iter__(self) -> CudaPrefetcher:
        return self

    def __next__(self) -> Batch:
        if self.done:
            raise StopIteration
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        batch = self.next
        tree_map(lambda t: t.record_stream(current), batch)
        self._preload()
        return batch


def _tensor_collection(data: Any) -> tuple | dict | None:
    if isinstance(data, TensorDataset):
        return tuple(data.tensors)
    if isinstance(data, tuple) and data and all(isinstance(t, torch.Tensor) and t.ndim > 0 for t in data):
        return data
    if isinstance(data, dict) and data and all(isinstance(t, torch.Tensor) and t.ndim > 0 for t in data.values()):
        return data
    return None


def default_workers(device: torch.device) -> int:
    """Workers for map-style datasets: from the core count on CUDA; 0 on CPU, where workers would
    take the very cores the model computes on."""
    if device.type != "cuda":
        return 0
    return max(1, min(8, (os.cpu_count() or 2) - 1))


def make_source(
    data: Any,
    *,
    batch_size: int,
    device: torch.device,
    train: bool,
    drop_last: bool,
    seed: int,
    num_workers: int | None = None,
    rank: int = 0,
    world: int = 1,
    collate_fn: Any = None,
) -> BatchSource:
    """Wrap `data` (see the module docstring) into a `BatchSource`; training data is sharded over `world` ranks."""
    if data is None:
        raise DataError(
            "no data given: pass a Dataset, a DataLoader, a tuple/dict of tensors or an iterable of batches"
        )
    tensors = _tensor_collection(data)
    if tensors is not None:
        return TensorSlices(
            tensors, batch_size, shuffle=train, drop_last=drop_last and train, seed=seed, rank=rank, world=world
        )
    if isinstance(data, DataLoader):
        if world > 1 and not isinstance(data.sampler, DistributedSampler):
            warnings.warn(
                f"a DataLoader without a DistributedSampler under {world} ranks: every rank trains on the same "
                "batches; pass the Dataset itself (hotloop shards it) or use sampler=DistributedSampler(dataset)",
                stacklevel=3,
            )
        return LoaderSource(data, seed=seed)
    if isinstance(data, Dataset) and hasattr(data, "__getitem__") and not isinstance(data, IterableDataset):
        n = len(data)  # type: ignore[arg-type]
        if train and drop_last and batch_size > n:
            raise DataError(
                f"batch_size={batch_size} is larger than the dataset ({n} samples) and drop_last=true drops "
                f"every batch; lower batch_size to at most {n} or set drop_last=false"
            )
        workers = default_workers(device) if num_workers is None else num_workers
        extra: dict[str, Any] = {"persistent_workers": True, "prefetch_factor": 4} if workers > 0 else {}
        if collate_fn is not None:
            extra["collate_fn"] = collate_fn
        if world > 1:  # DistributedSampler: the ranks' samples of step k are those of a one-process batch x world
            sampler = DistributedSampler(data, world, rank, shuffle=train, seed=seed, drop_last=drop_last and train)
            loader = DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=drop_last and train,
                              num_workers=workers, pin_memory=device.type == "cuda", **extra)  # fmt: skip
            return LoaderSource(loader, seed=seed)
        loader = DataLoader(data, batch_size=batch_size, shuffle=train, drop_last=drop_last and train,
                            num_workers=workers, pin_memory=device.type == "cuda", **extra)  # fmt: skip
        return LoaderSource(loader, seed=seed)
    if isinstance(data, IterableDataset):
        extra = {"collate_fn": collate_fn} if collate_fn is not None else {}
        return LoaderSource(DataLoader(data, batch_size=batch_size, pin_memory=device.type == "cuda", **extra))
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, torch.Tensor)):
        if world > 1 and train and not getattr(data, "rank_aware", False):
            warnings.warn(
                f"an iterable of batches under {world} ranks: each rank iterates it as given; make it yield this "
                "rank's share (torch.distributed.get_rank()) and set `rank_aware = True` on it",
                stacklevel=3,
            )
        return IterableSource(data)
    raise DataError(
        f"cannot train on a {type(data).__name__}: pass a Dataset, a DataLoader, a tuple/dict of tensors "
        "sharing their first dimension, or an iterable of batches"
    )


def windows(batches: Iterator[Batch], size: int, remaining: int | None = None) -> Iterator[Any]:
    """Group micro-batches into accumulation windows of `size`; the last one may be shorter.

    With `remaining` (the batches left in the epoch, when the source knows it exactly) each window is
    handed out *lazily*: micro-batch i + 1 is taken from `batches` - and so, with the CUDA prefetcher,
    copied on its side stream - only once micro-batch i is running, so copies overlap compute inside a
    window too. Its length is known in advance, which the step needs to divide the loss.
    """
    if size == 1:
        for batch in batches:
            yield (batch,)
        return
    if remaining is not None:
        while remaining > 0:
            n = min(size, remaining)
            remaining -= n
            yield _LazyWindow(batches, n)
        return
    while True:
        window = list(itertools.islice(batches, size))
        if not window:
            return
        yield window


class _LazyWindow:
    """`n` micro-batches, taken from the shared iterator as they are iterated."""

    def __init__(self, batches: Iterator[Batch], n: int) -> None:
        self.batches, self.n = batches, n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Batch]:
        for _ in range(self.n):
            try:
                yield next(self.batches)
            except StopIteration:
                raise DataError(
                    "the training data yielded fewer batches than its len() promised; its length must be exact"
                ) from None
