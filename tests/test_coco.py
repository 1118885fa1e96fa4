"""COCO person masks (YOLO segmentation labels), coco128_seg as a validated-only source, and
photos without people mixed into training."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from seg.config import AugConfig, DataConfig
from seg.data import BadSampleError, build_train_dataset, list_source
from seg.data.coco import (
    list_negatives,
    load_coco_instances,
    rasterize_polygons,
    read_yolo_instances,
    read_yolo_mask,
    write_coco_person_masks,
)
from seg.data.datasets import negative_refs, read_pair


def _shoelace(xy: np.ndarray) -> float:
    x, y = xy[:, 0], xy[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1))))


def test_a_yolo_label_file_gives_the_union_of_the_person_polygons(tmp_path: Path) -> None:
    """Class 0 polygons are filled at the photo's size (their area as the shoelace formula
    says), other classes are not people, overlapping people are one mask."""
    person = np.array([[0.1, 0.1], [0.5, 0.1], [0.5, 0.9], [0.1, 0.9]])
    other = np.array([[0.6, 0.1], [0.9, 0.1], [0.75, 0.5]])
    overlap = np.array([[0.3, 0.5], [0.7, 0.5], [0.7, 0.95], [0.3, 0.95]])
    lines = [
        f"{c} " + " ".join(f"{v:.6f}" for v in xy.ravel())
        for c, xy in ((0, person), (45, other), (0, overlap))
    ]
    label = tmp_path / "photo.txt"
    label.write_text("\n".join(lines) + "\n\n")
    mask = read_yolo_mask(label, (200, 300))
    assert mask.dtype == np.uint8 and set(np.unique(mask)) == {0, 1}
    assert mask[:95, 160:].sum() == 0  # the class-45 object is not a person
    scale = np.array([300, 200])
    union = _shoelace(person * scale) + _shoelace(overlap * scale) - 0.2 * 0.4 * 300 * 200
    assert abs(mask.sum() - union) / union < 0.03
    only_other = tmp_path / "other.txt"
    only_other.write_text(lines[1])
    assert read_yolo_mask(only_other, (200, 300)).sum() == 0
    # One mask per person, in the file's order, each its own polygon's area; their union is
    # the mask above.
    first, second = read_yolo_instances(label, (200, 300))
    assert abs(first.sum() - _shoelace(person * scale)) / first.sum() < 0.03
    assert abs(second.sum() - _shoelace(overlap * scale)) / second.sum() < 0.03
    assert np.array_equal(first | second, mask)
    assert read_yolo_instances(only_other, (200, 300)) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0 0.1 0.1 0.5", r"line 1: a polygon needs 3 or more x y pairs, got 3 values"),
        ("person 0.1 0.1 0.5 0.1 0.5 0.5", r"line 1: expected '<class> x1 y1"),
        ("0 0.1 0.1 0.5 0.1 0.5 0.5\n0 1 1 50 1 50 50", r"line 2: coordinates must be normalised"),
    ],
)
def test_a_bad_label_line_names_the_file_and_the_line(tmp_path: Path, text, problem) -> None:
    label = tmp_path / "bad.txt"
    label.write_text(text)
    with pytest.raises(BadSampleError, match=rf"bad\.txt.*{problem}"):
        read_yolo_mask(label, (10, 10))


def test_coco128_seg_is_validated_and_tested_never_trained(data_env: Path) -> None:
    """128 photos in val and test, none in train; 61 show people (their masks drawn from the
    polygons at the photo's size), the 67 others are all background, two of them without a
    label file; the two label files without a photo are noted."""
    listing = list_source(DataConfig(), "coco128_seg")
    assert listing.splits["train"] == [] and len(listing.splits["val"]) == 128
    assert listing.splits["test"] == listing.splits["val"]
    assert any("000000000656" in note for note in listing.notes)
    people = 0
    for ref in listing.refs.values():
        image, mask, resized = read_pair(ref)
        assert mask.shape == image.shape[:2] and not resized
        people += bool(mask.any())
    assert people == 61
    assert listing.refs["000000000250"].mask is None  # no label file: no objects


def test_negatives_are_a_share_of_the_epoch_and_never_pasted_from(
    data_env: Path, tmp_path: Path
) -> None:
    """data.negatives_p of the training samples are photos without people (all background),
    drawn without repeats while the folder lasts; people are pasted onto them, never taken
    from them; any folder of photos serves."""
    data = DataConfig(name="vikram_human_seg", negatives_p=0.2)
    train = build_train_dataset(data, dataclasses.replace(AugConfig(), paste_p=1.0), seed=0)
    negatives = [r for r in train.refs if r.source == "imagenet_negatives"]
    assert len(train.refs) - len(negatives) == 203 and len(negatives) == round(203 * 0.25)
    assert len({r.id for r in negatives}) == len(negatives)
    pool = train.transform.transforms[0].pool
    assert all(r.source == "vikram_human_seg" for r in pool.refs)
    sample = train[len(train) - 1]  # a negative with people pasted on it
    assert (sample["mask"] == 1).any()

    folder = tmp_path / "backgrounds"
    folder.mkdir()
    for i in range(3):
        cv2.imwrite(str(folder / f"{i}.jpg"), np.full((40, 60, 3), 40 * i, np.uint8))
    own = dataclasses.replace(data, negatives=str(folder), negatives_p=0.5)
    refs = negative_refs(own, 7)
    assert len(refs) == 7 and sorted(r.id for r in refs[:3]) == ["0", "1", "2"]
    assert [r.id for r in refs[3:6]] == [r.id for r in refs[:3]]  # each once, then again
    image, mask, _ = read_pair(refs[0])
    assert image.shape == (40, 60, 3) and not mask.any()


@pytest.mark.parametrize(
    ("negatives", "share", "problem"),
    [
        (
            "imagenet_negatives",
            1.0,
            r"data\.negatives_p=1\.0 is invalid: expected a share",
        ),
        ("imagenet_negatives", -0.1, r"data\.negatives_p=-0\.1"),
        ("no/such/folder", 0.1, r"data\.negatives='no/such/folder': no folder .*no/such/folder"),
    ],
)
def test_bad_negatives_settings_name_the_key(data_env, negatives, share, problem) -> None:
    with pytest.raises((ValueError, FileNotFoundError), match=problem):  # at once, or on use
        negative_refs(DataConfig(negatives=negatives, negatives_p=share), 10)


def test_an_empty_negatives_folder_says_what_it_expected(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no photos .* in .*expected a folder of photos"):
        list_negatives(tmp_path)


def _coco128_person(data: Path, stem: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """A coco128_seg photo's size and its person polygons in pixel coordinates."""
    image = cv2.imread(str(data / "coco128_seg" / "images" / "train2017" / f"{stem}.jpg"))
    h, w = image.shape[:2]
    polygons = []
    for line in (
        (data / "coco128_seg" / "labels" / "train2017" / f"{stem}.txt").read_text().splitlines()
    ):
        fields = line.split()
        if fields and fields[0] == "0":
            polygons.append(np.array(fields[1:], float).reshape(-1, 2) * (w, h))
    return np.zeros((h, w), np.uint8), polygons


def _runs(mask: np.ndarray) -> list[int]:
    """Uncompressed COCO RLE counts: runs down the columns, the first of 0s."""
    flat = mask.T.ravel()
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    return [0, *runs] if flat[0] == 1 else runs


def test_coco_instances_give_person_masks_from_polygons_and_rle(data_env: Path, tmp_path) -> None:
    """A COCO instance file built here from real coco128 polygons: polygon annotations fill as
    the YOLO reader does; the same people as RLE, pycocotools' compressed string and the plain
    run list, decode to the same pixels; a crowd region becomes ignore where no person is;
    other categories are not people; one PNG per image is written."""
    mask_utils = pytest.importorskip("pycocotools.mask")
    blank, polygons = _coco128_person(data_env, "000000000034")  # a zebra photo: no people
    assert not polygons
    blank, polygons = _coco128_person(data_env, "000000000061")
    h, w = blank.shape
    assert len(polygons) >= 2
    by_yolo = read_yolo_mask(
        data_env / "coco128_seg" / "labels" / "train2017" / "000000000061.txt", (h, w)
    )
    first = rasterize_polygons([polygons[0]], (h, w))
    exact = mask_utils.decode(mask_utils.frPyObjects([polygons[0].ravel().tolist()], h, w)[0])
    assert np.array_equal(first, exact)  # drawn as COCO draws it
    crowd = np.zeros((h, w), np.uint8)
    crowd[: h // 4, : w // 4] = 1
    compressed = mask_utils.encode(np.asfortranarray(first))
    anns = [
        {
            "image_id": 1,
            "category_id": 1,
            "iscrowd": 0,
            "segmentation": {"size": [h, w], "counts": compressed["counts"].decode()},
        },
        *(
            {"image_id": 1, "category_id": 1, "iscrowd": 0, "segmentation": [p.ravel().tolist()]}
            for p in polygons[1:]
        ),
        {
            "image_id": 1,
            "category_id": 1,
            "iscrowd": 1,
            "segmentation": {"size": [h, w], "counts": _runs(crowd)},
        },
        {
            "image_id": 1,
            "category_id": 3,
            "iscrowd": 0,  # a car over the whole photo
            "segmentation": [[0, 0, w, 0, w, h, 0, h]],
        },
        {
            "image_id": 2,
            "category_id": 1,
            "iscrowd": 0,
            "segmentation": {"size": [h, w], "counts": _runs(first)},
        },
    ]
    images = [
        {"id": 1, "file_name": "000000000061.jpg", "height": h, "width": w},
        {"id": 2, "file_name": "runs.jpg", "height": h, "width": w},
        {"id": 3, "file_name": "empty.jpg", "height": 10, "width": 12},
    ]
    instances = tmp_path / "instances_test.json"
    instances.write_text(json.dumps({"images": images, "annotations": anns, "categories": []}))
    counts = write_coco_person_masks(load_coco_instances(instances), tmp_path / "masks")
    assert counts == {"images": 3, "with_people": 2, "with_crowds": 1}
    mask = cv2.imread(str(tmp_path / "masks" / "000000000061.png"), cv2.IMREAD_UNCHANGED)
    person = by_yolo == 1
    assert np.array_equal(mask == 1, person)  # RLE of one person + polygons of the others
    assert np.array_equal(mask == 255, (crowd == 1) & ~person)
    runs = cv2.imread(str(tmp_path / "masks" / "runs.png"), cv2.IMREAD_UNCHANGED)
    assert np.array_equal(runs, first)
    empty = cv2.imread(str(tmp_path / "masks" / "empty.png"), cv2.IMREAD_UNCHANGED)
    assert empty.shape == (10, 12) and not empty.any()
    broken = tmp_path / "broken.json"
    broken.write_text('{"images": [')
    with pytest.raises(ValueError, match=r"broken\.json: not a COCO instance file"):
        load_coco_instances(broken)
