"""Every dataset the project reads, in one table (:data:`DATASETS`): its name, its role, how
its pairs are listed, and how it is fetched and verified.

A dataset is one :class:`Dataset` entry here: ``list`` turns its folder into a ``Listing``
(``seg.data.listing``: the pairs, their splits, notes and problems), ``fetcher`` gets and checks
it (a GitHub archive at a pinned commit, ``DatasetSource``; COCO's own servers; two
repositories assembled; None for your own data, read from ``data.root``), ``role`` says what
training and evaluation do with it. ``list_source``, ``scripts/download_data.py`` and
``scripts/check_data.py`` loop over this table; docs/extending.md shows how to add an entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Protocol

from seg.config import BadSamplePolicy, DataConfig
from seg.data.coco import list_coco128, list_coco_instances, list_coco_person, list_negatives
from seg.data.coco_download import CocoPerson
from seg.data.coco_mini import ANNOTATIONS, IMAGES, CocoMiniPerson
from seg.data.download import (
    DatasetNotFoundError,
    DatasetSource,
    FetchOptions,
    resolve_data_root,
)
from seg.data.folder import list_folder, under_root
from seg.data.listing import Listing, list_ccp, list_eg_portrait, list_vikram
from seg.errors import ConfigError


class Role(str, Enum):
    """What training and evaluation do with a dataset."""

    train = "train"  # its train split is trained on, its val and test splits reported
    train_only = "train_only"  # trained on, never reported: it has no val or test split
    validation = "validation"  # validated and tested, never trained on (data.val_sources)
    negatives = "negatives"  # photos without people, all background (data.negatives)


class Fetcher(Protocol):
    """How a dataset gets into ``root/<name>`` and is checked there."""

    on_request: bool  # fetched only when named: not by ``download_data.py all``, nor when missing

    def problems(self, folder: Path) -> list[str]:
        """What ``folder`` lacks; [] when the dataset is there."""
        ...

    def fetch(self, root: Path, options: FetchOptions | None = None) -> Path:
        """Get it into ``root/<name>``; that folder."""
        ...

    def verify(self, folder: Path) -> list[str]:
        """A copy's files against their manifest; [] when all match."""
        ...

    def instructions(self, root: Path) -> str:
        """How to get it by hand."""
        ...


Lister = Callable[[Path, DataConfig, BadSamplePolicy], Listing]


@dataclass(frozen=True)
class Dataset:
    """One dataset: ``list(folder, data config, bad-sample policy)`` gives its pairs, from
    ``root/<name>`` (``fetcher`` set) or from ``data.root`` itself (your own data)."""

    name: str
    role: Role
    list: Lister
    fetcher: Fetcher | None = None
    # A role that follows the config (data=coco: data.coco.train_only); None: ``role``.
    role_for: Callable[[DataConfig], Role] | None = None

    def role_of(self, cfg: DataConfig) -> Role:
        return self.role_for(cfg) if self.role_for is not None else self.role


def _coco(folder: Path, cfg: DataConfig, policy: BadSamplePolicy) -> Listing:
    """Your own COCO instances file (data.coco), its paths under the data root."""
    images = under_root(folder, cfg.coco.images)
    annotations = under_root(folder, cfg.coco.annotations)
    fractions = None if cfg.coco.train_only else (cfg.val_fraction, cfg.test_fraction)
    return list_coco_instances(images, annotations, "coco", fractions, policy)


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(
            "eg_portrait",
            Role.train,
            lambda f, c, p: list_eg_portrait(f, c.val_fraction, p),
            DatasetSource(
                name="eg_portrait",
                repo="bio-punk/AutoPortraitMatting",
                commit="5c89932069955ccf18a81ba824e466f8135aced4",
                members=(
                    "README*",
                    "LICENSE*",
                    "data/alldata_urls.txt",
                    "data/trainlist.mat",
                    "data/testlist.mat",
                    "data/images_data_crop/*.jpg",
                    "data/images_mask/*.mat",
                ),
                counts={"data/images_data_crop": 1605, "data/images_mask": 1887},
                required=("data/trainlist.mat", "data/testlist.mat"),
                note="the uncropped originals (data/images_data/) and the other folders are "
                "not used",
            ),
        ),
        Dataset(
            "ccp",
            Role.train,
            lambda f, c, p: list_ccp(f, c.val_fraction, c.test_fraction, p),
            DatasetSource(
                name="ccp",
                repo="bearpaw/clothing-co-parsing",
                commit="fe34fb77721a9973fbae92c05f7f12b664d10110",
                members=(
                    "README*",
                    "LICENSE*",
                    "label_list.mat",
                    "photos/0[0-9][0-9][0-9].jpg",
                    "photos/100[0-4].jpg",
                    "annotations/pixel-level/*.mat",
                ),
                counts={"photos": 1004, "annotations/pixel-level": 1004},
                required=("label_list.mat",),
                note="keep only photos/0001.jpg .. 1004.jpg (the photos with pixel-level labels)",
            ),
        ),
        Dataset(
            "vikram_human_seg",
            Role.train,
            lambda f, c, p: list_vikram(f, c.val_fraction, c.test_fraction, p),
            DatasetSource(
                name="vikram_human_seg",
                repo="VikramShenoy97/Human-Segmentation-Dataset",
                commit="fe4efc56003005a58b7d2449aa563a20e3861e24",
                members=("README*", "Training_Images/*.jpg", "Ground_Truth/*.png"),
                counts={"Training_Images": 290, "Ground_Truth": 290},
            ),
        ),
        Dataset(
            "coco128_seg",
            Role.validation,
            lambda f, c, p: list_coco128(f, p),
            DatasetSource(
                name="coco128_seg",
                repo="Goodccccl/yolov8_python",
                commit="0f2dcc3495e32245968452037ee54595d3af69f7",
                folder="coco128-seg",
                members=("README*", "LICENSE*", "images/train2017/*.jpg", "labels/train2017/*.txt"),
                counts={"images/train2017": 128, "labels/train2017": 128},
                note="only its coco128-seg/ folder (Ultralytics' coco128-seg.zip holds the same)",
            ),
        ),
        Dataset(
            "imagenet_negatives",
            Role.negatives,
            lambda f, c, p: list_negatives(f / "images", f.name),
            DatasetSource(
                name="imagenet_negatives",
                repo="EliSchwartz/imagenet-sample-images",
                commit="bc69043e2862758a1906c6a24a792bb28c6bb2ff",
                into="images",
                members=("images/*.JPEG",),
                counts={"images": 442},
                only_manifest=True,
                note="only the 442 photos without people that seg/data/manifests/"
                "imagenet_negatives.sha256 names, into images/",
            ),
        ),
        Dataset(
            "coco_mini_person",
            Role.train_only,
            lambda f, c, p: list_coco_instances(f / IMAGES, f / ANNOTATIONS, f.name, None, p),
            CocoMiniPerson(),
        ),
        Dataset("coco_person", Role.train, lambda f, c, p: list_coco_person(f, p), CocoPerson()),
        # Your own data, under data.root: nothing to fetch.
        Dataset(
            "folder",
            Role.train,
            lambda f, c, p: list_folder(f, c.folder, c.val_fraction, c.test_fraction, p),
        ),
        Dataset(
            "coco",
            Role.train,
            _coco,
            role_for=lambda c: Role.train_only if c.coco.train_only else Role.train,
        ),
    )
}
MIX = "human_mix"  # not a dataset: the datasets of data.sources and data.val_sources


def dataset(name: str) -> Dataset:
    """The entry of ``name``; an error lists the valid names."""
    try:
        return DATASETS[name]
    except KeyError:
        raise ConfigError(f"unknown dataset {name!r}; valid: {[*DATASETS, MIX]}") from None


def names_with_role(*roles: Role) -> list[str]:
    """The datasets whose ``role`` is one of ``roles``, in the table's order."""
    return [name for name, d in DATASETS.items() if d.role in roles]


def github_sources() -> dict[str, DatasetSource]:
    """The datasets fetched as one GitHub archive: ``{name: DatasetSource}``."""
    return {n: d.fetcher for n, d in DATASETS.items() if isinstance(d.fetcher, DatasetSource)}


def dataset_folder(name: str, root: Path, download: bool) -> Path:
    """Where ``name`` is read from: ``root/<name>`` once there (fetched when missing and
    ``download`` is on, unless it is fetched only on request), or ``root`` for your own data;
    else DatasetNotFoundError saying how to get it."""
    d = dataset(name)
    if d.fetcher is None:
        return Path(root)
    folder = Path(root) / name
    problems = d.fetcher.problems(folder)
    if not problems:
        return folder
    if download and not d.fetcher.on_request:
        return d.fetcher.fetch(Path(root))
    why = "" if d.fetcher.on_request else " and downloading is off (data.download=false)"
    raise DatasetNotFoundError(
        f"dataset {name!r} not found in {folder} ({'; '.join(problems)}){why}.\n"
        + d.fetcher.instructions(Path(root))
    )


def list_dataset(cfg: DataConfig, name: str, root: Path | None = None) -> Listing:
    """List dataset ``name`` under ``root`` (default: the configured data root), fetched when
    missing and ``data.download`` is on."""
    folder = dataset_folder(name, root or resolve_data_root(cfg.root), cfg.download)
    return dataset(name).list(folder, cfg, BadSamplePolicy(cfg.on_bad_sample))


__all__ = [
    "DATASETS",
    "MIX",
    "Dataset",
    "Fetcher",
    "Role",
    "dataset",
    "dataset_folder",
    "github_sources",
    "list_dataset",
    "names_with_role",
]
