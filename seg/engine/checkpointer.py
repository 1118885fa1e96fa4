"""Training's checkpoints: ``last`` / ``best`` / keep-N, RNG states, and which checkpoint a
run resumes from (and whether its config allows it). The file format, reading and writing one,
and rebuilding its model are ``seg.checkpoint``'s.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seg import distributed as du
from seg.checkpoint import (
    WEIGHTS_SUFFIX,
    CheckpointError,
    checkpoint_file,
    load_checkpoint,
    save_checkpoint,
)
from seg.config import Config, flatten_config, to_config
from seg.engine.state import STATE_KEYS
from seg.fileio import link_or_copy
from seg.runs import LAST, RunLayout

log = logging.getLogger(__name__)


class Checkpointer:
    """Writes ``last.pt`` and, as links to it, ``best.pt`` and ``step_XXXXXXXX.pt`` (the newest
    ``keep_last``) into ``run``'s ``checkpoints/``. Built with ``run=None`` on ranks other than
    0: there it writes nothing.
    """

    def __init__(self, run: RunLayout | None, keep_last: int = 3) -> None:
        self.run = run
        self.keep_last = keep_last
        if run is not None:
            run.checkpoints.mkdir(parents=True, exist_ok=True)

    def save(self, state: dict[str, Any], step: int, is_best: bool = False) -> None:
        run = self.run
        if run is None:
            return
        last = run.last
        save_checkpoint(state, last)
        if is_best:
            link_or_copy(last, run.best)
        if self.keep_last > 0:
            link_or_copy(last, run.step_checkpoint(step))
            for old in sorted(run.checkpoints.glob("step_*.pt"))[: -self.keep_last]:
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


def find_resume_checkpoint(spec: str | None, run_dir: Path) -> Path | None:
    """``trainer.resume`` -> the checkpoint to resume from, or None; rank 0 decides, every rank
    gets the same answer (a shared file system is assumed).

    ``auto``: the newest readable checkpoint of ``run_dir/checkpoints`` (``last.pt``, else the
    highest ``step_*.pt``); none there: a new run; only unreadable ones: an error listing them.
    A path: that checkpoint, or a run directory's ``checkpoints/last.pt``. A restarted job
    (torchrun ``--max-restarts``, SLURM requeue) continues from its own ``last.pt`` whatever
    was given, as with ``auto``.
    """
    found: tuple[str | None, str | None] = (None, None)  # (path, error)
    if du.is_main_process():
        run = RunLayout(run_dir)
        if du.restart_count() > 0 and run.last.is_file():  # a restart continues its own run
            found = (str(run.last), None)
        elif spec == "auto" or (spec is None and du.restart_count() > 0):
            found = _newest_readable(run.checkpoints)
        elif spec:
            try:
                path = checkpoint_file(spec, LAST)
                error = None if path.is_file() else f"{path} does not exist"
                if path.suffix == WEIGHTS_SUFFIX:
                    error = (
                        f"{path} holds a model's weights without its training state (no "
                        "optimiser, schedule or step), so there is no run to continue: resume "
                        "takes a last.pt or a run folder"
                    )
            except CheckpointError as err:
                error = str(err)
            found = (None, f"trainer.resume={spec}: {error}") if error else (str(path), None)
    path, error = du.broadcast_object(found)
    if error:
        raise CheckpointError(error)
    return Path(path) if path else None


def _newest_readable(folder: Path) -> tuple[str | None, str | None]:
    """(path, None) of the newest checkpoint in ``folder`` that loads, (None, None) when there
    is none, (None, error) when every one is unreadable."""
    candidates = [folder / LAST, *sorted(folder.glob("step_*.pt"), reverse=True)]
    present = [c for c in candidates if c.is_file()]
    if not present:
        log.info("trainer.resume=auto: no checkpoint in %s, starting a new run", folder)
        return None, None
    for path in present:
        try:
            load_checkpoint(path, mmap=True)  # the resume loads it for real
        except CheckpointError as err:
            log.warning("trainer.resume=auto: skipping %s: %s", path.name, err)
            continue
        if path.name != LAST:
            log.warning("trainer.resume=auto: no readable last.pt, resuming %s", path.name)
        return str(path), None
    names = ", ".join(p.name for p in present)
    return None, (
        f"trainer.resume=auto: no checkpoint in {folder} can be read ({names}); move them away "
        "to start a new run there, or give trainer.resume=PATH"
    )


# What a checkpoint's state cannot follow into another setting: the weights' shapes (the model)
# and the optimiser's state (its kind). The model's initialisation and memory layout may change.
_FREE_MODEL_KEYS = ("model.pretrained", "model.channels_last")
# What a checkpoint needs to continue training from (besides "model" and "config").
RESUME_KEYS = ("optimizer", "scheduler", "scaler", "rng", *STATE_KEYS)


def check_resume_config(ckpt: dict[str, Any], cfg: Config, path: Path) -> None:
    """Compare the config stored in ``ckpt`` with this run's before any state is loaded.

    A change of the model or of the optimiser's kind raises :class:`CheckpointError` naming
    each key ("checkpoint used optim.name=sgd, this run uses adamw"); other changes are
    logged, with a reminder that the optimiser and the schedule continue from the checkpoint.
    A checkpoint without the training state (a weights-only file) raises as well.
    """
    missing = [k for k in RESUME_KEYS if k not in ckpt]
    if missing:
        raise CheckpointError(
            f"cannot resume {path}: it holds model weights but not a training state (no "
            f"{', '.join(missing)}); resume from a run's checkpoints/last.pt, or start a new run"
        )
    try:
        saved = flatten_config(to_config(ckpt["config"]))
    except Exception as err:
        raise CheckpointError(f"the config stored in {path} is not valid here: {err}") from err
    current = flatten_config(cfg)  # incidental settings (paths, devices, logging) left out
    changed = [k for k in sorted(saved.keys() | current.keys()) if saved.get(k) != current.get(k)]
    fixed = [
        k
        for k in changed
        if (k.startswith("model.") or k == "optim.name")
        and not k.startswith(_FREE_MODEL_KEYS)
        and not k.endswith(".weights")
    ]
    if fixed:
        said = "; ".join(f"{k}={saved.get(k)}, this run uses {current.get(k)}" for k in fixed[:3])
        more = f" (and {len(fixed) - 3} more model keys)" if len(fixed) > 3 else ""
        raise CheckpointError(
            f"cannot resume {path}: {len(fixed)} setting(s) differ: checkpoint used {said}{more}. "
            "Resume with the checkpoint's settings, or start a new run"
        )
    soft = [k for k in changed if k not in fixed]
    if soft:
        log.warning(
            "resuming %s with changed settings (the optimiser's and the schedule's states "
            "continue from the checkpoint): %s",
            path,
            "; ".join(f"{k}: {saved.get(k)} -> {current.get(k)}" for k in soft),
        )
