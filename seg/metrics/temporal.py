"""How a video's masks behave from one frame to the next: flicker with and without labels, lag
on fast motion, recovery after a scene cut, as integer counts summed over frames and clips.

* **Flicker with labels** (in the spirit of VSPW's video consistency, which counts only where
  the truth is consistent): of the pixels whose true label is the same in two consecutive
  frames (both labelled), the share whose predicted label changes. A per-frame model that is
  perfect has none; every such change is wrong in one of the two frames.
* **Flicker without labels**, for any video: the previous frame's predicted mask is carried to
  the current frame by the optical flow between them (OpenCV's DIS, computed on frames shrunk
  to :data:`FLOW_WIDTH`), and compared with the current mask where the flow lands inside the
  previous frame. ``unexplained``: the share of those pixels whose label changed, a change the
  motion does not explain; ``tc_iou``: the IoU of the carried and the current person masks,
  the temporal-consistency score of per-frame video segmentation work (ETC, Liu et al., ECCV
  2020).
* **Lag**: person IoU on the *fast* frames, those whose true person centroid moved more than
  :data:`FAST_MOTION` of the frame's diagonal since the previous frame (a smoothed mask that
  trails the person loses it there).
* **Recovery after a cut**: person IoU on the first :data:`AFTER_CUT` frames of a new scene.
* Person IoU over all frames (summed counts) and the mean of the per-frame IoUs.

No pair of frames across a cut is compared. Cuts are given by the clip (its ground truth);
for a video without one, :func:`scene_cut` finds them from the frames: what the flow cannot
explain of the new frame's pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Literal

import cv2
import numpy as np

from seg.config import TemporalConfig

FLOW_WIDTH = 320  # frames are shrunk to this width (at most) for the optical flow
FAST_MOTION = 0.02  # a frame is fast when the true centroid moved > 2% of the diagonal
AFTER_CUT = 3  # frames after a cut (the cut's first frame included) scored as recovery
# A new scene: the mean absolute difference (in [0, 1]) between a frame and its predecessor
# carried by the flow, where the flow lands inside the predecessor.
CUT_RESIDUAL = TemporalConfig.cut  # the temporal mode's default, temporal.cut
IGNORE = 255


@dataclass
class FlowField:
    """The backward flow of a frame: for each pixel of the (shrunk) current frame, where it was
    in the previous one, and the shrunk frames' sizes and scale."""

    flow: np.ndarray  # float32 (h, w, 2): dx, dy in shrunk pixels, current -> previous
    scale: float  # shrunk / full size
    residual: float  # mean |current - previous carried by the flow| in [0, 1], where valid
    difference: np.ndarray  # float32 (h, w): that difference per pixel, 1 where not valid


def shrink_gray(frame: np.ndarray, width: int = FLOW_WIDTH) -> tuple[np.ndarray, float]:
    """uint8 (H, W, 3) RGB or (H, W) gray -> (gray shrunk to at most ``width`` columns, scale)."""
    gray = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY) if frame.ndim == 3 else frame
    scale = min(1.0, width / gray.shape[1])
    if scale < 1.0:
        size = (max(1, round(gray.shape[1] * scale)), max(1, round(gray.shape[0] * scale)))
        gray = cv2.resize(gray, size, interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(gray), scale


def flow_estimator() -> cv2.DISOpticalFlow:
    """OpenCV's DIS optical flow, fast preset. One per video being followed: an estimator
    keeps buffers between calls and is not shared between threads."""
    return cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_FAST)


def backward_flow(
    previous: np.ndarray, current: np.ndarray, scale: float, dis: cv2.DISOpticalFlow
) -> FlowField:
    """The optical flow from the shrunk gray ``current`` to ``previous`` (same size), and the
    photometric residual it leaves."""
    flow = dis.calc(current, previous, None)
    carried, valid = _warp(previous.astype(np.float32), flow, cv2.INTER_LINEAR)
    difference = np.abs(carried - current.astype(np.float32)) / 255.0
    residual = float(difference[valid].mean()) if valid.any() else 1.0
    difference[~valid] = 1.0
    return FlowField(flow, scale, residual, difference)


def _grid(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    return np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))


def _warp(image: np.ndarray, flow: np.ndarray, interpolation: int) -> tuple[np.ndarray, np.ndarray]:
    """``image`` (previous frame) sampled at each current pixel's source; and where the source
    lies inside the image."""
    h, w = flow.shape[:2]
    xs, ys = _grid(h, w)
    map_x, map_y = xs + flow[..., 0], ys + flow[..., 1]
    valid = (map_x >= 0) & (map_x <= w - 1) & (map_y >= 0) & (map_y <= h - 1)
    out = cv2.remap(image, map_x, map_y, interpolation, borderMode=cv2.BORDER_REPLICATE)
    return out, valid


def carry(
    previous: np.ndarray, field_: FlowField, interpolation: int
) -> tuple[np.ndarray, np.ndarray]:
    """A full-size map of the previous frame (float32 or uint8 (H, W)) carried to the current
    one by ``field_``: (carried map, bool where its source is inside the previous frame)."""
    h, w = previous.shape[:2]
    flow = field_.flow
    if flow.shape[:2] != (h, w):  # the flow of shrunk frames, in full-size pixels
        flow = cv2.resize(flow, (w, h), interpolation=cv2.INTER_LINEAR) / field_.scale
    return _warp(previous, flow, interpolation)


class Motion:
    """The flow of each frame of one video from its predecessor: ``step(frame)`` gives it
    (None for the first frame, or one of another size). One per video, its frames in order;
    what several users of the same frames share (the metrics and the temporal mode)."""

    def __init__(self) -> None:
        self._dis = flow_estimator()
        self._gray: np.ndarray | None = None

    def step(self, frame: np.ndarray) -> FlowField | None:
        gray, scale = shrink_gray(frame)
        previous, self._gray = self._gray, gray
        if previous is None or previous.shape != gray.shape:
            return None
        return backward_flow(previous, gray, scale, self._dis)

    def reset(self) -> None:
        self._gray = None


def scene_cut(field_: FlowField, threshold: float = CUT_RESIDUAL) -> bool:
    """Whether the current frame starts a new scene: the flow leaves more than ``threshold``
    of mean absolute difference (in [0, 1])."""
    return field_.residual > threshold


def centroid(mask: np.ndarray) -> tuple[float, float] | None:
    """(x, y) of a bool mask's pixels, None when empty."""
    ys, xs = np.nonzero(mask)
    return (float(xs.mean()), float(ys.mean())) if xs.size else None


@dataclass
class TemporalCounts:
    """Integer counts of :class:`ClipMeter`, summed over frames and clips (``merge_``)."""

    stable: int = 0  # pixels whose true label stayed (both frames labelled)
    flicker: int = 0  # ... whose predicted label changed
    compared: int = 0  # pixels with a flow-carried previous label
    unexplained: int = 0  # ... whose predicted label differs from it
    tc_inter: int = 0  # carried previous person mask & current
    tc_union: int = 0
    inter: int = 0  # person IoU counts over every labelled frame
    union: int = 0
    fast_inter: int = 0  # ... over the fast frames
    fast_union: int = 0
    cut_inter: int = 0  # ... over the first AFTER_CUT frames of each scene after a cut
    cut_union: int = 0
    frames: int = 0
    labelled: int = 0
    fast_frames: int = 0
    cut_frames: int = 0
    frame_iou_sum: float = 0.0  # sum of per-frame IoUs (frames with a person in truth or mask)
    frame_iou_n: int = 0

    def merge_(self, other: TemporalCounts) -> TemporalCounts:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def summary(self) -> dict[str, float | int]:
        """Ratios (NaN where undefined) and frame counts."""

        def ratio(a: float, b: float) -> float:
            return a / b if b else math.nan

        return {
            "flicker": ratio(self.flicker, self.stable),
            "unexplained": ratio(self.unexplained, self.compared),
            "tc_iou": ratio(self.tc_inter, self.tc_union),
            "iou": ratio(self.inter, self.union),
            "iou_fast": ratio(self.fast_inter, self.fast_union),
            "iou_after_cut": ratio(self.cut_inter, self.cut_union),
            "mean_frame_iou": ratio(self.frame_iou_sum, self.frame_iou_n),
            "frames": self.frames,
            "fast_frames": self.fast_frames,
            "cut_frames": self.cut_frames,
        }


@dataclass
class ClipMeter:
    """Feed one clip's frames in order (``update``); ``counts`` holds its totals.

    ``truth`` is uint8 (H, W) with 0 background, 1 person, :data:`IGNORE` unlabelled, or None
    for a video without labels (then only the flow-based figures are counted). ``cut`` marks
    a frame that starts a new scene; None asks :func:`scene_cut`.
    """

    counts: TemporalCounts = field(default_factory=TemporalCounts)
    _motion: Motion = field(default_factory=Motion, repr=False)
    _started: bool = False
    _pred: np.ndarray | None = None
    _truth: np.ndarray | None = None
    _centroid: tuple[float, float] | None = None
    _since_cut: int = AFTER_CUT  # frames since the last cut (AFTER_CUT: none recent)

    def update(
        self,
        frame: np.ndarray,
        pred: np.ndarray,
        truth: np.ndarray | None,
        cut: bool | None,
        motion: FlowField | Literal["own"] | None = "own",
    ) -> None:
        """Count one frame. ``motion``: the frame's flow from its predecessor where the caller
        has it (``Motion.step``, shared with other users of the frames), else computed here."""
        c = self.counts
        pred = pred.astype(bool)
        field_ = self._motion.step(frame) if motion == "own" else motion
        if cut is None:
            cut = field_ is not None and scene_cut(field_)
        first = not self._started
        self._started = True
        if cut and not first:
            self._since_cut = 0
        if field_ is not None and not cut:
            self._flow_counts(pred, field_)
        if truth is not None:
            self._label_counts(pred, truth, cut or first)
        c.frames += 1
        self._since_cut += 1
        self._pred, self._truth = pred, truth

    def _flow_counts(self, pred: np.ndarray, field_: FlowField) -> None:
        assert self._pred is not None
        carried, valid = carry(self._pred.astype(np.uint8), field_, cv2.INTER_NEAREST)
        carried = carried.astype(bool)
        c = self.counts
        c.compared += int(valid.sum())
        c.unexplained += int((valid & (carried != pred)).sum())
        c.tc_inter += int((carried & pred).sum())
        c.tc_union += int((carried | pred).sum())

    def _label_counts(self, pred: np.ndarray, truth: np.ndarray, new_scene: bool) -> None:
        c = self.counts
        if truth.shape != pred.shape:
            raise ValueError(f"a mask of size {truth.shape} for a frame of size {pred.shape}")
        labelled = truth != IGNORE
        person = truth == 1
        inter = int((pred & person).sum())
        union = int(((pred | person) & labelled).sum())
        c.labelled += 1
        c.inter += inter
        c.union += union
        if union:
            c.frame_iou_sum += inter / union
            c.frame_iou_n += 1
        where = centroid(person)
        diagonal = math.hypot(*truth.shape)
        if not new_scene and self._truth is not None and self._truth.shape == truth.shape:
            stable = labelled & (self._truth != IGNORE) & (self._truth == truth)
            assert self._pred is not None
            c.stable += int(stable.sum())
            c.flicker += int((stable & (self._pred != pred)).sum())
            if where and self._centroid:
                moved = math.dist(where, self._centroid)
                if moved > FAST_MOTION * diagonal:
                    c.fast_frames += 1
                    c.fast_inter += inter
                    c.fast_union += union
        if self._since_cut < AFTER_CUT:
            c.cut_frames += 1
            c.cut_inter += inter
            c.cut_union += union
        self._centroid = where
