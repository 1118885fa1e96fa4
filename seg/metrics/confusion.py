"""Integer confusion matrix and the pixel metrics derived from it.

Everything here is exact under data parallelism: ranks sum their (C, C) int64 matrices
(``all_reduce``) and only then are ratios taken, once, in float64.

Undefined ratios are NaN, never 0 or 1:

* ``iou_<k>`` / ``dice_<k>``: NaN when class k is absent from both truth and prediction
  (``tp + fp + fn == 0``); ``miou`` is the mean over the classes that are defined (NaN-mean, as
  torchvision's and mmseg's ``nanmean``), and NaN when none is.
* ``precision_<k>``: NaN when k is never predicted; ``recall_<k>``: NaN when k is absent from truth.
* an empty matrix (no labelled pixel) gives NaN for every key, ``pixel_acc`` included.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

BINARY_CLASS_NAMES = ("background", "person")
CHUNK = 1 << 22  # pixels counted at once by confusion_matrix


def class_names_for(num_classes: int) -> tuple[str, ...]:
    """The names used in metric keys: background/person for 2 classes, ``class<i>`` otherwise."""
    if num_classes == 2:
        return BINARY_CLASS_NAMES
    return tuple(f"class{i}" for i in range(num_classes))


def class_map(scores: Tensor, dim: int = 0, dtype: torch.dtype = torch.int64) -> Tensor:
    """The index of the largest score along ``dim``, as ``dtype``: exactly
    ``scores.argmax(dim)`` (the first index on ties, NaN above every number), in a tenth of
    its time or less.

    On CPU ``argmax`` over a dimension that is not the last takes a slow strided path (torch
    2.14, one thread, (2, 256, 256): 6.5 ms, more than the network at that size; this was most
    of ``predict.py``'s time around the network). ``max(dim).indices`` gives the same indices
    in 0.45 ms, and two classes, the person segmenter's case, are one comparison (0.1 ms).
    """
    if scores.shape[dim] != 2:
        return scores.max(dim=dim).indices.to(dtype)
    first, second = scores.unbind(dim)
    # argmax keeps the first unless the second is larger: the first also wins when it is NaN
    # (NaN counts as the largest), and loses to a NaN second (not <=).
    first_wins = (second <= first) | first.isnan()
    return first_wins.logical_not_().to(dtype)


def class_mask(scores: Tensor, k: int, dim: int = 0) -> Tensor:
    """bool: where class ``k`` has the largest score along ``dim``; exactly
    ``class_map(scores, dim) == k``. With two classes it is that comparison alone, with no
    index map built and compared (the mask predict.py writes for each photo)."""
    if scores.shape[dim] != 2 or k not in (0, 1):
        return class_map(scores, dim) == k
    first, second = scores.unbind(dim)
    first_wins = (second <= first) | first.isnan()
    return first_wins if k == 0 else first_wins.logical_not_()


def _check_labels(x: Tensor, name: str) -> None:
    if x.dtype.is_floating_point or x.dtype.is_complex:
        raise TypeError(
            f"{name} must hold integer class indices (or bool), got dtype {x.dtype}; "
            "take argmax over the logits first"
        )


def confusion_matrix(
    pred: Tensor, target: Tensor, num_classes: int = 2, ignore_index: int = 255
) -> Tensor:
    """Count (truth, prediction) pairs over the labelled pixels.

    Args:
        pred: class indices, any shape (e.g. (B, H, W) or (N,)), integer or bool.
        target: ground truth of the same shape; pixels equal to ``ignore_index`` are skipped.
        num_classes: C.
        ignore_index: the "don't care" label; must lie outside [0, C).

    Returns:
        (C, C) int64 tensor on the inputs' device; rows = truth, columns = prediction.

    Raises:
        ValueError: shapes differ, or a target (or prediction, on labelled pixels) value lies
            outside [0, C) and is not ``ignore_index``; the message names the value.
    """
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    if 0 <= ignore_index < num_classes:
        raise ValueError(
            f"ignore_index={ignore_index} is a valid class of num_classes={num_classes}; "
            "use a value outside [0, num_classes), e.g. 255"
        )
    if pred.shape != target.shape:
        raise ValueError(
            f"pred and target shapes differ: {tuple(pred.shape)} vs {tuple(target.shape)}"
        )
    _check_labels(pred, "pred")
    _check_labels(target, "target")
    pred, target = pred.reshape(-1), target.reshape(-1)
    counts = torch.zeros(num_classes * num_classes, dtype=torch.int64, device=pred.device)
    # In chunks: the int64 temporaries of a 12000 x 12000 mask would take several GB at once.
    for start in range(0, pred.numel(), CHUNK):
        p, t = pred[start : start + CHUNK].long(), target[start : start + CHUNK].long()
        keep = t != ignore_index
        t, p = t[keep], p[keep]
        _check_values(t, p, num_classes, ignore_index)
        counts += torch.bincount(t * num_classes + p, minlength=num_classes * num_classes)
    return counts.reshape(num_classes, num_classes)


def _check_values(t: Tensor, p: Tensor, num_classes: int, ignore_index: int) -> None:
    """Labelled truth ``t`` and prediction ``p`` (int64) must hold classes in [0, C)."""
    bad_t = (t < 0) | (t >= num_classes)
    bad_p = (p < 0) | (p >= num_classes)
    # One host sync on the normal path; the slow search for the culprit only runs on error.
    if bool((bad_t | bad_p).any()):
        if bool(bad_t.any()):
            value = int(t[bad_t][0])
            raise ValueError(
                f"target holds the value {value}, expected class indices in "
                f"[0, {num_classes}) or ignore_index={ignore_index}"
            )
        value = int(p[bad_p][0])
        raise ValueError(
            f"pred holds the value {value} on a labelled pixel, expected class indices "
            f"in [0, {num_classes})"
        )


def _nan_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.full(np.shape(num), np.nan, dtype=np.float64)
    np.divide(num, den, out=out, where=den > 0)
    return out


def metrics_from_confusion(
    cm: Tensor | np.ndarray, class_names: Sequence[str] | None = None
) -> dict[str, float]:
    """Pixel accuracy, mIoU and per-class IoU, Dice, precision and recall.

    Args:
        cm: (C, C) integer confusion matrix, rows = truth, columns = prediction.
        class_names: C names for the per-class keys; default :func:`class_names_for`.

    Returns:
        ``pixel_acc``, ``miou`` and, for every class name k, ``iou_k``, ``dice_k``,
        ``precision_k``, ``recall_k`` (e.g. ``iou_person``). Undefined values are NaN
        (see the module docstring).
    """
    cm_t = torch.as_tensor(cm)
    if cm_t.ndim != 2 or cm_t.shape[0] != cm_t.shape[1]:
        raise ValueError(f"confusion matrix must be square (C, C), got shape {tuple(cm_t.shape)}")
    if cm_t.dtype.is_floating_point or cm_t.dtype.is_complex or cm_t.dtype == torch.bool:
        raise TypeError(f"confusion matrix must hold integer counts, got dtype {cm_t.dtype}")
    m = cm_t.detach().cpu().to(torch.float64).numpy()
    if (m < 0).any():
        raise ValueError("confusion matrix holds negative counts")
    n = m.shape[0]
    names = tuple(class_names) if class_names is not None else class_names_for(n)
    if len(names) != n:
        raise ValueError(f"got {len(names)} class names {names} for a {n}x{n} confusion matrix")

    tp = np.diag(m)
    fp = m.sum(axis=0) - tp  # predicted as k, truly something else
    fn = m.sum(axis=1) - tp  # truly k, predicted as something else
    iou = _nan_div(tp, tp + fp + fn)
    dice = _nan_div(2 * tp, 2 * tp + fp + fn)
    precision = _nan_div(tp, tp + fp)
    recall = _nan_div(tp, tp + fn)

    total = m.sum()
    out: dict[str, float] = {
        "pixel_acc": float(tp.sum() / total) if total > 0 else float("nan"),
        # NaN-mean without numpy's "mean of empty slice" warning when no class is defined.
        "miou": float(np.nanmean(iou)) if np.isfinite(iou).any() else float("nan"),
    }
    for i, name in enumerate(names):
        out[f"iou_{name}"] = float(iou[i])
        out[f"dice_{name}"] = float(dice[i])
        out[f"precision_{name}"] = float(precision[i])
        out[f"recall_{name}"] = float(recall[i])
    return out
