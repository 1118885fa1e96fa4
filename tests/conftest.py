"""Shared fixtures: where the real datasets are, and small subsets of them.

``shared_datasets`` skips a test where the real datasets are missing: for tests of facts about
them. ``vikram_pairs`` never skips: the real vikram_human_seg folder where it exists, else drawn
pairs of the same names, sizes and layout (``tests/synthetic.py``), so that the core suite
(loading, training, resuming, evaluating, predicting, exporting) runs on any machine.

What is costly is built once per session and shared read-only: a real 2-step training run
(``tiny_run``), a random tiny dual-column model (``tiny_model``) and its checked ONNX export
(``exported_tiny``). A test that writes beside them takes a copy (``tiny_checkpoint``). The run
and the export (a dynamo export: half a minute each) are built once for all the pytest-xdist
workers of a session (``built_once``), not once per worker.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from training_utils import (
    calibrated_model,
    load_script,
    make_folder_subset,
    tiny_config,
    tiny_overrides,
)

from seg.config import Config
from seg.locks import file_lock

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = Path(os.environ.get("SEG_SHARED_DATASETS", REPO.parent / "shared" / "datasets"))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``-n N``) each worker takes its share of the cores for torch's
    intra-op threads: N workers of all the cores each would oversubscribe them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        torch.set_num_threads(max(1, torch.get_num_threads() // workers))


# Built once per session for all workers (``built_once``); under pytest-xdist worker gw<k> builds
# the k-th first thing, so that the builds run side by side and no test waits on both in turn.
SHARED_BUILDS = ("exported_tiny", "tiny_run")
NEEDED_BUILDS = pytest.StashKey[set]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Which shared builds the tests to run need (none for a run of a few fast modules)."""
    used = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    session.config.stash[NEEDED_BUILDS] = used & set(SHARED_BUILDS)


@pytest.fixture(scope="session", autouse=True)
def shared_builds_first(request: pytest.FixtureRequest) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") else len(SHARED_BUILDS)
    if index < len(SHARED_BUILDS):
        name = SHARED_BUILDS[index]
        if name in request.config.stash.get(NEEDED_BUILDS, set()):
            request.getfixturevalue(name)


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


@pytest.fixture
def data_root(vikram_pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A few vikram pairs as a ``data=folder`` root (train and val splits), with SEG_DATA_DIR
    unset so that ``data.root`` is the one used."""
    monkeypatch.delenv("SEG_DATA_DIR", raising=False)
    return make_folder_subset(vikram_pairs, tmp_path / "data")


@contextlib.contextmanager
def built_once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """``(folder, build)``: a folder of this test session shared by its pytest-xdist workers,
    and whether the caller must build into it (the first to come; the others wait on a file
    lock and find it built). A build that raised is cleared and redone by the next caller."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's popen-gwN
    folder, done = base / name, base / f"{name}.built"
    with file_lock(base / f"{name}.lock"):
        if done.is_file():
            yield folder, False
            return
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        yield folder, True
        done.touch()


@pytest.fixture(scope="session")
def tiny_run(vikram_pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of a real 2-step run (single-column net, 64x64 crops, vikram pairs): read only
    (copy it to write into it); its checkpoint ``checkpoints/last.pt`` has its ONNX export in
    the cache beside it, so a copy of the folder predicts through ONNX Runtime at once."""
    from seg.checkpoint import load_model_from_checkpoint
    from seg.config import compose_config
    from seg.engine.train import train
    from seg.inference.cache import cached_export

    with built_once(tmp_path_factory, "tiny_run") as (root, build):
        if build:
            data = make_folder_subset(vikram_pairs, root / "data")
            with pytest.MonkeyPatch.context() as mp:
                mp.delenv("SEG_DATA_DIR", raising=False)
                train(compose_config([*tiny_overrides(data, root / "run"), "trainer.max_steps=2"]))
            last = root / "run" / "checkpoints" / "last.pt"
            cached_export(last, *load_model_from_checkpoint(last, device="cpu"))
    return root / "run"


TINY_PHOTOS = ("1.jpg", "3.jpg", "56.jpg")  # of Training_Images: landscape, portrait, grayscale


@pytest.fixture(scope="session")
def tiny_photos(vikram_pairs: Path) -> list[np.ndarray]:
    """Three real photos of different shapes (RGB arrays; read only)."""
    from seg.data.io import read_image

    return [read_image(vikram_pairs / "Training_Images" / name) for name in TINY_PHOTOS]


@pytest.fixture(scope="session")
def tiny_model(tiny_photos: list[np.ndarray]) -> tuple[nn.Module, Config]:
    """A random dual-column net of a few channels (``tiny_config``) whose BatchNorm statistics
    come from ``tiny_photos``, so that its masks hold both classes; in eval mode, read only."""
    cfg = tiny_config()
    return calibrated_model(cfg, tiny_photos), cfg


# scripts/export.py's verification: real photos of both orientations and a grayscale one, at
# the eval size's canvas and an odd larger size, in batches of 1 and 3 (test_export.py).
EXPORT_PHOTOS = ("1.jpg", "22.jpg", "3.jpg", "56.jpg")  # of Training_Images
EXPORT_ARGS = ["sizes=[[256,192],[321,241]]", "batch_sizes=[1,3]"]


@pytest.fixture(scope="session")
def exported_tiny(
    tiny_model: tuple[nn.Module, Config], vikram_pairs: Path, tmp_path_factory
) -> Path:
    """``run/checkpoints/best.pt`` of ``tiny_model``, exported by ``scripts/export.py`` (checked
    against PyTorch on real photos; its JSON report is ``run/export_report.json``) to the name
    the ONNX Runtime backend's cache gives it, so that every use of the checkpoint is a cache
    hit. Read only: copy it with ``tiny_checkpoint``."""
    from seg.checkpoint import save_checkpoint
    from seg.config import config_to_dict
    from seg.inference.cache import export_key

    model, cfg = tiny_model
    with built_once(tmp_path_factory, "exported") as (root, build):
        path = root / "run" / "checkpoints" / "best.pt"
        if build:
            path.parent.mkdir(parents=True)
            save_checkpoint({"model": model.state_dict(), "config": config_to_dict(cfg)}, path)
            photos = root / "photos"
            photos.mkdir()
            for name in EXPORT_PHOTOS:
                shutil.copy(vikram_pairs / "Training_Images" / name, photos)
            out = path.parent / f"best.{export_key(path)}.onnx"
            args = [f"checkpoint={path}", f"out={out}", f"images={photos}", *EXPORT_ARGS]
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                assert load_script("export").main(args) == 0
            (root / "run" / "export_report.json").write_text(printed.getvalue())
    return path


@pytest.fixture
def tiny_checkpoint(exported_tiny: Path, tmp_path: Path) -> Path:
    """A writable copy of ``exported_tiny``'s checkpoint folder (best.pt and its export: a cache
    hit, as the cache key is the checkpoint's content)."""
    folder = tmp_path / "run" / "checkpoints"
    shutil.copytree(exported_tiny.parent, folder)
    return folder / exported_tiny.name


@pytest.fixture
def fast_export(exported_tiny: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``export_onnx`` writes a copy of ``exported_tiny``'s export (the dynamo export of the same
    weights) instead of exporting again: for tests of what happens around an export of
    ``tiny_model``'s checkpoint (caching, temporary files, checks), not of the export itself."""
    from seg.inference import graph

    (export,) = exported_tiny.parent.glob("*.onnx")

    def copy_export(model: nn.Module, path: Path, *args: object, **kwargs: object) -> Path:
        shutil.copyfile(export, path)
        return Path(path)

    monkeypatch.setattr(graph, "export_onnx", copy_export)
