"""Starting replicas: ``trainer.devices=N|auto`` through PyTorch's elastic launcher API (what
torchrun runs), and the small adjustments a torchrun-started ``@hydra.main`` needs.

- ``python scripts/train.py trainer.devices=2``: :func:`launch` starts 2 workers on this node
  with ``torch.distributed.launcher.api.elastic_launch`` (c10d rendezvous on a free local
  port, as ``torchrun --standalone``), each running ``train`` with the same run directory,
  restarting all of them up to ``trainer.max_restarts`` times after a failure.
- ``torchrun ... scripts/train.py``: every rank runs ``@hydra.main``. :func:`hydra_overrides`
  keeps ranks other than 0 from creating Hydra output directories (rank 0 broadcasts its own),
  and after a restart points rank 0 at the previous attempt's directory, so that the restarted
  job resumes from its ``last.pt``.
"""

from __future__ import annotations

import getpass
import logging
import os
import socket
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from seg import distributed as du
from seg.config import Config, config_to_dict, to_config
from seg.engine.run_dir import default_run_dir
from seg.fileio import write_text

log = logging.getLogger(__name__)


def replicas(devices: str) -> int:
    """``trainer.devices`` -> replicas to start on this node: N, or ``auto`` = one per visible
    GPU (1 on a machine without GPUs)."""
    if str(devices) == "auto":
        return max(torch.cuda.device_count(), 1)
    return int(devices)


def needs_launch(devices: str) -> bool:
    """Whether this process must start the replicas itself (nobody else started them)."""
    started = du.launched_by_elastic() or "WORLD_SIZE" in os.environ
    if started or os.environ.get("SUBMITIT_EXECUTOR") in ("slurm", "local"):
        if replicas(devices) > 1:
            log.info("trainer.devices=%s is ignored: the launcher started the replicas", devices)
        return False
    return replicas(devices) > 1


def launch(cfg: Config, train: Callable[[Config], dict[str, Any]]) -> dict[str, Any]:
    """Run ``train(cfg)`` in ``trainer.devices`` local worker processes; rank 0's result.

    ``train`` (``seg.engine.train.train``, passed in so that the two modules do not import each
    other) travels to the spawned workers by its qualified name."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    nproc = replicas(cfg.trainer.devices)
    run_dir = Path(cfg.trainer.run_dir or default_run_dir()).expanduser().absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg.trainer.run_dir = str(run_dir)
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",  # a free port, as torchrun --standalone
        max_restarts=cfg.trainer.max_restarts,
        monitor_interval=0.5,
        start_method="spawn",
    )
    log.info(
        "starting %d replicas with torch elastic; run directory %s", nproc, cfg.trainer.run_dir
    )
    results = elastic_launch(config, _worker)(config_to_dict(cfg), train)
    return results[0]


def _worker(cfg_dict: dict[str, Any], train: Callable[[Config], dict[str, Any]]) -> dict[str, Any]:
    """One replica started by :func:`launch` (a fresh interpreter: set up logging first)."""
    rank = int(os.environ.get("RANK", 0))
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if rank == 0:
        handlers.append(logging.FileHandler(Path(cfg_dict["trainer"]["run_dir"]) / "train.log"))
    logging.basicConfig(
        level=logging.INFO,
        format=f"[%(asctime)s][rank {rank}][%(name)s][%(levelname)s] - %(message)s",
        handlers=handlers,
    )
    return train(to_config(cfg_dict))


def _pointer_file() -> Path:
    """Where rank 0 notes its run directory for later attempts of the same torchrun job: keyed
    by the agent process (the workers' parent, alive across restarts) and the run id."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    folder = Path(tempfile.gettempdir()) / f"seg-run-dirs-{getpass.getuser()}"
    return folder / f"{socket.gethostname()}-{os.getppid()}-{run_id}.txt"


def remember_run_dir(run_dir: Path) -> None:
    """Called by rank 0 of an elastic job once it has decided the run directory."""
    if not du.launched_by_elastic():
        return
    pointer = _pointer_file()
    pointer.parent.mkdir(parents=True, exist_ok=True)
    write_text(pointer, str(run_dir))  # other ranks read it: whole or absent


def hydra_overrides(argv: list[str] | None = None) -> list[str]:
    """Overrides to append to ``sys.argv`` before ``@hydra.main`` runs under torchrun.

    Ranks other than 0 write nothing (no output directory; they log to stdout).
    After a restart (``TORCHELASTIC_RESTART_COUNT`` > 0), rank 0 reuses the directory of the
    first attempt unless ``hydra.run.dir`` was given. Outside torchrun: none.
    """
    argv = sys.argv[1:] if argv is None else argv
    if not du.launched_by_elastic():
        return []
    if int(os.environ.get("RANK", 0)) != 0:
        return ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout"]
    pointer = _pointer_file()
    given = any(a.startswith("hydra.run.dir=") for a in argv)
    if du.restart_count() > 0 and not given and pointer.is_file():
        previous = pointer.read_text().strip()
        log.info("restart %d: continuing in %s", du.restart_count(), previous)
        return [f"hydra.run.dir='{previous}'"]
    return []
