"""Class probabilities at each image's original resolution, with optional test-time
augmentation (flip, several scales) and sliding windows.

Built on ``seg.inference.predictor``: one :class:`Predictor` per scale (its eval preset fits
the image into ``eval_size * scale``, as bounds of the long and short side, its ``logits`` does
the flip), and ``LogitRestorer`` crops the padding and resizes the logits to H x W. Per scale
the logits are restored and turned into probabilities; the probabilities are averaged over the
scales. Evaluation asks for class maps (``labels``), which are made band by band at the full
resolution, so a photo's size bounds memory at a few bytes per pixel. Sliding windows cover
each scale's model input; overlapping logits are averaged (as mmsegmentation's ``slide`` mode).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from seg.config import PERSON, Config
from seg.data.transforms import build_eval_transform
from seg.errors import ConfigError
from seg.inference.predictor import BAND_VALUES, LogitRestorer, Predictor, build_predictor
from seg.inference.refine import GuidedRefiner
from seg.models import SegmentationModel


def _windows(size: int, window: int, stride: int) -> list[int]:
    """Start offsets of windows of ``window`` (<= size) every ``stride``, the last one flush
    with the end, so that every position is covered."""
    count = max(size - window + stride - 1, 0) // stride + 1
    return sorted({min(i * stride, size - window) for i in range(count)})


def slide_logits(
    logits_fn: Callable[[Tensor], Tensor],
    batch: Tensor,
    window: Sequence[int],
    stride: Sequence[int],
) -> Tensor:
    """Logits of (B, 3, H, W) from windows of ``window`` (H, W) every ``stride`` (H, W).

    A window larger than the input shrinks to it (one window: the plain logits); the window is
    not turned for a landscape input. Where windows
    overlap their logits are averaged. ``logits_fn``: (B, 3, h, w) -> (B, K, h, w).
    """
    _, _, h, w = batch.shape
    wh, ww = min(int(window[0]), h), min(int(window[1]), w)
    out: Tensor | None = None
    count = torch.zeros(1, 1, h, w)
    for y in _windows(h, wh, int(stride[0])):
        for x in _windows(w, ww, int(stride[1])):
            logits = logits_fn(batch[:, :, y : y + wh, x : x + ww])
            if out is None:
                out = logits.new_zeros(*logits.shape[:2], h, w)
                count = count.to(logits.device)
            out[:, :, y : y + wh, x : x + ww] += logits
            count[:, :, y : y + wh, x : x + ww] += 1
    assert out is not None  # at least one window
    return out / count


class ProbabilityPredictor:
    """``predictor(images) -> list[(K, H, W) float32 probabilities]`` at each image's size.

    ``predictors``: one :class:`Predictor` per scale (same model, each its own eval size and
    flip setting). ``window`` / ``stride`` (H, W): sliding windows over each model input.
    ``eval_size``: the unscaled eval size (default: the first predictor's), which sets
    ``refine``'s radius whatever the order of the scales.
    """

    def __init__(
        self,
        predictors: Sequence[Predictor],
        window: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        refine: GuidedRefiner | None = None,
        eval_size: Sequence[int] | None = None,
    ) -> None:
        if not predictors:
            raise ConfigError("at least one scale is needed")
        self.predictors = list(predictors)
        self.eval_size = tuple(eval_size) if eval_size else self.predictors[0].eval_size
        self.refine = refine
        self.window = tuple(window) if window else None
        if self.window and not stride:  # default: a third of each window overlaps the next
            stride = [max(1, (2 * s) // 3) for s in self.window]
        self.stride = tuple(stride) if stride else None
        self.device = self.predictors[0].device

    def _logits(self, predictor: Predictor, batch: Tensor) -> Tensor:
        if self.window is None:
            return predictor.logits(batch)
        return slide_logits(predictor.logits, batch, self.window, self.stride)

    def _restorers(self, images: Sequence[np.ndarray]) -> list[list[LogitRestorer]]:
        """Per image, one :class:`LogitRestorer` per scale (the network's small outputs)."""
        per_image: list[list[LogitRestorer]] = [[] for _ in images]
        if not images:
            return per_image
        for predictor in self.predictors:
            logits = predictor.batch_logits(images, functools.partial(self._logits, predictor))
            for restorers, image, item in zip(per_image, images, logits, strict=True):
                restorers.append(LogitRestorer(item, image.shape[:2], predictor.eval_size))
        return per_image

    @staticmethod
    def _band_probabilities(restorers: list[LogitRestorer], start: int, stop: int) -> Tensor:
        """(K, H, stop - start): the softmax of each scale's logits there, averaged."""
        total = restorers[0].columns(start, stop).softmax(dim=0)
        for restorer in restorers[1:]:
            total += restorer.columns(start, stop).softmax(dim=0)
        return total / len(restorers)

    @torch.inference_mode()
    def __call__(self, images: Sequence[np.ndarray]) -> list[Tensor]:
        """uint8 (H, W, 3) RGB images of any sizes -> (K, H, W) softmax probabilities on
        ``self.device``. Holds K float32 maps of each image's full size: for large photos
        :meth:`labels` needs a few bytes per pixel instead."""
        out = []
        for image, restorers in zip(images, self._restorers(images), strict=True):
            full = self._band_probabilities(restorers, 0, restorers[0].width)
            if self.refine is not None:
                person = full[PERSON].clone()
                for start, stop, q in self._refined(image, restorers):
                    person[:, start:stop] = q
                full = torch.stack([1 - person, person])
            out.append(full)
        return out

    def _refined(
        self, image: np.ndarray, restorers: list[LogitRestorer]
    ) -> Iterator[tuple[int, int, Tensor]]:
        """Bands ``(start, stop, refined person probability)`` of ``self.refine``."""
        assert self.refine is not None
        if restorers[0].num_classes != 2:
            raise ConfigError(
                f"refine.guided needs a 2-class model, not {restorers[0].num_classes}"
            )

        def person(lo: int, hi: int) -> Tensor:
            return self._band_probabilities(restorers, lo, hi)[PERSON]

        return self.refine.bands(image, person, self.eval_size)

    @torch.inference_mode()
    def labels(self, images: Sequence[np.ndarray], max_values: int = BAND_VALUES) -> list[Tensor]:
        """uint8 (H, W, 3) RGB images -> uint8 (H, W) class maps (the argmax of
        :meth:`__call__`'s probabilities), on the CPU, computed band by band: the full-size
        floats in memory at any time are ``max_values`` per scale, whatever the photo's size."""
        out = []
        for image, restorers in zip(images, self._restorers(images), strict=True):
            first = restorers[0]
            if first.num_classes > 255:  # uint8 labels, 255 being the ignore index
                raise ValueError(f"labels() holds 255 classes at most, not {first.num_classes}")
            label = torch.empty(first.height, first.width, dtype=torch.uint8)
            if self.refine is not None:  # person where its refined probability is above 1/2
                for start, stop, q in self._refined(image, restorers):
                    label[:, start:stop] = (q > 0.5).to("cpu", torch.uint8)
            else:
                for start, stop in first.bands(max_values):
                    band = self._band_probabilities(restorers, start, stop)
                    label[:, start:stop] = band.argmax(dim=0).to("cpu", torch.uint8)
            out.append(label)
        return out


def scaled_size(eval_size: Sequence[int], scale: float) -> tuple[int, int]:
    """``eval_size`` (H, W) times ``scale``, rounded, at least 1 pixel."""
    return max(1, round(eval_size[0] * scale)), max(1, round(eval_size[1] * scale))


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
    """Place ``model`` (see ``build_predictor``) and make one predictor per scale of
    ``cfg.aug.eval_size`` (``cfg``: the training config, with the eval size to use)."""
    base = build_predictor(model, cfg, device, flip, column_devices)
    predictors = []
    for scale in scales:
        size = scaled_size(base.eval_size, scale)
        aug = dataclasses.replace(cfg.aug, eval_size=list(size))
        predictors.append(Predictor(base.model, build_eval_transform(aug), size, tta=flip))
    return ProbabilityPredictor(predictors, window, stride, refine, base.eval_size)
