"""The fine-tuning study's pieces (seg/study.py): its folders are data=folder folders with the
base run's val and test photos and nested training subsets, and its table comes from the runs'
files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seg.config import FolderConfig
from seg.data.folder import list_folder
from seg.errors import ConfigError, MissingFileError
from seg.study import (
    END,
    START,
    Row,
    best_epoch,
    build_folders,
    nested_subsets,
    row_figures,
    study_table,
    with_study_table,
)


def test_subsets_are_nested_seeded_and_sorted() -> None:
    ids = [str(i) for i in range(1, 21)]
    subsets = nested_subsets(ids, [5, 10, 0], seed=0)
    assert set(subsets[5]) < set(subsets[10]) < set(subsets[0]) == set(ids)
    assert subsets[10] == sorted(subsets[10], key=int)
    assert nested_subsets(ids, [5], seed=0)[5] == subsets[5]
    assert nested_subsets(ids, [5], seed=1)[5] != subsets[5]
    with pytest.raises(ConfigError, match="21 photos: the training split has 20"):
        nested_subsets(ids, [21], seed=0)


def _base_run(root: Path, splits: dict[str, list[str]]) -> Path:
    (root / "splits").mkdir(parents=True)
    for split, ids in splits.items():
        (root / "splits" / f"vikram_human_seg_{split}.txt").write_text("\n".join(ids) + "\n")
    return root


def test_folders_are_data_folder_splits_of_the_base_runs_ids(
    shared_datasets: Path, tmp_path: Path
) -> None:
    splits = {"train": ["1", "2", "3", "5", "6", "9"], "val": ["4", "10"], "test": ["7", "8"]}
    base = _base_run(tmp_path / "base", splits)
    folders = build_folders(base, "vikram_human_seg", shared_datasets, tmp_path / "d", [3, 0])
    assert sorted(folders) == [0, 3]
    small = list_folder(folders[3], FolderConfig(), 0.1, 0.1)
    whole = list_folder(folders[0], FolderConfig(), 0.1, 0.1)
    assert whole.splits == {s: [f"{s}/{i}" for i in ids] for s, ids in splits.items()}
    assert small.splits["val"] == whole.splits["val"]
    assert small.splits["test"] == whole.splits["test"]
    assert len(small.splits["train"]) == 3
    assert set(small.splits["train"]) < set(whole.splits["train"])
    ref = whole.refs["test/7"]
    assert (
        ref.image.resolve()
        == (shared_datasets / "vikram_human_seg/Training_Images/7.jpg").resolve()
    )
    assert ref.mask.resolve() == (shared_datasets / "vikram_human_seg/Ground_Truth/7.png").resolve()
    # built again (the study resumed): the same folders, no error on the existing links
    assert build_folders(base, "vikram_human_seg", shared_datasets, tmp_path / "d", [3]) == {
        3: folders[3]
    }


def test_folders_name_ids_the_dataset_lacks(shared_datasets: Path, tmp_path: Path) -> None:
    base = _base_run(tmp_path / "base", {"train": ["1", "99999"], "val": ["4"], "test": ["7"]})
    with pytest.raises(MissingFileError, match=r"1 ids of .*base/splits .* \(first: 99999\)"):
        build_folders(base, "vikram_human_seg", shared_datasets, tmp_path / "d", [0])
    with pytest.raises(MissingFileError, match=r"vikram_human_seg_train\.txt does not exist"):
        build_folders(tmp_path, "vikram_human_seg", shared_datasets, tmp_path / "d", [0])


def _write(path: Path, content: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def _finished_run(root: Path, val: list[float], dirty: bool = False) -> Path:
    """A run folder's files as training and evaluate.py write them: one validation per epoch
    of 4 steps, and the final validation again at the last step."""
    records = [{"step": s, "train/loss": 0.5} for s in range(1, 4 * len(val) + 1)]
    records += [{"step": 4 * (i + 1), "val/train_sources/iou_person": v} for i, v in enumerate(val)]
    records.append({"step": 4 * len(val), "val/train_sources/iou_person": val[-1]})
    root.mkdir(parents=True)
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    _write(
        root / "metrics.json",
        {"epoch": len(val), "step": 4 * len(val), "elapsed_s": 90.0,
         "best_key": "val/train_sources/iou_person"},
    )  # fmt: skip
    _write(root / "run_info.json", {"git": {"commit": "8505afb" + "0" * 33, "dirty": dirty}})
    _write(root / "eval/folder_test/metrics.json", {"overall": {
        "iou_person": 0.91234, "pixel_acc": 0.95678, "images": 58}})  # fmt: skip
    return root


def test_the_table_comes_from_the_runs_files(tmp_path: Path) -> None:
    run = _finished_run(tmp_path / "ft", [0.80, 0.86, 0.85], dirty=True)
    assert best_epoch(run, "val/train_sources/iou_person") == (2, 3)
    assert best_epoch(run, "val/other") is None
    figures = row_figures(Row("ft", 50, "base", 3), run, 50)
    assert figures["epochs"] == 3 and figures["steps"] == 12 and figures["minutes"] == 1.5
    assert figures["commit"] == "8505afb+dirty"
    base = row_figures(Row("base", 0, "base", 0), _finished_run(tmp_path / "base", [0.7]), 0)
    table = study_table([base, figures], "vikram_human_seg")
    lines = table.splitlines()
    assert lines[0].startswith("| run | vikram_human_seg training photos |")
    assert lines[2] == (
        f"| `{tmp_path / 'base'}` | 0 | the base alone | 0 | 0 (base: 2) | 91.23 | 95.68 "
        "| 8505afb |"
    )
    assert lines[3] == (
        f"| `{run}` | 50 | the base | 3 (2) | 1.5 | 91.23 | 95.68 | 8505afb+dirty |"
    )


def test_a_row_without_its_test_says_so(tmp_path: Path) -> None:
    run = _finished_run(tmp_path / "ft", [0.8])
    (run / "eval/folder_test/metrics.json").unlink()
    with pytest.raises(MissingFileError, match=r"folder_test/metrics\.json does not exist"):
        row_figures(Row("ft", 50, "base", 1), run, 50)


def test_the_table_goes_between_the_markers() -> None:
    doc = f"intro\n{START}\nold\n{END}\nafter\n"
    assert with_study_table(doc, "| new |", "doc.md") == f"intro\n{START}\n| new |\n{END}\nafter\n"
    with pytest.raises(ConfigError, match=r"doc\.md has no table markers"):
        with_study_table("no markers", "| new |", "doc.md")
    docs = (Path(__file__).parents[1] / "docs" / "training.md").read_text()
    assert START in docs and END in docs
