"""What an evaluation writes: ``metrics.json``, ``per_image.csv``, the printed table and the
``worst/`` gallery names. The file formats are a contract (the notebooks read them): see
docs/evaluation.md.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from seg.checkpoint import load_checkpoint
from seg.config import PERSON, to_config
from seg.data import own_eval_sizes
from seg.evaluation.selection import Selection
from seg.fileio import write_text
from seg.metrics import SegMetrics
from seg.metrics.format import percent, ratio
from seg.metrics.keys import metric_key, metric_sources
from seg.metrics.sizes import SIZES

CSV_COLUMNS = (
    "name",
    "source",
    "height",
    "width",
    "pixels",
    "correct",
    "tp",
    "fp",
    "fn",
    "pixel_acc",
    "iou",
    "person_fraction",
    "bf_2",
    "bf_5",
)
SUMMARY_KEYS = (
    "pixel_acc",
    "miou",
    "iou_person",
    "iou_background",
    "dice_person",
    "precision_person",
    "recall_person",
    "bf_2",
    "bf_5",
    "boundary_iou",
    "iou_person_with_people",
    "empty_person_share",
    "empty_over_1pct",
)


def image_row(
    name: str, source: str, size_hw: Sequence[int], metrics: SegMetrics
) -> dict[str, Any]:
    """One ``per_image.csv`` row from an accumulator that has seen only this image.

    Counts are of the labelled pixels; ``tp``/``fp``/``fn`` are of the person class, ``iou``
    its IoU (NaN when neither truth nor prediction has a person), ``bf_<t>`` the boundary F.
    """
    cm = metrics.confusion.cpu()
    tp = int(cm[PERSON, PERSON])
    fp = int(cm[:, PERSON].sum()) - tp
    fn = int(cm[PERSON, :].sum()) - tp
    pixels, correct = int(cm.sum()), int(torch.diagonal(cm).sum())
    stats = metrics.compute()
    return {
        "name": name,
        "source": source,
        "height": int(size_hw[0]),
        "width": int(size_hw[1]),
        "pixels": pixels,
        "correct": correct,
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "pixel_acc": stats["pixel_acc"],
        "iou": stats["iou_person"],
        "person_fraction": ratio(tp + fn, pixels),
        "bf_2": stats.get("bf_2", float("nan")),
        "bf_5": stats.get("bf_5", float("nan")),
    }


def summary(metrics: SegMetrics) -> dict[str, float | int]:
    """The ``overall`` / ``per_source`` entry of ``metrics.json`` (NaN for undefined ratios)."""
    values = metrics.compute()
    out: dict[str, float | int] = {k: values.get(k, float("nan")) for k in SUMMARY_KEYS}
    out["images"] = int(metrics.images)
    out["empty_images"] = int(metrics.empty[0])
    return out


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6f}"
    return str(value)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``per_image.csv`` with the header :data:`CSV_COLUMNS`; NaN is written as ``nan``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        writer.writerow([_cell(row[c]) for c in CSV_COLUMNS])
    write_text(path, buffer.getvalue())
    return path


def json_safe(obj: Any) -> Any:
    """NaN and infinities -> None (``null``), so that ``metrics.json`` is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def worst_rows(rows: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The ``k`` worst rows by person IoU (then pixel accuracy, then name).

    An undefined IoU (no person in truth or prediction) has no person error: it ranks as 1.
    """

    def key(row: dict[str, Any]) -> tuple[float, float, str, str]:
        iou, acc = row["iou"], row["pixel_acc"]
        return (
            1.0 if math.isnan(iou) else iou,
            1.0 if math.isnan(acc) else acc,
            row["source"],
            row["name"],
        )

    return sorted(rows, key=key)[:k]


def gallery_name(rank: int, k: int, source: str, name: str) -> str:
    """``NN_<source>_<name>.png``; characters unsafe in file names become ``_``."""
    width = max(2, len(str(k)))
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    return f"{rank:0{width}d}_{source}_{safe}.png"


# Photos without people: the mean share of their pixels labelled person, and the share of them
# with more than 1% labelled person (seg.metrics.accumulator).
EMPTY_COLUMNS = [
    ("iou_person_with_people", "IoU people"),
    ("empty_person_share", "empty px"),
    ("empty_over_1pct", "empty>1%"),
]
EMPTY_NOTE = (
    "IoU people: person IoU on the photos with people only; empty px / empty>1%: on photos "
    "without people, the mean share of pixels labelled person and the share of such photos "
    "with more than 1% (n/a: the source has none)"
)


def format_table(result: dict[str, Any]) -> str:
    """Per source and overall: images, pixel accuracy, person IoU, mIoU, Dice, BF, Boundary
    IoU, and on photos without people (where a source has any) the mean share labelled person
    and the share of them over 1%; then ``pixel accuracy X% vs target T%: PASS/FAIL``."""
    cols = [
        ("pixel_acc", "pixel acc"),
        ("iou_person", "person IoU"),
        ("miou", "mIoU"),
        ("dice_person", "Dice"),
        ("bf_2", "BF@2"),
        ("bf_5", "BF@5"),
        ("boundary_iou", "B-IoU"),
        *EMPTY_COLUMNS,
    ]
    head = f"{'source':<18} {'images':>6} " + " ".join(f"{h:>10}" for _, h in cols)
    lines = [head]
    rows = [*result["per_source"].items(), ("all", result["overall"])]
    for name, m in rows:
        values = " ".join(f"{percent(_nan(m.get(k))):>10}" for k, _ in cols)
        lines.append(f"{name:<18} {m['images']:>6} {values}")
    lines.append(EMPTY_NOTE)
    lines += size_lines(result.get("person_sizes") or {})
    lines.append(target_line(_nan(result["overall"]["pixel_acc"]), result["target_pixel_acc"]))
    return "\n".join(lines)


def size_lines(sizes: dict[str, dict[str, float]]) -> list[str]:
    """The person-size split (``seg.metrics.sizes``) of the sources that have one: per size,
    person recall, IoU, the share of people found and their number."""
    if not sizes:
        return []
    names = [name for name, _ in SIZES]
    head = " ".join(f"{n + ' recall / IoU / found (people)':>38}" for n in names)
    lines = [f"{'people by size':<18} {head}"]
    for source, m in sizes.items():
        cells = []
        for n in names:
            r, i, f = (percent(_nan(m.get(f"{k}_{n}")), 1) for k in ("recall", "iou", "found"))
            people = int(m.get(f"instances_{n}") or 0)
            cell = f"{r} / {i} / {f} ({people})"
            cells.append(f"{cell:>38}")
        lines.append(f"{source:<18} {' '.join(cells)}")
    lines.append(
        "  (COCO's sizes: small under 32 x 32 pixels, medium under 96 x 96; found: half or more "
        "of the person's pixels)"
    )
    return lines


# --- The case study's pixel-accuracy target (88%): the one place its verdict is made --------


def meets_target(pixel_acc: float, target: float) -> bool:
    """Whether ``pixel_acc`` reaches ``target``; an undefined accuracy (NaN) never does."""
    return bool(math.isfinite(pixel_acc) and pixel_acc >= target)


def target_line(pixel_acc: float, target: float) -> str:
    """``pixel accuracy 97.12% vs target 88%: PASS`` (FAIL below the target or undefined)."""
    verdict = "PASS" if meets_target(pixel_acc, target) else "FAIL"
    return f"pixel accuracy {percent(pixel_acc)} vs target {100 * target:.4g}%: {verdict}"


def format_training_report(
    metrics: dict[str, Any], sources: list[str], target: float, selection: Selection
) -> str:
    """A training run's final table (its ``metrics.json``): pixel accuracy, person IoU and
    mIoU per source and overall (and over the training sources when one is held out, the
    figures the target is then judged on), the verdict against the pixel-accuracy target, when
    training first reached it, and the bad pairs that were skipped."""
    rows: list[tuple[str, str | None]] = [(s, s) for s in sources] + [("all", None)]
    if selection.held_out:  # the figures the target is judged on
        rows.append(("training sources", selection.source))
    head = ["pixel acc", "person IoU", "mIoU", *(h for _, h in EMPTY_COLUMNS)]
    lines = [f"{'source':<20} " + " ".join(f"{h:>10}" for h in head)]
    keys = ["pixel_acc", "iou_person", "miou", *(k for k, _ in EMPTY_COLUMNS)]
    for name, source in rows:
        values = " ".join(f"{percent(_nan(metrics.get(metric_key(k, source)))):>10}" for k in keys)
        lines.append(f"{name:<20} {values}")
    lines.append(EMPTY_NOTE)
    lines.append(target_line(metrics.get(selection.key_of("pixel_acc"), float("nan")), target))
    reached = metrics.get("target_reached")
    if reached:
        lines.append(
            f"target first reached at epoch {reached['epoch']}, step {reached['step']}, "
            f"{reached['wall_time_s']:.0f} s, {reached['images_seen']} images seen"
        )
    else:
        lines.append("target not reached during training")
    val_bad, train_bad = metrics.get(metric_key("skipped"), 0), metrics.get("train/skipped", 0)
    if val_bad or train_bad:
        lines.append(
            f"bad pairs skipped (data.on_bad_sample=skip): {val_bad:.0f} in validation "
            f"(not scored), {train_bad:.0f} in training (replaced by the next pair)"
        )
    return "\n".join(lines)


def _nan(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def run_summary(checkpoint: Path) -> str:
    """Markdown: a run's recipe (from its checkpoint's config) and its validation figures at the
    checkpoint's step (those that chose it), per source."""
    ckpt = load_checkpoint(checkpoint, mmap=True)
    cfg = to_config(ckpt["config"])
    metrics = ckpt.get("metrics") or {}
    shipped = ckpt.get("weights") or {}  # a weights file (seg.zoo): its run's epoch and step
    epoch, step = (ckpt.get(k, shipped.get(k, "?")) for k in ("epoch", "step"))
    columns = ", ".join(
        f"{c.name}{f' ({c.backbone})' if c.backbone else ''} x{c.input_scale:g}"
        for c in cfg.model.columns
    )
    size = [int(v) for v in cfg.aug.eval_size]
    own = own_eval_sizes(cfg.data, size)  # data.eval_scales: this run's sources only
    lines = [
        f"**{checkpoint.name}** of `{checkpoint.parent}`",
        f"- model: {cfg.model.name}" + (f" [{columns}]" if cfg.model.columns else ""),
        f"- trained: epoch {epoch}, step {step} of "
        f"{cfg.trainer.epochs} epochs on {', '.join(cfg.data.sources)}"
        + (f" + {cfg.data.negatives_p:.0%} photos without people" if cfg.data.negatives_p else "")
        + "".join(
            f", {n} at {s:g}x the training size" for n, s in dict(cfg.data.train_scales).items()
        ),
        f"- evaluated at {size[0]}x{size[1]} (long x short side)"
        + "".join(f", {n} at {h}x{w}" for n, (h, w) in own.items()),
    ]
    sources = metric_sources(metrics)
    if sources:
        lines += ["", "| validation | pixel acc | person IoU | empty px |", "|---|---|---|---|"]
        for source in [*sources, None]:
            empty = metrics.get(metric_key("empty_person_share", source))
            lines.append(
                f"| {source or 'all'} | {_pct(metrics.get(metric_key('pixel_acc', source)))} | "
                f"{_pct(metrics.get(metric_key('iou_person', source)))} | {_pct(empty)} |"
            )
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{100 * value:.2f}%"
