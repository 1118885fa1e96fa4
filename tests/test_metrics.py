"""Metrics on small hand-computed cases; the expected numbers are derived in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from seg.evaluation.report import image_row
from seg.metrics import (
    SegMetrics,
    boundary_counts,
    boundary_fscore,
    boundary_iou,
    boundary_iou_counts,
    class_map,
    class_mask,
    confusion_matrix,
    fscore_from_counts,
    metrics_from_confusion,
)
from seg.metrics.boundary import dilation_for

T = torch.tensor


def square(h: int, w: int, rows: tuple[int, int], cols: tuple[int, int]) -> np.ndarray:
    """A uint8 (h, w) mask that is 1 on rows[0]..rows[1] x cols[0]..cols[1] (inclusive)."""
    m = np.zeros((h, w), dtype=np.uint8)
    m[rows[0] : rows[1] + 1, cols[0] : cols[1] + 1] = 1
    return m


def _blobs(rng: np.random.Generator, n: int, h: int, w: int) -> torch.Tensor:
    """n random rectangles (person) on background, with a random ignore band."""
    out = np.zeros((n, h, w), dtype=np.int64)
    for i in range(n):
        r0, c0 = rng.integers(0, h // 2), rng.integers(0, w // 2)
        r1, c1 = rng.integers(r0 + 2, h), rng.integers(c0 + 2, w)
        out[i, r0:r1, c0:c1] = 1
        out[i, :, rng.integers(0, w) :][:, :2] = 255
    return torch.from_numpy(out)


# ---------------------------------------------------------------- confusion matrix and ratios


def test_confusion_hand_case() -> None:
    # truth [0 0 0 1 1 1 1 1], pred [0 1 1 1 1 1 1 0]:
    # truth 0 -> pred 0 once, pred 1 twice; truth 1 -> pred 0 once, pred 1 four times.
    target = T([0, 0, 0, 1, 1, 1, 1, 1])
    pred = T([0, 1, 1, 1, 1, 1, 1, 0])
    cm = confusion_matrix(pred, target)
    assert cm.dtype == torch.int64
    assert cm.tolist() == [[1, 2], [1, 4]]
    m = metrics_from_confusion(cm)
    assert m["pixel_acc"] == pytest.approx(5 / 8)  # diagonal 1 + 4 of 8
    assert m["iou_person"] == pytest.approx(4 / 7)  # tp 4 / (tp 4 + fp 2 + fn 1)
    assert m["iou_background"] == pytest.approx(1 / 4)  # 1 / (1 + fp 1 + fn 2)
    assert m["miou"] == pytest.approx((4 / 7 + 1 / 4) / 2)
    assert m["dice_person"] == pytest.approx(8 / 11)  # 2*4 / (2*4 + 2 + 1)
    assert m["precision_person"] == pytest.approx(4 / 6)  # 4 of the 6 predicted person
    assert m["recall_person"] == pytest.approx(4 / 5)  # 4 of the 5 true person
    assert m["precision_background"] == pytest.approx(1 / 2)
    assert m["recall_background"] == pytest.approx(1 / 3)


def test_empty_masks_person_is_nan_and_excluded() -> None:
    # No person anywhere: 6 background pixels all right. Person IoU is 0/0 -> NaN, and the mIoU
    # is the mean over the defined classes only (background IoU 6/6 = 1).
    zeros = torch.zeros(1, 2, 3, dtype=torch.long)
    m = metrics_from_confusion(confusion_matrix(zeros, zeros))
    assert m["pixel_acc"] == 1.0
    assert math.isnan(m["iou_person"]) and math.isnan(m["dice_person"])
    assert math.isnan(m["precision_person"]) and math.isnan(m["recall_person"])
    assert m["iou_background"] == 1.0
    assert m["miou"] == 1.0


def test_all_person_perfect_and_fully_wrong() -> None:
    ones = torch.ones(2, 2, dtype=torch.long)
    m = metrics_from_confusion(confusion_matrix(ones, ones))
    # cm [[0, 0], [0, 4]]: person IoU 4/4, background absent from both -> NaN.
    assert m["pixel_acc"] == 1.0 and m["iou_person"] == 1.0 and m["miou"] == 1.0
    assert math.isnan(m["iou_background"])

    target = T([[0, 1], [1, 1]])
    perfect = metrics_from_confusion(confusion_matrix(target.clone(), target))
    assert perfect["miou"] == 1.0 and perfect["dice_person"] == 1.0

    # Every pixel flipped: cm [[0, 1], [3, 0]], no true positive for either class.
    wrong = metrics_from_confusion(confusion_matrix(1 - target, target))
    assert wrong["pixel_acc"] == 0.0 and wrong["miou"] == 0.0
    assert wrong["iou_person"] == 0.0 and wrong["dice_person"] == 0.0
    assert wrong["precision_person"] == 0.0 and wrong["recall_person"] == 0.0


def test_ignore_pixels_are_excluded() -> None:
    target = T([[0, 1, 255], [1, 255, 0]])
    pred = T([[1, 1, 0], [0, 1, 0]])
    # Labelled pixels: (t0,p1), (t1,p1), (t1,p0), (t0,p0) -> cm [[1, 1], [1, 1]].
    cm = confusion_matrix(pred, target)
    assert cm.tolist() == [[1, 1], [1, 1]]
    m = metrics_from_confusion(cm)
    assert m["pixel_acc"] == 0.5
    assert m["iou_person"] == pytest.approx(1 / 3)  # 1 / (1 + 1 + 1)
    assert m["dice_person"] == pytest.approx(0.5)  # 2 / (2 + 1 + 1)


def test_three_classes() -> None:
    # truth [0 1 2 2 1 0], pred [0 2 2 1 1 0]: rows truth -> [2 0 0], [0 1 1], [0 1 1].
    cm = confusion_matrix(T([0, 2, 2, 1, 1, 0]), T([0, 1, 2, 2, 1, 0]), num_classes=3)
    assert cm.tolist() == [[2, 0, 0], [0, 1, 1], [0, 1, 1]]
    m = metrics_from_confusion(cm)
    assert m["iou_class0"] == 1.0
    assert m["iou_class1"] == pytest.approx(1 / 3)  # tp 1, fp 1, fn 1
    assert m["iou_class2"] == pytest.approx(1 / 3)
    assert m["miou"] == pytest.approx(5 / 9)
    assert m["pixel_acc"] == pytest.approx(4 / 6)
    # Class 2 absent from truth and prediction: NaN, left out of the mean of 1 and 1/3.
    m2 = metrics_from_confusion(confusion_matrix(T([0, 1, 1]), T([0, 1, 0]), num_classes=3))
    assert math.isnan(m2["iou_class2"])
    assert m2["miou"] == pytest.approx((1 / 2 + 1 / 2) / 2)  # class0 1/(1+0+1), class1 1/(1+1)


def test_empty_matrix_is_all_nan() -> None:
    m = metrics_from_confusion(torch.zeros(2, 2, dtype=torch.int64))
    assert set(m) >= {"pixel_acc", "miou", "iou_person", "dice_person", "recall_background"}
    assert all(math.isnan(v) for v in m.values())


@pytest.mark.parametrize("chunk", [1 << 22, 7])  # one chunk; many, ignore pixels straddling
def test_confusion_matches_brute_force(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    import seg.metrics.confusion as confusion_module

    monkeypatch.setattr(confusion_module, "CHUNK", chunk)
    rng = np.random.default_rng(0)
    c = 4
    target = rng.integers(0, c, size=(3, 7, 9))
    target[rng.random(target.shape) < 0.2] = 255
    pred = rng.integers(0, c, size=(3, 7, 9))
    expected = np.zeros((c, c), dtype=np.int64)
    for t, p in zip(target.ravel(), pred.ravel(), strict=True):
        if t != 255:
            expected[t, p] += 1
    got = confusion_matrix(torch.from_numpy(pred), torch.from_numpy(target), num_classes=c)
    np.testing.assert_array_equal(got.numpy(), expected)


def test_confusion_errors_name_the_value() -> None:
    with pytest.raises(ValueError, match="target holds the value 3"):
        confusion_matrix(T([0, 1]), T([0, 3]))
    with pytest.raises(ValueError, match="pred holds the value 7"):
        confusion_matrix(T([0, 7]), T([0, 1]))
    with pytest.raises(TypeError, match="argmax"):
        confusion_matrix(torch.zeros(2), T([0, 1]))
    with pytest.raises(ValueError, match="shapes differ"):
        confusion_matrix(T([0, 1, 1]), T([0, 1]))
    with pytest.raises(ValueError, match="ignore_index=1"):
        confusion_matrix(T([0, 1]), T([0, 1]), ignore_index=1)
    with pytest.raises(ValueError, match="3 class names"):
        metrics_from_confusion(torch.zeros(2, 2, dtype=torch.int64), ["a", "b", "c"])
    # A pred value outside [0, C) under an ignore pixel is never looked at.
    assert confusion_matrix(T([0, 7]), T([0, 255])).tolist() == [[1, 0], [0, 0]]


# ---------------------------------------------------------------- boundary F


def test_bf_one_pixel_diagonal_shift() -> None:
    # 6x6 square (rows/cols 2..7) vs the same square shifted by (+1, +1): each 4-boundary is
    # the 20-pixel ring. Tolerance 0: the rings share only (7, 3) and (3, 7) -> P = R = 2/20.
    # Tolerance 1: every ring pixel has a 4-neighbour on the other ring except the far corners
    # (pred (8, 8), truth (2, 2): nearest other ring pixel at sqrt 2) -> 19/20. Tolerance 2: all.
    truth = square(12, 12, (2, 7), (2, 7))
    pred = square(12, 12, (3, 8), (3, 8))
    assert boundary_counts(pred, truth, 0) == (2, 20, 2, 20)
    assert boundary_counts(pred, truth, 1) == (19, 20, 19, 20)
    assert boundary_counts(pred, truth, 2) == (20, 20, 20, 20)
    assert boundary_fscore(pred, truth, 0)["f"] == pytest.approx(0.1)
    assert boundary_fscore(pred, truth, 1)["f"] == pytest.approx(0.95)
    assert boundary_fscore(pred, truth, 2) == {"precision": 1.0, "recall": 1.0, "f": 1.0}


def test_bf_horizontal_shift_and_tensor_input() -> None:
    # 4x4 square shifted right by 1: the 12-pixel rings share the top and bottom rows' 3 common
    # columns (6 pixels); every other pixel is 1 px from the other ring.
    truth = torch.from_numpy(square(10, 10, (2, 5), (2, 5)))
    pred = torch.from_numpy(square(10, 10, (2, 5), (3, 6))).bool()
    assert boundary_counts(pred, truth, 0) == (6, 12, 6, 12)
    assert boundary_fscore(pred, truth, 0)["f"] == pytest.approx(0.5)
    assert boundary_fscore(pred, truth, 1)["f"] == 1.0


def test_bf_empty_cases_follow_davis() -> None:
    empty = np.zeros((8, 8), dtype=np.uint8)
    sq = square(8, 8, (2, 5), (2, 5))
    assert boundary_fscore(empty, empty, 2) == {"precision": 1.0, "recall": 1.0, "f": 1.0}
    assert boundary_fscore(empty, sq, 2) == {"precision": 1.0, "recall": 0.0, "f": 0.0}
    assert boundary_fscore(sq, empty, 2) == {"precision": 0.0, "recall": 1.0, "f": 0.0}
    assert fscore_from_counts(3, 4, 1, 2) == pytest.approx(
        {"precision": 0.75, "recall": 0.5, "f": 0.6}  # 2 * 0.75 * 0.5 / 1.25
    )


def test_bf_image_frame_is_no_boundary() -> None:
    # Person on the left 5 columns of a 6x10 image: the only edge is column 4 (6 pixels).
    half = square(6, 10, (0, 5), (0, 4))
    assert boundary_counts(half, half, 0) == (6, 6, 6, 6)
    full = np.ones((6, 10), dtype=np.uint8)
    assert boundary_counts(full, full, 0) == (0, 0, 0, 0)


def test_bf_ignore_counts_neither_way() -> None:
    # Truth: person rows 2..7, cols 2..6, and columns 7..9 ignored. The prediction runs on into
    # the ignored columns (cols 2..9). Edges toward ignore pixels are no edges, so both masks
    # have the same 14 edge pixels: top row 5, bottom row 5, left column rows 3..6: 4.
    target = square(10, 10, (2, 7), (2, 6))
    target[:, 7:] = 255
    pred = square(10, 10, (2, 7), (2, 9))
    assert boundary_counts(pred, target, 0) == (14, 14, 14, 14)
    # The same prediction against the truth with column 7 labelled person and 8..9 background
    # is wrong on its right side: it must score below 1.
    labelled = square(10, 10, (2, 7), (2, 7))
    assert boundary_fscore(pred, labelled, 0)["f"] < 1.0


def _brute_bf(pred: np.ndarray, truth: np.ndarray, tol: int) -> tuple[int, int, int, int]:
    """Edges by explicit 4-neighbour loops, matches by all pairwise Euclidean distances."""

    def edges(m: np.ndarray) -> list[tuple[int, int]]:
        h, w = m.shape
        out = []
        for r in range(h):
            for c in range(w):
                near = [(r + dr, c + dc) for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1))]
                if m[r, c] and any(0 <= y < h and 0 <= x < w and not m[y, x] for y, x in near):
                    out.append((r, c))
        return out

    def matched(a: list, b: list) -> int:
        if not b:
            return 0
        bb = np.asarray(b, dtype=float)
        return sum(np.hypot(*(bb - p).T).min() <= tol for p in np.asarray(a, dtype=float))

    ep, et = edges(pred), edges(truth)
    return matched(ep, et), len(ep), matched(et, ep), len(et)


def test_bf_matches_brute_force_on_random_masks() -> None:
    rng = np.random.default_rng(1)
    for _ in range(3):  # speckle: many short distances
        truth = (rng.random((14, 16)) < 0.5).astype(np.uint8)
        pred = (rng.random((14, 16)) < 0.5).astype(np.uint8)
        for tol in (0, 1, 2, 3):
            assert boundary_counts(pred, truth, tol) == _brute_bf(pred, truth, tol)
    for _ in range(3):  # one rectangle each: long distances
        truth, pred = (_blobs(rng, 1, 20, 22)[0].clamp(max=1).numpy() for _ in range(2))
        for tol in (4, 5, 7):
            assert boundary_counts(pred, truth, tol) == _brute_bf(pred, truth, tol)


def test_bf_distance_is_euclidean() -> None:
    # Single pixels (each its own boundary) 4 rows and 3 columns apart: distance exactly 5.
    pred, truth = np.zeros((10, 10), np.uint8), np.zeros((10, 10), np.uint8)
    pred[2, 2], truth[6, 5] = 1, 1
    assert boundary_counts(pred, truth, 4) == (0, 1, 0, 1)
    assert boundary_counts(pred, truth, 5) == (1, 1, 1, 1)


def test_boundary_input_errors() -> None:
    sq = square(6, 6, (1, 3), (1, 3))
    with pytest.raises(ValueError, match="target holds the value 2"):
        boundary_counts(sq, sq * 2, 1)
    with pytest.raises(ValueError, match="pred holds the value 255"):
        boundary_counts(sq * 255, sq, 1)
    with pytest.raises(ValueError, match="one shape"):
        boundary_iou(sq, sq[:5])
    with pytest.raises(ValueError, match=">= 0"):
        boundary_counts(sq, sq, -1)


# ---------------------------------------------------------------- boundary IoU


def test_boundary_iou_shifted_square() -> None:
    truth = square(10, 10, (2, 5), (2, 5))
    pred = square(10, 10, (2, 5), (3, 6))
    # d = 1: each band is the 12-pixel ring; they share 6 pixels -> 6 / (12 + 12 - 6) = 1/3.
    assert boundary_iou_counts(pred, truth, dilation_px=1) == (6, 18)
    assert boundary_iou(pred, truth, dilation_px=1) == pytest.approx(1 / 3)
    # d = 2 swallows a 4x4 square whole: 4x3 = 12 shared of 16 + 16 - 12 = 20.
    assert boundary_iou(pred, truth, dilation_px=2) == pytest.approx(12 / 20)
    # Ratio form: 0.1 x diagonal sqrt(200) = 1.41 -> 1 px, the d = 1 case.
    assert boundary_iou(pred, truth, dilation_ratio=0.1) == pytest.approx(1 / 3)
    assert dilation_for((512, 512), 0.02) == 14  # 0.02 x 724.08 = 14.48
    assert dilation_for((10, 10), 0.02) == 1  # 0.28 rounds to 0, raised to the 1-px minimum


def test_boundary_iou_frame_empty_and_ignore() -> None:
    # A mask truncated by the image frame has a band along it (Cheng et al.): the 36-pixel
    # outer ring of a 10x10 all-person image, the same for both.
    full = np.ones((10, 10), dtype=np.uint8)
    assert boundary_iou_counts(full, full, dilation_px=1) == (36, 36)
    empty = np.zeros((10, 10), dtype=np.uint8)
    assert math.isnan(boundary_iou(empty, empty, dilation_px=1))
    # The ignore case of test_bf_ignore_counts_neither_way: both bands are the same 14 pixels
    # (pixels next to ignore or the prediction's extra, ignored columns are no band).
    target = square(10, 10, (2, 7), (2, 6))
    target[:, 7:] = 255
    pred = square(10, 10, (2, 7), (2, 9))
    assert boundary_iou_counts(pred, target, dilation_px=1) == (14, 14)


def _brute_band(mask: np.ndarray, valid: np.ndarray, d: int) -> set[tuple[int, int]]:
    """Cheng et al.'s band by its definition: labelled mask pixels with, within chessboard
    distance d, a point off the image or a labelled non-mask pixel (ignore pixels are neither)."""
    h, w = mask.shape
    band = set()
    for r in range(h):
        for c in range(w):
            if not (mask[r, c] and valid[r, c]):
                continue
            for y in range(r - d, r + d + 1):
                for x in range(c - d, c + d + 1):
                    off = not (0 <= y < h and 0 <= x < w)
                    if off or (valid[y, x] and not mask[y, x]):
                        band.add((r, c))
    return band


def test_boundary_iou_matches_brute_force_on_random_masks() -> None:
    """Speckle and blobs, with and without ignore pixels, d = 1..4: the counts equal the
    definition's, pixel by pixel."""
    rng = np.random.default_rng(2)
    cases = []
    for _ in range(3):
        truth = (rng.random((13, 17)) < 0.5).astype(np.uint8)
        pred = (rng.random((13, 17)) < 0.5).astype(np.uint8)
        cases.append((pred, truth))
    for _ in range(3):
        truth, pred = (_blobs(rng, 2, 18, 21)[0].clamp(max=1).numpy() for _ in range(2))
        cases.append((pred, truth))
    for pred, truth in cases:
        for with_ignore in (False, True):
            target = truth.astype(np.int64)
            if with_ignore:
                target[rng.random(truth.shape) < 0.15] = 255
            valid = target != 255
            for d in (1, 2, 3, 4):
                bp = _brute_band(pred.astype(bool), valid, d)
                bt = _brute_band(target == 1, valid, d)
                expected = (len(bp & bt), len(bp | bt))
                got = boundary_iou_counts(pred, target, dilation_px=d)
                assert got == expected, (d, with_ignore)


# ---------------------------------------------------------------- per image and accumulator


def test_one_image_row_hand_case() -> None:
    """A per_image.csv row (SegMetrics of one image) on a case counted by hand."""
    target = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [255, 255, 1, 1], [0, 0, 0, 0]])
    pred = np.array([[0, 1, 1, 1], [0, 0, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    m = SegMetrics(boundary_tolerances=(2, 5))
    m.update(torch.from_numpy(pred)[None], torch.from_numpy(target)[None])
    s = image_row("x", "src", (4, 4), m)
    # 14 labelled pixels; 6 true person; predicted person on labelled pixels: (0,1) wrong,
    # (0,2) (0,3) (1,2) (2,2) (2,3) right; missed (1,3). So tp 5, fp 1, fn 1, correct 12.
    assert (s["pixels"], s["tp"], s["fp"], s["fn"], s["correct"]) == (14, 5, 1, 1, 12)
    assert s["iou"] == pytest.approx(5 / 7)
    assert s["pixel_acc"] == pytest.approx(12 / 14)
    assert s["person_fraction"] == pytest.approx(6 / 14)
    assert s["bf_2"] == pytest.approx(boundary_fscore(pred, target, 2)["f"])
    perfect = SegMetrics(boundary_tolerances=(2, 5))
    perfect.update(torch.from_numpy(target.clip(0, 1))[None], torch.from_numpy(target)[None])
    row = image_row("x", "src", (4, 4), perfect)
    assert row["bf_2"] == row["bf_5"] == row["iou"] == 1.0


def test_segmetrics_hand_case() -> None:
    truth = torch.from_numpy(square(10, 10, (2, 5), (2, 5))).long()
    pred = torch.from_numpy(square(10, 10, (2, 5), (3, 6))).long()
    m = SegMetrics(boundary_tolerances=(0, 1))
    m.update(pred[None], truth[None])
    m.update(pred[None], truth[None])  # the same image twice: counts double, ratios stay
    out = m.compute()
    # Per image: 16 true, 16 predicted, 12 shared -> tp 12, fp 4, fn 4, tn 80 of 100.
    assert m.confusion.tolist() == [[160, 8], [8, 24]]
    assert out["pixel_acc"] == pytest.approx(0.92)
    assert out["iou_person"] == pytest.approx(0.6)  # 12 / 20
    assert out["bf_0"] == pytest.approx(0.5) and out["bf_1"] == 1.0  # see the shift test
    assert out["boundary_iou"] == pytest.approx(1 / 3)  # d = 1 on a 10x10 image
    assert int(m.images) == 2
    assert all(t.dtype == torch.int64 for t in m.state_tensors())
    m.reset()
    assert all(int(t.sum()) == 0 for t in m.state_tensors())


def test_segmetrics_halves_sum_to_whole() -> None:
    rng = np.random.default_rng(2)
    target = _blobs(rng, 6, 32, 40)
    pred = _blobs(rng, 6, 32, 40).clamp(max=1)
    whole = SegMetrics()
    whole.update(pred, target)
    first, second = SegMetrics(), SegMetrics()
    first.update(pred[:2], target[:2])
    second.update(pred[2:], target[2:])
    # What all_reduce_sum_ would do with two ranks, applied as the in-place hook.
    others = iter(second.state_tensors())
    first.reduce_(lambda t: t.add_(next(others)))
    for a, b in zip(first.state_tensors(), whole.state_tensors(), strict=True):
        assert torch.equal(a, b)
    assert first.compute() == pytest.approx(whole.compute(), nan_ok=True)
    assert set(whole.compute()) >= {"pixel_acc", "miou", "iou_person", "bf_2", "bf_5"}


def test_segmetrics_multiclass_and_no_boundaries() -> None:
    target = T([[[0, 1, 2], [2, 255, 0]]])
    pred = T([[[0, 2, 2], [2, 1, 0]]])
    m = SegMetrics(num_classes=3, boundary_tolerances=(), boundary_iou_ratio=None)
    m.update(pred, target)
    out = m.compute()
    assert "bf_2" not in out and "boundary_iou" not in out
    # (truth, pred) on labelled pixels: (0,0) (1,2) (2,2) (2,2) (0,0) -> 4 of 5 right.
    assert out["pixel_acc"] == pytest.approx(4 / 5)
    assert math.isnan(out["precision_class1"])  # class 1 never predicted on a labelled pixel
    # Boundaries of class 2 against the rest. Truth edges: (0,2) (next to labelled 1 and 0) and
    # (1,0) (below 0): 2. Predicted edges: (0,1), (0,2), (1,0): 3. Tolerance 0: 2 shared ->
    # P = 2/3, R = 1, F = 0.8. Tolerance 1: (0,1) is 1 px from (0,2) -> F = 1.
    m3 = SegMetrics(num_classes=3, boundary_class=2, boundary_tolerances=(0, 1))
    m3.update(pred, target)
    assert m3.compute()["bf_0"] == pytest.approx(0.8)
    assert m3.compute()["bf_1"] == 1.0
    with pytest.raises(ValueError, match="one shape"):
        m.update(pred[0], target[0])
    with pytest.raises(ValueError, match="boundary_class=2"):
        SegMetrics(num_classes=2, boundary_class=2)


def test_merge_sums_counts_and_refuses_other_settings() -> None:
    truth = torch.from_numpy(square(10, 10, (2, 5), (2, 5))).long()[None]
    pred = torch.from_numpy(square(10, 10, (2, 5), (3, 6))).long()[None]
    one, two, both = SegMetrics(), SegMetrics(), SegMetrics()
    one.update(pred, truth)
    two.update(truth, truth)
    both.update(pred, truth)
    both.update(truth, truth)
    merged = SegMetrics().merge_(one).merge_(two)
    pairs = zip(merged.state_tensors(), both.state_tensors(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert merged.compute() == pytest.approx(both.compute(), nan_ok=True, abs=0)
    with pytest.raises(ValueError, match="settings differ"):
        SegMetrics.confusion_only(2).merge_(one)


def test_photos_without_people_are_counted_on_their_own() -> None:
    """Per photo without people (labelled pixels, no person among them): the share of its
    labelled pixels predicted person; the mean over such photos, and the share of them over
    1%. Photos with people, and photos with no labelled pixel, are not among them; the false
    people still count in the confusion matrix (the IoU)."""
    target = torch.zeros(4, 10, 10, dtype=torch.long)
    target[0, :5] = 1  # a photo with a person
    target[1, 0, 0] = 255  # without people, 99 labelled pixels
    target[3] = 255  # nothing labelled
    pred = torch.zeros_like(target)
    pred[0, :5] = 1  # the person found
    pred[1, 5:] = 1  # 50 of 99 labelled pixels
    pred[2, 0, 0] = 1  # 1 of 100: not over 1%
    pred[3] = 1
    parts = [SegMetrics.confusion_only(2), SegMetrics.confusion_only(2)]
    parts[0].update(pred[:2], target[:2])
    parts[1].update(pred[2:], target[2:])
    merged = SegMetrics.confusion_only(2).merge_(parts[0]).merge_(parts[1])
    out = merged.compute()
    assert out["empty_images"] == 2 and out["empty_over_1pct"] == 0.5
    assert out["empty_person_share"] == pytest.approx((50 / 99 + 1 / 100) / 2, abs=1e-6)
    assert int(merged.confusion[0, 1]) == 51
    assert out["iou_person"] == 50 / (50 + 51) and out["iou_person_with_people"] == 1.0
    with_people = SegMetrics.confusion_only(2)
    with_people.update(pred[:1], target[:1])
    assert math.isnan(with_people.compute()["empty_person_share"])


def test_person_sizes_split_recall_and_iou_the_way_coco_sizes_people() -> None:
    """A large, a medium and a small person (COCO's areas): each pixel of a person belongs to
    the smallest one covering it, a false pixel to the nearest person; the buckets' counts add
    up to the photo's (person IoU over the buckets = the photo's person IoU)."""
    from seg.metrics.sizes import SizeSplit, size_index

    assert [size_index(a) for a in (0, 1023, 1024, 9215, 9216)] == [0, 0, 1, 1, 2]
    h, w = 200, 300
    large = np.zeros((h, w), np.uint8)
    large[20:180, 20:140] = 1  # 19,200 pixels
    small = np.zeros((h, w), np.uint8)
    small[50:60, 200:210] = 1  # 100
    medium = np.zeros((h, w), np.uint8)
    medium[100:150, 200:250] = 1  # 2,500
    child = np.zeros((h, w), np.uint8)
    child[30:50, 30:50] = 1  # 400, in front of the large one: its pixels are the child's
    pred = (large | medium).astype(bool)
    pred[20:180, 140:145] = True  # 800 false pixels beside the large person
    pred[60:62, 200:210] = True  # 20 just below the small one
    pred[120:130, 180:190] = True  # 100 false pixels left of the medium one (30 px from large)
    valid = np.ones((h, w), bool)
    valid[0:5, 0:5] = False
    split = SizeSplit()
    split.update(pred, [large, small, medium, child], valid)
    m = split.compute()
    assert (m["instances_small"], m["instances_medium"], m["instances_large"]) == (2, 1, 1)
    assert m["recall_small"] == 400 / 500 and m["found_small"] == 0.5  # the child, not the small
    assert m["iou_small"] == 400 / (500 + 20)
    assert m["recall_large"] == 1.0 and m["iou_large"] == 18_800 / (18_800 + 800)
    assert m["iou_medium"] == 2_500 / (2_500 + 100)
    counts = split.counts.numpy()
    people = (large | small | medium | child).astype(bool)
    assert counts[:, 2].sum() == people.sum() and counts[:, 3].sum() == (pred & people).sum()
    assert counts[:, 4].sum() == (pred & ~people & valid).sum()
    photo_iou = (pred & people).sum() / (pred | people).sum()
    assert counts[:, 3].sum() / (counts[:, 2].sum() + counts[:, 4].sum()) == pytest.approx(
        photo_iou
    )
    nobody = SizeSplit()
    nobody.update(pred, [])
    assert nobody.counts.sum() == 0


def test_metric_keys_are_built_and_read_by_one_pair_of_functions() -> None:
    from seg.metrics.keys import TRAIN_SOURCES, MetricKey, metric_key, metric_sources
    from seg.metrics.keys import parse_metric_key as parse

    assert metric_key("iou_person") == "val/iou_person"
    assert metric_key("iou_person", "ccp") == "val/ccp/iou_person"
    for key in ("val/iou_person", "val/ccp/iou_person", f"val/{TRAIN_SOURCES}/pixel_acc"):
        parsed = parse(key)
        assert parsed is not None and str(parsed) == key
    assert parse("val/ccp/iou_person") == MetricKey("iou_person", "ccp")
    assert not parse(f"val/{TRAIN_SOURCES}/miou").per_source and parse("val/a/b").per_source
    assert [parse(k) for k in ("train/loss", "confusion/all", "val//x", "val/a/b/c")] == [None] * 4
    keys = ["val/miou", "val/ccp/miou", "val/eg/miou", f"val/{TRAIN_SOURCES}/miou", "step"]
    assert metric_sources(keys) == ["ccp", "eg"]


@pytest.mark.parametrize("classes", [1, 2, 3, 5])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_class_map_and_mask_are_argmax_with_ties_nan_and_infinities(classes: int, dim: int) -> None:
    """class_map replaces argmax for speed; it must give the same indices bit for bit: the
    first index on ties, NaN above everything (also above +inf), in any dtype asked for."""
    g = torch.Generator().manual_seed(classes * 10 + dim)
    shape = [4, 6, 7]
    shape[dim] = classes
    for trial in range(12):
        scores = torch.randint(0, 3, shape, generator=g).float()  # many ties
        for value, share in ((float("nan"), 0.2), (float("inf"), 0.1), (float("-inf"), 0.1)):
            if trial % 2:
                scores[torch.rand(shape, generator=g) < share] = value
        for dtype in (torch.int64, torch.uint8):
            got = class_map(scores, dim, dtype)
            assert got.dtype == dtype
            assert torch.equal(got, scores.argmax(dim).to(dtype)), (trial, dtype)
        for k in range(classes + 1):  # a class beyond the last is never the largest
            mask = class_mask(scores, k, dim)
            assert mask.dtype == torch.bool
            assert torch.equal(mask, scores.argmax(dim) == k), (trial, k)
