"""The run directory shared by all ranks, and what is saved in it at start.

Layout: ``config.yaml`` (resolved), ``run_info.json`` (git commit, command, world size),
``splits/`` (the id list of every split), ``checkpoints/``, ``tb/`` (TensorBoard),
``metrics.jsonl`` (one line per logged step), ``metrics.json`` (final), and Hydra's ``train.log``.

One run per folder: rank 0 holds ``.lock`` for the whole run (a second run into the folder stops
at once, naming the holder), and a folder that already holds a run is only continued
(``trainer.resume``) or, when asked (``trainer.overwrite=true``), emptied of the run's files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from seg import distributed as du
from seg.config import Config, config_to_dict
from seg.errors import UserError
from seg.fileio import write_json, write_text
from seg.locks import LockHeld, file_lock
from seg.runs import CHECKPOINTS, RunLayout

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]


class RunDirError(UserError, RuntimeError):
    """The run folder is in use, or holds a run that this one would overwrite."""


def default_run_dir() -> Path:
    """Hydra's output directory under ``@hydra.main``, else ``outputs/<date>/<time>``."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path("outputs") / time.strftime("%Y-%m-%d") / time.strftime("%H-%M-%S")


def decide_run_dir(requested: str | None) -> tuple[Path, bool]:
    """Rank 0 picks the run directory (``trainer.run_dir`` or :func:`default_run_dir`) and
    creates it; every rank gets the same absolute path, and whether this call created it."""
    found = None
    if du.is_main_process():
        path = Path(requested) if requested else default_run_dir()
        path = path.expanduser().absolute()
        created = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        found = (str(path), created)
    path, created = du.broadcast_object(found)
    return Path(path), created


def remove_if_unused(run_dir: Path) -> None:
    """Remove a run folder this run created when it failed before writing anything of a run
    (a config error, a busy GPU): only its lock and log, never a file of a run
    (``RunLayout.owned``)."""
    if not du.is_main_process() or run_files(run_dir):
        return
    if {p.name for p in run_dir.iterdir()} <= {".lock", "train.log"}:
        shutil.rmtree(run_dir, ignore_errors=True)


def run_files(run_dir: Path) -> list[str]:
    """The names of the run's own files (``RunLayout.owned``) that ``run_dir`` holds (an empty
    folder counts as absent)."""
    found = []
    for path in RunLayout(run_dir).owned():
        if path.is_file() or (path.is_dir() and any(path.iterdir())):
            found.append(path.name)
    return found


def _raise_on_every_rank(error: str | None) -> None:
    """Rank 0 decided; every rank raises the same :class:`RunDirError` (or none)."""
    error = du.broadcast_object(error)
    if error:
        raise RunDirError(error)


@contextlib.contextmanager
def lock_run_dir(run_dir: Path) -> Iterator[None]:
    """Rank 0 holds ``run_dir/.lock`` for the ``with`` block; if another process holds it, every
    rank raises :class:`RunDirError` naming that process."""
    with contextlib.ExitStack() as stack:
        error = None
        if du.is_main_process():
            try:
                stack.enter_context(file_lock(run_dir / ".lock", blocking=False))
            except LockHeld as err:
                error = (
                    f"run folder {run_dir} is in use by {err.holder}: wait for that run to "
                    "end, or choose another trainer.run_dir"
                )
        _raise_on_every_rank(error)
        yield


def claim_run_dir(run_dir: Path, resuming: bool, overwrite: bool, auto: bool = False) -> None:
    """Refuse to start a new run in a folder that holds one, unless it is resumed or
    ``overwrite`` (then the previous run's files are removed, and only those). A restarted job
    (torchrun ``--max-restarts``) owns its folder. ``auto`` (``trainer.resume=auto``) that
    found no checkpoint starts afresh in a folder of a run stopped before its first checkpoint
    (its logs and splits are replaced); a folder with checkpoints never gets here."""
    error = None
    found = run_files(run_dir) if du.is_main_process() and not resuming else []
    fresh = auto and CHECKPOINTS not in found
    if found and (overwrite or fresh or du.restart_count() > 0):
        if overwrite:
            why = "trainer.overwrite=true"
        elif fresh:
            why = "trainer.resume=auto found no checkpoint (a run stopped before its first one)"
        else:
            why = f"restart {du.restart_count()}"
        log.warning("%s: removing %s from %s", why, ", ".join(found), run_dir)
        for name in found:
            path = run_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
    elif found:
        error = (
            f"run folder {run_dir} already holds a run ({', '.join(found)}) and this one would "
            "overwrite it: continue it with trainer.resume=auto, choose another trainer.run_dir, "
            "or replace it with trainer.overwrite=true"
        )
    _raise_on_every_rank(error)


def git_commit(repo: Path = REPO_ROOT) -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of the repository the code runs from."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=repo, capture_output=True, text=True, timeout=20, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def write_run_files(run_dir: Path, cfg: Config, extra: dict[str, Any]) -> None:
    """``config.yaml`` and ``run_info.json`` (rank 0 only; call once the run is set up)."""
    write_text(RunLayout(run_dir).config, OmegaConf.to_yaml(OmegaConf.create(config_to_dict(cfg))))
    info = {
        "git": git_commit(),
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "host": platform.node(),
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra,
    }
    write_json(RunLayout(run_dir).info, info)
