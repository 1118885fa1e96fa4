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
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from seg import distributed as du
from seg.data import run_by_size
from seg.evaluation.selection import Selection
from seg.metrics import SegMetrics, class_map, metrics_from_confusion
from seg.metrics.keys import TRAIN_SOURCES, metric_key


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
        pred = class_map(logits, 1)  # 0 beyond a sample's size, where its mask is 255 (ignored)
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


def validation_metrics(totals: dict[str, SegMetrics], selection: Selection) -> dict[str, Any]:
    """``val/<source>/<metric>`` per source, ``val/<metric>`` over all of them (the summed
    counts), and the matrices themselves as lists under ``confusion/<source>`` / ``confusion/all``.

    With a ``selection`` that holds sources out, ``val/train_sources/<metric>`` and
    ``confusion/train_sources`` sum its sources only: the training-domain validation that steers
    the run without the held-out sources.
    """
    first = next(iter(totals.values()))
    overall = SegMetrics.confusion_only(first.num_classes, first.device)
    seen = SegMetrics.confusion_only(first.num_classes, first.device)
    out: dict[str, Any] = {}
    for name, metrics in totals.items():
        out.update({metric_key(k, name): v for k, v in metrics.compute().items()})
        out[f"confusion/{name}"] = metrics.confusion.tolist()
        overall.merge_(metrics)
        if name in selection.sources:
            seen.merge_(metrics)
    out.update({metric_key(k): v for k, v in overall.compute().items()})
    out["confusion/all"] = overall.confusion.tolist()
    if selection.held_out:
        out.update({metric_key(k, TRAIN_SOURCES): v for k, v in seen.compute().items()})
        out[f"confusion/{TRAIN_SOURCES}"] = seen.confusion.tolist()
    return out


def metric_names(num_classes: int) -> list[str]:
    """The overall metric names (``trainer.best_metric`` must be one)."""
    return list(metrics_from_confusion(torch.zeros(num_classes, num_classes, dtype=torch.long)))


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite float entries (what TensorBoard gets)."""
    return {k: v for k, v in metrics.items() if isinstance(v, float) and math.isfinite(v)}
