"""The guided filter that refines person probabilities at the photo's resolution: its box
means, its band-by-band form, that it moves a blurred outline onto the photo's edge, and the
``refine.*`` options of evaluation and prediction."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seg.config import RefineConfig, compose_config, compose_eval_config
from seg.config.predict import compose_predict_config
from seg.data.io import read_image
from seg.inference import build_predictor
from seg.inference.refine import GuidedRefiner, box_mean, build_refiner, guided_filter
from seg.models import SegmentationModel


def test_box_mean_is_the_mean_over_each_clipped_window():
    x = torch.rand(2, 37, 53)
    for r in (1, 4, 20):
        expected = F.avg_pool2d(x[None], 2 * r + 1, 1, r, count_include_pad=False)[0]
        torch.testing.assert_close(box_mean(x, r), expected, rtol=0, atol=1e-6)


def step_photo(h: int = 60, w: int = 90, edge: int = 47) -> tuple[np.ndarray, torch.Tensor]:
    """A photo dark left of column ``edge`` and bright right of it, and the person
    probability a low-resolution network might give it: a ramp 16 pixels wide whose middle
    is 3 pixels right of the edge (a blurred outline, slightly misplaced)."""
    photo = np.full((h, w, 3), 40, np.uint8)
    photo[:, edge:] = (200, 180, 160)
    cols = torch.arange(w, dtype=torch.float32)
    prob = ((cols - edge - 3 + 8) / 16).clamp(0, 1).expand(h, w).clone()
    return photo, prob


@pytest.mark.parametrize("color", [False, True])
def test_the_filter_moves_a_blurred_outline_onto_the_photos_edge(color):
    photo, prob = step_photo()
    guide = torch.from_numpy(photo).permute(2, 0, 1).float() / 255
    guide = guide if color else guide.mean(0, keepdim=True)
    truth = torch.zeros_like(prob, dtype=torch.bool)
    truth[:, 47:] = True
    assert ((prob > 0.5) != truth).sum() == 4 * 60  # the plain mask: columns 47-50 missed
    q = guided_filter(guide, prob, radius=8, eps=1e-3)
    assert torch.equal(q > 0.5, truth)  # the refined mask's edge is the photo's
    assert abs(float(q.mean() - prob.mean())) < 1e-3  # it moves the outline, keeps the mass
    flat = torch.full_like(prob, 0.7)  # a probability without structure stays as it is
    torch.testing.assert_close(guided_filter(guide, flat, 8, 1e-3), flat)


@pytest.mark.parametrize("color", [False, True])
def test_bands_with_a_halo_equal_the_whole_photo(color):
    rng = np.random.default_rng(0)
    photo = rng.integers(0, 256, (50, 97, 3), dtype=np.uint8)
    prob = torch.from_numpy(rng.random((50, 97), dtype=np.float32))
    refiner = GuidedRefiner(radius=3, eps=1e-2, color=color)
    whole = torch.cat(
        [q for *_, q in refiner.bands(photo, lambda lo, hi: prob[:, lo:hi], (50, 97))], 1
    )
    bands = list(refiner.bands(photo, lambda lo, hi: prob[:, lo:hi], (50, 97), max_values=50 * 9))
    assert len(bands) > 5 and [b[0] for b in bands] == list(range(0, 97, 9))
    torch.testing.assert_close(torch.cat([q for *_, q in bands], 1), whole, rtol=0, atol=1e-5)


def test_the_radius_is_in_model_input_pixels():
    refiner = GuidedRefiner(radius=4)
    assert refiner.pixels((800, 600), (400, 300)) == 8  # seen at 0.5x
    assert refiner.pixels((600, 800), (400, 300)) == 8  # landscape: the transposed bounds
    assert refiner.pixels((300, 200), (400, 300)) == 3  # upscaled to 400x267: 4 * 0.75
    assert build_refiner(RefineConfig()) is None
    assert build_refiner(RefineConfig(guided=True, radius=2, eps=0.1)) == GuidedRefiner(2, 0.1)


class StepModel(SegmentationModel):
    """Person logits that ramp across the middle column of the model input."""

    def __init__(self) -> None:
        super().__init__(channels_last=False)
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        w = x.shape[-1]
        ramp = (torch.arange(w, dtype=x.dtype) - w / 2) / 2
        person = ramp.expand(x.shape[0], 1, *x.shape[-2:])
        return {"out": torch.cat([-person, person], 1)}


def test_evaluation_and_prediction_refine_alike(vikram_pairs: Path):
    """The predictor gives evaluation and prediction the same refined person probability
    and mask (its probability above 1/2), and refining changes them."""
    photo = read_image(vikram_pairs / "Training_Images" / "1.jpg")
    cfg = compose_config(["aug.eval_size=[96,80]"])
    refiner = GuidedRefiner(radius=2, eps=1e-3)
    plain = build_predictor(StepModel(), cfg, "cpu")
    refined = build_predictor(StepModel(), cfg, "cpu", refine=refiner)
    prob = refined.probabilities([photo])[0]
    assert prob.shape == (2, *photo.shape[:2])
    torch.testing.assert_close(prob.sum(0), torch.ones_like(prob[0]))
    assert (prob[1] - plain.probabilities([photo])[0][1]).abs().max() > 0.05
    assert torch.equal(refined.labels([photo])[0], (prob[1] > 0.5).to(torch.uint8))
    prediction = refined([photo])[0]
    np.testing.assert_array_equal(prediction.prob, prob[1].numpy())
    assert np.array_equal(prediction.mask, prediction.prob > 0.5)


def test_multi_scale_refinement_does_not_depend_on_the_order_of_the_scales(
    vikram_pairs: Path, monkeypatch: pytest.MonkeyPatch
):
    """The radius is set by the unscaled eval size, not by whichever scale is listed first."""
    photo = read_image(vikram_pairs / "Training_Images" / "1.jpg")
    cfg = compose_config(["aug.eval_size=[96,80]"])
    refiner = GuidedRefiner(radius=2, eps=1e-3)
    sizes = []
    real = GuidedRefiner.bands

    def spy(self, image, person, eval_size):
        sizes.append(tuple(eval_size))
        return real(self, image, person, eval_size)

    monkeypatch.setattr(GuidedRefiner, "bands", spy)
    probs = [
        build_predictor(StepModel(), cfg, "cpu", scales=s, refine=refiner).probabilities([photo])[0]
        for s in ([0.75, 1.0, 1.25], [1.25, 1.0, 0.75])
    ]
    assert sizes == [(96, 80), (96, 80)]
    torch.testing.assert_close(probs[0], probs[1])


@pytest.mark.parametrize("override", ["refine.radius=0", "refine.eps=-1"])
def test_bad_refine_options_name_the_key(override):
    key = override.split("=")[0]
    with pytest.raises(ValueError, match=re.escape(key)):
        compose_eval_config(["checkpoint=x.pt", override])
    with pytest.raises(ValueError, match=re.escape(key)):
        compose_predict_config(["checkpoint=x.pt", "input=x.jpg", override])
