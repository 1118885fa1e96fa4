"""Shared fixtures: where the real datasets are, and small subsets of them.

``shared_datasets`` skips a test where the real datasets are missing: for tests of facts about
them. ``vikram_pairs`` never skips: the real vikram_human_seg folder where it exists, else drawn
pairs of the same names, sizes and layout (``tests/synthetic.py``), so that the core suite
(loading, training, resuming, evaluating, predicting, exporting) runs on any machine.
"""

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
    if not (SHARED_DATASETS / "README.md").is_file() or os.environ.get("SEG_TEST_SYNTHETIC"):
        pytest.skip(f"real datasets not found at {SHARED_DATASETS} (set SEG_SHARED_DATASETS)")
    return SHARED_DATASETS


@pytest.fixture
def data_env(shared_datasets: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point SEG_DATA_DIR at the shared datasets, as CI does, and forbid downloads."""
    monkeypatch.setenv("SEG_DATA_DIR", str(shared_datasets))
    return shared_datasets


@pytest.fixture(scope="session")
def vikram_pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A vikram_human_seg folder (read-only use) holding at least the pairs the tests name:
    the real one beside the repository, else drawn stand-ins (``SEG_TEST_SYNTHETIC=1`` forces
    those, to run the suite as a machine without the datasets does)."""
    real = SHARED_DATASETS / "vikram_human_seg"
    if (SHARED_DATASETS / "README.md").is_file() and not os.environ.get("SEG_TEST_SYNTHETIC"):
        return real
    from synthetic import write_vikram_like

    return write_vikram_like(tmp_path_factory.mktemp("synthetic") / "vikram_human_seg")


@pytest.fixture
def vikram_subset(vikram_pairs: Path, tmp_path: Path) -> Path:
    """A copy of a few vikram_human_seg pairs in the published layout (writable)."""
    src = vikram_pairs
    dst = tmp_path / "vikram_human_seg"
    for folder in ("Training_Images", "Ground_Truth"):
        (dst / folder).mkdir(parents=True)
    for stem in ("1", "2", "3", "10", "11"):
        shutil.copy(src / "Training_Images" / f"{stem}.jpg", dst / "Training_Images")
        shutil.copy(src / "Ground_Truth" / f"{stem}.png", dst / "Ground_Truth")
    return dst
