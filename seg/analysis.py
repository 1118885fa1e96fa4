"""Helpers of the result-analysis notebooks (``notebooks/``): load what training and evaluation
wrote, turn it into pandas tables, and draw the usual figures.

Training runs (``seg/engine/run_dir.py``): scalars from the TensorBoard event files in ``tb/``
(else ``metrics.jsonl``), ``config.yaml``, ``run_info.json`` and the final ``metrics.json``.
Evaluations (``scripts/evaluate.py``): ``<run_dir>/eval/<data>_<split>/`` with ``metrics.json``,
``per_image.csv`` (one row per image, :data:`PER_IMAGE_COLUMNS`) and a ``worst/`` gallery.

Needs the ``analysis`` extra (pandas, matplotlib): ``pip install -e ".[analysis]"``.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seg.config import TARGET_PIXEL_ACC, to_config
from seg.errors import ConfigError, DataError, MissingFileError
from seg.evaluation.report import CSV_COLUMNS, meets_target
from seg.metrics.keys import metric_key, metric_sources
from seg.runs import RunLayout

try:
    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.ticker import MaxNLocator
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"seg.analysis needs pandas and matplotlib ({err}); pip install -e '.[analysis]'"
    ) from err

# The header of an evaluation's per_image.csv, as scripts/evaluate.py writes it.
PER_IMAGE_COLUMNS = CSV_COLUMNS
# Multi-column nets named by their number of columns, as in configs/exp/.
VARIANTS = {1: "single_column", 2: "dual_channel"}


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _num(mapping: dict[str, Any], key: str) -> Any:
    """``mapping[key]``, NaN when absent or None (so that table columns stay numeric)."""
    value = mapping.get(key)
    return float("nan") if value is None else value


# --- Training runs -----------------------------------------------------------------------


def load_scalars(run_dir: str | Path) -> pd.DataFrame:
    """Every scalar of the TensorBoard event files in ``run_dir/tb`` (or ``run_dir`` itself), in
    long form: columns ``tag``, ``step``, ``value``, ``wall_time``. Points that a resumed run
    purged are dropped (EventAccumulator does it); an empty frame when there are no events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = Path(run_dir)
    tb = RunLayout(run_dir).tensorboard
    tb = tb if tb.is_dir() else run_dir
    acc = EventAccumulator(str(tb), size_guidance={"scalars": 0})  # 0: keep every point
    acc.Reload()
    rows = [
        (tag, e.step, e.value, e.wall_time)
        for tag in acc.Tags()["scalars"]
        for e in acc.Scalars(tag)
    ]
    return pd.DataFrame(rows, columns=["tag", "step", "value", "wall_time"])


def load_jsonl(path: str | Path) -> pd.DataFrame:
    """``metrics.jsonl`` (a file or the run directory holding it) as one row per step (lines of
    the same step merged), one column per scalar; indexed by ``step``."""
    path = Path(path)
    path = RunLayout(path).metrics_log if path.is_dir() else path
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file (a training run writes metrics.jsonl)")
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    frame = pd.DataFrame.from_records(records)
    if frame.empty:
        return frame
    return frame.groupby("step").last().sort_index()


def load_history(run_dir: str | Path) -> pd.DataFrame:
    """The logged scalars of a run, one row per step and one column per tag: from the event
    files when there are any, else from ``metrics.jsonl``."""
    scalars = load_scalars(run_dir)
    if scalars.empty:
        return load_jsonl(run_dir)
    wide = scalars.pivot_table(index="step", columns="tag", values="value", aggfunc="last")
    wide.columns.name = None
    return wide.sort_index()


@dataclass
class Run:
    """One training run: its directory, a label, what it saved, and its logged history."""

    path: Path
    label: str
    config: dict[str, Any]  # config.yaml
    info: dict[str, Any]  # run_info.json
    final: dict[str, Any]  # metrics.json ({} while the run has not finished)
    history: pd.DataFrame  # index step, a column per scalar tag

    @property
    def variant(self) -> str:
        return model_variant(self.config)


def load_run(run_dir: str | Path, label: str | None = None) -> Run:
    """Load a run directory (``label`` defaults to its last two path parts)."""
    from omegaconf import OmegaConf

    path = Path(run_dir).expanduser()
    run = RunLayout(path)
    cfg_path = run.config
    if not cfg_path.is_file():
        raise MissingFileError(
            f"{path} is not a training run directory: no config.yaml in it (expected the "
            "directory that scripts/train.py wrote, e.g. outputs/<date>/<time>)"
        )
    config = OmegaConf.to_container(OmegaConf.load(cfg_path), resolve=True)
    return Run(
        path=path,
        label=label or "/".join(path.absolute().parts[-2:]),
        config=config,  # type: ignore[arg-type]
        info=_read_json(run.info),
        final=_read_json(run.metrics),
        history=load_history(path),
    )


def load_runs(run_dirs: Sequence[str | Path]) -> list[Run]:
    """:func:`load_run` of each directory, in order."""
    return [load_run(d) for d in run_dirs]


def model_variant(config: dict[str, Any]) -> str:
    """``single_column`` / ``dual_channel`` / ``multi_column`` for the multi-column net (from its
    number of columns), else the model's name."""
    model = config.get("model", {})
    name = str(model.get("name", "unknown"))
    if name != "multicolumn":
        return name
    return VARIANTS.get(len(model.get("columns", [])), "multi_column")


def model_summary(run: Run, compute: bool = True) -> dict[str, Any] | None:
    """Parameters and FLOPs of the run's model: a logged summary (a dict with ``params`` in
    ``run_info.json`` or ``metrics.json``) if there is one, else (``compute``) the model rebuilt
    from ``config.yaml`` on the CPU and measured at ``aug.eval_size`` (no weights loaded)."""
    for source in (run.info, run.final):
        for value in source.values():
            if isinstance(value, dict) and "params" in value:
                return value
    if not compute:
        return None
    from seg.models import build_model, summarize_model  # torch only when asked

    cfg = to_config(run.config)
    height, width = cfg.aug.eval_size
    model = build_model(cfg.model, pretrained=False)  # counting needs no weights (no download)
    return summarize_model(model, (1, 3, height, width))


def sources(final: dict[str, Any]) -> list[str]:
    """The sources of a run's validation metrics (keys ``val/<source>/<metric>``; not the
    training-sources sum of a leave-one-out run, ``val/train_sources/<metric>``)."""
    return metric_sources(final)


def throughput(run: Run) -> float:
    """Median training images/s (``perf/img_per_s``), leaving out the first (warm-up) point
    when there are others; NaN when not logged."""
    if "perf/img_per_s" not in run.history:
        return float("nan")
    values = run.history["perf/img_per_s"].dropna()
    return float(values.iloc[1:].median() if len(values) > 1 else values.median())


def runs_table(
    runs: Sequence[Run],
    metrics: Sequence[str] = ("pixel_acc", "iou_person", "miou"),
    with_model: bool = False,
) -> pd.DataFrame:
    """One row per run: variant, steps, time, time to the target, img/s, the final overall
    ``val/`` metrics, and (``with_model``) parameters and GFLOPs per image."""
    rows = []
    for run in runs:
        f, reached = run.final, run.final.get("target_reached") or {}
        row = {
            "run": run.label,
            "variant": run.variant,
            "steps": _num(f, "step"),
            "elapsed_s": _num(f, "elapsed_s"),
            "target_step": _num(reached, "step"),
            "target_wall_time_s": _num(reached, "wall_time_s"),
            "img_per_s": throughput(run),
        }
        row.update({m: _num(f, metric_key(m)) for m in metrics})
        if with_model:
            summary = model_summary(run) or {}
            batch = (summary.get("input_size") or [1])[0]
            row["params_M"] = summary.get("params", float("nan")) / 1e6
            row["gflops_per_img"] = summary.get("flops", float("nan")) / batch / 1e9
        rows.append(row)
    return pd.DataFrame(rows).set_index("run")


def per_source_table(
    runs: Sequence[Run], metrics: Sequence[str] = ("pixel_acc", "iou_person", "miou")
) -> pd.DataFrame:
    """Final validation metrics per (run, source), rows indexed by both."""
    rows = [
        {"run": r.label, "source": s, **{m: _num(r.final, metric_key(m, s)) for m in metrics}}
        for r in runs
        for s in sources(r.final)
    ]
    return pd.DataFrame(rows, columns=["run", "source", *metrics]).set_index(["run", "source"])


def match_tags(runs: Sequence[Run], patterns: Sequence[str]) -> list[str]:
    """The logged tags matching any shell-style pattern (``train/*``, ``val/*/pixel_acc``), in
    the order of the patterns; a ``*`` matches across slashes, so ``val/*`` also takes
    ``val/<source>/...``."""
    tags = sorted({t for r in runs for t in r.history.columns})
    out: list[str] = []
    for pattern in patterns:
        out += [t for t in tags if fnmatch.fnmatchcase(t, pattern) and t not in out]
    return out


def plot_curves(
    runs: Sequence[Run], tags: Sequence[str], ncols: int = 3, target: float | None = None
) -> plt.Figure:
    """One panel per tag, one line per run; ``target`` draws a line on ``*pixel_acc`` panels."""
    tags = list(tags)
    if not tags:
        raise ConfigError("no tags to plot; the runs log: " + ", ".join(match_tags(runs, ["*"])))
    ncols = min(ncols, len(tags))
    nrows = -(-len(tags) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.5 * ncols, 3.2 * nrows), squeeze=False)
    for ax, tag in zip(axes.flat, tags, strict=False):
        for run in runs:
            if tag in run.history:
                series = run.history[tag].dropna()
                marker = "." if len(series) < 30 else None
                ax.plot(series.index, series.values, marker=marker, label=run.label)
        if target is not None and tag.endswith("pixel_acc"):
            ax.axhline(target, color="red", linestyle="--", linewidth=1, label="target")
        ax.set_title(tag)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(tags) :]:
        ax.set_visible(False)
    legend = {}  # one entry per label over all panels (a run may lack some tags)
    for ax in axes.flat:
        legend.update(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    fig.legend(legend.values(), legend.keys(), loc="upper center", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.2 * nrows)))
    return fig


# --- Evaluations -------------------------------------------------------------------------


def resolve_eval_dir(path: str | Path) -> Path:
    """An evaluation directory (holding ``per_image.csv``) itself, or the newest one under a run
    directory's ``eval/``."""
    path = Path(path).expanduser()
    if (path / "per_image.csv").is_file():
        return path
    found = sorted(
        RunLayout(path).evaluations.glob("*/per_image.csv"), key=lambda p: p.stat().st_mtime
    )
    if not found:
        raise FileNotFoundError(
            f"{path}: no per_image.csv in it nor in {path / 'eval'}/*/; "
            "run scripts/evaluate.py on the run first"
        )
    return found[-1].parent


def load_per_image(eval_dir: str | Path) -> pd.DataFrame:
    """``per_image.csv`` of an evaluation (or its path) as a DataFrame; raises ``ValueError``
    naming the file and the missing columns when it does not follow :data:`PER_IMAGE_COLUMNS`."""
    path = Path(eval_dir)
    path = path / "per_image.csv" if path.is_dir() else path
    frame = pd.read_csv(path, dtype={"name": str, "source": str})
    missing = [c for c in PER_IMAGE_COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(
            f"{path}: missing columns {missing}; expected {list(PER_IMAGE_COLUMNS)} "
            f"(found {list(frame.columns)})"
        )
    return frame


def load_eval_metrics(eval_dir: str | Path) -> dict[str, Any]:
    """An evaluation's ``metrics.json`` ({} when absent)."""
    return _read_json(Path(eval_dir) / "metrics.json")


def eval_table(metrics: dict[str, Any]) -> pd.DataFrame:
    """``metrics.json`` of an evaluation as a table: one row per source, then ``all``."""
    rows = {**metrics.get("per_source", {}), "all": metrics.get("overall", {})}
    return pd.DataFrame.from_dict(rows, orient="index")


def worst_images(frame: pd.DataFrame, k: int = 10, by: str = "iou") -> pd.DataFrame:
    """The ``k`` rows with the lowest ``by``, ties by pixel accuracy, as the evaluation's gallery
    ranks them (NaN, e.g. the IoU of an image with no person in truth or prediction, last)."""
    if by not in frame.columns:
        raise KeyError(f"no column {by!r}; columns: {list(frame.columns)}")
    keys = [by] if by == "pixel_acc" else [by, "pixel_acc"]
    return frame.sort_values(keys, na_position="last", kind="stable").head(k)


def gallery(eval_dir: str | Path) -> list[Path]:
    """The worst-case images the evaluation saved (``worst/NN_<source>_<name>.png``), in order."""
    return sorted((Path(eval_dir) / "worst").glob("*.png"))


def per_source_summary(frame: pd.DataFrame, target: float = TARGET_PIXEL_ACC) -> pd.DataFrame:
    """Per source and ``all``: images, pooled pixel accuracy and person IoU (pixel counts summed
    over images), mean per-image IoU, pixel accuracy and boundary F (``mean_bf_2``,
    ``mean_bf_5``: means of the per-image scores, in which an image without a person in truth
    nor prediction scores 1; ``metrics.json``'s ``bf_2`` pools the boundary counts instead), the
    fraction of images under ``target`` and whether the pooled pixel accuracy meets it."""
    groups = [*frame.groupby("source"), ("all", frame)]
    rows = {}
    for name, g in groups:
        union = (g["tp"] + g["fp"] + g["fn"]).sum()
        acc = g["correct"].sum() / g["pixels"].sum()
        rows[name] = {
            "images": len(g),
            "pixel_acc": acc,
            "iou": g["tp"].sum() / union if union else float("nan"),
            "mean_iou": g["iou"].mean(),
            "mean_pixel_acc": g["pixel_acc"].mean(),
            "mean_bf_2": g["bf_2"].mean(),
            "mean_bf_5": g["bf_5"].mean(),
            "below_target": (g["pixel_acc"] < target).mean(),
            "pass": meets_target(acc, target),
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def iou_by_person_fraction(
    frame: pd.DataFrame, bins: Sequence[float] = (0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
) -> pd.DataFrame:
    """Per-image IoU and pixel accuracy by bins of person size (fraction of the image)."""
    binned = pd.cut(frame["person_fraction"], list(bins), include_lowest=True)
    grouped = frame.groupby(binned, observed=False)
    return pd.DataFrame(
        {
            "images": grouped.size(),
            "mean_iou": grouped["iou"].mean(),
            "median_iou": grouped["iou"].median(),
            "mean_pixel_acc": grouped["pixel_acc"].mean(),
        }
    )


def _scatter_by_source(ax: plt.Axes, frame: pd.DataFrame, x: str, y: str) -> None:
    for name, g in frame.groupby("source"):
        ax.scatter(g[x], g[y], s=12, alpha=0.6, label=name)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.grid(alpha=0.3)


def plot_iou_vs_person_fraction(frame: pd.DataFrame, binned: pd.DataFrame) -> plt.Figure:
    """Per-image IoU against person fraction (one colour per source), and the binned means."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    _scatter_by_source(left, frame, "person_fraction", "iou")
    left.legend()
    left.set_title("per image")
    x = range(len(binned))  # positions, not categories: empty bins keep their place
    right.bar(x, binned["mean_iou"].fillna(0), color="tab:blue")
    right.set_xticks(x, [str(b) for b in binned.index])
    right.set_xlabel("person fraction")
    right.set_ylabel("mean IoU")
    right.set_ylim(0, 1)
    right.set_title("binned (labels: images per bin)")
    for i, n in zip(x, binned["images"], strict=True):
        right.annotate(str(n), (i, 0), ha="center", va="bottom")
    right.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    return fig


def plot_boundary_vs_iou(frame: pd.DataFrame) -> plt.Figure:
    """Boundary F at 2 and 5 pixels against region IoU, per image."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, column in zip(axes, ("bf_2", "bf_5"), strict=True):
        _scatter_by_source(ax, frame, "iou", column)
        ax.plot([0, 1], [0, 1], color="grey", linewidth=1, linestyle=":")
    axes[0].legend()
    fig.tight_layout()
    return fig


def plot_gallery(paths: Sequence[Path], ncols: int = 2) -> plt.Figure | None:
    """The given PNGs in a grid, titled by file name; None when there are none."""
    if not paths:
        return None
    ncols = min(ncols, len(paths))
    nrows = -(-len(paths) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(8 * ncols, 3 * nrows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, path in zip(axes.flat, paths, strict=False):
        ax.imshow(plt.imread(path))
        ax.set_title(path.name, fontsize=8)
    fig.tight_layout()
    return fig
