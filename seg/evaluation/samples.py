"""The evaluation's samples: raw images and masks at their own size, any dataset and split.

Unlike training's datasets, a bad pair under ``on_bad_sample=skip`` is dropped (and reported),
never replaced by its neighbour, so that no image is counted twice (``SegDataset(drop_bad=True)``
decides; ``seg.data.split_bad`` separates).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, Dataset

from seg.config import DataConfig
from seg.data import SegDataset, eval_source_names, list_source
from seg.data.batching import pixel_batches
from seg.data.datasets import has_instances, read_instances
from seg.data.io import header_pixels
from seg.data.listing import natural_key
from seg.errors import DataError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Item:
    index: int  # position in the whole evaluation (over all sources)
    source: str
    dataset: SegDataset
    position: int  # in ``dataset``

    @property
    def name(self) -> str:
        return self.dataset.refs[self.position].id

    @property
    def has_instances(self) -> bool:
        """Whether its labels tell its people apart (the person-size split counts it)."""
        return has_instances(self.dataset.refs[self.position])


def list_items(cfg: DataConfig, split: str, max_images: int = 0) -> list[Item]:
    """Every sample of ``split`` (``all``: every pair) of every source of ``cfg``, in order.

    ``max_images`` > 0 keeps the first N of each source.
    """
    items: list[Item] = []
    for source in eval_source_names(cfg):
        listing = list_source(cfg, source)
        if split == "all":
            refs = sorted(listing.refs.values(), key=lambda r: natural_key(r.id))
        else:
            refs = listing.split_refs(split)
        if max_images > 0:
            refs = refs[:max_images]
        if not refs:
            log.warning("%s has no %s samples", source, split)
        dataset = SegDataset(refs, None, cfg.on_bad_sample, drop_bad=True)
        items += [Item(len(items) + i, source, dataset, i) for i in range(len(refs))]
    if not items:
        raise DataError(f"no samples to evaluate in split {split!r} of {eval_source_names(cfg)}")
    return items


class RawSamples(Dataset):
    """``items`` -> their datasets' raw samples (``image`` uint8 (H, W, 3), ``mask`` uint8
    (H, W) {0, 1, 255}, or ``bad``: a message), each with its ``index``."""

    def __init__(self, items: list[Item]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = self.items[i]
        sample = {**item.dataset[item.position], "index": item.index}
        ref = item.dataset.refs[item.position]
        if "mask" in sample and has_instances(ref):  # its people one by one: the size split
            sample["instances"] = read_instances(ref, sample["mask"].shape)
        return sample


def _as_list(batch: list[dict]) -> list[dict]:
    return batch


def raw_loader(items: list[Item], batch_size: int, num_workers: int) -> DataLoader:
    """Batches (lists) of :class:`RawSamples` read by ``num_workers`` processes, in order, of
    at most ``batch_size`` images and ``MAX_BATCH_PIXELS`` pixels (sizes from the headers)."""
    pixels = [header_pixels(item.dataset.refs[item.position].image) for item in items]
    return DataLoader(
        RawSamples(items),
        batch_sampler=pixel_batches(pixels, batch_size),
        num_workers=num_workers,
        collate_fn=_as_list,
        persistent_workers=False,
    )
