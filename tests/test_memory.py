"""Bounded memory per image: evaluation and prediction of a large photo, and the band-by-band
restoring to full size that makes it possible, against the one-piece computation."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from training_utils import REPO, subprocess_env

from seg.checkpoint import load_model_from_checkpoint
from seg.config import TTA
from seg.data import pixel_batches
from seg.data.io import read_image
from seg.data.transforms import eval_content_size
from seg.inference.predictor import LogitRestorer, Predictor, Scale, build_predictor
from seg.inference.render import cutout, overlay

# One xdist worker runs this module (pyproject.toml: --dist loadgroup): its module fixtures
# are built once.
pytestmark = pytest.mark.xdist_group("memory")

# Peak memory above the warm process, bytes per pixel of a 3200 x 2400 photo (measured with the
# tiny test model and malloc's mmap threshold fixed, see peak_bytes_per_pixel: evaluation
# 25.2-25.5, prediction 16.2-16.4 in 4 runs; without the fixed threshold 20.5-28.0 and 5.2-7.4
# in 3, and up to 34 on a busy machine). Before the banded restoring:
# evaluation 67 (full-size float probabilities, int64 labels, a distance transform, full-size
# gallery panels), prediction 31 (a batch of full-size predictions, float blends).
EVALUATE_BYTES_PER_PIXEL = 35
PREDICT_BYTES_PER_PIXEL = 22


@pytest.fixture(scope="module")
def checkpoint(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """last.pt of a copy of the session's real 2-step run (single-column net, vikram pairs)."""
    run = shutil.copytree(tiny_run, tmp_path_factory.mktemp("run") / "run")
    return run / "checkpoints" / "last.pt"


@pytest.fixture(scope="module")
def large_photo(vikram_pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real vikram photo and its mask enlarged to 3200 x 2400, as a ``data=folder`` root."""
    root = tmp_path_factory.mktemp("large")
    (root / "images").mkdir()
    (root / "masks").mkdir()
    src = vikram_pairs
    image = cv2.imread(str(src / "Training_Images" / "1.jpg"))
    mask = cv2.imread(str(src / "Ground_Truth" / "1.png"), cv2.IMREAD_GRAYSCALE)
    size = (3200, 2400)
    image = cv2.resize(image, size, interpolation=cv2.INTER_CUBIC)
    mask = cv2.resize(mask, size, interpolation=cv2.INTER_NEAREST)
    assert cv2.imwrite(str(root / "images" / "big.jpg"), image)
    assert cv2.imwrite(str(root / "masks" / "big.png"), mask)
    return root


def peak_bytes_per_pixel(checkpoint: Path, root: Path, kind: str, out: Path) -> float:
    """The peak of ``kind`` on the photo in ``root``, in a fresh process. glibc's malloc would
    raise its mmap threshold after the warm run's large frees (up to 32 MB), so the measured
    run's blocks of a few MB (the bands) would come from the heap and stay resident when freed:
    a peak of allocator history, not of live memory, that varied from 19 to 34 bytes per pixel
    between runs. A fixed threshold (1 MB) maps every large block and unmaps it when freed."""
    args = [sys.executable, str(REPO / "tests" / "peak_memory.py")]
    args += [str(checkpoint), str(root), kind, str(out)]
    env = {**subprocess_env(), "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return float(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("kind", "limit"),
    [("evaluate", EVALUATE_BYTES_PER_PIXEL), ("predict", PREDICT_BYTES_PER_PIXEL)],
)
def test_a_large_photo_costs_a_few_bytes_per_pixel(
    checkpoint: Path, large_photo: Path, tmp_path: Path, kind: str, limit: float
) -> None:
    used = peak_bytes_per_pixel(checkpoint, large_photo, kind, tmp_path / "out")
    assert 0 < used < limit, f"{kind}: {used:.1f} bytes per pixel (limit {limit})"


def test_bands_of_columns_equal_one_interpolation() -> None:
    """Restoring band by band gives F.interpolate's logits of the whole map: bit for bit when
    upsampling (the network's output is smaller than the photo), to rounding otherwise."""
    torch.manual_seed(0)
    cases = [
        ((64, 48), (825, 550)),
        ((48, 64), (183, 276)),
        ((20, 15), (1000, 999)),
        ((9, 7), (5, 3)),
    ]
    for (h, w), (big_h, big_w) in cases:
        eval_size = (max(h, w), min(h, w))
        logits = torch.randn(2, h + 3, w + 5) * 4  # padded canvas: the crop is the restorer's
        restorer = LogitRestorer(logits, (big_h, big_w), eval_size)
        assert restorer.wide.shape[-1] == big_w
        bands = list(restorer.bands(max_values=2 * big_h * 7))
        assert len(bands) == -(-big_w // 7) and bands[-1][1] == big_w
        pieces = torch.cat([restorer.columns(a, b) for a, b in bands], dim=2)
        ch, cw = eval_content_size((big_h, big_w), eval_size)
        whole = F.interpolate(
            logits[None, :, :ch, :cw], size=(big_h, big_w), mode="bilinear", align_corners=False
        )[0]
        if big_h >= ch and big_w >= cw:
            assert torch.equal(pieces, whole)
        torch.testing.assert_close(pieces, whole, rtol=0, atol=1e-5)


class FixedLogits(torch.nn.Module):
    """A model whose output is given: the same (K, h, w) logits for every input."""

    devices = (torch.device("cpu"),)

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"out": self.logits[None].expand(x.shape[0], -1, -1, -1)}


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("scales", [1, 2])
def test_probabilities_are_the_softmax_of_the_restored_logits(classes: int, scales: int) -> None:
    """Against the one-piece formula (crop, one F.interpolate, softmax, mean over scales): two
    classes take the sigmoid of the restored difference, equal to float rounding; the class map
    and the mask are the argmax of the probabilities returned, bit for bit."""
    torch.manual_seed(classes)
    canvas, eval_size, photo_hw = (48, 64), (64, 48), (183, 276)
    logits = torch.randn(classes, *canvas) * 4
    logits[:, 5, :] = 0  # ties: the first class wins them
    blank = {"image": torch.zeros(3, *canvas)}
    predictor = Predictor(
        FixedLogits(logits), [Scale(eval_size, lambda image: blank) for _ in range(scales)]
    )
    photo = np.zeros((*photo_hw, 3), np.uint8)
    (prob,) = predictor.probabilities([photo])
    ch, cw = eval_content_size(photo_hw, eval_size)
    whole = F.interpolate(logits[None, :, :ch, :cw], size=photo_hw, mode="bilinear")[0]
    torch.testing.assert_close(prob, whole.softmax(0), rtol=0, atol=2e-6)
    for max_values in (1 << 22, 2 * photo_hw[0] * 5):
        (label,) = predictor.labels([photo], max_values=max_values)
        assert torch.equal(label, prob.argmax(0).to(torch.uint8))
    (pred,) = predictor([photo])
    assert np.array_equal(pred.mask, label.numpy() == 1)
    assert np.array_equal(pred.prob, prob[1].numpy())


def test_labels_made_in_bands_are_the_argmax_of_the_probabilities(
    vikram_pairs: Path, checkpoint: Path
) -> None:
    """With every test-time option, the class map that evaluation scores equals the argmax of
    the full-size probabilities, however narrow its bands."""
    model, cfg = load_model_from_checkpoint(checkpoint, device="cpu")
    names = ("1.jpg", "3.jpg", "56.jpg")
    photos = [read_image(vikram_pairs / "Training_Images" / n) for n in names]
    options = [
        {},
        {"tta": [TTA.flip], "scales": [0.75, 1.25]},
        {"window": [48, 40], "stride": [24, 20]},
    ]
    for kwargs in options:
        predictor = build_predictor(model, cfg, "cpu", **kwargs)
        probs = predictor.probabilities(photos)
        for max_values in (1 << 24, 2 * 300 * 5):  # one band; bands of a few columns
            labels = predictor.labels(photos, max_values=max_values)
            for photo, prob, label in zip(photos, probs, labels, strict=True):
                assert label.dtype == torch.uint8 and label.shape == photo.shape[:2]
                assert torch.equal(label, prob.argmax(0).to(torch.uint8)), kwargs
    assert predictor.labels([]) == []


def test_renderers_in_bands_equal_the_one_piece_formula() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (301, 257, 3), dtype=np.uint8)
    mask = np.zeros((301, 257), np.uint8)
    mask = cv2.ellipse(mask, (120, 150), (80, 120), 0, 0, 360, 1, -1) > 0
    alpha = rng.random((301, 257)).astype(np.float32)
    rgba = cutout(image, alpha)
    assert np.array_equal(rgba[..., :3], image)
    assert np.array_equal(rgba[..., 3], np.clip(np.rint(alpha * 255), 0, 255).astype(np.uint8))
    tinted = overlay(image, mask, (255, 0, 255), 0.45)
    expected = np.rint(0.55 * image.astype(np.float32) + 0.45 * np.float32([255, 0, 255]))
    inside = cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0  # off the outline
    assert np.array_equal(tinted[inside], np.clip(expected, 0, 255).astype(np.uint8)[inside])
    assert np.array_equal(tinted[~mask], image[~mask])


def test_pixel_batches_bound_the_pixels_of_a_batch() -> None:
    assert pixel_batches([1, 1, 1, 1, 1], 2, 100) == [[0, 1], [2, 3], [4]]
    assert pixel_batches([60, 50, 10, 200, 5], 8, 100) == [[0], [1, 2], [3], [4]]
    assert pixel_batches([], 4, 100) == []
