"""Shared fixtures: where the real datasets are, and small real subsets of them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = Path(os.environ.get("SEG_SHARED_DATASETS", REPO.parent / "shared" / "datasets"))


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The read-only copy of the three real datasets beside the repository."""
    if not (SHARED_DATASETS / "README.md").is_file():
        pytest.skip(f"real datasets not found at {SHARED_DATASETS} (set SEG_SHARED_DATASETS)")
    return SHARED_DATASETS


@pytest.fixture
def data_env(shared_datasets: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point SEG_DATA_DIR at the shared datasets, as CI does, and forbid downloads."""
    monkeypatch.setenv("SEG_DATA_DIR", str(shared_datasets))
    return shared_datasets


@pytest.fixture
def vikram_subset(shared_datasets: Path, tmp_path: Path) -> Path:
    """A copy of a few real vikram_human_seg pairs in the published layout (writable)."""
    src = shared_datasets / "vikram_human_seg"
    dst = tmp_path / "vikram_human_seg"
    for folder in ("Training_Images", "Ground_Truth"):
        (dst / folder).mkdir(parents=True)
    for stem in ("1", "2", "3", "10", "11"):
        shutil.copy(src / "Training_Images" / f"{stem}.jpg", dst / "Training_Images")
        shutil.copy(src / "Ground_Truth" / f"{stem}.png", dst / "Ground_Truth")
    return dst
