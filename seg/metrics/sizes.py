"""Person recall and IoU split by the size of each person, as COCO splits its metrics.

COCO's areas: *small* people cover fewer than 32 x 32 pixels of their photo, *medium* fewer than
96 x 96, *large* the rest (``areaRng`` of pycocotools' ``COCOeval``), counted on the instance's
own mask at the photo's resolution. A semantic mask has no instances, so each pixel is given to
one person of the ground truth:

- a person pixel to the smallest instance covering it (a child in front of a parent is the
  child's);
- a false person pixel (predicted person, labelled background) to the nearest instance
  (Euclidean distance; photos without people keep theirs in ``empty_*`` of ``SegMetrics``).

Per size, ``recall`` is the share of its instances' pixels predicted person, ``iou`` is
true / (its pixels + the false pixels given to it): the buckets' counts add up to the photo's
person IoU. ``found`` is the share of its instances with at least half their pixels found
(``FOUND``), ``instances`` their number. Counts are int64, summed exactly across processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import cv2
import numpy as np
import torch
from torch import Tensor

from seg.metrics.format import ratio

SIZES = (("small", 32**2), ("medium", 96**2), ("large", None))  # (name, area below)
FOUND = 0.5  # an instance counts as found when this share of its pixels is
# Columns of the counts: instances, instances found, instance pixels, of them found, false.
_INSTANCES, _FOUND, _PIXELS, _TRUE, _FALSE = range(5)


def size_index(area: int) -> int:
    """The row of ``SIZES`` an instance of ``area`` pixels falls in."""
    for i, (_, below) in enumerate(SIZES):
        if below is None or area < below:
            return i
    raise AssertionError("the last size has no bound")


class SizeSplit:
    """Counts per COCO size (module docstring), photo by photo."""

    def __init__(self) -> None:
        self.counts = torch.zeros(len(SIZES), 5, dtype=torch.int64)

    def update(
        self, pred: np.ndarray, instances: Sequence[np.ndarray], valid: np.ndarray | None = None
    ) -> None:
        """One photo: ``pred`` bool (H, W) person; ``instances`` its people, each a (H, W)
        mask; ``valid`` bool (H, W), False where the label is "ignore" (crowds, padding)."""
        if not len(instances):
            return
        pred = np.asarray(pred, bool)
        valid = np.ones(pred.shape, bool) if valid is None else np.asarray(valid, bool)
        masks = [np.asarray(m, bool) & valid for m in instances]
        areas = np.array([int(m.sum()) for m in masks])
        rows = np.array([size_index(a) for a in areas])
        owner = np.full(pred.shape, -1, np.int32)  # smallest instance on top
        for i in np.argsort(-areas, kind="stable"):
            owner[masks[i]] = i
        counts = np.zeros((len(SIZES), 5), np.int64)
        for i, mask in enumerate(masks):
            if areas[i] == 0:
                continue
            counts[rows[i], _INSTANCES] += 1
            counts[rows[i], _FOUND] += (pred & mask).sum() >= FOUND * areas[i]
        person = owner >= 0
        np.add.at(counts[:, _PIXELS], rows[owner[person]], 1)
        np.add.at(counts[:, _TRUE], rows[owner[person & pred]], 1)
        false = pred & ~person & valid
        if false.any() and person.any():
            nearest = _nearest_owner(owner, person)
            np.add.at(counts[:, _FALSE], rows[nearest[false]], 1)
        self.counts += torch.from_numpy(counts)

    def merge_(self, other: SizeSplit) -> SizeSplit:
        self.counts += other.counts
        return self

    def reduce_(self, fn: Callable[[Tensor], object]) -> None:
        """Apply an in-place sum (e.g. ``all_reduce_sum_``) to the counts."""
        fn(self.counts)

    def compute(self) -> dict[str, float]:
        """``{recall,iou,found,instances}_{small,medium,large}`` (NaN where no instance)."""
        out: dict[str, float] = {}
        for (name, _), row in zip(SIZES, self.counts.tolist(), strict=True):
            instances, found, pixels, true, false = row
            out[f"recall_{name}"] = ratio(true, pixels)
            out[f"iou_{name}"] = ratio(true, pixels + false)
            out[f"found_{name}"] = ratio(found, instances)
            out[f"instances_{name}"] = float(instances)
        return out


def _nearest_owner(owner: np.ndarray, person: np.ndarray) -> np.ndarray:
    """For every pixel, the instance (``owner``) of the nearest person pixel."""
    src = np.where(person, 0, 255).astype(np.uint8)
    _, labels = cv2.distanceTransformWithLabels(src, cv2.DIST_L2, 5, labelType=cv2.DIST_LABEL_PIXEL)
    # Each person pixel is labelled 1..N (row-major order of the zero pixels); the others
    # carry the label of their nearest one.
    by_label = np.zeros(int(person.sum()) + 1, np.int32)
    by_label[labels[person]] = owner[person]
    return by_label[labels]


__all__ = ["FOUND", "SIZES", "SizeSplit", "size_index"]
