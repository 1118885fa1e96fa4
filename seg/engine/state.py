"""Training progress (saved in every checkpoint) and the fault injection of the crash tests."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from seg import distributed as du
from seg.checkpoint import LATER_STATE_KEYS

log = logging.getLogger(__name__)
STATE_KEYS = ("epoch", "step", "batch_in_epoch", "elapsed_s", "best", "target", "metrics")
# Added later: a checkpoint written before them gets them from seg.checkpoint.upgrade_checkpoint.
LATER_KEYS = tuple(LATER_STATE_KEYS)


@dataclass
class TrainState:
    """``epoch`` is the epoch in progress, of which ``batch_in_epoch`` forward passes are done;
    ``step`` counts optimiser steps. The fields of ``STATE_KEYS`` go into checkpoints."""

    epoch: int = 0
    step: int = 0
    batch_in_epoch: int = 0
    elapsed_s: float = 0.0  # training wall time, over all attempts
    best: float | None = None
    best_of: str | None = None  # what ``best`` is a value of: "<metric key> over <sources>"
    target: dict | None = None  # when val/pixel_acc first reached trainer.target_pixel_acc
    metrics: dict = field(default_factory=dict)  # the latest validation
    train_skipped: int = 0  # bad training pairs replaced (data.on_bad_sample=skip), all ranks
    pending_skipped: int = field(default=0, repr=False)  # this rank's, since the last validation
    clock: float = field(default_factory=time.perf_counter, repr=False)

    def tick(self) -> None:
        """Add the time since the last tick to ``elapsed_s``."""
        now = time.perf_counter()
        self.elapsed_s += now - self.clock
        self.clock = now

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in (*STATE_KEYS, *LATER_KEYS)}

    @classmethod
    def from_checkpoint(cls, ckpt: dict[str, Any], world_size: int) -> TrainState:
        state = cls(**{k: ckpt[k] for k in (*STATE_KEYS, *LATER_KEYS)})
        saved_world = len(ckpt["rng"])  # one entry per replica
        if saved_world != world_size:
            state.next_epoch_if_regrouped([f"replicas: {saved_world} -> {world_size}"])
        return state

    def choose_best_by(self, best_of: str) -> None:
        """Compare validations by ``best_of`` (:func:`seg.engine.evaluate.selection`) from now
        on; the saved best of another metric or other sources is no bar for it, so best.pt is
        then chosen afresh."""
        if self.best is not None and self.best_of not in (None, best_of):
            log.warning(
                "best.pt followed %s, now %s: it is chosen afresh from the next validation on",
                self.best_of,
                best_of,
            )
            self.best = None
        self.best_of = best_of

    def next_epoch_if_regrouped(self, changes: list[str]) -> None:
        """A position inside an epoch counts batches of the checkpoint's grouping (replicas,
        batch size, accumulation): with ``changes`` to it, continue at the next epoch."""
        if changes and self.batch_in_epoch:
            log.warning(
                "%s in the middle of epoch %d: continuing at epoch %d",
                ", ".join(changes),
                self.epoch,
                self.epoch + 1,
            )
            self.epoch, self.batch_in_epoch = self.epoch + 1, 0


def resume_changes(state: TrainState, saved: dict[str, Any], trainer: Any) -> None:
    """Adjust a resumed ``state`` to trainer settings changed since the checkpoint (``saved``:
    its ``trainer`` config): another ``batch_size`` or ``accumulate`` in the middle of an epoch
    continues at the next epoch (the position counts batches of the old size). (Another
    ``best_metric`` or other training sources: :meth:`TrainState.choose_best_by`.)"""
    state.next_epoch_if_regrouped(
        [
            f"trainer.{k}: {saved[k]} -> {getattr(trainer, k)}"
            for k in ("batch_size", "accumulate")
            if k in saved and saved[k] != getattr(trainer, k)
        ]
    )


FAULT_ENV = "SEG_TEST_FAULT"  # "STEP:RANK:exit|exception", crash-recovery tests only


class InjectedFault(RuntimeError):
    """The fault that ``SEG_TEST_FAULT=STEP:RANK:exception`` injects."""


@dataclass(frozen=True)
class Fault:
    """A crash that the crash-recovery tests inject through the environment (never a config
    key: no user run has one): after step ``step``'s checkpoint, on rank ``rank``, on the first
    attempt only. ``exit``: ``os._exit(1)``, the process dies at once as a crashed worker does;
    ``exception``: raise :class:`InjectedFault` (in-process tests)."""

    step: int
    rank: int = 0
    kind: str = "exit"

    @classmethod
    def from_env(cls) -> Fault | None:
        spec = os.environ.get(FAULT_ENV)
        if not spec:
            return None
        parts = spec.split(":")
        step, rank, kind = (parts + ["", "0", "exit"][len(parts) :])[:3]
        if len(parts) > 3 or kind not in ("exit", "exception") or not (step + rank).isdigit():
            raise ValueError(f"{FAULT_ENV}={spec!r}: expected STEP[:RANK[:exit|exception]]")
        return cls(int(step), int(rank), kind)

    def maybe_inject(self, step: int) -> None:
        if step != self.step or du.rank() != self.rank or du.restart_count() > 0:
            return
        message = f"{FAULT_ENV}: injected fault at step {step} on rank {du.rank()}"
        log.error(message)
        if self.kind == "exit":
            for handler in logging.getLogger().handlers:
                handler.flush()
            os._exit(1)  # die like a crashed worker: no exception, no clean-up
        raise InjectedFault(message)
