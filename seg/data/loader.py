"""DataLoader construction: workers, pinned memory, per-worker seeding, distributed sampling."""

from __future__ import annotations

import random
from collections.abc import Iterator

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, get_worker_info


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: give each worker its own, reproducible random streams.

    PyTorch seeds torch in each worker with ``base_seed + worker_id`` (``base_seed`` comes from
    the loader's generator); numpy, ``random`` and albumentations would otherwise start every
    worker from the same forked state and augment identically. OpenCV gets one thread per worker,
    since workers are already parallel and OpenCV's own pool oversubscribes the cores.
    """
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)
    cv2.setNumThreads(1)
    info = get_worker_info()
    if info is not None:
        for transform in _transforms(info.dataset):
            transform.set_random_seed(seed)


def _transforms(dataset: Dataset) -> Iterator:
    """Albumentations pipelines held by a dataset, or by datasets it wraps (Subset, Concat)."""
    transform = getattr(dataset, "transform", None)
    if hasattr(transform, "set_random_seed"):
        yield transform
    inner = getattr(dataset, "dataset", None)
    if inner is not None:
        yield from _transforms(inner)
    for part in getattr(dataset, "datasets", []):
        yield from _transforms(part)


def build_loader(
    dataset: Dataset,
    batch_size: int,
    *,
    train: bool,
    num_workers: int = 2,
    seed: int = 0,
    distributed: bool = False,
    pin_memory: bool | None = None,
    prefetch_factor: int | None = None,
) -> DataLoader:
    """A DataLoader for training (shuffled, last partial batch dropped) or evaluation.

    With ``distributed`` a ``DistributedSampler`` splits the data across ranks (call
    ``loader.sampler.set_epoch(epoch)`` every epoch); exact distributed evaluation, where every
    sample is seen once without padding, is the evaluation code's business, not this sampler's.
    Pinned memory defaults to on when CUDA is available. ``seed`` fixes the shuffling order and
    the workers' augmentation streams; pass a different one per rank.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if len(dataset) == 0:  # type: ignore[arg-type]
        raise ValueError("the dataset is empty: check data.root and the split")
    generator = torch.Generator().manual_seed(seed)
    sampler = None
    if distributed:
        sampler = DistributedSampler(dataset, shuffle=train, seed=seed, drop_last=train)
    if num_workers == 0:
        # In-process loading: seed the pipelines here, as a worker would.
        for transform in _transforms(dataset):
            transform.set_random_seed(seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=train and sampler is None,
        sampler=sampler,
        num_workers=num_workers,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        drop_last=train,
        worker_init_fn=seed_worker,
        generator=generator,
        persistent_workers=num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
    )
