"""Segmentation metrics from integer counts, exact when summed across processes.

- :mod:`seg.metrics.confusion`: confusion matrix, pixel accuracy, (m)IoU, Dice, precision, recall.
- :mod:`seg.metrics.boundary`: BF score and Boundary IoU of a person mask, with counts forms.
- :mod:`seg.metrics.accumulator`: the ``SegMetrics`` accumulator.
"""

from seg.metrics.accumulator import SegMetrics
from seg.metrics.boundary import (
    boundary_counts,
    boundary_fscore,
    boundary_iou,
    boundary_iou_counts,
    fscore_from_counts,
)
from seg.metrics.confusion import (
    class_map,
    class_mask,
    class_names_for,
    confusion_matrix,
    metrics_from_confusion,
)

__all__ = [
    "SegMetrics",
    "boundary_counts",
    "boundary_fscore",
    "boundary_iou",
    "boundary_iou_counts",
    "class_map",
    "class_mask",
    "class_names_for",
    "confusion_matrix",
    "fscore_from_counts",
    "metrics_from_confusion",
]
