"""Class probabilities at each image's original resolution, with optional test-time
augmentation (flip, several scales) and sliding windows.

Built on ``seg.inference.predictor``: one :class:`Predictor` per scale (its eval preset fits
the image into ``eval_size * scale``, as bounds of the long and short side, its ``logits`` does
the flip), and ``restore_logits`` crops the padding and resizes the logits to H x W. Per scale
the logits are restored and turned into probabilities; the probabilities are averaged over the
scales. Sliding windows cover each scale's model input; overlapping logits are averaged (as
mmsegmentation's ``slide`` mode).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from seg.config import Config
from seg.data.transforms import build_eval_transform
from seg.inference.predictor import Predictor, build_predictor, restore_logits


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
    """

    def __init__(
        self,
        predictors: Sequence[Predictor],
        window: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
    ) -> None:
        if not predictors:
            raise ValueError("at least one scale is needed")
        self.predictors = list(predictors)
        self.window = tuple(window) if window else None
        if self.window and not stride:  # default: a third of each window overlaps the next
            stride = [max(1, (2 * s) // 3) for s in self.window]
        self.stride = tuple(stride) if stride else None
        self.device = self.predictors[0].device

    def _logits(self, predictor: Predictor, batch: Tensor) -> Tensor:
        if self.window is None:
            return predictor.logits(batch)
        return slide_logits(predictor.logits, batch, self.window, self.stride)

    @torch.inference_mode()
    def __call__(self, images: Sequence[np.ndarray]) -> list[Tensor]:
        """uint8 (H, W, 3) RGB images of any sizes -> softmax probabilities on ``self.device``."""
        if not images:
            return []
        sums: list[Tensor | None] = [None] * len(images)
        for predictor in self.predictors:
            logits = predictor.batch_logits(images, functools.partial(self._logits, predictor))
            for i, (image, item) in enumerate(zip(images, logits, strict=True)):
                prob = restore_logits(item, image.shape[:2], predictor.eval_size).softmax(dim=0)
                sums[i] = prob if sums[i] is None else sums[i] + prob
        return [s / len(self.predictors) for s in sums]  # type: ignore[operator]


def scaled_size(eval_size: Sequence[int], scale: float) -> tuple[int, int]:
    """``eval_size`` (H, W) times ``scale``, rounded, at least 1 pixel."""
    return max(1, round(eval_size[0] * scale)), max(1, round(eval_size[1] * scale))


def build_probability_predictor(
    model: nn.Module,
    cfg: Config,
    device: str = "auto",
    column_devices: Sequence[str] = (),
    flip: bool = False,
    scales: Sequence[float] = (1.0,),
    window: Sequence[int] | None = None,
    stride: Sequence[int] | None = None,
) -> ProbabilityPredictor:
    """Place ``model`` (see ``build_predictor``) and make one predictor per scale of
    ``cfg.aug.eval_size`` (``cfg``: the training config, with the eval size to use)."""
    base = build_predictor(model, cfg, device, flip, column_devices)
    predictors = []
    for scale in scales:
        size = scaled_size(base.eval_size, scale)
        aug = dataclasses.replace(cfg.aug, eval_size=list(size))
        predictors.append(Predictor(base.model, build_eval_transform(aug), size, tta=flip))
    return ProbabilityPredictor(predictors, window, stride)
