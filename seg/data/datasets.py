"""The dataset every stage uses, and the builders that read the data config."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from seg.config import AugConfig, BadSamplePolicy, DataConfig, DatasetName, MaskEncoding
from seg.data.coco import (
    list_coco128,
    list_coco_instances,
    list_coco_person,
    list_negatives,
    read_coco_instances,
    read_coco_mask,
    read_yolo_instances,
    read_yolo_mask,
)
from seg.data.coco_mini import ANNOTATIONS, IMAGES, download_coco_mini_person
from seg.data.download import DatasetNotFoundError, ensure_dataset, resolve_data_root
from seg.data.folder import list_folder, under_root
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
from seg.errors import ConfigError, DataError, MissingFileError
from seg.fileio import write_text

log = logging.getLogger(__name__)

# Training sources of human_mix (data.sources); coco_person is fetched only by name (its size);
# coco is the COCO instances file that data.coco names.
SOURCE_NAMES = ("eg_portrait", "ccp", "vikram_human_seg", "coco_person", "coco_mini_person", "coco")
VAL_SOURCE_NAMES = ("coco128_seg",)  # sources that are only ever validated and tested
COCO_MINI_PERSON = (IMAGES, ANNOTATIONS)  # its layout
NEGATIVES = "imagenet_negatives"  # the photos without people that data.negatives names

Transform = Callable[..., dict]


class SegDataset(Dataset):
    """Image/mask pairs -> dicts ``image``, ``mask``, ``id``, ``source``, ``skipped``.

    Mask values: 0 background, 1 person, 255 ignore. ``transform`` is an albumentations pipeline
    built from the config (``seg.data.transforms``: it normalises with ``aug.mean``/``aug.std``)
    called as ``transform(image=..., mask=...)``: ``image`` float (3, H, W), ``mask`` long
    (H, W). Without one the pair is returned as read: ``image`` uint8 (H, W, 3) RGB, ``mask``
    uint8 (H, W); nothing is normalised behind the config's back.

    Bad pairs are decided here, and only here. ``on_bad_sample="error"``: the pair's
    ``BadSampleError``. ``"skip"``: logged, and in training replaced by the next good pair
    (``skipped`` counts the pairs passed over to reach it); with ``drop_bad`` (evaluation: no
    image may count twice) returned as ``{"id", "source", "bad": message}`` instead, which
    :func:`seg.data.batching.split_bad` separates from the good samples of a batch.
    """

    def __init__(
        self,
        refs: list[SampleRef],
        transform: Transform | None = None,
        on_bad_sample: BadSamplePolicy = BadSamplePolicy.error,
        drop_bad: bool = False,
    ) -> None:
        self.refs = list(refs)
        self.drop_bad = drop_bad
        self.transform = transform
        self.on_bad_sample = BadSamplePolicy(on_bad_sample)

    def __len__(self) -> int:
        return len(self.refs)

    def load_raw(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Return uint8 RGB (H, W, 3) and uint8 mask (H, W) in {0, 1, 255}, same size."""
        image, mask, _ = read_pair(self.refs[index])
        return image, mask

    def __getitem__(self, index: int) -> dict:
        for skipped in range(len(self.refs)):
            ref = self.refs[(index + skipped) % len(self.refs)]
            try:
                image, mask = self.load_raw((index + skipped) % len(self.refs))
            except BadSampleError as err:
                if self.on_bad_sample is BadSamplePolicy.error:
                    raise
                log.warning("skipping bad sample %s", err)
                if self.drop_bad:
                    return {"id": ref.id, "source": ref.source, "bad": str(err)}
                continue
            sample: dict = {"image": image, "mask": mask}
            if self.transform is not None:
                out = self.transform(image=image, mask=mask)
                sample = {"image": out["image"], "mask": torch.as_tensor(out["mask"]).long()}
            return {**sample, "id": ref.id, "source": ref.source, "skipped": skipped}
        raise DataError(f"all {len(self.refs)} samples of the dataset are bad (see the log)")


def read_pair(ref: SampleRef) -> tuple[np.ndarray, np.ndarray, bool]:
    """uint8 RGB (H, W, 3), its uint8 mask (H, W) in {0, 1, 255}, and whether the mask file was
    smaller than the photo and resized to it (``fit_mask_to_image``).
    A ref without a mask file is a photo without people: all background."""
    image = read_image(ref.image)
    spec = ref.mask_spec
    if ref.mask is None:
        return image, np.zeros(image.shape[:2], np.uint8), False
    if spec.encoding is MaskEncoding.yolo:
        return image, read_yolo_mask(ref.mask, image.shape[:2]), False
    if spec.encoding is MaskEncoding.coco:  # ref.mask: the instances file of all the photos
        return image, read_coco_mask(ref.mask, ref.image, image.shape[:2]), False
    raw = read_mask_array(ref.mask, spec.mat_key)
    mask = encode_mask(raw, spec.encoding, ref.mask, spec.alpha_threshold, spec.ignore_value)
    fitted = fit_mask_to_image(mask, image.shape[:2], ref.mask)
    return image, fitted, fitted.shape != mask.shape


def has_instances(ref: SampleRef) -> bool:
    """Whether ``ref``'s labels tell its people apart (YOLO polygons, COCO instances)."""
    return ref.mask_spec.encoding in (MaskEncoding.yolo, MaskEncoding.coco)


def read_instances(ref: SampleRef, size_hw: tuple[int, int]) -> list[np.ndarray] | None:
    """Each person of ``ref``'s photo on its own, uint8 (H, W) masks at ``size_hw``, where its
    labels tell people apart (``has_instances``; none for a photo without a label file), else
    None."""
    if not has_instances(ref) and ref.mask is not None:
        return None
    if ref.mask is None:
        return []
    if ref.mask_spec.encoding is MaskEncoding.yolo:
        return read_yolo_instances(ref.mask, size_hw)
    return read_coco_instances(ref.mask, ref.image, size_hw)


def list_source(cfg: DataConfig, name: str) -> Listing:
    """List one real source (or the ``folder`` dataset) under the configured data root.

    A missing real dataset is downloaded when ``cfg.download`` is true.
    """
    root = resolve_data_root(cfg.root)
    policy = BadSamplePolicy(cfg.on_bad_sample)
    if name == DatasetName.folder.value:
        return list_folder(root, cfg.folder, cfg.val_fraction, cfg.test_fraction, policy)
    valid = [*SOURCE_NAMES, *VAL_SOURCE_NAMES]
    if name not in valid:
        raise ConfigError(f"unknown dataset source {name!r}; valid: {[*valid, 'folder']}")
    if name == "coco_person":
        return list_coco_person(coco_person_folder(root), policy)
    if name == "coco":
        images = under_root(root, cfg.coco.images)
        annotations = under_root(root, cfg.coco.annotations)
        fractions = None if cfg.coco.train_only else (cfg.val_fraction, cfg.test_fraction)
        return list_coco_instances(images, annotations, "coco", fractions, policy)
    if name == "coco_mini_person":
        folder = coco_mini_person_folder(root, cfg.download)
        images, annotations = (folder / part for part in COCO_MINI_PERSON)
        return list_coco_instances(images, annotations, name, None, policy)
    folder = ensure_dataset(name, root, cfg.download)
    if name == "coco128_seg":
        return list_coco128(folder, policy)
    if name == "eg_portrait":
        return list_eg_portrait(folder, cfg.val_fraction, policy)
    if name == "ccp":
        return list_ccp(folder, cfg.val_fraction, cfg.test_fraction, policy)
    return list_vikram(folder, cfg.val_fraction, cfg.test_fraction, policy)


def train_only(cfg: DataConfig, name: str) -> bool:
    """Whether source ``name`` is training material only (no val or test split to report)."""
    return name == "coco_mini_person" or (name == "coco" and cfg.coco.train_only)


def coco_mini_person_folder(root: Path, download: bool) -> Path:
    """``root/coco_mini_person`` (a copy with its photos and annotation file), fetched when
    missing and ``download`` is on (``seg.data.coco_mini``)."""
    folder = root / "coco_mini_person"
    if all((folder / part).exists() for part in COCO_MINI_PERSON):
        return folder
    if download:
        return download_coco_mini_person(root)
    raise DatasetNotFoundError(
        f"dataset 'coco_mini_person' not found in {folder} (expected {COCO_MINI_PERSON[0]}/ and "
        f"{COCO_MINI_PERSON[1]}) and downloading is off (data.download=false): run python "
        f"scripts/download_data.py coco_mini_person --root {root}, or point SEG_DATA_DIR (or "
        "data.root) at a folder that holds a copy"
    )


def coco_person_folder(root: Path) -> Path:
    """``root/coco_person`` if it holds the layout of ``seg.data.coco_download``; it is not
    fetched on its own (about 11 GB): the error says how."""
    folder = root / "coco_person"
    if not all((folder / kind / "train2017").is_dir() for kind in ("images", "masks")):
        raise DatasetNotFoundError(
            f"dataset 'coco_person' not found in {folder} (expected images/train2017/ and "
            "masks/train2017/). It is large (COCO 2017's ~64k photos with people, about 11 "
            f"GB) and fetched only on request: python scripts/download_data.py coco_person "
            f"--root {root} (resumable; data/README.md)"
        )
    return folder


def list_negatives_of(cfg: DataConfig) -> Listing:
    """The photos without people that ``data.negatives`` names: the ``imagenet_negatives``
    dataset (fetched when missing and ``data.download`` is on), or a folder of photos
    (relative to the data root, or absolute)."""
    root = resolve_data_root(cfg.root)
    if cfg.negatives == NEGATIVES:
        return list_negatives(ensure_dataset(NEGATIVES, root, cfg.download) / "images", NEGATIVES)
    folder = root / Path(cfg.negatives).expanduser()  # an absolute path replaces the root
    if not folder.is_dir():
        raise MissingFileError(
            f"data.negatives={cfg.negatives!r}: no folder {folder}; expected {NEGATIVES!r} or a "
            "folder of photos without people"
        )
    return list_negatives(folder)


def negative_refs(cfg: DataConfig, positives: int, seed: int = 0) -> list[SampleRef]:
    """The photos without people of each epoch: ``data.negatives_p`` of its samples besides
    ``positives`` photos with people, taken from the folder in an order drawn from ``seed``
    (the same ones every epoch of a run; when the share needs more photos than the folder has,
    each is used before any repeats)."""
    share = cfg.negatives_p  # in [0, 1): DataConfig checks it
    if share == 0:
        return []
    refs = list(list_negatives_of(cfg).refs.values())
    order = np.random.default_rng(seed).permutation(len(refs))
    count = round(positives * share / (1 - share))
    return [refs[order[i % len(refs)]] for i in range(count)]


def shared_refs(cfg: DataConfig, refs: list[SampleRef], seed: int = 0) -> list[SampleRef]:
    """An epoch's photos with people, ``refs`` (the train splits) with the sources of
    ``data.source_shares`` at their shares: each such source's photos repeated (each before any
    repeats, in an order drawn from ``seed``) to ``share`` of the result; the other sources'
    photos once each, as they are. A share smaller than the source's own is reached by taking
    fewer of its photos, the same ones every epoch."""
    shares = dict(cfg.source_shares or {})
    if not shares:
        return list(refs)
    trained = train_source_names(cfg)
    unknown = sorted(set(shares) - set(trained))
    if unknown:
        raise ConfigError(
            f"data.source_shares names {unknown}, which are not training sources of this run; "
            f"valid: {trained}"
        )
    rest = [ref for ref in refs if ref.source not in shares]
    if not rest:
        raise ConfigError(
            f"data.source_shares={shares} names every training source; leave one out: its "
            "photos are what the shares are shares of"
        )
    total = len(rest) / (1.0 - sum(shares.values()))
    out = list(rest)
    for k, (name, share) in enumerate(sorted(shares.items())):
        own = [ref for ref in refs if ref.source == name]
        if not own:
            raise DataError(f"data.source_shares.{name}: the source has no training photos")
        order = np.random.default_rng([seed, k]).permutation(len(own))
        out += [own[order[i % len(own)]] for i in range(round(total * share))]
    return out


def source_names(cfg: DataConfig) -> list[str]:
    """The sources a data config reads: its ``sources`` and ``val_sources`` for human_mix, else
    its own name.

    Validation and test report each of them; ``data.train_sources`` is checked here too, so a
    bad name fails whichever split is built first.
    """
    name = DatasetName(cfg.name).value
    if name != DatasetName.human_mix.value:
        names = [name]
    elif not cfg.sources:
        raise ConfigError("data.sources is empty; human_mix needs at least one source")
    else:
        unknown = [s for s in cfg.sources if s not in SOURCE_NAMES]
        if unknown:
            raise ConfigError(
                f"data.sources has unknown names {unknown}; valid: {list(SOURCE_NAMES)}"
            )
        names = list(cfg.sources)
        extra = list(cfg.val_sources or [])
        if [s for s in extra if s not in VAL_SOURCE_NAMES] or len(set(extra)) < len(extra):
            raise ConfigError(
                f"data.val_sources={extra} must name each of {list(VAL_SOURCE_NAMES)} at most "
                "once ([] for none); to validate a training source without training on it, "
                "use data.train_sources"
            )
    chosen = None if cfg.train_sources is None else list(cfg.train_sources)
    if chosen is not None and (
        not chosen or len(set(chosen)) < len(chosen) or not set(chosen) <= set(names)
    ):
        raise ConfigError(
            f"data.train_sources={chosen} must name each source once, one or more of {names} "
            f"(data.sources for human_mix), or be null for all of them"
        )
    return names if name != DatasetName.human_mix.value else names + extra


def train_source_names(cfg: DataConfig) -> list[str]:
    """The sources whose train splits are joined: ``data.train_sources`` (in the order of
    ``data.sources``), or all of ``source_names(cfg)`` but ``data.val_sources`` when it is
    null."""
    names = [n for n in source_names(cfg) if n not in VAL_SOURCE_NAMES]
    return names if cfg.train_sources is None else [n for n in names if n in cfg.train_sources]


def eval_source_names(cfg: DataConfig) -> list[str]:
    """The sources validation and test report: ``source_names`` but those that are training
    material only (``train_only``)."""
    return [name for name in source_names(cfg) if not train_only(cfg, name)]


def build_dataset(cfg: DataConfig, split: str, transform: Transform | None = None) -> SegDataset:
    """One dataset for a split; for human_mix the union of the sources' splits (for the train
    split, of ``data.train_sources``)."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; valid: {list(SPLITS)}")
    names = train_source_names(cfg) if split == "train" else eval_source_names(cfg)
    refs = [ref for name in names for ref in list_source(cfg, name).split_refs(split)]
    return SegDataset(refs, transform, cfg.on_bad_sample)


def build_train_dataset(data: DataConfig, aug: AugConfig, seed: int | None = None) -> SegDataset:
    """The train split with the training transform, which pastes people (``aug.paste_p``) from
    the split's photos with people: only training sources and ids are ever pasted. With
    ``data.negatives_p`` photos without people follow them (``negative_refs``), people pasted
    onto them as onto any other."""
    people = build_dataset(data, "train")
    shared = shared_refs(data, people.refs, seed or 0)
    refs = shared + negative_refs(data, len(shared), seed or 0)
    dataset = SegDataset(refs, None, data.on_bad_sample)
    dataset.transform = build_train_transform(aug, seed, pool=people)
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
            drop_bad=True,
        )
        for name in eval_source_names(cfg)
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
    "VAL_SOURCE_NAMES",
    "SegDataset",
    "build_dataset",
    "build_eval_datasets",
    "build_train_dataset",
    "eval_source_names",
    "has_instances",
    "list_source",
    "read_instances",
    "read_pair",
    "save_splits",
    "shared_refs",
    "source_names",
    "train_source_names",
]
