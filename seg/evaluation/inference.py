"""Evaluation's former names for the one predictor, :class:`seg.inference.predictor.Predictor`.

Transitional (issue 27, section 4): ``seg.evaluation.scoring`` and ``tests/test_evaluate.py``,
edited elsewhere at the same time, still import these. Once they call ``build_predictor``
(``tta=cfg.tta``), read ``predictor.model`` for ``predictors[0].model`` and call
``probabilities`` where they call the predictor, this module goes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from torch import Tensor

from seg.config import TTA, Config
from seg.inference.predictor import Predictor, build_predictor
from seg.inference.refine import GuidedRefiner
from seg.models import SegmentationModel


class ScaleView(NamedTuple):
    """What the callers read of the former per-scale predictors."""

    model: Any
    transform: Callable[..., dict]


class ProbabilityPredictor(Predictor):
    """A :class:`Predictor` whose call gives :meth:`Predictor.probabilities`."""

    def __call__(self, images: Sequence[np.ndarray]) -> list[Tensor]:  # type: ignore[override]
        return self.probabilities(images)

    @property
    def predictors(self) -> list[ScaleView]:
        return [ScaleView(self.model, scale.transform) for scale in self.scales]


def build_probability_predictor(
    model: SegmentationModel,
    cfg: Config,
    device: str = "auto",
    column_devices: Sequence[str] = (),
    flip: bool = False,
    scales: Sequence[float] = (1.0,),
    window: Sequence[int] | None = None,
    stride: Sequence[int] | None = None,
    refine: GuidedRefiner | None = None,
) -> ProbabilityPredictor:
    """``build_predictor`` with ``flip`` for ``tta=[flip]``."""
    tta = [TTA.flip] if flip else []
    p = build_predictor(model, cfg, device, column_devices, tta, scales, window, stride, refine)
    return ProbabilityPredictor(
        p.model, p.scales, p.flip, p.window, p.stride, p.refine, p.eval_size
    )
