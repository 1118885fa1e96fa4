"""Checkpoints: atomic writes, ``last`` / ``best`` / keep-N, RNG states, and loading a model back.

A checkpoint is a dict of tensors, numbers, strings, lists and dicts only (the resolved config
included), so ``torch.load(weights_only=True)`` reads it and it rebuilds its model on its own:
``{"model", "optimizer", "scheduler", "scaler", "epoch", "step", "batch_in_epoch",
"rng": [per rank], "config", "metrics", "best", "target", "elapsed_s"}``.
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from seg.config import Config
from seg.engine import distributed as du
from seg.engine.run_dir import to_config
from seg.models import build_model, num_columns

log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, damaged or not one of this project's."""


def save_atomic(obj: dict[str, Any], path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename it into place, so a crash
    mid-write never leaves a truncated ``path``."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint onto the CPU with ``weights_only=True``; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile) as err:
        raise CheckpointError(
            f"cannot read checkpoint {path} ({type(err).__name__}: {err}); the file is damaged, "
            "truncated or not a checkpoint of this project"
        ) from err
    if not isinstance(ckpt, dict) or "model" not in ckpt or "config" not in ckpt:
        raise CheckpointError(f"{path} is not a checkpoint of this project (no model/config)")
    return ckpt


def _link_or_copy(src: Path, dst: Path) -> None:
    """``dst`` becomes ``src``'s content, atomically; a hard link costs no space."""
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:  # no hard links on this file system
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


class Checkpointer:
    """Writes ``last.pt`` and, as links to it, ``best.pt`` and ``step_XXXXXXXX.pt`` (the newest
    ``keep_last``). Built with ``directory=None`` on ranks other than 0: there it writes nothing.
    """

    def __init__(self, directory: Path | None, keep_last: int = 3) -> None:
        self.directory = directory
        self.keep_last = keep_last
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    @property
    def last(self) -> Path | None:
        return None if self.directory is None else self.directory / "last.pt"

    def save(self, state: dict[str, Any], step: int, is_best: bool = False) -> None:
        if self.directory is None:
            return
        last = self.directory / "last.pt"
        save_atomic(state, last)
        if is_best:
            _link_or_copy(last, self.directory / "best.pt")
        if self.keep_last > 0:
            _link_or_copy(last, self.directory / f"step_{step:08d}.pt")
            for old in sorted(self.directory.glob("step_*.pt"))[: -self.keep_last]:
                old.unlink(missing_ok=True)
        log.info("saved checkpoint at step %d to %s%s", step, last, " (best)" if is_best else "")


def capture_rng(transforms: list[Any], cuda_devices: list[torch.device]) -> dict[str, Any]:
    """This process's random states: torch (CPU and the replica's GPUs), numpy, ``random`` and
    the albumentations pipelines loaded in this process (``num_workers=0``)."""
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": [torch.cuda.get_rng_state(d) for d in cuda_devices],
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": random.getstate(),
        "transforms": [
            {"numpy": t.random_generator.bit_generator.state, "python": t.py_random.getstate()}
            for t in transforms
        ],
    }


def restore_rng(
    state: dict[str, Any], transforms: list[Any], cuda_devices: list[torch.device]
) -> None:
    """Undo :func:`capture_rng` (same replica layout and pipelines)."""
    torch.set_rng_state(state["torch"])
    for device, s in zip(cuda_devices, state["cuda"], strict=False):
        torch.cuda.set_rng_state(s, device)
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    random.setstate(_tuples(state["python"]))
    for t, s in zip(transforms, state["transforms"], strict=True):
        t.random_generator.bit_generator.state = s["numpy"]
        t.py_random.setstate(_tuples(s["python"]))


def _tuples(x: Any) -> Any:
    """``random.setstate`` wants tuples where a round trip may have produced lists."""
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


def load_model_from_checkpoint(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[nn.Module, Config]:
    """Rebuild the model a checkpoint was trained with, every column on ``device``, in eval mode.

    Returns ``(model, cfg)``, ``cfg`` the typed config stored in the checkpoint. For
    evaluation, prediction and export; raises :class:`CheckpointError` naming the file.
    """
    ckpt = load_checkpoint(path)
    try:
        cfg = to_config(ckpt["config"])
    except Exception as err:
        raise CheckpointError(f"the config stored in {path} is not valid here: {err}") from err
    cfg.model.devices = [str(torch.device(device))] * num_columns(cfg.model)
    cfg.model.pretrained = False  # the weights come from the checkpoint
    model = build_model(cfg.model)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as err:
        raise CheckpointError(f"the weights in {path} do not fit its model config: {err}") from err
    return model.eval(), cfg


def find_resume_checkpoint(spec: str | None, run_dir: Path) -> Path | None:
    """``trainer.resume`` -> the checkpoint to resume from, or None; rank 0 decides, every rank
    gets the same answer (a shared file system is assumed).

    ``auto``: ``run_dir/checkpoints/last.pt`` if it exists. A path: that checkpoint, or a run
    directory's ``checkpoints/last.pt``. A restarted job (torchrun ``--max-restarts``, SLURM
    requeue) continues from its own ``last.pt`` whatever was given, as with ``auto``.
    """
    found: tuple[str | None, str | None] = (None, None)  # (path, error)
    if du.is_main_process():
        last = run_dir / "checkpoints" / "last.pt"
        if du.restart_count() > 0 and last.is_file():  # a restart continues its own run
            found = (str(last), None)
        elif spec == "auto" or (spec is None and du.restart_count() > 0):
            found = (str(last), None) if last.is_file() else (None, None)
            if found[0] is None:
                log.info("trainer.resume=auto: no checkpoint in %s, starting from scratch", run_dir)
        elif spec:
            path = Path(spec).expanduser()
            path = path / "checkpoints" / "last.pt" if path.is_dir() else path
            error = None if path.is_file() else f"trainer.resume={spec}: {path} does not exist"
            found = (None if error else str(path), error)
    path, error = du.broadcast_object(found)
    if error:
        raise CheckpointError(error)
    return Path(path) if path else None
