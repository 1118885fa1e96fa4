"""The loader: reproducible batches, distinct augmentation per worker, distributed sampling."""

from __future__ import annotations

from pathlib import Path

import torch

from seg.config import AugConfig, BadSamplePolicy
from seg.data import SegDataset, build_loader
from seg.data.listing import list_vikram
from seg.data.transforms import build_train_transform


def _dataset(root: Path, seed: int | None = None) -> SegDataset:
    refs = list(list_vikram(root, 0.0, 0.0).refs.values())
    aug = AugConfig(crop_size=[64, 48])
    return SegDataset(refs * 2, build_train_transform(aug, seed=seed), BadSamplePolicy.error)


def _batches(loader) -> list[torch.Tensor]:
    return [batch["image"].clone() for batch in loader]


def test_same_seed_same_batches_with_workers(vikram_subset: Path) -> None:
    a = _batches(build_loader(_dataset(vikram_subset), 2, train=True, num_workers=2, seed=3))
    b = _batches(build_loader(_dataset(vikram_subset), 2, train=True, num_workers=2, seed=3))
    c = _batches(build_loader(_dataset(vikram_subset), 2, train=True, num_workers=2, seed=4))
    assert len(a) == 5 and all(x.shape == (2, 3, 64, 48) for x in a)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_in_process_loading_is_reproducible_too(vikram_subset: Path) -> None:
    a = _batches(build_loader(_dataset(vikram_subset), 3, train=True, num_workers=0, seed=1))
    b = _batches(build_loader(_dataset(vikram_subset), 3, train=True, num_workers=0, seed=1))
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_workers_do_not_repeat_each_others_augmentation(vikram_subset: Path) -> None:
    """One photo four times, in order over two workers: samples 0 and 1 are the first draw of
    each worker's random stream, so workers seeded alike would make them equal."""
    ref = next(iter(list_vikram(vikram_subset, 0.0, 0.0).refs.values()))
    aug = AugConfig(crop_size=[64, 48])
    ds = SegDataset([ref] * 4, build_train_transform(aug), BadSamplePolicy.error)
    loader = build_loader(ds, 1, train=False, num_workers=2, seed=0)
    images = [b["image"][0] for b in loader]
    assert len(images) == 4
    for i in range(4):
        for j in range(i + 1, 4):
            assert not torch.equal(images[i], images[j]), (i, j)


def test_epochs_differ_with_persistent_workers(vikram_subset: Path) -> None:
    """In a fixed sample order (no shuffling), so only the random draws can differ."""
    loader = build_loader(_dataset(vikram_subset), 2, train=False, num_workers=2, seed=0)
    assert loader.persistent_workers
    first, second = _batches(loader), _batches(loader)
    assert not all(torch.equal(x, y) for x, y in zip(first, second, strict=True))


def test_eval_loader_keeps_order_and_every_sample(vikram_subset: Path) -> None:
    ds = _dataset(vikram_subset)
    loader = build_loader(ds, 3, train=False, num_workers=0)
    ids = [i for batch in loader for i in batch["id"]]
    assert ids == [r.id for r in ds.refs]
