"""``run_evaluation(cfg) -> dict``: a checkpoint on any dataset and split, at the images'
original resolution, with metrics exact over several processes.

Each image goes through the checkpoint's eval preset, the model, and back to its own H x W
(``seg.inference.predictor``); its prediction is scored against the full-resolution mask
(ignore pixels excluded) in an accumulator of its own, which gives its ``per_image.csv`` row and
is then added to its source's. Under torchrun every rank scores a contiguous shard of the images
(``seg.distributed.shard``: each image exactly once) and the integer counts are summed across
ranks (``SegMetrics.reduce_``) before any ratio is taken; rank 0 writes the outputs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from seg import distributed as du
from seg.checkpoint import checkpoint_file
from seg.config import Config, DataConfig, EvalConfig, InferencePrecision
from seg.data import eval_sizes, split_bad
from seg.data.download import resolve_data_root
from seg.distributed import shard
from seg.errors import DataError
from seg.evaluation.panels import four_panels
from seg.evaluation.report import (
    format_table,
    gallery_name,
    image_row,
    json_safe,
    meets_target,
    summary,
    worst_rows,
    write_csv,
)
from seg.evaluation.samples import Item, list_items, raw_loader
from seg.fileio import write_json, write_text
from seg.inference.backend import load_for
from seg.inference.media import write_image
from seg.inference.predictor import Predictor, predictor_from_options
from seg.metrics import SegMetrics
from seg.metrics.format import percent
from seg.metrics.sizes import SizeSplit
from seg.runs import RunLayout

log = logging.getLogger(__name__)


def default_out_dir(checkpoint: str | Path, data_name: str, split: str) -> Path:
    """``<run_dir>/eval/<data>_<split>`` for a checkpoint in a run's ``checkpoints/`` folder,
    else ``outputs/eval/<data>_<split>``."""
    ckpt = Path(checkpoint).expanduser().absolute()
    run = RunLayout.of_checkpoint(ckpt)
    if run is not None:
        return run.evaluation(data_name, split)
    return RunLayout(Path("outputs")).evaluation(data_name, split)


def score_items(
    predictors: Mapping[str, Predictor],
    items: list[Item],
    cfg: EvalConfig,
    num_classes: int,
    sources: list[str],
    sizes: dict[str, SizeSplit] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, SegMetrics], list[str]]:
    """Score ``items``, each source's by its predictor in ``predictors`` (its eval size):
    (per-image rows with their ``index``, per-source accumulators, the messages of bad pairs
    skipped under ``on_bad_sample=skip``). The photos of the sources in ``sizes`` whose labels
    tell people apart are also counted there, by person size."""
    by_index = {item.index: item for item in items}
    sizes = sizes if sizes is not None else {}
    totals = {s: SegMetrics(num_classes) for s in sources}
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    show = cfg.progress and du.is_main_process()
    bar = tqdm(total=len(items), unit="img", desc="evaluating", disable=None if show else True)
    for batch in raw_loader(items, cfg.batch_size, cfg.num_workers) if items else []:
        good, bad = split_bad(batch)
        skipped += bad
        labelled = []
        # By predictor, not by source: sources of one eval size share one batch.
        groups: dict[int, tuple[Predictor, list[dict]]] = {}
        for sample in good:
            predictor = predictors[by_index[sample["index"]].source]
            groups.setdefault(id(predictor), (predictor, []))[1].append(sample)
        for predictor, group in groups.values():
            labels = predictor.labels([s.pop("image") for s in group])  # done with
            labelled += zip(group, labels, strict=True)
        for sample, label in labelled:
            item = by_index[sample["index"]]
            truth = torch.from_numpy(sample.pop("mask"))
            people = sample.pop("instances", None)
            if people is not None and item.source in sizes:
                sizes[item.source].update((label == 1).numpy(), people, (truth != 255).numpy())
            one = SegMetrics(num_classes)
            one.update(label[None], truth[None])
            row = image_row(item.name, item.source, truth.shape, one)
            rows.append({"index": item.index, **row})
            totals[item.source].merge_(one)
        bar.update(len(batch))
    bar.close()
    return rows, totals, skipped


def _reduce(totals: dict[str, SegMetrics] | dict[str, SizeSplit], device: torch.device) -> None:
    """Sum every rank's counts in place (on ``device``, which the backend serves)."""

    def sum_(tensor: torch.Tensor) -> None:
        moved = tensor.to(device)
        du.all_reduce_sum_(moved)
        tensor.copy_(moved.to(tensor.device))

    for name in sorted(totals):  # the same order on every rank
        totals[name].reduce_(sum_)


def write_gallery(
    predictors: Mapping[str, Predictor],
    items: list[Item],
    rows: list[dict[str, Any]],
    cfg: EvalConfig,
    out_dir: Path,
) -> list[Path]:
    """``worst/NN_<source>_<name>.png`` for the ``cfg.worst`` worst images (predicted again:
    K forward passes instead of keeping every prediction in memory)."""
    folder = out_dir / "worst"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("[0-9][0-9]*_*.png"):  # a previous gallery, maybe of another K
        old.unlink()
    written = []
    for rank, row in enumerate(worst_rows(rows, cfg.worst), start=1):
        item = items[row["index"]]
        image, truth = item.dataset.load_raw(item.position)
        pred = (predictors[item.source].labels([image])[0] == 1).numpy()
        iou, acc = percent(row["iou"], 1), percent(row["pixel_acc"], 1)
        text = f"{item.source}/{item.name}  IoU {iou}  acc {acc}"
        panels = four_panels(image, truth, pred, text, cfg.worst_height)
        path = folder / gallery_name(rank, cfg.worst, item.source, item.name)
        written.append(write_image(path, panels))
    return written


def _setup(cfg: EvalConfig) -> tuple[Any, Config, DataConfig]:
    model, train_cfg = load_for(cfg)
    data = cfg.data if cfg.data is not None else train_cfg.data  # the checkpoint's, or given
    if cfg.eval_size is not None:
        # replace, not assign: the schema checks the new size when it is made; every source
        # at it, those of data.eval_scales too
        train_cfg.aug = dataclasses.replace(
            train_cfg.aug, eval_size=[int(v) for v in cfg.eval_size]
        )
        data = dataclasses.replace(data, eval_scales={})
    if cfg.data is not None:
        return model, train_cfg, data
    # The checkpoint's data.root may be another machine's path.
    if data.root is not None and not resolve_data_root(data.root).is_dir():
        log.info("data.root %s of the checkpoint is not here: using this machine's", data.root)
        data = dataclasses.replace(data, root=None)
    return model, train_cfg, data


def source_predictors(
    model: Any, train_cfg: Config, cfg: EvalConfig, data: DataConfig
) -> dict[str, Predictor]:
    """A predictor per validation and test source of ``data``, at its eval size
    (``aug.eval_size`` times its ``data.eval_scales``); sources of one size share one."""
    by_size: dict[tuple[int, ...], Predictor] = {}
    out = {}
    for source, size in eval_sizes(data, train_cfg.aug.eval_size).items():
        if tuple(size) not in by_size:
            aug = dataclasses.replace(train_cfg.aug, eval_size=size)
            at_size = dataclasses.replace(train_cfg, aug=aug)
            by_size[tuple(size)] = predictor_from_options(model, at_size, cfg)
        out[source] = by_size[tuple(size)]
    return out


def _result(
    cfg: EvalConfig,
    train_cfg: Config,
    data_name: str,
    predictors: Mapping[str, Predictor],
    totals: dict[str, SegMetrics],
    skipped: list[str],
    sizes: dict[str, SizeSplit],
) -> dict[str, Any]:
    """The content of ``metrics.json`` (before NaN becomes null)."""
    predictor = next(iter(predictors.values()))  # device, backend and windows: the same in all
    overall = SegMetrics(train_cfg.model.num_classes)
    for metrics in totals.values():
        overall.merge_(metrics)
    target = cfg.target_pixel_acc or train_cfg.trainer.target_pixel_acc
    acc = summary(overall)["pixel_acc"]
    slide = None
    if predictor.window:
        slide = {"window": list(predictor.window), "stride": list(predictor.stride or ())}
    confusion = {s: m.confusion.tolist() for s, m in totals.items()}
    return {
        "checkpoint": str(Path(cfg.checkpoint).expanduser().absolute()),
        "data": data_name,
        "split": cfg.split,
        "tta": [t.value for t in cfg.tta],
        "scales": [float(s) for s in cfg.scales],
        "slide": slide,
        "refine": dataclasses.asdict(cfg.refine) if cfg.refine.guided else None,
        "eval_size": list(train_cfg.aug.eval_size),
        "eval_sizes": {s: list(predictors[s].eval_size) for s in totals},
        "target_pixel_acc": target,
        "pass": meets_target(acc, target),
        "overall": summary(overall),
        "per_source": {s: summary(m) for s, m in totals.items()},
        "person_sizes": {s: split.compute() for s, split in sizes.items()},
        "confusion": {**confusion, "all": overall.confusion.tolist()},
        "skipped": skipped,
        "device": str(predictor.device),
        "backend": predictor.model.backend,
        "precision": InferencePrecision(cfg.precision).value,
        "world_size": du.world_size(),
    }


def write_outputs(
    result: dict[str, Any],
    rows: list[dict[str, Any]],
    predictors: Mapping[str, Predictor],
    items: list[Item],
    cfg: EvalConfig,
    out_dir: Path,
    started: float,
) -> dict[str, Any]:
    """``per_image.csv``, ``worst/``, ``metrics.json`` and ``report.txt``; returns the result
    as written (NaN as None, with the gallery's and the total time since ``started``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "per_image.csv", rows)
    t0 = time.perf_counter()
    write_gallery(predictors, items, rows, cfg, out_dir)
    now = time.perf_counter()
    result["timing_s"].update(gallery=round(now - t0, 2), total=round(now - started, 2))
    result = json_safe(result)
    write_json(out_dir / "metrics.json", result)
    write_text(out_dir / "report.txt", format_table(result) + "\n")
    return result


def _score(
    cfg: EvalConfig,
    predictors: Mapping[str, Predictor],
    items: list[Item],
    train_cfg: Config,
    data_name: str,
    out_dir: Path,
    started: float,
) -> dict[str, Any]:
    """Score this rank's share of ``items``, gather every rank's, write the outputs on rank 0;
    the result (as ``metrics.json``) on every rank."""
    sources = list(dict.fromkeys(i.source for i in items))
    mine = [items[i] for i in shard(len(items), du.rank(), du.world_size())]
    predictor = next(iter(predictors.values()))
    log.info(
        "evaluating %d of %d image(s) of %s/%s on %s, eval size %s, tta %s, scales %s, "
        "sliding windows %s",
        len(mine),
        len(items),
        data_name,
        cfg.split,
        predictor.device,
        {s: list(predictors[s].eval_size) for s in sources},
        [t.value for t in cfg.tta],
        list(cfg.scales),
        predictor.window,
    )
    t0 = time.perf_counter()
    # The same sources on every rank: what their listings are, not what a shard holds.
    sizes = {
        s: SizeSplit() for s in sources if any(i.source == s and i.has_instances for i in items)
    }
    classes = train_cfg.model.num_classes
    rows, totals, skipped = score_items(predictors, mine, cfg, classes, sources, sizes)
    _reduce(totals, predictor.device)
    _reduce(sizes, predictor.device)
    gathered = [r for part in du.all_gather_object(rows) for r in part]
    rows = sorted(gathered, key=lambda r: r["index"])
    skipped = [s for part in du.all_gather_object(skipped) for s in part]
    if not rows:  # every pair was bad: no metric means anything, and nothing is written
        raise DataError(
            f"no image of {data_name} {cfg.split} could be scored: all {len(skipped)} pairs "
            f"are bad (data.on_bad_sample=skip), e.g. {skipped[0] if skipped else '?'}"
        )
    scoring_s = time.perf_counter() - t0
    result = _result(cfg, train_cfg, data_name, predictors, totals, skipped, sizes)
    result["timing_s"] = {
        "scoring": round(scoring_s, 2),
        "images_per_s": round(len(rows) / max(scoring_s, 1e-9), 2),
    }
    if du.is_main_process():
        result = write_outputs(result, rows, predictors, items, cfg, out_dir, started)
    result = du.broadcast_object(json_safe(result))
    return result


def run_evaluation(cfg: EvalConfig) -> dict[str, Any]:
    """Evaluate ``cfg.checkpoint`` on ``cfg.data`` / ``cfg.split``; rank 0 writes
    ``metrics.json``, ``per_image.csv``, ``report.txt`` and ``worst/`` into the output folder.

    Returns the content of ``metrics.json`` (NaN as None) plus ``out_dir`` and ``table``.
    """
    cfg = dataclasses.replace(cfg, checkpoint=str(checkpoint_file(cfg.checkpoint)))  # a run dir
    started = time.perf_counter()
    model, train_cfg, data_cfg = _setup(cfg)
    data_name = str(data_cfg.name)
    out_dir = Path(cfg.out) if cfg.out else default_out_dir(cfg.checkpoint, data_name, cfg.split)
    items = list_items(data_cfg, cfg.split, cfg.max_images)
    predictors = source_predictors(model, train_cfg, cfg, data_cfg)
    owns_group = not du.is_distributed()  # a caller's process group is left alone
    du.init_distributed(next(iter(predictors.values())).model.devices)
    try:
        result = _score(cfg, predictors, items, train_cfg, data_name, out_dir, started)
    finally:
        if owns_group:
            du.destroy_distributed()
    return {**result, "out_dir": str(out_dir), "table": format_table(result)}
