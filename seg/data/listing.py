"""List the (image, mask) pairs of each dataset in its published layout, and split them.

Each ``list_*`` function returns a ``Listing``: the usable pairs, the ids of each split, notes
that explain every file left out on purpose, and problems (pairs that cannot be used).
Splits of sets that publish none are drawn from a hash of the file names, never from the order
of a directory listing, so every machine gets the same split.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.io

from seg.config import BadSamplePolicy, MaskEncoding
from seg.data.io import BadSampleError
from seg.errors import ConfigError, MissingFileError

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
# Clothing Co-Parsing: this annotation is all background (the photo has no labelled person).
CCP_EXCLUDED = {"0536": "annotation is empty (all background)"}


@dataclass(frozen=True)
class MaskSpec:
    """How to turn one source's mask files into {0, 1, ignore} masks."""

    encoding: MaskEncoding
    mat_key: str | None = None
    alpha_threshold: int = 128
    ignore_value: int | None = None


@dataclass(frozen=True)
class SampleRef:
    id: str
    source: str
    image: Path
    mask: Path | None  # None: no mask file, every pixel is background (a photo without people)
    mask_spec: MaskSpec


@dataclass
class Listing:
    source: str
    refs: dict[str, SampleRef]  # id -> pair, every usable pair of the dataset
    splits: dict[str, list[str]]  # split -> ids
    notes: list[str] = field(default_factory=list)  # files left out on purpose, explained
    problems: list[BadSampleError] = field(default_factory=list)  # skipped bad pairs

    def split_refs(self, split: str) -> list[SampleRef]:
        if split not in self.splits:
            raise ConfigError(
                f"unknown split {split!r} for {self.source}; valid: {list(self.splits)}"
            )
        return [self.refs[i] for i in self.splits[split]]


def natural_key(name: str) -> list[int | str]:
    """Sort key that puts '2' before '10'."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def hash_split(ids: list[str], fractions: dict[str, float], salt: str) -> dict[str, list[str]]:
    """Split ids deterministically by a hash of their names, in the order of ``fractions``.

    Each split but the last gets ``round(n * fraction)`` ids; the last one takes the rest.
    """
    order = sorted(ids, key=lambda i: hashlib.sha1(f"{salt}/{i}".encode()).hexdigest())
    out: dict[str, list[str]] = {}
    start = 0
    names = list(fractions)
    for k, name in enumerate(names):
        stop = len(order) if k == len(names) - 1 else start + round(len(order) * fractions[name])
        out[name] = sorted(order[start:stop], key=natural_key)
        start = stop
    return out


def _files(folder: Path, suffixes: tuple[str, ...]) -> dict[str, Path]:
    if not folder.is_dir():
        raise MissingFileError(f"expected folder {folder} (is the dataset complete?)")
    return {p.stem: p for p in folder.iterdir() if p.suffix.lower() in suffixes and p.is_file()}


def _bad_pair(err: BadSampleError, policy: BadSamplePolicy, listing: Listing) -> None:
    if policy is BadSamplePolicy.error:
        raise err
    log.warning("skipping %s", err)
    listing.problems.append(err)


def list_eg_portrait(
    root: Path, val_fraction: float, policy: BadSamplePolicy = BadSamplePolicy.error
) -> Listing:
    """eg_portrait: official train/test id lists; val carved from train by file-name hash."""
    data = root / "data"
    images = _files(data / "images_data_crop", (".jpg", ".jpeg", ".png"))
    masks = _files(data / "images_mask", (".mat",))
    spec = MaskSpec(MaskEncoding.binary01, mat_key="mask")
    listing = Listing("eg_portrait", {}, {})
    for stem, image in sorted(images.items()):
        mask = data / "images_mask" / f"{stem}_mask.mat"
        if f"{stem}_mask" not in masks:
            _bad_pair(BadSampleError(image, f"missing mask: expected {mask}"), policy, listing)
            continue
        listing.refs[stem] = SampleRef(stem, "eg_portrait", image, mask, spec)
    orphans = len(masks) - sum(f"{s}_mask" in masks for s in images)
    if orphans:
        listing.notes.append(f"{orphans} masks have no image (skipped, as published)")

    official = {}
    for split in ("train", "test"):
        ids = scipy.io.loadmat(str(data / f"{split}list.mat"))[f"{split}list"].ravel()
        official[split] = [f"{int(i):05d}" for i in ids]
    present = {s: [i for i in ids if i in listing.refs] for s, ids in official.items()}
    for split, ids in official.items():
        listing.notes.append(
            f"official {split} list: {len(ids)} ids, {len(present[split])} with an image"
        )
    carved = hash_split(present["train"], {"val": val_fraction, "train": 1.0}, "eg_portrait")
    listing.splits = {"train": carved["train"], "val": carved["val"], "test": present["test"]}
    listed = set(official["train"]) | set(official["test"])
    unlisted = [i for i in listing.refs if i not in listed]
    if unlisted:
        listing.notes.append(f"{len(unlisted)} images are in neither official list (unused)")
    return listing


def _pair(
    listing: Listing,
    found: dict[str, Path],
    partner: Callable[[str], Path],
    spec: MaskSpec,
    policy: BadSamplePolicy,
    found_are_masks: bool = False,
) -> None:
    """Add ``stem -> (image, mask)`` to ``listing`` for every file of ``found`` (images, or
    masks with ``found_are_masks``) whose partner file exists; a missing partner is a bad pair
    (raised or noted, as ``policy`` says)."""
    for stem, path in found.items():
        other = partner(stem)
        if not other.is_file():
            what = "annotation has no photo" if found_are_masks else "missing mask"
            _bad_pair(BadSampleError(path, f"{what}: expected {other}"), policy, listing)
            continue
        image, mask = (other, path) if found_are_masks else (path, other)
        listing.refs[stem] = SampleRef(stem, listing.source, image, mask, spec)


def list_ccp(
    root: Path,
    val_fraction: float,
    test_fraction: float,
    policy: BadSamplePolicy = BadSamplePolicy.error,
) -> Listing:
    """Clothing Co-Parsing: pixel-level label maps, person = label > 0; no official split."""
    annotations = _files(root / "annotations" / "pixel-level", (".mat",))
    listing = Listing("ccp", {}, {})
    for stem in sorted(set(annotations) & set(CCP_EXCLUDED)):
        listing.notes.append(f"{stem} excluded: {CCP_EXCLUDED[stem]}")
    kept = {k: v for k, v in sorted(annotations.items()) if k not in CCP_EXCLUDED}
    spec = MaskSpec(MaskEncoding.labels, mat_key="groundtruth")
    photos = root / "photos"
    _pair(listing, kept, lambda stem: photos / f"{stem}.jpg", spec, policy, found_are_masks=True)
    listing.splits = fraction_splits(listing, val_fraction, test_fraction)
    return listing


def list_vikram(
    root: Path,
    val_fraction: float,
    test_fraction: float,
    policy: BadSamplePolicy = BadSamplePolicy.error,
) -> Listing:
    """Vikram Shenoy's set: Training_Images/N.jpg with Ground_Truth/N.png in {0, 255}."""
    images = _files(root / "Training_Images", (".jpg", ".jpeg", ".png"))
    listing = Listing("vikram_human_seg", {}, {})
    ordered = dict(sorted(images.items(), key=lambda kv: natural_key(kv[0])))
    masks, spec = root / "Ground_Truth", MaskSpec(MaskEncoding.binary255)
    _pair(listing, ordered, lambda stem: masks / f"{stem}.png", spec, policy)
    listing.splits = fraction_splits(listing, val_fraction, test_fraction)
    return listing


def fraction_splits(listing: Listing, val_fraction: float, test_fraction: float) -> dict:
    """test / val / train drawn from the hash of each id, with fixed fractions (checked by
    ``DataConfig``: each in [0, 1), their sum below 1)."""
    fractions = {"test": test_fraction, "val": val_fraction, "train": 1.0}
    return hash_split(list(listing.refs), fractions, listing.source)


def person_fraction(mask: np.ndarray) -> float:
    """Share of labelled pixels that are person (ignore pixels excluded)."""
    labelled = mask != 255
    return float((mask[labelled] == 1).mean()) if labelled.any() else 0.0
