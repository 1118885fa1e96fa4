"""The analysis helpers of the notebooks (seg/analysis.py) on files written here: TensorBoard
events from SummaryWriter, metrics.jsonl / metrics.json / config.yaml, a per-image CSV."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from omegaconf import OmegaConf
from torch.utils.tensorboard import SummaryWriter

from seg import analysis
from seg.config import compose_config, config_to_dict
from seg.models import build_model


@pytest.fixture(autouse=True)
def _no_display() -> Iterator[None]:
    plt.switch_backend("Agg")  # figures are drawn off screen, and closed after each test
    yield
    plt.close("all")


def write_run(path: Path, columns: int, final: dict, lines: list[dict], tb: bool = True) -> Path:
    """A run directory as the engine writes it: config.yaml (a multi-column net of ``columns``
    columns), metrics.json, metrics.jsonl and (``tb``) the same scalars as TensorBoard events."""
    path.mkdir(parents=True)
    model = {"name": "multicolumn", "columns": [{"name": f"c{i}"} for i in range(columns)]}
    OmegaConf.save(OmegaConf.create({"model": model}), path / "config.yaml")
    (path / "metrics.json").write_text(json.dumps(final))
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if tb:
        with SummaryWriter(str(path / "tb")) as writer:
            for line in lines:
                for tag, value in line.items():
                    if tag != "step":
                        writer.add_scalar(tag, value, line["step"])
    return path


LINES = [
    {"step": 1, "train/loss": 1.0, "lr": 0.1, "perf/img_per_s": 5.0},
    {"step": 2, "train/loss": 0.5, "lr": 0.05, "perf/img_per_s": 40.0},
    {"step": 2, "val/pixel_acc": 0.75, "val/a/pixel_acc": 0.5, "val/b/pixel_acc": 1.0},
    {"step": 3, "train/loss": 0.25, "lr": 0.01, "perf/img_per_s": 20.0},
]
FINAL = {
    "step": 3,
    "elapsed_s": 12.5,
    "val/pixel_acc": 0.9,
    "val/iou_person": 0.8,
    "val/miou": 0.85,
    "val/a/pixel_acc": 0.95,
    "val/b/pixel_acc": 0.85,
    "confusion/all": [[1, 2], [3, 4]],
    "target_reached": {"epoch": 1.0, "step": 3, "wall_time_s": 11.0, "images_seen": 6},
}


# --- Training runs -----------------------------------------------------------------------


def test_scalars_from_event_files(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", 2, FINAL, LINES)
    long = analysis.load_scalars(run)
    assert set(long["tag"]) == {t for line in LINES for t in line if t != "step"}
    loss = long[long["tag"] == "train/loss"].sort_values("step")
    assert list(loss["step"]) == [1, 2, 3]
    assert loss["value"].tolist() == pytest.approx([1.0, 0.5, 0.25])
    wide = analysis.load_history(run)
    assert list(wide.index) == [1, 2, 3]
    assert wide.loc[2, "val/a/pixel_acc"] == pytest.approx(0.5)
    assert math.isnan(wide.loc[1, "val/pixel_acc"])  # validated at step 2 only


def test_points_purged_by_a_resumed_run_are_dropped(tmp_path: Path) -> None:
    tb = tmp_path / "run" / "tb"
    with SummaryWriter(str(tb)) as first:
        for step in range(1, 6):
            first.add_scalar("train/loss", float(step), step)
    time.sleep(1.1)  # the second event file must sort after the first (seconds in its name)
    with SummaryWriter(str(tb), purge_step=4) as resumed:  # what MetricLogger does at step 3
        for step in range(4, 7):
            resumed.add_scalar("train/loss", 10.0 * step, step)
    loss = analysis.load_history(tmp_path / "run")["train/loss"]
    assert loss.to_dict() == {1: 1.0, 2: 2.0, 3: 3.0, 4: 40.0, 5: 50.0, 6: 60.0}


def test_history_falls_back_to_jsonl(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", 1, FINAL, LINES, tb=False)
    wide = analysis.load_history(run)
    assert list(wide.index) == [1, 2, 3]
    assert wide.loc[2, "train/loss"] == 0.5 and wide.loc[2, "val/pixel_acc"] == 0.75
    with pytest.raises(FileNotFoundError, match=r"nothing.metrics\.jsonl: no such file"):
        analysis.load_jsonl(tmp_path / "nothing" / "metrics.jsonl")


def test_load_run_and_tables(tmp_path: Path) -> None:
    runs = [
        analysis.load_run(write_run(tmp_path / "x" / f"r{n}", n, FINAL, LINES)) for n in (1, 2, 3)
    ]
    assert [r.variant for r in runs] == ["single_column", "dual_channel", "multi_column"]
    assert runs[0].label == "x/r1"
    table = analysis.runs_table(runs)
    row = table.loc["x/r2"]
    assert row["variant"] == "dual_channel" and row["steps"] == 3
    assert row["target_step"] == 3 and row["target_wall_time_s"] == 11.0
    assert row["pixel_acc"] == 0.9 and row["miou"] == 0.85
    assert row["img_per_s"] == pytest.approx(30.0)  # median of 40 and 20: step 1 is warm-up
    per_source = analysis.per_source_table(runs)
    assert per_source.loc[("x/r3", "a"), "pixel_acc"] == 0.95
    assert per_source.loc[("x/r3", "b"), "pixel_acc"] == 0.85
    assert len(per_source) == 6 and math.isnan(per_source.loc[("x/r1", "a"), "miou"])


def test_load_run_names_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope is not a training run directory"):
        analysis.load_run(tmp_path / "nope")


def test_model_variant() -> None:
    assert analysis.model_variant({"model": {"name": "unet"}}) == "unet"
    cols = [{"name": n} for n in ("a", "b", "c", "d")]
    assert analysis.model_variant({"model": {"name": "multicolumn", "columns": cols}}) == (
        "multi_column"
    )


def test_model_summary_logged_or_rebuilt(tmp_path: Path) -> None:
    run = analysis.load_run(write_run(tmp_path / "run", 1, FINAL, LINES))
    run.info["model"] = {"params": 7, "flops": 11, "input_size": [1, 3, 8, 8]}
    assert analysis.model_summary(run) == run.info["model"]
    cfg = compose_config(["+exp=single_column", "aug.eval_size=[64,48]"])
    run.config, run.info = config_to_dict(cfg), {}
    assert analysis.model_summary(run, compute=False) is None
    summary = analysis.model_summary(run)
    assert summary["params"] == sum(p.numel() for p in build_model(cfg.model).parameters())
    assert summary["input_size"] == [1, 3, 64, 48] and summary["flops"] > 0
    table = analysis.runs_table([run], with_model=True)
    assert table.loc[run.label, "params_M"] == summary["params"] / 1e6


def test_match_tags_and_plot_curves(tmp_path: Path) -> None:
    run = analysis.load_run(write_run(tmp_path / "run", 2, FINAL, LINES))
    assert analysis.match_tags([run], ["train/*", "val/*/pixel_acc", "lr"]) == [
        "train/loss",
        "val/a/pixel_acc",
        "val/b/pixel_acc",
        "lr",
    ]
    tags = analysis.match_tags([run], ["val/*"])
    assert tags == ["val/a/pixel_acc", "val/b/pixel_acc", "val/pixel_acc"]
    fig = analysis.plot_curves([run], tags, ncols=2, target=0.88)
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == tags
    assert all(ax.lines[-1].get_ydata()[0] == 0.88 for ax in visible)  # the target line
    with pytest.raises(ValueError, match=r"no tags to plot; the runs log: lr, perf/img_per_s"):
        analysis.plot_curves([run], [])


# --- Evaluations -------------------------------------------------------------------------

ROWS = [  # name, source, pixels, correct, tp, fp, fn, pixel_acc, iou, person_fraction, bf2, bf5
    ("a1", "a", 100, 90, 40, 5, 5, 0.90, 0.80, 0.45, 0.7, 0.9),
    ("a2", "a", 100, 80, 10, 10, 10, 0.80, 1 / 3, 0.20, 0.3, 0.5),
    ("b1", "b", 200, 198, 0, 2, 0, 0.99, float("nan"), 0.00, float("nan"), float("nan")),
    ("b2", "b", 200, 100, 20, 50, 50, 0.50, 1 / 6, 0.35, 0.1, 0.2),
]


def write_per_image(directory: Path, rows: list[tuple] = ROWS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(
        rows,
        columns=[
            "name",
            "source",
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
        ],
    )
    frame.insert(2, "height", 10)
    frame.insert(3, "width", frame["pixels"] // 10)
    frame[list(analysis.PER_IMAGE_COLUMNS)].to_csv(directory / "per_image.csv", index=False)
    return directory


def test_per_image_csv_and_its_tables(tmp_path: Path) -> None:
    images = analysis.load_per_image(write_per_image(tmp_path / "eval"))
    assert list(images.columns) == list(analysis.PER_IMAGE_COLUMNS) and len(images) == 4
    assert list(analysis.worst_images(images, 3)["name"]) == ["b2", "a2", "a1"]
    assert list(analysis.worst_images(images, 4)["name"])[-1] == "b1"  # NaN IoU last
    assert list(analysis.worst_images(images, 1, by="pixel_acc")["name"]) == ["b2"]
    tied = images.assign(iou=[0.8, 0.2, float("nan"), 0.2])  # a2 and b2 tie: pixel acc decides
    assert list(analysis.worst_images(tied, 2)["name"]) == ["b2", "a2"]
    with pytest.raises(KeyError, match=r"no column 'dice'"):
        analysis.worst_images(images, by="dice")
    summary = analysis.per_source_summary(images, target=0.85)
    assert summary.loc["a", "pixel_acc"] == pytest.approx(170 / 200)
    assert summary.loc["a", "iou"] == pytest.approx(50 / 80)
    assert summary.loc["b", "iou"] == pytest.approx(20 / 122)
    assert summary.loc["all", "pixel_acc"] == pytest.approx(468 / 600)
    assert summary.loc["a", "mean_iou"] == pytest.approx((0.8 + 1 / 3) / 2)
    assert summary.loc["b", "mean_bf_5"] == pytest.approx(0.2)  # NaN left out of the mean
    assert summary.loc["b", "below_target"] == 0.5
    assert list(summary["pass"]) == [True, False, False]
    assert list(summary["images"]) == [2, 2, 4]
    binned = analysis.iou_by_person_fraction(images, bins=(0, 0.25, 0.5))
    assert list(binned["images"]) == [2, 2]
    assert binned["mean_iou"].iloc[1] == pytest.approx((0.8 + 1 / 6) / 2)
    assert binned["mean_iou"].iloc[0] == pytest.approx(1 / 3)  # b1 has no person: NaN IoU
    for fig in (
        analysis.plot_iou_vs_person_fraction(images, binned),
        analysis.plot_boundary_vs_iou(images),
    ):
        assert sum(len(ax.collections) for ax in fig.axes) >= 2  # a scatter per source


def test_per_image_csv_with_missing_columns_is_named(tmp_path: Path) -> None:
    (tmp_path / "per_image.csv").write_text("name,source,iou\nx,a,0.5\n")
    with pytest.raises(ValueError, match=r"per_image\.csv: missing columns \['height'"):
        analysis.load_per_image(tmp_path)


def test_eval_dir_from_a_run_dir_metrics_and_gallery(tmp_path: Path) -> None:
    run = tmp_path / "run"
    old = write_per_image(run / "eval" / "folder_val")
    new = write_per_image(run / "eval" / "folder_test")
    os.utime(old / "per_image.csv", (1, 1))  # the newest evaluation wins
    assert analysis.resolve_eval_dir(run) == new
    assert analysis.resolve_eval_dir(old) == old
    with pytest.raises(FileNotFoundError, match=r"no per_image\.csv .*scripts/evaluate\.py"):
        analysis.resolve_eval_dir(tmp_path / "empty")
    overall = {"pixel_acc": 0.9, "iou_person": 0.7, "images": 4}
    metrics = {"overall": overall, "per_source": {"a": {**overall, "images": 2}}}
    (new / "metrics.json").write_text(json.dumps(metrics))
    table = analysis.eval_table(analysis.load_eval_metrics(new))
    assert list(table.index) == ["a", "all"] and table.loc["a", "images"] == 2
    assert analysis.load_eval_metrics(old) == {}
    (new / "worst").mkdir()
    for name in ("01_b_b2.png", "00_a_a1.png"):
        plt.imsave(new / "worst" / name, [[0.0, 1.0], [1.0, 0.0]])
    paths = analysis.gallery(new)
    assert [p.name for p in paths] == ["00_a_a1.png", "01_b_b2.png"]
    fig = analysis.plot_gallery(paths, ncols=4)
    assert [ax.get_title() for ax in fig.axes if ax.images] == [p.name for p in paths]
    assert analysis.plot_gallery([]) is None


def test_a_leave_one_out_runs_training_sources_sum_is_no_source() -> None:
    final = {
        "val/iou_person": 0.8,
        "val/ccp/iou_person": 0.7,
        "val/vikram_human_seg/iou_person": 0.9,
        "val/train_sources/iou_person": 0.9,
    }
    assert analysis.sources(final) == ["ccp", "vikram_human_seg"]
