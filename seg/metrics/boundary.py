"""Boundary metrics for a binary (person) mask: BF score and Boundary IoU, as integer counts.

Both come in a counts form (``boundary_counts``, ``boundary_iou_counts``) so that they can be
summed over images and processes and turned into ratios once, exactly.

Ignore pixels (``target == ignore_index``) count neither way: they are never boundary pixels of
either mask, and an edge between a labelled pixel and an ignore pixel is no edge (the ignore
pixel is treated as "same as its neighbour"). So padding or "don't care" bands make no boundary
in the truth and cost the prediction nothing.

* BF score (Csurka et al. 2013; DAVIS F-measure): a boundary pixel of a mask is a labelled mask
  pixel with a 4-neighbour that is labelled and outside the mask (as MATLAB's ``bwperim``); the
  image frame is not a boundary (as DAVIS's ``seg2bmap``). A predicted boundary pixel is matched
  when a true one lies within Euclidean distance ``tolerance_px`` (0: the same pixel), and vice
  versa. The tolerance is a fixed number of pixels at each image's own resolution, not a
  fraction of its diagonal as in MATLAB's ``bfscore`` (0.75%) or DAVIS (0.8%): BF@2 on an
  800x600 photo is about a quarter of DAVIS's tolerance, so BF figures compare between sets
  of similar resolution only. Empty cases follow DAVIS: no boundary in either -> P = R = 1;
  none predicted -> P = 1, R = 0; none true -> P = 0, R = 1; F = 0 when P + R = 0.
* Boundary IoU (Cheng et al. 2021): the boundary region of a mask is its pixels within
  chessboard distance d of the outside (``mask - erode(mask, 3x3, d times)``), the image frame
  counting as outside as in the reference code; Boundary IoU = |G_d & P_d| / |G_d | P_d|, NaN when
  both regions are empty.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np
from torch import Tensor

_CROSS = cv2.getStructuringElement(cv2.MORPH_CROSS, (3, 3))
_SQUARE = np.ones((3, 3), dtype=np.uint8)


def binary_inputs(
    pred: np.ndarray | Tensor, target: np.ndarray | Tensor, ignore_index: int = 255
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check an (H, W) 0/1 prediction and 0/1/ignore truth; return bool (pred, truth, valid)."""
    p = pred.detach().cpu().numpy() if isinstance(pred, Tensor) else np.asarray(pred)
    t = target.detach().cpu().numpy() if isinstance(target, Tensor) else np.asarray(target)
    if p.ndim != 2 or p.shape != t.shape:
        raise ValueError(
            f"expected pred and target of one shape (H, W), got {p.shape} and {t.shape}"
        )
    if p.dtype != bool:
        bad = p[(p != 0) & (p != 1)]
        if bad.size:
            raise ValueError(f"pred holds the value {bad.flat[0]}, expected a 0/1 or bool mask")
    valid = t != ignore_index
    bad = t[valid & (t != 0) & (t != 1)]
    if bad.size:
        raise ValueError(
            f"target holds the value {bad.flat[0]}, expected 0, 1 or ignore_index={ignore_index}"
        )
    return p.astype(bool), (t == 1) & valid, valid


def _edges(mask: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Labelled pixels of ``mask`` with a labelled 4-neighbour outside it (bool (H, W))."""
    outside = ~mask
    outside &= valid
    # cv2.dilate's default border adds nothing, so the image frame makes no edge.
    near = cv2.dilate(outside.view(np.uint8), _CROSS)  # 0/1, as bool below
    del outside
    edges = mask & valid
    edges &= near.view(bool)
    return edges


def _disk(radius: int) -> np.ndarray:
    """The pixels within Euclidean distance ``radius`` of the centre (uint8 structuring element)."""
    y, x = np.ogrid[-radius : radius + 1, -radius : radius + 1]
    return (x * x + y * y <= radius * radius).astype(np.uint8)


def _count_within(src: np.ndarray, ref: np.ndarray, tolerances: Sequence[int]) -> list[int]:
    """For each tolerance, how many ``src`` pixels lie within that Euclidean distance of a
    ``ref`` pixel: ``ref`` dilated by the disk of that radius (exact on the pixel grid, where
    squared distances are integers), read at the ``src`` pixels only. One byte per pixel of
    work, where a distance transform would take four."""
    if not src.any() or not ref.any():
        return [0 for _ in tolerances]
    ref_u8 = np.ascontiguousarray(ref).view(np.uint8)
    counts = []
    for tol in tolerances:
        near = cv2.dilate(ref_u8, _disk(tol)) if tol > 0 else ref_u8
        counts.append(int(np.count_nonzero(near.view(bool)[src])))
    return counts


def boundary_counts_multi(
    pred: np.ndarray, truth: np.ndarray, valid: np.ndarray, tolerances: Sequence[int]
) -> np.ndarray:
    """BF counts for several tolerances from bool masks (see :func:`binary_inputs`).

    Returns:
        (T, 4) int64: per tolerance (matched_pred, n_pred, matched_target, n_target).
    """
    for tol in tolerances:
        if tol < 0:
            raise ValueError(f"tolerance_px must be >= 0, got {tol}")
    bp, bt = _edges(pred, valid), _edges(truth, valid)
    n_pred, n_target = int(np.count_nonzero(bp)), int(np.count_nonzero(bt))
    matched_pred = _count_within(bp, bt, tolerances)
    matched_target = _count_within(bt, bp, tolerances)
    rows = [[mp, n_pred, mt, n_target] for mp, mt in zip(matched_pred, matched_target, strict=True)]
    return np.asarray(rows, dtype=np.int64).reshape(len(tolerances), 4)


def boundary_counts(
    pred: np.ndarray | Tensor,
    target: np.ndarray | Tensor,
    tolerance_px: int,
    ignore_index: int = 255,
) -> tuple[int, int, int, int]:
    """Counts behind the BF score of one (H, W) mask pair; sum them over images, then
    :func:`fscore_from_counts`.

    Returns:
        (matched_pred, n_pred, matched_target, n_target).
    """
    p, t, valid = binary_inputs(pred, target, ignore_index)
    row = boundary_counts_multi(p, t, valid, [tolerance_px])[0]
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def fscore_from_counts(
    matched_pred: int, n_pred: int, matched_target: int, n_target: int
) -> dict[str, float]:
    """Boundary precision, recall and F from (summed) counts, with DAVIS's empty-case rules."""
    matched_pred, n_pred = int(matched_pred), int(n_pred)
    matched_target, n_target = int(matched_target), int(n_target)
    if n_pred == 0 and n_target == 0:
        precision, recall = 1.0, 1.0
    elif n_pred == 0:
        precision, recall = 1.0, 0.0
    elif n_target == 0:
        precision, recall = 0.0, 1.0
    else:
        precision, recall = matched_pred / n_pred, matched_target / n_target
    f = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return {"precision": precision, "recall": recall, "f": f}


def boundary_fscore(
    pred: np.ndarray | Tensor,
    target: np.ndarray | Tensor,
    tolerance_px: int,
    ignore_index: int = 255,
) -> dict[str, float]:
    """BF score of one (H, W) mask pair: {"precision", "recall", "f"} (module docstring)."""
    return fscore_from_counts(*boundary_counts(pred, target, tolerance_px, ignore_index))


def dilation_for(shape: tuple[int, ...], dilation_ratio: float) -> int:
    """Cheng et al.'s band width: ``ratio`` times the image diagonal, rounded, at least 1 px."""
    h, w = shape[-2:]
    return max(1, round(dilation_ratio * math.sqrt(h * h + w * w)))


def _band(mask: np.ndarray, valid: np.ndarray, d: int) -> np.ndarray:
    """Labelled pixels of ``mask`` within chessboard distance d of a labelled outside pixel or
    of the image frame."""
    # Ignore pixels join the mask so they never erode it; the zero frame makes a mask truncated
    # by the image border count as boundary there, as in the reference implementation.
    solid = ~valid
    solid |= mask
    padded = cv2.copyMakeBorder(solid.view(np.uint8), 1, 1, 1, 1, cv2.BORDER_CONSTANT, value=0)
    del solid
    eroded = cv2.erode(padded, _SQUARE, iterations=d)
    del padded
    band = mask & valid
    band &= eroded[1:-1, 1:-1] == 0
    return band


def boundary_iou_counts_np(
    pred: np.ndarray, truth: np.ndarray, valid: np.ndarray, d: int
) -> tuple[int, int]:
    """(intersection, union) of the two boundary regions from bool masks (:func:`binary_inputs`)."""
    if d < 1:
        raise ValueError(f"boundary IoU dilation must be >= 1 px, got {d}")
    bp, bt = _band(pred, valid, d), _band(truth, valid, d)
    return int(np.count_nonzero(bp & bt)), int(np.count_nonzero(bp | bt))


def boundary_iou_counts(
    pred: np.ndarray | Tensor,
    target: np.ndarray | Tensor,
    dilation_ratio: float = 0.02,
    dilation_px: int | None = None,
    ignore_index: int = 255,
) -> tuple[int, int]:
    """(intersection, union) behind the Boundary IoU of one (H, W) mask pair.

    The band width is ``dilation_px`` when given, else :func:`dilation_for` (ratio x diagonal).
    """
    p, t, valid = binary_inputs(pred, target, ignore_index)
    d = dilation_px if dilation_px is not None else dilation_for(p.shape, dilation_ratio)
    return boundary_iou_counts_np(p, t, valid, d)


def boundary_iou(
    pred: np.ndarray | Tensor,
    target: np.ndarray | Tensor,
    dilation_ratio: float = 0.02,
    dilation_px: int | None = None,
    ignore_index: int = 255,
) -> float:
    """Boundary IoU (Cheng et al. 2021) of one (H, W) mask pair; NaN when both bands are empty."""
    inter, union = boundary_iou_counts(pred, target, dilation_ratio, dilation_px, ignore_index)
    return inter / union if union > 0 else float("nan")
