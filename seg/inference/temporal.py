"""Steady masks on video: the person probability of each frame blended with the previous
frame's, carried to it by the optical flow (motion-compensated smoothing), and a label that
changes only when its probability clearly crosses 0.5 (hysteresis).

Per-frame prediction flickers where the probability hovers near 0.5: noise, blur or a change
of light tips such pixels one way, then the other. Plain smoothing over time (an average of
the last masks, as webcam tools do) steadies them but drags the mask behind a moving person:
the lag users complain of. Here the previous probability is first carried along the motion
(``seg.metrics.temporal``: DIS flow on frames shrunk to 320 columns), so a moving person's
mask is blended with where the person now is, not where they were. Where the flow fails (the
carried frame differs from the current one by more than ``occlusion``: a hand appearing, an
occluded background) nothing is blended. A frame the flow cannot explain at all is a scene
cut (``scene_cut``): the state is reset and the frame is predicted on its own.

One :class:`TemporalFilter` per video or stream, fed its frames in order; ``reset()`` at a
new video. The network still runs in batches: the filter is applied after it, frame by frame.
"""

from __future__ import annotations

from typing import Literal

import cv2
import numpy as np

from seg.config import TemporalConfig
from seg.inference.predictor import Prediction
from seg.metrics.temporal import FlowField, Motion, carry, scene_cut

CONFIDENT = 0.8  # |2p - 1| from which a pixel is sure (p <= 0.1 or p >= 0.9): not blended


# The filter's options are the scripts' ``temporal.*`` (``TemporalConfig``: ``blend``,
# ``hysteresis``, ``occlusion``, ``cut``); ``enabled`` is the scripts' switch, not the filter's.
TemporalOptions = TemporalConfig


def temporal_options(cfg: TemporalConfig) -> TemporalOptions | None:
    """A script's ``temporal.*`` -> the filter's options (None: per-frame prediction)."""
    return cfg if cfg.enabled else None


class TemporalFilter:
    """Motion-compensated smoothing of one video's predictions (see the module docstring)."""

    def __init__(self, options: TemporalOptions | None = None) -> None:
        self.options = options or TemporalOptions()
        self._motion = Motion()
        self.reset()

    def reset(self) -> None:
        """Forget the previous frame: the next one is predicted on its own."""
        self._motion.reset()
        self._prob: np.ndarray | None = None
        self._mask: np.ndarray | None = None
        self.cuts = 0

    def __call__(
        self,
        frame: np.ndarray,
        pred: Prediction,
        motion: FlowField | Literal["own"] | None = "own",
    ) -> Prediction:
        """The steadied prediction of ``frame`` (uint8 (H, W, 3) RGB), given its own.
        ``motion``: the frame's flow from its predecessor where the caller has it
        (``Motion.step``), else computed here."""
        field = self._motion.step(frame) if motion == "own" else motion
        if field is not None and scene_cut(field, self.options.cut):
            self.cuts += 1
            field = None
        prob, mask = pred.prob, pred.mask
        if field is not None and self._prob is not None and self._prob.shape == prob.shape:
            prob, mask = self._steady(prob, field)
        self._prob, self._mask = prob, mask
        return Prediction(mask=mask, prob=prob)

    def _steady(self, prob: np.ndarray, field: FlowField) -> tuple[np.ndarray, np.ndarray]:
        o = self.options
        h, w = prob.shape
        assert self._prob is not None and self._mask is not None
        carried, valid = carry(self._prob, field, cv2.INTER_LINEAR)
        weight = np.where(field.difference <= o.occlusion, np.float32(o.blend), np.float32(0))
        if weight.shape != (h, w):
            weight = cv2.resize(weight, (w, h), interpolation=cv2.INTER_LINEAR)
        # by confidence: a pixel the frame is sure of (p <= 0.1 or >= 0.9) keeps its own
        # probability, so a person's confident outline is never dragged by a flow that errs
        # at motion boundaries; the doubtful pixels, where flicker lives, lean on the past
        doubt = np.clip(1.0 - np.abs(2.0 * prob - 1.0) / CONFIDENT, 0.0, 1.0)
        weight *= valid * doubt
        steady = prob + weight * (carried - prob)
        if not o.hysteresis:
            return steady, steady > 0.5
        was, _ = carry(self._mask.astype(np.uint8), field, cv2.INTER_NEAREST)
        threshold = np.where(was.astype(bool), 0.5 - o.hysteresis, 0.5 + o.hysteresis)
        threshold = np.where(valid, threshold, 0.5).astype(np.float32)
        return steady, steady > threshold
