"""DataLoader construction: workers, pinned memory, per-worker seeding."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator
from typing import Any

import albumentations as A
import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from seg.data.transforms import SourceTransforms, seed_transform
from seg.errors import ConfigError, DataError


def _mix(*seeds: int) -> int:
    return int(np.random.SeedSequence(list(seeds)).generate_state(1, np.uint64)[0])


def seed_worker(worker_id: int, rank: int = 0) -> None:
    """DataLoader ``worker_init_fn``: give each worker its own, reproducible random streams.

    torch seeds worker ``i`` with ``base_seed + i``, ``base_seed`` drawn from the loader's
    generator each time an epoch's iterator starts. numpy, ``random`` and albumentations
    (2.0.x never reseeds in workers) would otherwise start every worker from the same forked
    state and augment identically, epoch after epoch. Mixing in ``rank`` keeps DDP ranks that
    share a generator seed apart. OpenCV runs single-threaded in workers: ``build_loader`` sets
    that before the fork, because OpenCV's pool does not survive a fork and calling
    ``cv2.setNumThreads`` in a child whose parent had a pool deadlocks.
    """
    info = get_worker_info()
    if info is None:
        raise RuntimeError("seed_worker must be called inside a DataLoader worker process")
    seed = _mix(info.seed, rank)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    for transform in _transforms(info.dataset):
        seed_transform(transform, seed)


def _transforms(dataset: Any) -> Iterator[A.BaseCompose | SourceTransforms]:
    """Albumentations pipelines held by a dataset, or by datasets it wraps (Subset, Concat)."""
    transform = getattr(dataset, "transform", None)
    if isinstance(transform, (A.BaseCompose, SourceTransforms)):
        yield transform
    inner = getattr(dataset, "dataset", None)
    if inner is not None:
        yield from _transforms(inner)
    for part in getattr(dataset, "datasets", None) or ():
        yield from _transforms(part)


def build_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    train: bool,
    num_workers: int = 2,
    seed: int = 0,
    rank: int = 0,
    sampler: Sampler | None = None,
    pin_memory: bool | None = None,
    prefetch_factor: int | None = None,
    collate_fn: Callable[[list[Any]], Any] | None = None,
) -> DataLoader:
    """A DataLoader for training (shuffled, last partial batch dropped) or evaluation.

    Data-parallel training passes its own ``sampler`` (the engine's resumable one, which
    splits the data across ranks); exact distributed evaluation, where every sample is seen
    once without padding, shards the dataset before it gets here. Pinned memory defaults to on
    when CUDA is available. ``seed`` fixes the shuffling order and, with ``rank``, the
    augmentation streams; workers persist across epochs. ``collate_fn`` (default: torch's)
    makes the batches, e.g. ``seg.data.batching.PadCollate`` for eval-preset samples, whose
    sizes differ with their orientation.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if num_workers < 0:
        raise ConfigError(f"num_workers must be >= 0, got {num_workers}")
    if len(dataset) == 0:  # type: ignore[arg-type]
        raise DataError("the dataset is empty: check data.root and the split")
    if num_workers > 0:
        # Workers are the parallelism; OpenCV's own pool would oversubscribe the cores, and a
        # pool alive at fork time hangs the children (see seed_worker). As mmsegmentation does.
        cv2.setNumThreads(0)
    else:
        for transform in _transforms(dataset):  # in-process loading: seed here, as a worker would
            seed_transform(transform, _mix(seed, rank))
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=train and sampler is None,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        drop_last=train,
        worker_init_fn=functools.partial(seed_worker, rank=rank),
        generator=torch.Generator().manual_seed(seed),
        persistent_workers=num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
        collate_fn=collate_fn,
    )
