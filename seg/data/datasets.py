"""The dataset every stage uses, and the builders that read the data config."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from seg.config import AugConfig, BadSamplePolicy, DataConfig, DatasetName
from seg.data.download import ensure_dataset, resolve_data_root
from seg.data.folder import list_folder
from seg.data.io import (
    IGNORE_INDEX,
    BadSampleError,
    encode_mask,
    fit_mask_to_image,
    read_image,
    read_mask_array,
)
from seg.data.listing import SPLITS, Listing, SampleRef, list_ccp, list_eg_portrait, list_vikram
from seg.data.transforms import build_train_transform
from seg.fileio import write_text

log = logging.getLogger(__name__)

SOURCE_NAMES = ("eg_portrait", "ccp", "vikram_human_seg")
_IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)

Transform = Callable[..., dict]


class SegDataset(Dataset):
    """Image/mask pairs -> dicts: image float (3,H,W), mask long (H,W), id, source, skipped.

    Mask values: 0 background, 1 person, 255 ignore. ``transform`` is an albumentations pipeline
    (see ``seg.data.transforms``) called as ``transform(image=..., mask=...)`` that ends in a
    tensor conversion; without one the image is only normalised (ImageNet statistics).
    With ``on_bad_sample="skip"`` a bad pair is logged and replaced by the next good one;
    ``skipped`` in the returned sample counts how many were passed over to reach it. With
    ``drop_bad`` (evaluation: no image may count twice) it is returned as ``{"id", "source",
    "bad": message}`` instead, for the collate function to drop and count.
    """

    def __init__(
        self,
        refs: list[SampleRef],
        transform: Transform | None = None,
        on_bad_sample: BadSamplePolicy = BadSamplePolicy.error,
        mask_resize_tolerance: float = 0.01,
        drop_bad: bool = False,
    ) -> None:
        self.refs = list(refs)
        self.drop_bad = drop_bad
        self.transform = transform
        self.on_bad_sample = BadSamplePolicy(on_bad_sample)
        self.mask_resize_tolerance = mask_resize_tolerance

    def __len__(self) -> int:
        return len(self.refs)

    def load_raw(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Return uint8 RGB (H, W, 3) and uint8 mask (H, W) in {0, 1, 255}, same size."""
        ref = self.refs[index]
        image = read_image(ref.image)
        spec = ref.mask_spec
        raw = read_mask_array(ref.mask, spec.mat_key)
        mask = encode_mask(raw, spec.encoding, ref.mask, spec.alpha_threshold, spec.ignore_value)
        mask = fit_mask_to_image(mask, image.shape[:2], ref.mask, self.mask_resize_tolerance)
        return image, mask

    def __getitem__(self, index: int) -> dict:
        for skipped in range(len(self.refs)):
            i = (index + skipped) % len(self.refs)
            try:
                image, mask = self.load_raw(i)
            except BadSampleError as err:
                if self.on_bad_sample is BadSamplePolicy.error:
                    raise
                log.warning("skipping bad sample %s", err)
                if self.drop_bad:
                    return {"id": self.refs[i].id, "source": self.refs[i].source, "bad": str(err)}
                continue
            sample = self._to_tensors(image, mask)
            ref = self.refs[i]
            sample.update(id=ref.id, source=ref.source, skipped=skipped)
            return sample
        raise RuntimeError(f"all {len(self.refs)} samples of the dataset are bad (see the log)")

    def _to_tensors(self, image: np.ndarray, mask: np.ndarray) -> dict:
        if self.transform is not None:
            out = self.transform(image=image, mask=mask)
            return {"image": out["image"], "mask": torch.as_tensor(out["mask"]).long()}
        normalised = (image.astype(np.float32) / 255.0 - _IMAGENET_MEAN) / _IMAGENET_STD
        return {
            "image": torch.from_numpy(normalised.transpose(2, 0, 1).copy()),
            "mask": torch.from_numpy(mask).long(),
        }


def list_source(cfg: DataConfig, name: str) -> Listing:
    """List one real source (or the ``folder`` dataset) under the configured data root.

    A missing real dataset is downloaded when ``cfg.download`` is true.
    """
    root = resolve_data_root(cfg.root)
    policy = BadSamplePolicy(cfg.on_bad_sample)
    if name == DatasetName.folder.value:
        return list_folder(root, cfg.folder, cfg.val_fraction, cfg.test_fraction, policy)
    if name not in SOURCE_NAMES:
        raise ValueError(f"unknown dataset source {name!r}; valid: {[*SOURCE_NAMES, 'folder']}")
    folder = ensure_dataset(name, root, cfg.download)
    if name == "eg_portrait":
        return list_eg_portrait(folder, cfg.val_fraction, policy)
    if name == "ccp":
        return list_ccp(folder, cfg.val_fraction, cfg.test_fraction, policy)
    return list_vikram(folder, cfg.val_fraction, cfg.test_fraction, policy)


def source_names(cfg: DataConfig) -> list[str]:
    """The sources a data config reads: its ``sources`` for human_mix, else its own name.

    Validation and test report each of them; ``data.train_sources`` is checked here too, so a
    bad name fails whichever split is built first.
    """
    name = DatasetName(cfg.name).value
    if name != DatasetName.human_mix.value:
        names = [name]
    elif not cfg.sources:
        raise ValueError("data.sources is empty; human_mix needs at least one source")
    else:
        unknown = [s for s in cfg.sources if s not in SOURCE_NAMES]
        if unknown:
            raise ValueError(
                f"data.sources has unknown names {unknown}; valid: {list(SOURCE_NAMES)}"
            )
        names = list(cfg.sources)
    chosen = None if cfg.train_sources is None else list(cfg.train_sources)
    if chosen is not None and (
        not chosen or len(set(chosen)) < len(chosen) or not set(chosen) <= set(names)
    ):
        raise ValueError(
            f"data.train_sources={chosen} must name each source once, one or more of {names} "
            f"(data.sources for human_mix), or be null for all of them"
        )
    return names


def train_source_names(cfg: DataConfig) -> list[str]:
    """The sources whose train splits are joined: ``data.train_sources`` (in the order of
    ``data.sources``), or all of ``source_names(cfg)`` when it is null."""
    names = source_names(cfg)
    return names if cfg.train_sources is None else [n for n in names if n in cfg.train_sources]


def build_dataset(cfg: DataConfig, split: str, transform: Transform | None = None) -> SegDataset:
    """One dataset for a split; for human_mix the union of the sources' splits (for the train
    split, of ``data.train_sources``)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid: {list(SPLITS)}")
    names = train_source_names(cfg) if split == "train" else source_names(cfg)
    refs = [ref for name in names for ref in list_source(cfg, name).split_refs(split)]
    return SegDataset(refs, transform, cfg.on_bad_sample, cfg.mask_resize_tolerance)


def build_train_dataset(data: DataConfig, aug: AugConfig, seed: int | None = None) -> SegDataset:
    """The train split with the training transform, which pastes people (``aug.paste_p``) from
    this same dataset: only training sources and ids are ever pasted."""
    dataset = build_dataset(data, "train")
    dataset.transform = build_train_transform(aug, seed, pool=dataset)
    return dataset


def build_eval_datasets(
    cfg: DataConfig, split: str, transform: Transform | None = None
) -> dict[str, SegDataset]:
    """One dataset per source for a split, so that results are reported per source; a bad
    pair under ``on_bad_sample=skip`` is dropped (``drop_bad``), never replaced."""
    return {
        name: SegDataset(
            list_source(cfg, name).split_refs(split),
            transform,
            cfg.on_bad_sample,
            cfg.mask_resize_tolerance,
            drop_bad=True,
        )
        for name in source_names(cfg)
    }


def save_splits(cfg: DataConfig, out_dir: Path) -> list[Path]:
    """Write the id list of every split of every source to ``out_dir/<source>_<split>.txt``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in source_names(cfg):
        listing = list_source(cfg, name)
        for split, ids in listing.splits.items():
            path = out_dir / f"{name}_{split}.txt"
            write_text(path, "".join(f"{i}\n" for i in ids))
            written.append(path)
    return written


__all__ = [
    "IGNORE_INDEX",
    "SOURCE_NAMES",
    "SegDataset",
    "build_dataset",
    "build_eval_datasets",
    "build_train_dataset",
    "list_source",
    "save_splits",
    "source_names",
    "train_source_names",
]
