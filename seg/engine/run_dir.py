"""The run directory shared by all ranks, and what is saved in it at start.

Layout: ``config.yaml`` (resolved), ``run_info.json`` (git commit, command, world size),
``splits/`` (the id list of every split), ``checkpoints/``, ``tb/`` (TensorBoard),
``metrics.jsonl`` (one line per logged step), ``metrics.json`` (final), and Hydra's ``train.log``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from seg.config import Config
from seg.engine import distributed as du

REPO_ROOT = Path(__file__).resolve().parents[2]


def to_config(cfg: Config | DictConfig | dict) -> Config:
    """A typed, validated ``Config`` from a Hydra config, a plain dict (a checkpoint's) or itself.

    Range checks run here (the dataclasses' ``__post_init__``); errors name the key.
    """
    if isinstance(cfg, Config):
        return cfg
    merged = OmegaConf.merge(OmegaConf.structured(Config), cfg)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """The resolved config as plain dicts, lists and scalars (enums as strings)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True, enum_to_str=True)


def default_run_dir() -> Path:
    """Hydra's output directory under ``@hydra.main``, else ``outputs/<date>/<time>``."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path("outputs") / time.strftime("%Y-%m-%d") / time.strftime("%H-%M-%S")


def decide_run_dir(requested: str | None) -> Path:
    """Rank 0 picks the run directory (``trainer.run_dir`` or :func:`default_run_dir`) and
    creates it; every rank gets the same absolute path."""
    path = None
    if du.is_main_process():
        path = Path(requested) if requested else default_run_dir()
        path = path.expanduser().absolute()
        path.mkdir(parents=True, exist_ok=True)
        path = str(path)
    return Path(du.broadcast_object(path))


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
    OmegaConf.save(OmegaConf.create(config_to_dict(cfg)), run_dir / "config.yaml")
    info = {
        "git": git_commit(),
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "host": platform.node(),
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra,
    }
    write_json(run_dir / "run_info.json", info)


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (temporary file, then rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(tmp, path)
