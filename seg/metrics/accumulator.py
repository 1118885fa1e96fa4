"""The one accumulator of segmentation counts: validation during training feeds it (confusion
matrix only), offline evaluation too (with boundary counts), batch by batch.

``SegMetrics`` keeps only int64 counts (confusion matrix, boundary counts, image count), so the
state of several processes can be summed exactly (``reduce_(all_reduce_sum_)``) before the
ratios are taken once in :meth:`SegMetrics.compute`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from seg.metrics.boundary import (
    boundary_counts_multi,
    boundary_iou_counts_np,
    dilation_for,
    fscore_from_counts,
)
from seg.metrics.confusion import class_names_for, confusion_matrix, metrics_from_confusion
from seg.metrics.format import ratio

EMPTY_ALARM = 0.01  # a photo without people "finds" one when > 1% of its frame is labelled so
PPM = 1_000_000  # per-image shares are summed in millionths: int64 counts stay exact under DDP


class SegMetrics:
    """Accumulates a confusion matrix and boundary counts over batches; exact under DDP.

    Boundary metrics (BF at each tolerance, Boundary IoU) are for ``boundary_class`` (the person,
    1) against the rest; they are computed per image on the CPU with OpenCV and summed as counts,
    so ``bf_<t>`` and ``boundary_iou`` are dataset-level ratios of summed counts (as the IoU from
    the confusion matrix), not means of per-image ratios.

    Photos without people (labelled pixels, none of them ``boundary_class``) are also counted
    on their own: ``empty_person_share`` is the mean over them of the share of their labelled
    pixels predicted as the class, ``empty_over_1pct`` the share of them with more than
    ``EMPTY_ALARM`` of it, ``empty_images`` how many there were (both ratios NaN for none).
    Their pixels stay in the confusion matrix too: a false person lowers the IoU;
    ``iou_person_with_people`` is the class's IoU over the other photos only.

    Typical use::

        metrics = SegMetrics(device=device)
        for images, masks in loader:
            metrics.update(class_map(model(images)["out"], 1), masks)
        metrics.reduce_(all_reduce_sum_)  # every rank, identical order
        results = metrics.compute()
    """

    def __init__(
        self,
        num_classes: int = 2,
        boundary_tolerances: Sequence[int] = (2, 5),
        ignore_index: int = 255,
        boundary_class: int = 1,
        boundary_iou_ratio: float | None = 0.02,
        device: torch.device | str = "cpu",
    ) -> None:
        """``boundary_tolerances=()`` and ``boundary_iou_ratio=None`` skip the (CPU) boundary
        work, leaving a confusion-matrix-only accumulator."""
        if not 0 <= boundary_class < num_classes:
            raise ValueError(f"boundary_class={boundary_class} not in [0, {num_classes})")
        if any(t < 0 for t in boundary_tolerances):
            raise ValueError(f"boundary_tolerances must be >= 0, got {tuple(boundary_tolerances)}")
        self.num_classes = num_classes
        self.boundary_tolerances = tuple(int(t) for t in boundary_tolerances)
        self.ignore_index = ignore_index
        self.boundary_class = boundary_class
        self.boundary_iou_ratio = boundary_iou_ratio
        self.device = torch.device(device)
        self.reset()

    def reset(self) -> None:
        """Zero every count."""
        zeros = torch.zeros
        self.confusion = zeros(
            self.num_classes, self.num_classes, dtype=torch.int64, device=self.device
        )
        # Per tolerance: (matched_pred, n_pred, matched_target, n_target).
        self.boundary = zeros(
            len(self.boundary_tolerances), 4, dtype=torch.int64, device=self.device
        )
        self.boundary_iou = zeros(2, dtype=torch.int64, device=self.device)  # (intersection, union)
        self.images = zeros((), dtype=torch.int64, device=self.device)
        # Photos without people: (count, count over EMPTY_ALARM, sum of person shares in PPM),
        # and their own confusion matrix (the rest of ``confusion`` is the photos with people).
        self.empty = zeros(3, dtype=torch.int64, device=self.device)
        self.confusion_empty = torch.zeros_like(self.confusion)

    def state_tensors(self) -> list[Tensor]:
        """The live int64 state; in-place changes (e.g. an all-reduce sum) change the counts."""
        return [
            *(self.confusion, self.boundary, self.boundary_iou, self.images),
            *(self.empty, self.confusion_empty),
        ]

    def reduce_(self, fn: Callable[[Tensor], object]) -> None:
        """Apply an in-place sum (e.g. ``all_reduce_sum_``) to every state tensor, in a fixed
        order, so that every rank then holds the totals."""
        for tensor in self.state_tensors():
            fn(tensor)

    def merge_(self, other: SegMetrics) -> SegMetrics:
        """Add ``other``'s counts (an accumulator of the same settings) into this one: sums of
        counts stay exact (per-image accumulators into per-source totals into the overall)."""
        same = ("num_classes", "boundary_tolerances", "ignore_index", "boundary_class")
        if any(getattr(self, k) != getattr(other, k) for k in same) or (
            self.boundary_iou_ratio != other.boundary_iou_ratio
        ):
            raise ValueError("merge_: the accumulators count different things (settings differ)")
        for mine, theirs in zip(self.state_tensors(), other.state_tensors(), strict=True):
            mine += theirs.to(mine.device)
        return self

    @classmethod
    def confusion_only(cls, num_classes: int, device: torch.device | str = "cpu") -> SegMetrics:
        """An accumulator without the (CPU) boundary metrics: what validation during training
        counts."""
        return cls(num_classes, boundary_tolerances=(), boundary_iou_ratio=None, device=device)

    @property
    def _needs_boundaries(self) -> bool:
        return bool(self.boundary_tolerances) or self.boundary_iou_ratio is not None

    @torch.no_grad()
    def update(self, pred: Tensor, target: Tensor) -> None:
        """Add a batch: ``pred`` (B, H, W) class indices, ``target`` (B, H, W) with ignore."""
        if pred.ndim != 3 or pred.shape != target.shape:
            raise ValueError(
                f"expected pred and target of one shape (B, H, W), got {tuple(pred.shape)} "
                f"and {tuple(target.shape)}"
            )
        cm = confusion_matrix(pred, target, self.num_classes, self.ignore_index)
        self.confusion += cm.to(self.device)
        self.images += pred.shape[0]
        counts, empty = self._empty_counts(pred, target)
        self.empty += counts.to(self.device)
        if empty.any():
            cm_empty = confusion_matrix(
                pred[empty], target[empty], self.num_classes, self.ignore_index
            )
            self.confusion_empty += cm_empty.to(self.device)
        if not self._needs_boundaries:
            return
        # Labels were validated by confusion_matrix; the rest is per image on the CPU (OpenCV).
        k = self.boundary_class
        pred_k = (pred == k).cpu().numpy()
        valid = (target != self.ignore_index).cpu().numpy()
        truth_k = (target == k).cpu().numpy()
        bf = np.zeros((len(self.boundary_tolerances), 4), dtype=np.int64)
        biou = np.zeros(2, dtype=np.int64)
        ratio = self.boundary_iou_ratio
        d = dilation_for(pred.shape, ratio) if ratio is not None else 0
        for p, t, v in zip(pred_k, truth_k, valid, strict=True):
            if self.boundary_tolerances:
                bf += boundary_counts_multi(p, t, v, self.boundary_tolerances)
            if ratio is not None:
                biou += np.asarray(boundary_iou_counts_np(p, t, v, d), dtype=np.int64)
        self.boundary += torch.from_numpy(bf).to(self.device)
        self.boundary_iou += torch.from_numpy(biou).to(self.device)

    def _empty_counts(self, pred: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """(photos without people, those with > EMPTY_ALARM predicted, sum of shares in PPM),
        and which photos of the batch are without people, (B,) bool."""
        k = self.boundary_class
        labelled = (target != self.ignore_index).flatten(1)
        pixels = labelled.sum(1)
        truth = ((target.flatten(1) == k) & labelled).sum(1)
        empty = (pixels > 0) & (truth == 0)
        found = ((pred.flatten(1) == k) & labelled).sum(1)[empty]
        share = found.double() / pixels[empty].double()
        ppm = torch.round(share * PPM).long().sum()
        return torch.stack([empty.sum(), (share > EMPTY_ALARM).sum(), ppm]).long(), empty

    def compute(self) -> dict[str, float]:
        """Metrics of everything seen (after ``reduce_``, of every rank).

        Returns:
            the keys of :func:`metrics_from_confusion` (``pixel_acc``, ``miou``,
            ``iou_person``, ``dice_person``, ``precision_person``, ``recall_person``, ...),
            ``bf_<t>`` per tolerance and ``boundary_iou`` (NaN when no band pixel was seen),
            ``empty_person_share``, ``empty_over_1pct``, ``empty_images`` (photos without
            people) and ``iou_person_with_people`` (see the class docstring).
        """
        out = metrics_from_confusion(self.confusion)
        empty, over, ppm = self.empty.cpu().tolist()
        out["empty_person_share"] = ratio(ppm / PPM, empty)
        out["empty_over_1pct"] = ratio(over, empty)
        out["empty_images"] = float(empty)
        name = class_names_for(self.num_classes)[self.boundary_class]
        with_people = metrics_from_confusion(self.confusion - self.confusion_empty)
        out[f"iou_{name}_with_people"] = with_people[f"iou_{name}"]
        for tol, row in zip(self.boundary_tolerances, self.boundary.cpu().tolist(), strict=True):
            out[f"bf_{tol}"] = fscore_from_counts(*row)["f"]
        if self.boundary_iou_ratio is not None:
            inter, union = self.boundary_iou.cpu().tolist()
            out["boundary_iou"] = ratio(inter, union)
        return out
