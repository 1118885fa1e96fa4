"""Listing the real datasets' pairs, their notes, and deterministic splits."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from seg.config import BadSamplePolicy, DataConfig
from seg.data.io import BadSampleError
from seg.data.listing import hash_split, list_ccp, list_eg_portrait, list_vikram


def test_hash_split_is_deterministic_exact_and_independent_of_order() -> None:
    ids = [str(i) for i in range(1000)]
    fractions = {"test": 0.2, "val": 0.1, "train": 1.0}
    a = hash_split(ids, fractions, "x")
    b = hash_split(list(reversed(ids)), fractions, "x")
    assert a == b
    assert [len(a[s]) for s in ("test", "val", "train")] == [200, 100, 700]
    assert set(a["test"]).isdisjoint(a["val"]) and set(a["val"]).isdisjoint(a["train"])
    assert sorted(a["test"] + a["val"] + a["train"], key=int) == ids
    # A split follows the names: adding files leaves most earlier assignments in place.
    bigger = hash_split([*ids, *map(str, range(1000, 1100))], fractions, "x")
    assert len(set(a["test"]) & set(bigger["test"])) > 150


def test_eg_portrait_uses_official_lists_and_explains_left_out_files(data_env: Path) -> None:
    listing = list_eg_portrait(data_env / "eg_portrait", val_fraction=0.1)
    assert len(listing.refs) == 1605
    sizes = {s: len(ids) for s, ids in listing.splits.items()}
    assert sizes == {"train": 1161, "val": 129, "test": 264}
    assert set(listing.splits["test"]).isdisjoint(listing.splits["train"] + listing.splits["val"])
    notes = " | ".join(listing.notes)
    assert "282 masks have no image" in notes and "51 images are in neither" in notes
    assert listing.refs["00001"].mask.name == "00001_mask.mat"


def test_ccp_excludes_the_empty_annotation(data_env: Path) -> None:
    listing = list_ccp(data_env / "ccp", 0.1, 0.2)
    assert len(listing.refs) == 1003 and "0536" not in listing.refs
    assert any("0536" in n for n in listing.notes)
    assert sum(len(v) for v in listing.splits.values()) == 1003
    assert len(listing.splits["test"]) == round(1003 * 0.2)


def test_vikram_missing_mask_errors_or_is_skipped(vikram_subset: Path) -> None:
    (vikram_subset / "Ground_Truth" / "2.png").unlink()
    with pytest.raises(
        BadSampleError, match=r"2\.jpg: missing mask: expected .*Ground_Truth/2\.png"
    ):
        list_vikram(vikram_subset, 0.2, 0.2)
    listing = list_vikram(vikram_subset, 0.2, 0.2, BadSamplePolicy.skip)
    assert sorted(listing.refs) == ["1", "10", "11", "3"]
    assert len(listing.problems) == 1 and "2.jpg" in str(listing.problems[0])


def test_ccp_annotation_without_photo_is_reported(shared_datasets: Path, tmp_path: Path) -> None:
    root = tmp_path / "ccp"
    (root / "annotations" / "pixel-level").mkdir(parents=True)
    (root / "photos").mkdir()
    src = shared_datasets / "ccp"
    for stem in ("0001", "0002"):
        shutil.copy(src / "annotations" / "pixel-level" / f"{stem}.mat",
                    root / "annotations" / "pixel-level")  # fmt: skip
    shutil.copy(src / "photos" / "0001.jpg", root / "photos")
    with pytest.raises(BadSampleError, match=r"0002\.mat: annotation has no photo"):
        list_ccp(root, 0.0, 0.0)


@pytest.mark.parametrize(("val", "test"), [(-0.1, 0.2), (0.5, 0.5), (0.1, 1.0)])
def test_bad_split_fractions_are_rejected(val: float, test: float) -> None:
    with pytest.raises(ValueError, match=r"data\.(val|test)_fraction"):
        DataConfig(val_fraction=val, test_fraction=test)
