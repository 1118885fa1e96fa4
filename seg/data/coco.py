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

Any COCO instances file is a source too (``list_coco_instances``: ``coco_mini_person``, or
``data=coco`` with one's own): the person mask of a photo is the union of its person instances,
its crowd regions (``iscrowd``) ignored (255), made from the polygons and RLEs when the photo is
read. Every person of such photos is labelled, the crowd, the far and the half-hidden among them.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import cv2
import numpy as np

from seg.config import IGNORE_INDEX, BadSamplePolicy, MaskEncoding
from seg.data.io import BadSampleError
from seg.data.listing import (
    Listing,
    MaskSpec,
    SampleRef,
    _bad_pair,
    _files,
    _pair,
    fraction_splits,
    hash_split,
    natural_key,
)
from seg.errors import DataError, MissingFileError
from seg.fileio import atomic_path

YOLO_PERSON = 0  # COCO's person in the 80-class order of YOLO labels
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
COCO128_FOLDER = "train2017"
NO_OBJECTS = MaskSpec(MaskEncoding.binary01)  # the spec of a ref without a mask file


def read_yolo_mask(path: Path, size_hw: tuple[int, int], cls: int = YOLO_PERSON) -> np.ndarray:
    """The union of the class-``cls`` polygons of a YOLO segmentation label file, rasterised at
    ``size_hw``: uint8 (H, W) in {0, 1}. A line that is not a class index followed by three or
    more x y pairs in [0, 1] is a ``BadSampleError`` naming the file and line."""
    mask = np.zeros(size_hw, np.uint8)
    for instance in read_yolo_instances(path, size_hw, cls):
        mask |= instance
    return mask


def read_yolo_instances(
    path: Path, size_hw: tuple[int, int], cls: int = YOLO_PERSON
) -> list[np.ndarray]:
    """Each class-``cls`` polygon of a YOLO segmentation label file rasterised on its own at
    ``size_hw`` (uint8 (H, W) in {0, 1}, in the file's order): one mask per object, e.g. to
    score the largest person of a photo apart from the others. Errors as ``read_yolo_mask``."""
    height, width = size_hw
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
            polygons.append(coords.reshape(-1, 2) * (width, height))
    return [rasterize_polygons([polygon], size_hw) for polygon in polygons]


def rasterize_polygons(polygons: list[np.ndarray], size_hw: tuple[int, int]) -> np.ndarray:
    """The union of ``polygons`` ((N, 2) x y in pixels, 0 at the left or top edge of the first
    pixel) drawn as COCO draws them (pycocotools' ``frPyObjects``, the masks COCO's metrics
    score against): uint8 (H, W) in {0, 1}. OpenCV's ``fillPoly`` also fills every pixel an
    edge touches: 1.8% more person pixels on coco128_seg, 14% more for people under 32 x 32."""
    from pycocotools import mask as mask_utils

    height, width = size_hw
    flat = [np.asarray(p, np.float64).ravel().tolist() for p in polygons if len(p) >= 3]
    if not flat:
        return np.zeros((height, width), np.uint8)
    rles = mask_utils.frPyObjects(flat, height, width)
    return mask_utils.decode(mask_utils.merge(rles)).astype(np.uint8)


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


def list_coco_person(root: Path, policy: BadSamplePolicy = BadSamplePolicy.error) -> Listing:
    """coco_person (``seg.data.coco_download``): ``images/<split>/<id>.jpg`` with
    ``masks/<split>/<id>.png`` (0, 1, 255 = ignore); train2017 is the train split, val2017's
    photos are split in halves by a hash of their names into val and test."""
    listing = Listing("coco_person", {}, {})
    spec = MaskSpec(MaskEncoding.binary01, ignore_value=IGNORE_INDEX)
    by_split: dict[str, list[str]] = {}
    for split in ("train2017", "val2017"):
        photos = _files(root / "images" / split, IMAGE_SUFFIXES)
        masks = root / "masks" / split
        found = dict(sorted(photos.items()))
        _pair(listing, found, lambda stem, m=masks: m / f"{stem}.png", spec, policy)
        by_split[split] = [stem for stem in found if stem in listing.refs]
    halves = hash_split(by_split["val2017"], {"val": 0.5, "test": 1.0}, "coco_person")
    listing.splits = {"train": by_split["train2017"], **halves}
    return listing


def list_negatives(folder: Path, source: str = "negatives") -> Listing:
    """Every photo of ``folder`` (not its subfolders) as a training sample without people."""
    photos = _files(folder, IMAGE_SUFFIXES)
    if not photos:
        raise MissingFileError(
            f"data.negatives: no photos ({', '.join(IMAGE_SUFFIXES)}) in {folder}; expected a "
            "folder of photos that show nobody"
        )
    listing = Listing(source, {}, {})
    for stem in sorted(photos, key=natural_key):
        listing.refs[stem] = SampleRef(stem, source, photos[stem], None, NO_OBJECTS)
    listing.splits = {"train": list(listing.refs), "val": [], "test": []}
    return listing


# --- COCO's own instance annotations (instances_*.json) ---------------------------------------

COCO_PERSON = 1  # category id of a person in COCO's instance files


def rle_counts(counts: str | list[int]) -> list[int]:
    """Run lengths of a COCO RLE: a list as given (uncompressed), or pycocotools' compressed
    string (6 bits a character, each run a difference from the run two before, as its
    ``rleFrString`` reads it)."""
    if not isinstance(counts, str):
        return [int(c) for c in counts]
    runs: list[int] = []
    p = 0
    while p < len(counts):
        x, k, more = 0, 0, True
        while more:
            c = ord(counts[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p, k = p + 1, k + 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(runs) > 2:
            x += runs[-2]
        runs.append(x)
    return runs


def decode_rle(rle: dict, size_hw: tuple[int, int]) -> np.ndarray:
    """A COCO RLE (``{"size": [h, w], "counts": ...}``) as a uint8 (H, W) mask in {0, 1}: runs
    of 0s and 1s alternate, the first of 0s, down the columns (column-major)."""
    height, width = (int(v) for v in rle.get("size", size_hw))
    runs = rle_counts(rle["counts"])
    if sum(runs) != height * width or min(runs, default=0) < 0:
        raise DataError(f"RLE runs cover {sum(runs)} pixels, expected {height} x {width}")
    values = np.zeros(len(runs), np.uint8)
    values[1::2] = 1
    return np.repeat(values, runs).reshape(width, height).T.copy()


def coco_person_mask(annotations: list[dict], size_hw: tuple[int, int]) -> np.ndarray:
    """The person mask of one COCO image: uint8 (H, W), 1 for the union of its category-1
    instances (polygons or RLE), ``IGNORE_INDEX`` for its crowd regions (``iscrowd``) that no
    instance covers, as mmsegmentation's and detectron2's semantic conversions treat them;
    0 elsewhere. Annotations of other categories are passed over."""
    height, width = size_hw
    person = np.zeros((height, width), np.uint8)
    crowd = np.zeros((height, width), np.uint8)
    for ann in annotations:
        if ann.get("category_id") != COCO_PERSON:
            continue
        target = crowd if ann.get("iscrowd") else person
        seg = ann["segmentation"]
        if isinstance(seg, dict):  # RLE
            target |= decode_rle(seg, size_hw)
            continue
        polygons = [np.asarray(flat, np.float64).reshape(-1, 2) for flat in seg]
        target |= rasterize_polygons(polygons, size_hw)  # pixel coordinates
    mask = person.copy()
    mask[(crowd == 1) & (person == 0)] = IGNORE_INDEX
    return mask


def load_coco_instances(path: Path) -> dict:
    """A COCO instance file (``instances_*.json``) as its dict; an error names the file."""
    try:
        data = json.loads(Path(path).read_text())
        if not isinstance(data.get("images"), list) or not isinstance(
            data.get("annotations"), list
        ):
            raise ValueError("no 'images' and 'annotations' lists")
    except (OSError, ValueError, AttributeError) as err:
        raise DataError(
            f"{path}: not a COCO instance file ({type(err).__name__}: {err}); expected JSON "
            "with 'images' and 'annotations', as instances_train2017.json"
        ) from err
    return data


def write_coco_person_masks(
    instances: dict, out_dir: Path, keep: set[int] | None = None
) -> dict[str, int]:
    """One PNG mask per image of a COCO instance file's dict (``<file stem>.png``, values 0, 1
    and 255 = ignore: ``coco_person_mask``), for the images of ``keep`` (ids; None: all).
    Returns counts: images written, with people, with crowd regions. Each PNG is written whole
    (temporary name, then renamed)."""
    anns: dict[int, list[dict]] = {}
    for ann in instances["annotations"]:
        anns.setdefault(int(ann["image_id"]), []).append(ann)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {"images": 0, "with_people": 0, "with_crowds": 0}
    for image in sorted(instances["images"], key=lambda im: int(im["id"])):
        image_id = int(image["id"])
        if keep is not None and image_id not in keep:
            continue
        mask = coco_person_mask(anns.get(image_id, []), (image["height"], image["width"]))
        target = out_dir / f"{Path(image['file_name']).stem}.png"
        ok, png = cv2.imencode(".png", mask)
        if not ok:
            raise OSError(f"could not encode the mask of {target}")
        with atomic_path(target) as part:
            part.write_bytes(png.tobytes())
        counts["images"] += 1
        counts["with_people"] += bool((mask == 1).any())
        counts["with_crowds"] += bool((mask == IGNORE_INDEX).any())
    return counts


# --- A training source read straight from a COCO instances file ------------------------------


@functools.lru_cache(maxsize=4)
def _coco_index(path: Path, mtime_ns: int) -> dict[str, tuple[int, int, list[dict]]]:
    """``{file name: (height, width, its annotations)}`` of a COCO instances file, parsed once
    per process (and again when the file changes: ``mtime_ns`` is part of the key)."""
    data = load_coco_instances(path)
    anns: dict[int, list[dict]] = {}
    for ann in data["annotations"]:
        anns.setdefault(int(ann["image_id"]), []).append(ann)
    return {
        str(im["file_name"]): (int(im["height"]), int(im["width"]), anns.get(int(im["id"]), []))
        for im in data["images"]
    }


def coco_index(path: Path) -> dict[str, tuple[int, int, list[dict]]]:
    """The cached index of :func:`_coco_index` for the file as it is now."""
    path = Path(path)
    try:
        stamp = path.stat().st_mtime_ns
    except FileNotFoundError:
        raise MissingFileError(f"COCO annotation file {path} does not exist") from None
    return _coco_index(path, stamp)


def _coco_entry(annotations: Path, image: Path, size_hw: tuple[int, int]) -> list[dict]:
    """The annotations of ``image`` in ``annotations``; its size there must be the photo's."""
    entry = coco_index(annotations).get(image.name)
    if entry is None:
        raise BadSampleError(image, f"not in the images of {annotations}")
    height, width, anns = entry
    if (height, width) != tuple(size_hw):
        raise BadSampleError(
            image,
            f"is {size_hw[1]} x {size_hw[0]} pixels, but {annotations} describes it as "
            f"{width} x {height} (another version of the photo?)",
        )
    return anns


def read_coco_mask(annotations: Path, image: Path, size_hw: tuple[int, int]) -> np.ndarray:
    """The person mask of ``image`` from a COCO instances file (``coco_person_mask``: 1 the
    union of the person instances, 255 their crowd regions, 0 elsewhere), uint8 (H, W)."""
    anns = _coco_entry(annotations, image, size_hw)
    try:
        return coco_person_mask(anns, size_hw)
    except (KeyError, TypeError, ValueError) as err:
        raise BadSampleError(image, f"unreadable annotation in {annotations} ({err})") from err


def read_coco_instances(
    annotations: Path, image: Path, size_hw: tuple[int, int]
) -> list[np.ndarray]:
    """Each non-crowd person instance of ``image`` on its own, uint8 (H, W) in {0, 1}."""
    anns = _coco_entry(annotations, image, size_hw)
    people = [a for a in anns if a.get("category_id") == COCO_PERSON and not a.get("iscrowd")]
    return [(coco_person_mask([a], size_hw) == 1).astype(np.uint8) for a in people]


def list_coco_instances(
    images: Path,
    annotations: Path,
    source: str,
    fractions: tuple[float, float] | None = None,
    policy: BadSamplePolicy = BadSamplePolicy.error,
) -> Listing:
    """A COCO instances file (``instances_*.json``, its polygons and RLEs) and its photos as a
    source: every image entry whose photo is in ``images`` (found by ``file_name``); masks made
    when read (``read_coco_mask``). ``fractions``: (val, test) shares drawn by hash of the
    names (``fraction_splits``); None: every photo is training material."""
    index = coco_index(annotations)
    photos = _files(images, IMAGE_SUFFIXES)
    by_name = {p.name: p for p in photos.values()}
    spec = MaskSpec(MaskEncoding.coco)
    listing = Listing(source, {}, {})
    for name in sorted(index, key=natural_key):
        photo = by_name.get(name)
        if photo is None:
            _bad_pair(
                BadSampleError(images / name, f"listed in {annotations}, missing"), policy, listing
            )
            continue
        listing.refs[photo.stem] = SampleRef(photo.stem, source, photo, annotations, spec)
    unlisted = sorted(set(by_name) - set(index))
    if unlisted:
        listing.notes.append(
            f"{len(unlisted)} photos of {images} are not in {annotations.name} (unused)"
        )
    if not listing.refs:
        raise DataError(f"{annotations}: none of its images is in {images}")
    ids = list(listing.refs)
    if fractions is None:
        listing.splits = {"train": ids, "val": [], "test": []}
    else:
        listing.splits = fraction_splits(listing, *fractions)
    return listing
