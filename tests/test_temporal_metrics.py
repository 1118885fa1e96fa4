"""The temporal metrics (seg/metrics/temporal.py) on hand-made frames with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from seg.metrics.temporal import (
    ClipMeter,
    backward_flow,
    flow_estimator,
    scene_cut,
    shrink_gray,
)


def texture(h: int = 96, w: int = 128, seed: int = 0) -> np.ndarray:
    """A smooth random RGB texture the optical flow can follow."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    import cv2

    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)


def square(h: int, w: int, x: int, y: int, side: int = 20) -> np.ndarray:
    mask = np.zeros((h, w), np.uint8)
    mask[y : y + side, x : x + side] = 1
    return mask


def run(frames, preds, truths, cuts=None) -> dict:
    meter = ClipMeter()
    for i, (frame, pred, truth) in enumerate(zip(frames, preds, truths, strict=True)):
        meter.update(frame, pred, truth, cuts[i] if cuts else False)
    return meter.counts.summary()


def test_flicker_with_labels_counts_changes_where_the_truth_stays() -> None:
    frame = texture()
    truth = square(96, 128, 40, 30)
    blip = truth.copy()
    blip[0:2, 0:5] = 1  # 10 background pixels called person in the middle frame
    out = run([frame] * 3, [truth, blip, truth], [truth] * 3)
    assert out["flicker"] == pytest.approx(20 / (2 * 96 * 128))
    assert out["iou"] == pytest.approx(1200 / (1200 + 10))
    # the same blip on pixels whose truth is unlabelled costs nothing
    ignored = truth.copy()
    ignored[0:2, 0:5] = 255
    assert run([frame] * 3, [truth, blip, truth], [ignored] * 3)["flicker"] == 0.0


def test_a_prediction_that_follows_a_moving_truth_does_not_flicker() -> None:
    frames = [texture()] * 4
    truths = [square(96, 128, 10 + 8 * i, 30) for i in range(4)]
    out = run(frames, truths, truths)
    assert out["flicker"] == 0.0 and out["iou"] == 1.0 and out["mean_frame_iou"] == 1.0


def test_flicker_without_labels_on_a_still_video_is_the_share_of_changed_pixels() -> None:
    frame = texture()
    mask = square(96, 128, 40, 30)
    blip = mask.copy()
    blip[0:2, 0:5] = 1
    out = run([frame] * 3, [mask, blip, mask], [None] * 3)
    assert out["unexplained"] == pytest.approx(20 / (2 * 96 * 128))
    assert out["tc_iou"] == pytest.approx((400 + 400) / (410 + 410))
    assert math.isnan(out["flicker"]) and math.isnan(out["iou"])  # no labels


def test_motion_explains_a_mask_that_moves_with_the_picture() -> None:
    """The picture and the mask both shift 3 px right per frame: the flow carries the previous
    mask onto the current one (the frame's edge aside); a mask that stays put while the
    picture moves is a change the motion does not explain."""
    base = texture(96, 160)
    frames = [base[:, 24 - 3 * i : 24 - 3 * i + 128] for i in range(5)]
    moving = [square(96, 128, 40 + 3 * i, 30) for i in range(5)]
    follows = run(frames, moving, [None] * 5)
    assert follows["unexplained"] < 0.005 and follows["tc_iou"] > 0.95
    stays = run(frames, [moving[0]] * 5, [None] * 5)
    # the carried mask is 3 px off: 2 x 3 x 20 pixels of each 96 x 128 frame
    assert stays["unexplained"] == pytest.approx(120 / (96 * 128), rel=0.1)
    assert stays["tc_iou"] == pytest.approx(340 / 460, rel=0.05)


def test_fast_frames_are_those_whose_true_centroid_moves_over_2_percent_of_the_diagonal() -> None:
    frames = [texture()] * 4
    # diagonal 160 px: 2% is 3.2 px; the square moves 8, 1, 8 px
    xs = [10, 18, 19, 27]
    truths = [square(96, 128, x, 30) for x in xs]
    preds = [square(96, 128, xs[0], 30)] * 4  # lags: stays where the person was
    out = run(frames, preds, truths)
    assert out["fast_frames"] == 2
    inter = [(20 - abs(x - xs[0])) * 20 for x in (18, 27)]
    union = [(20 + abs(x - xs[0])) * 20 for x in (18, 27)]
    assert out["iou_fast"] == pytest.approx(sum(inter) / sum(union))


def test_a_cut_stops_the_comparison_and_scores_recovery_on_three_frames() -> None:
    a, b = texture(seed=1), texture(seed=2)
    frames = [a, a, b, b, b, b]
    truth_a, truth_b = square(96, 128, 10, 10), square(96, 128, 80, 60)
    truths = [truth_a, truth_a, truth_b, truth_b, truth_b, truth_b]
    # the prediction keeps the old scene's mask for one frame after the cut
    preds = [truth_a, truth_a, truth_a, truth_b, truth_b, truth_b]
    out = run(frames, preds, truths, cuts=[False, False, True, False, False, False])
    assert out["cut_frames"] == 3
    assert out["iou_after_cut"] == pytest.approx(800 / (400 * 4))
    # pairs across the cut are not compared: the switch of scene is no flicker, and the
    # prediction's change on frame 3 (where the truth stayed) is
    assert out["flicker"] == pytest.approx(800 / (4 * 96 * 128))
    assert out["fast_frames"] == 0  # the centroid's jump at the cut is no motion


def test_scene_cuts_are_found_from_the_frames() -> None:
    dis = flow_estimator()
    base = texture(96, 160)
    first, _ = shrink_gray(base[:, 16:144])
    shifted, scale = shrink_gray(base[:, 12:140])
    other, _ = shrink_gray(texture(96, 128, seed=5))
    assert not scene_cut(backward_flow(first, shifted, scale, dis))
    assert scene_cut(backward_flow(first, other, scale, dis))
    frames = [base[:, 16:144], base[:, 12:140], texture(96, 128, seed=5)]
    masks = [square(96, 128, 40, 30)] * 3
    found = run(frames, masks, masks, cuts=[None, None, None])
    assert found["cut_frames"] == 1  # the last frame: found as a cut, scored as recovery
