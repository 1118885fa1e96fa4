"""The dataset every stage uses, and the builders that read the data config."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from seg.config import AugConfig, BadSamplePolicy, DataConfig, MaskEncoding
from seg.config.data import scaled_sides
from seg.data.coco import (
    list_negatives,
    read_coco_instances,
    read_coco_mask,
    read_yolo_instances,
    read_yolo_mask,
)
from seg.data.copy_paste import RawPool
from seg.data.download import DatasetNotFoundError, resolve_data_root
from seg.data.io import (
    IGNORE_INDEX,
    BadSampleError,
    encode_mask,
    fit_mask_to_image,
    read_image,
    read_mask_array,
)
from seg.data.listing import SPLITS, Listing, SampleRef
from seg.data.registry import DATASETS, MIX, Role, dataset, list_dataset, names_with_role
from seg.data.transforms import SourceTransforms, build_train_transform, seed_transform
from seg.errors import ConfigError, DataError, MissingFileError
from seg.fileio import write_text

log = logging.getLogger(__name__)

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
                transform = self.transform
                if isinstance(transform, SourceTransforms):  # data.train_scales
                    transform = transform.for_source(ref.source)
                out = transform(image=image, mask=mask)
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
    """List one dataset (a source of human_mix, or ``data.name``'s own) under the configured
    data root; a missing one is downloaded when ``cfg.download`` is true
    (``seg.data.registry``)."""
    return list_dataset(cfg, name)


def train_only(cfg: DataConfig, name: str) -> bool:
    """Whether source ``name`` is training material only (no val or test split to report)."""
    return dataset(name).role_of(cfg) is Role.train_only


def own_folder(cfg: DataConfig) -> bool:
    """Whether ``data.name`` is data of the user's (``data=folder``, ``data=coco``): nothing to
    fetch, and ``data.root`` is that folder, not where the datasets are."""
    return cfg.name != MIX and dataset(cfg.name).fetcher is None


def list_negatives_of(cfg: DataConfig) -> Listing | None:
    """The photos without people that ``data.negatives`` names: the ``imagenet_negatives``
    dataset (fetched when missing and ``data.download`` is on), or a folder of photos
    (relative to the data root, or absolute).

    With data of the user's (``own_folder``) the named dataset is looked for where the
    datasets are (``$SEG_DATA_DIR``, else ``./data``), not in the user's folder; where it is
    missing there, None (the run trains without them, and one line says so and how to add
    them).
    """
    negatives = names_with_role(Role.negatives)
    if cfg.negatives in negatives:
        if not own_folder(cfg):
            return list_dataset(cfg, cfg.negatives)
        root = resolve_data_root(None)
        try:
            return list_dataset(cfg, cfg.negatives, root)
        except DatasetNotFoundError:
            log.warning(
                "training without photos without people: data.negatives_p=%g asks for %s, which "
                "is not in %s ($SEG_DATA_DIR, where the datasets are); add them with python "
                "scripts/download_data.py %s --root %s, or data.negatives=<a folder of photos "
                "without people>; data.negatives_p=0 says you want none",
                cfg.negatives_p, cfg.negatives, root, cfg.negatives, root,
            )  # fmt: skip
            return None
    folder = resolve_data_root(cfg.root) / Path(cfg.negatives).expanduser()  # absolute wins
    if not folder.is_dir():
        raise MissingFileError(
            f"data.negatives={cfg.negatives!r}: no folder {folder}; expected one of {negatives} "
            "or a folder of photos without people"
        )
    return list_negatives(folder)


def negative_refs(cfg: DataConfig, positives: int, seed: int = 0) -> list[SampleRef]:
    """The photos without people of each epoch: ``data.negatives_p`` of its samples besides
    ``positives`` photos with people, taken from the folder in an order drawn from ``seed``
    (the same ones every epoch of a run; when the share needs more photos than the folder has,
    each is used before any repeats). None where ``list_negatives_of`` finds none."""
    share = cfg.negatives_p  # in [0, 1): DataConfig checks it
    listing = list_negatives_of(cfg) if share > 0 else None
    if listing is None:
        return []
    refs = list(listing.refs.values())
    order = np.random.default_rng(seed).permutation(len(refs))
    count = round(positives * share / (1 - share))
    return [refs[order[i % len(refs)]] for i in range(count)]


def check_training_sources(cfg: DataConfig, key: str, names: Mapping[str, object]) -> None:
    """Fail unless every key of ``names`` (``data.<key>``) is a training source of this run,
    naming those that are."""
    trained = train_source_names(cfg)
    unknown = sorted(set(names) - set(trained))
    if unknown:
        raise ConfigError(
            f"data.{key} names {unknown}, which are not training sources of this run; "
            f"valid: {trained}"
        )


def shared_refs(cfg: DataConfig, refs: list[SampleRef], seed: int = 0) -> list[SampleRef]:
    """An epoch's photos with people, ``refs`` (the train splits) with the sources of
    ``data.source_shares`` at their shares: each such source's photos repeated (each before any
    repeats, in an order drawn from ``seed``) to ``share`` of the result; the other sources'
    photos once each, as they are. A share smaller than the source's own is reached by taking
    fewer of its photos, the same ones every epoch."""
    shares = dict(cfg.source_shares or {})
    if not shares:
        return list(refs)
    check_training_sources(cfg, "source_shares", shares)
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
    name = str(getattr(cfg.name, "value", cfg.name))
    extra: list[str] = []
    if name != MIX:
        dataset(name)  # an unknown name: the error lists the valid ones
        names = [name]
    elif not cfg.sources:
        raise ConfigError("data.sources is empty; human_mix needs at least one source")
    else:
        trainable = names_with_role(Role.train, Role.train_only)
        unknown = [s for s in cfg.sources if s not in trainable]
        if unknown:
            raise ConfigError(f"data.sources has unknown names {unknown}; valid: {trainable}")
        names = list(cfg.sources)
        extra = list(cfg.val_sources or [])
        validation = names_with_role(Role.validation)
        if [s for s in extra if s not in validation] or len(set(extra)) < len(extra):
            raise ConfigError(
                f"data.val_sources={extra} must name each of {validation} at most once ([] "
                "for none); to validate a training source without training on it, use "
                "data.train_sources"
            )
    chosen = None if cfg.train_sources is None else list(cfg.train_sources)
    if chosen is not None and (
        not chosen or len(set(chosen)) < len(chosen) or not set(chosen) <= set(names)
    ):
        raise ConfigError(
            f"data.train_sources={chosen} must name each source once, one or more of {names} "
            f"(data.sources for human_mix), or be null for all of them"
        )
    return names + extra


def train_source_names(cfg: DataConfig) -> list[str]:
    """The sources whose train splits are joined: ``data.train_sources`` (in the order of
    ``data.sources``), or all of ``source_names(cfg)`` but ``data.val_sources`` when it is
    null."""
    names = [n for n in source_names(cfg) if DATASETS[n].role is not Role.validation]
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
    dataset.transform = build_train_transforms(data, aug, seed, pool=people)
    return dataset


def build_train_transforms(
    data: DataConfig, aug: AugConfig, seed: int | None = None, pool: RawPool | None = None
) -> Transform:
    """The training transform (``build_train_transform``), or with ``data.train_scales`` a
    :class:`SourceTransforms` whose named sources resize their photos to ``aug.train_size``
    (``max(aug.crop_size)`` when null) times their scale. A name that is not a training source
    of this run fails, naming those that are."""
    scales = {str(k): float(v) for k, v in dict(data.train_scales or {}).items()}
    default = build_train_transform(aug, seed, pool=pool)
    if not scales:
        return default
    check_training_sources(data, "train_scales", scales)
    base = max(aug.crop_size) if aug.train_size is None else aug.train_size
    by_source = {
        name: build_train_transform(
            dataclasses.replace(aug, train_size=scaled_sides([base], scale)[0]), pool=pool
        )
        for name, scale in scales.items()
    }
    transforms = SourceTransforms(default, by_source)
    if seed is not None:
        seed_transform(transforms, seed)
    return transforms


def eval_sizes(cfg: DataConfig, default: Sequence[int]) -> dict[str, list[int]]:
    """The size (long, short side) each validation and test source is scored at: ``default``
    (``aug.eval_size``) times its entry of ``data.eval_scales`` (1 without one). Entries of
    datasets that are not sources here are passed over (``data.val_sources=[]`` drops
    coco128_seg, not its scale); a name that is no dataset fails, naming the valid ones."""
    scales = {str(k): float(v) for k, v in dict(cfg.eval_scales or {}).items()}
    unknown = sorted(set(scales) - set(DATASETS))
    if unknown:
        raise ConfigError(
            f"data.eval_scales names {unknown}, which are no datasets; valid: {sorted(DATASETS)}"
        )
    return {name: scaled_sides(default, scales.get(name, 1.0)) for name in eval_source_names(cfg)}


def build_eval_datasets(
    cfg: DataConfig, split: str, transform: Transform | Mapping[str, Transform] | None = None
) -> dict[str, SegDataset]:
    """One dataset per source for a split, so that results are reported per source; a bad
    pair under ``on_bad_sample=skip`` is dropped (``drop_bad``), never replaced. ``transform``
    is every source's, or one per source (by name: sizes of their own, ``eval_sizes``)."""
    return {
        name: SegDataset(
            list_source(cfg, name).split_refs(split),
            transform.get(name) if isinstance(transform, Mapping) else transform,
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


def own_eval_sizes(cfg: DataConfig, default: Sequence[int]) -> dict[str, list[int]]:
    """The sources of :func:`eval_sizes` scored at another size than ``default``: what a log
    line or a run card names beside ``aug.eval_size``."""
    return {n: hw for n, hw in eval_sizes(cfg, default).items() if hw != [int(v) for v in default]}


__all__ = [
    "IGNORE_INDEX",
    "SegDataset",
    "build_dataset",
    "build_eval_datasets",
    "build_train_dataset",
    "build_train_transforms",
    "eval_sizes",
    "eval_source_names",
    "has_instances",
    "list_source",
    "own_eval_sizes",
    "read_instances",
    "read_pair",
    "save_splits",
    "shared_refs",
    "source_names",
    "train_source_names",
]
