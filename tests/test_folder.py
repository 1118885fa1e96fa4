"""The folder dataset: a user's own files, generated here, in every mask encoding."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from seg.config import BadSamplePolicy, DataConfig, FolderConfig, MaskEncoding
from seg.data import BadSampleError, SegDataset, build_dataset
from seg.data.folder import list_folder

# A 6x8 image whose person is the left half; raw mask values per encoding.
PERSON = np.zeros((6, 8), bool)
PERSON[:, :4] = True
RAW = {
    MaskEncoding.binary01: PERSON.astype(np.uint8),
    MaskEncoding.binary255: PERSON.astype(np.uint8) * 255,
    MaskEncoding.labels: np.where(PERSON, np.arange(8) % 3 + 1, 0).astype(np.uint8),
    MaskEncoding.instances: np.where(PERSON, np.repeat([[1, 1, 2, 2, 0, 0, 0, 0]], 6, 0), 0).astype(
        np.uint16
    ),
    MaskEncoding.alpha: np.where(PERSON, 200, 40).astype(np.uint8),
}


def _write_pairs(images: Path, masks: Path, raw: np.ndarray, pattern: str, n: int = 4) -> None:
    images.mkdir(parents=True, exist_ok=True)
    masks.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        stem = f"img{i}"
        cv2.imwrite(str(images / f"{stem}.png"), rng.integers(0, 255, (6, 8, 3), dtype=np.uint8))
        cv2.imwrite(str(masks / pattern.format(stem=stem)), raw)


@pytest.mark.parametrize("encoding", list(RAW))  # yolo's text labels: tests/test_coco.py
def test_every_encoding_gives_the_person(tmp_path: Path, encoding: MaskEncoding) -> None:
    _write_pairs(tmp_path / "images", tmp_path / "masks", RAW[encoding], "{stem}_mask.png")
    cfg = FolderConfig(mask_pattern="{stem}_mask.png", encoding=encoding)
    listing = list_folder(tmp_path, cfg, 0.25, 0.25)
    assert sorted(listing.refs) == ["img0", "img1", "img2", "img3"]
    assert {s: len(v) for s, v in listing.splits.items()} == {"test": 1, "val": 1, "train": 2}
    sample = SegDataset(list(listing.refs.values()))[0]  # as read: no transform, no normalising
    assert sample["image"].shape == (6, 8, 3) and sample["image"].dtype == np.uint8
    assert sample["mask"].dtype == np.uint8 and (sample["mask"] == PERSON).all()


def test_masks_beside_images_and_ignore_value(tmp_path: Path) -> None:
    raw = RAW[MaskEncoding.binary01].copy()
    raw[0, 0] = 255
    _write_pairs(tmp_path / "all", tmp_path / "all", raw, "{stem}_mask.png", n=2)
    cfg = FolderConfig(images="all", masks="all", mask_pattern="{stem}_mask.png",
                       encoding=MaskEncoding.binary01, ignore_value=255)  # fmt: skip
    listing = list_folder(tmp_path, cfg, 0.0, 0.0)
    assert sorted(listing.refs) == ["img0", "img1"]  # the *_mask.png files are not images
    mask = SegDataset(list(listing.refs.values()))[0]["mask"]
    assert mask[0, 0] == 255 and mask[0, 1] == 1 and mask[0, 7] == 0


def test_split_subfolders_are_the_splits(tmp_path: Path) -> None:
    for split, n in (("train", 3), ("val", 2)):
        _write_pairs(tmp_path / "images" / split, tmp_path / "masks" / split,
                     RAW[MaskEncoding.binary255], "{stem}.png", n=n)  # fmt: skip
    listing = list_folder(tmp_path, FolderConfig(), 0.1, 0.2)
    assert {s: len(v) for s, v in listing.splits.items()} == {"train": 3, "val": 2, "test": 0}
    assert listing.splits["val"] == ["val/img0", "val/img1"]


def test_missing_mask_and_bad_values_name_the_file(tmp_path: Path) -> None:
    _write_pairs(tmp_path / "images", tmp_path / "masks", RAW[MaskEncoding.binary255], "{stem}.png")
    (tmp_path / "masks" / "img2.png").unlink()
    with pytest.raises(
        BadSampleError, match=r"img2\.png: missing mask: expected .*masks/img2\.png"
    ):
        list_folder(tmp_path, FolderConfig(), 0.0, 0.0)
    listing = list_folder(tmp_path, FolderConfig(), 0.0, 0.0, BadSamplePolicy.skip)
    assert len(listing.refs) == 3 and len(listing.problems) == 1
    # binary255 data read as binary01: the value 255 is not expected.
    wrong = list_folder(tmp_path, FolderConfig(encoding=MaskEncoding.binary01), 0, 0,
                        BadSamplePolicy.skip)  # fmt: skip
    with pytest.raises(BadSampleError, match=r"img0\.png: unexpected mask values \[255\]"):
        SegDataset(list(wrong.refs.values()))[0]


def test_bad_pattern_and_missing_folders_are_clear(tmp_path: Path) -> None:
    _write_pairs(tmp_path / "images", tmp_path / "masks", RAW[MaskEncoding.binary255], "{stem}.png")
    with pytest.raises(ValueError, match=r"mask_pattern='\{stme\}.png' is invalid"):
        list_folder(tmp_path, FolderConfig(mask_pattern="{stme}.png"), 0, 0)
    with pytest.raises(FileNotFoundError, match=r"data\.folder\.images"):
        list_folder(tmp_path, FolderConfig(images="nope"), 0, 0)
    with pytest.raises(ValueError, match="alpha_threshold=300"):
        list_folder(tmp_path, FolderConfig(alpha_threshold=300), 0, 0)


def test_build_dataset_reads_folder_under_the_data_root(tmp_path: Path, monkeypatch) -> None:
    _write_pairs(tmp_path / "images", tmp_path / "masks", RAW[MaskEncoding.binary255], "{stem}.png",
                 n=10)  # fmt: skip
    monkeypatch.setenv("SEG_DATA_DIR", str(tmp_path))
    cfg = DataConfig(name="folder", download=False)
    sizes = {s: len(build_dataset(cfg, s)) for s in ("train", "val", "test")}
    assert sizes == {"train": 7, "val": 1, "test": 2}
