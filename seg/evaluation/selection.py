"""What steers a training run: one metric over the validation of some sources.

``best.pt``, the pixel-accuracy target and ``trainer.stop_at_target`` all read one figure. It
sums the validation of every validated source, unless some of them are not trained on (held out
with ``data.train_sources``, or validated only: ``data.val_sources``): then it sums the
training sources only (DomainBed's training-domain validation), logged as
``val/train_sources/<metric>``, and the sources not trained on are reported, never used to
choose or stop. A :class:`Selection` is that choice as a value: built once per run, stored in
every checkpoint (``"best_of"``) so that a resumed run can tell whether a saved best still
compares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from seg.metrics.keys import TRAIN_SOURCES, metric_key


@dataclass(frozen=True)
class Selection:
    """``metric`` (a ``trainer.best_metric``) over the validation of ``sources`` (sorted);
    ``held_out``: other sources are validated too, and the figure is their sum without them."""

    metric: str
    sources: tuple[str, ...]
    held_out: bool = False

    @classmethod
    def of_run(
        cls, metric: str, validated: Sequence[str], train_sources: Sequence[str] | None
    ) -> Selection:
        """The selection of a run validating ``validated`` and training on ``train_sources``
        (``train_source_names``; None: all of them)."""
        chosen = [s for s in validated if train_sources is not None and s in train_sources]
        if chosen and len(chosen) < len(validated):
            return cls(metric, tuple(sorted(chosen)), held_out=True)
        return cls(metric, tuple(sorted(validated)))

    @property
    def source(self) -> str | None:
        """Whose figures steer the run: the training sources' sum, or every source's (None)."""
        return TRAIN_SOURCES if self.held_out else None

    def key_of(self, metric: str) -> str:
        """The key of ``metric`` over what steers the run, e.g. ``val/pixel_acc``."""
        return metric_key(metric, self.source)

    @property
    def key(self) -> str:
        """The key of the figure that picks best.pt, e.g. ``val/iou_person``."""
        return self.key_of(self.metric)

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "sources": list(self.sources), "held_out": self.held_out}

    @classmethod
    def from_dict(cls, stored: dict[str, Any]) -> Selection:
        return cls(stored["metric"], tuple(sorted(stored["sources"])), bool(stored["held_out"]))

    def __str__(self) -> str:
        return f"{self.key} over {','.join(self.sources)}"


__all__ = ["TRAIN_SOURCES", "Selection"]
