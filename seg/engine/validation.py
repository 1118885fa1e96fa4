"""Validation during training: confusion matrices summed over ranks, then the metrics.

Every validation sample is scored on exactly one rank (contiguous shards, no padding) and the
integer matrices are summed before any ratio is taken, so the result is the same on any number
of replicas. Scoring happens at the eval transform's size (``aug.eval_size``, or its transpose
for landscape images) with the padding ignored (mask 255); samples of each canvas size run on
their own (``run_by_size``), so batches that mix orientations change nothing. Scoring at the
original resolution is the evaluation script's job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from seg import distributed as du
from seg.data import run_by_size
from seg.evaluation.report import TRAIN_SOURCES
from seg.metrics import SegMetrics, metrics_from_confusion


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: DataLoader | None,
    device: torch.device,
    sources: list[str],
    num_classes: int,
    amp_dtype: torch.dtype | None = None,
) -> tuple[dict[str, SegMetrics], int]:
    """Counts of each source (``SegMetrics`` without boundary metrics: its ``confusion`` is the
    (C, C) int64 matrix), over all ranks' shards, and the number of bad pairs dropped
    (``on_bad_sample=skip``), also over all ranks.

    ``model`` is the plain module (not DDP: shards differ in length, so no collective may run
    inside the loop); ``loader`` is this rank's shard (None: empty), batches as
    ``build_val_loader`` makes them (with ``size``). Every rank must call this.
    """
    was_training = model.training
    model.eval()
    totals = {name: SegMetrics.confusion_only(num_classes, device) for name in sources}
    bad = torch.zeros((), dtype=torch.long, device=device)
    for batch in loader if loader is not None else []:
        bad += len(batch["bad"])
        if "image" not in batch:
            continue
        images = batch["image"].to(device, non_blocking=True)
        masks = batch["mask"].to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            # Each canvas size on its own: a sample's prediction never depends on its batch.
            logits = run_by_size(lambda x: model(x)["out"], images, batch["size"])
        pred = logits.argmax(1)  # 0 beyond a sample's size, where its mask is 255 (ignored)
        for name in sorted(set(batch["source"])):
            if name not in totals:
                raise KeyError(f"validation sample from source {name!r}, expected {sources}")
            keep = torch.tensor([s == name for s in batch["source"]], device=device)
            totals[name].update(pred[keep], masks[keep])
    for name in sources:  # the same order on every rank
        totals[name].reduce_(du.all_reduce_sum_)
    du.all_reduce_sum_(bad)
    model.train(was_training)
    return totals, int(bad)


def validation_metrics(
    totals: dict[str, SegMetrics], selection: Sequence[str] | None = None
) -> dict[str, Any]:
    """``val/<source>/<metric>`` per source, ``val/<metric>`` over all of them (the summed
    counts), and the matrices themselves as lists under ``confusion/<source>`` / ``confusion/all``.

    With a ``selection`` (:func:`selection_sources`: the training sources, when a validated
    source is held out), ``val/train_sources/<metric>`` and ``confusion/train_sources`` sum
    those only: the training-domain validation that steers the run without the held-out source.
    """
    first = next(iter(totals.values()))
    overall = SegMetrics.confusion_only(first.num_classes, first.device)
    seen = SegMetrics.confusion_only(first.num_classes, first.device)
    out: dict[str, Any] = {}
    for name, metrics in totals.items():
        out.update({f"val/{name}/{k}": v for k, v in metrics.compute().items()})
        out[f"confusion/{name}"] = metrics.confusion.tolist()
        overall.merge_(metrics)
        if selection is not None and name in selection:
            seen.merge_(metrics)
    out.update({f"val/{k}": v for k, v in overall.compute().items()})
    out["confusion/all"] = overall.confusion.tolist()
    if selection is not None:
        out.update({f"val/{TRAIN_SOURCES}/{k}": v for k, v in seen.compute().items()})
        out[f"confusion/{TRAIN_SOURCES}"] = seen.confusion.tolist()
    return out


def selection_sources(
    validated: Sequence[str], train_sources: Sequence[str] | None
) -> list[str] | None:
    """The validated sources that steer a run (``best.pt``, the pixel-accuracy target,
    ``trainer.stop_at_target``) when some validated source is not trained on (held out by
    ``data.train_sources``, or only validated: ``data.val_sources``), else None: all of them
    (``val/<metric>``). ``train_sources``: the sources trained on (``train_source_names``)."""
    if train_sources is None:
        return None
    chosen = [name for name in validated if name in train_sources]
    return chosen if chosen and len(chosen) < len(validated) else None


def selection_prefix(selection: Sequence[str] | None) -> str:
    """Where the figures that steer a run are read: ``val/train_sources/`` with a
    :func:`selection_sources` (DomainBed's training-domain validation), else ``val/``."""
    return "val/" if selection is None else f"val/{TRAIN_SOURCES}/"


def best_of(best_metric: str, validated: Sequence[str], selection: Sequence[str] | None) -> str:
    """What a run's best value is a value of: its key and the sources it sums (sorted), so
    that a resumed run can tell whether a saved best still compares."""
    sources = ",".join(sorted(selection or validated))
    return f"{selection_prefix(selection)}{best_metric} over {sources}"


def metric_names(num_classes: int) -> list[str]:
    """The overall metric names (``trainer.best_metric`` must be one)."""
    return list(metrics_from_confusion(torch.zeros(num_classes, num_classes, dtype=torch.long)))


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite float entries (what TensorBoard gets)."""
    return {k: v for k, v in metrics.items() if isinstance(v, float) and math.isfinite(v)}
