"""Person masks from COCO's labels, and photos without people.

``coco128_seg`` is the first 128 photos of COCO train2017 in Ultralytics' YOLO segmentation
layout (``images/train2017/<id>.jpg``, ``labels/train2017/<id>.txt``): one object a line, its
COCO class index (0 = person, in COCO's 80-class order) then its polygon as x y pairs
normalised to [0, 1]. The person mask is the union of the class-0 polygons; a photo without a
label file has no objects. COCO's crowd regions are not in this format, so crowds (stadium
spectators) are unlabelled rather than background by intent. It is a report-only source:
every split it has is "val" and "test" (never "train").

Photos without people (``imagenet_negatives``, or any folder of them) are training material:
every pixel is background. Their ``SampleRef`` has no mask file (``mask=None``).
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from seg.config import BadSamplePolicy, MaskEncoding
from seg.data.io import BadSampleError
from seg.data.listing import Listing, MaskSpec, SampleRef, _bad_pair, _files, natural_key

YOLO_PERSON = 0  # COCO's person in the 80-class order of YOLO labels
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
COCO128_FOLDER = "train2017"
NO_OBJECTS = MaskSpec(MaskEncoding.binary01)  # the spec of a ref without a mask file


def read_yolo_mask(path: Path, size_hw: tuple[int, int], cls: int = YOLO_PERSON) -> np.ndarray:
    """The union of the class-``cls`` polygons of a YOLO segmentation label file, rasterised at
    ``size_hw``: uint8 (H, W) in {0, 1}. A line that is not a class index followed by three or
    more x y pairs in [0, 1] is a ``BadSampleError`` naming the file and line."""
    height, width = size_hw
    mask = np.zeros((height, width), np.uint8)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise BadSampleError(path, "label file is missing") from None
    except (OSError, UnicodeDecodeError) as err:
        raise BadSampleError(path, f"unreadable label file ({err})") from err
    polygons = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        try:
            label, coords = int(fields[0]), np.array(fields[1:], dtype=np.float64)
        except ValueError:
            raise BadSampleError(
                path, f"line {number}: expected '<class> x1 y1 x2 y2 ...', got {line[:60]!r}"
            ) from None
        if coords.size < 6 or coords.size % 2 or not np.isfinite(coords).all():
            raise BadSampleError(
                path,
                f"line {number}: a polygon needs 3 or more x y pairs, got {coords.size} values",
            )
        if coords.min() < -0.01 or coords.max() > 1.01:  # YOLO's tools round to 1e-6
            raise BadSampleError(
                path,
                f"line {number}: coordinates must be normalised to [0, 1], got "
                f"{coords.min():.3f}..{coords.max():.3f}",
            )
        if label == cls:
            xy = coords.reshape(-1, 2) * (width, height)
            polygons.append(np.round(xy - 0.5).astype(np.int32))  # pixel centres
    for polygon in polygons:  # one at a time: fillPoly fills several by the even-odd rule
        cv2.fillPoly(mask, [polygon], 1)
    return mask


def list_coco128(root: Path, policy: BadSamplePolicy = BadSamplePolicy.error) -> Listing:
    """coco128_seg: every photo (with its label file, or none: no objects) in "val" and
    "test"; label files without a photo are noted and left out, as published."""
    images = _files(root / "images" / COCO128_FOLDER, IMAGE_SUFFIXES)
    labels_dir = root / "labels" / COCO128_FOLDER
    labels = _files(labels_dir, (".txt",))
    spec = MaskSpec(MaskEncoding.yolo)
    listing = Listing("coco128_seg", {}, {})
    for stem in sorted(images, key=natural_key):
        label = labels.get(stem)
        listing.refs[stem] = SampleRef(
            stem, listing.source, images[stem], label, spec if label else NO_OBJECTS
        )
    orphans = sorted(set(labels) - set(images))
    if orphans:
        listing.notes.append(f"{len(orphans)} label files have no photo (unused): {orphans}")
    unlabelled = sorted(set(images) - set(labels))
    if unlabelled:
        listing.notes.append(f"{len(unlabelled)} photos have no label file (no objects)")
    if not listing.refs:
        _bad_pair(BadSampleError(root, "no photos in images/train2017"), policy, listing)
    ids = list(listing.refs)
    listing.splits = {"train": [], "val": ids, "test": list(ids)}
    return listing


def list_negatives(folder: Path, source: str = "negatives") -> Listing:
    """Every photo of ``folder`` (not its subfolders) as a training sample without people."""
    photos = _files(folder, IMAGE_SUFFIXES)
    if not photos:
        raise FileNotFoundError(
            f"data.negatives: no photos ({', '.join(IMAGE_SUFFIXES)}) in {folder}; expected a "
            "folder of photos that show nobody"
        )
    listing = Listing(source, {}, {})
    for stem in sorted(photos, key=natural_key):
        listing.refs[stem] = SampleRef(stem, source, photos[stem], None, NO_OBJECTS)
    listing.splits = {"train": list(listing.refs), "val": [], "test": []}
    return listing
