"""Training progress, saved in every checkpoint."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from seg.checkpoint import LATER_STATE_KEYS
from seg.evaluation.selection import Selection

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
    best_of: Selection | None = None  # what ``best`` is a value of
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
        """What a checkpoint stores (``best_of`` as a plain dict)."""
        out = {k: getattr(self, k) for k in (*STATE_KEYS, *LATER_KEYS)}
        out["best_of"] = None if self.best_of is None else self.best_of.as_dict()
        return out

    @classmethod
    def from_checkpoint(cls, ckpt: dict[str, Any], world_size: int) -> TrainState:
        state = cls(**{k: ckpt[k] for k in (*STATE_KEYS, *LATER_KEYS)})
        if ckpt["best_of"] is not None:
            state.best_of = Selection.from_dict(ckpt["best_of"])
        saved_world = len(ckpt["rng"])  # one entry per replica
        if saved_world != world_size:
            state.next_epoch_if_regrouped([f"replicas: {saved_world} -> {world_size}"])
        return state

    def choose_best_by(self, best_of: Selection) -> None:
        """Compare validations by ``best_of`` from now on; the saved best of another metric or
        other sources is no bar for it, so best.pt is then chosen afresh."""
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
