"""Batched prediction at each image's own resolution, on an automatically chosen device.

The images go through the evaluation preset (resize into ``aug.eval_size``, which bounds the
long and the short side, pad bottom/right to a canvas of the image's orientation), so images of
any sizes share one batch (``seg.data.batching``). Each image's logits are cropped back to its
content (``eval_content_size``), resized bilinearly to its original H x W, and only then turned
into a mask (argmax) and a person probability (softmax): resizing logits rather than masks
gives smooth, sub-pixel contours.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from seg.config import PERSON, Config
from seg.data.batching import pad_batch, run_by_size
from seg.data.transforms import build_eval_transform, check_aug_config, eval_content_size
from seg.devices import resolve_devices
from seg.errors import ConfigError
from seg.inference.refine import GuidedRefiner
from seg.models import SegmentationModel

# Values (classes x rows x width) of full-size logits worked on at once: 16 M floats, 64 MB.
BAND_VALUES = 1 << 24


@dataclass(frozen=True)
class Prediction:
    """One image's result at its original size."""

    mask: np.ndarray  # bool (H, W): person where the person logit is the largest
    prob: np.ndarray  # float32 (H, W) in [0, 1]: softmax probability of person


class LogitRestorer:
    """Undo the eval preset for one image, a band of columns at a time: (K, h, w) logits ->
    columns of its (K, H, W) logits, without ever holding all H x W of them.

    Crops the padding (bottom/right, of any amount: the canvas, a batch's) off, keeping
    ``[:h', :w']`` with ``(h', w') = eval_content_size(image_hw, eval_size)``, and resizes
    bilinearly (``align_corners=False``) to ``image_hw`` in two separable passes of
    ``F.interpolate``: the width once, for all h' rows (small: h' is the network's size), then
    the height per band of columns. A pass that keeps a side leaves it exact, and the height's
    weights do not depend on the columns, so the bands put together equal one ``F.interpolate``
    of the whole map to float rounding. Full-size work per band is ``K x H x columns`` floats:
    a 12000 x 12000 photo is scored in bands of tens of MB.
    """

    def __init__(self, logits: Tensor, image_hw: Sequence[int], eval_size: Sequence[int]) -> None:
        h, w = eval_content_size(image_hw, eval_size)
        self.height, self.width = int(image_hw[0]), int(image_hw[1])
        content = logits[None, :, :h, :w]
        self.wide = content if w == self.width else _resize(content, (h, self.width))

    @property
    def num_classes(self) -> int:
        return int(self.wide.shape[1])

    def columns(self, start: int, stop: int) -> Tensor:
        """Columns ``[start, stop)`` of the restored logits: (K, H, stop - start)."""
        band = self.wide[..., start:stop]
        if band.shape[-2] == self.height:
            return band[0]
        return _resize(band, (self.height, band.shape[-1]))[0]

    def bands(self, max_values: int = BAND_VALUES) -> Iterator[tuple[int, int]]:
        """``(start, stop)`` column ranges of at most ``max_values`` restored values each."""
        step = max(1, max_values // (self.num_classes * self.height))
        for start in range(0, self.width, step):
            yield start, min(start + step, self.width)


def _resize(x: Tensor, size: tuple[int, int]) -> Tensor:
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


def restore_logits(logits: Tensor, image_hw: Sequence[int], eval_size: Sequence[int]) -> Tensor:
    """Undo the eval preset: (K, h, w) logits -> (K, H, W) at the image's size, in one piece
    (:class:`LogitRestorer` does it band by band)."""
    restorer = LogitRestorer(logits, image_hw, eval_size)
    return restorer.columns(0, restorer.width)


class Predictor:
    """``predictor(images) -> list[Prediction]`` for uint8 (H, W, 3) RGB images of any sizes.

    ``model`` must already sit on its devices (``model.devices[0]`` receives the batch) and
    return ``{"out": (B, K, H, W)}`` with K >= 2, class 1 = person. ``transform`` is the eval
    preset for ``eval_size`` (bounds of the long and the short side). ``tta=True`` averages the
    logits with those of the horizontally mirrored batch (twice the compute).
    """

    def __init__(
        self,
        model: SegmentationModel,
        transform: Callable[..., dict],
        eval_size: tuple[int, int],
        tta: bool = False,
        refine: GuidedRefiner | None = None,
    ) -> None:
        self.model = model.eval()
        self.transform = transform
        self.eval_size = eval_size
        self.tta = tta
        self.refine = refine
        self.device = model.devices[0]

    def logits(self, batch: Tensor) -> Tensor:
        """Normalised (B, 3, h, w) -> float32 logits (B, K, h, w)."""
        batch = batch.to(self.device, non_blocking=True)
        out = self.model(batch)["out"].float()
        if out.shape[1] < 2:
            raise ConfigError(
                f"the model has {out.shape[1]} output channel(s); prediction needs >= 2 "
                "classes (0 background, 1 person)"
            )
        if self.tta:
            out = (out + self.model(batch.flip(-1))["out"].float().flip(-1)) / 2
        return out

    def batch_logits(
        self, images: Sequence[np.ndarray], logits_fn: Callable[[Tensor], Tensor]
    ) -> Tensor:
        """uint8 (H, W, 3) images through the eval preset and ``logits_fn`` -> (B, K, H', W'):
        portrait and landscape canvases padded into one batch, and each canvas size run on its
        own (``run_by_size``), so an image's logits never depend on its batch."""
        tensors = [self.transform(image=image)["image"] for image in images]
        batch, _ = pad_batch(tensors)  # the padding never reaches the model
        return run_by_size(logits_fn, batch, [t.shape[-2:] for t in tensors])

    def __call__(self, images: Sequence[np.ndarray]) -> list[Prediction]:
        return list(self.predictions(images))

    def predictions(self, images: Sequence[np.ndarray]) -> Iterator[Prediction]:
        """Each image's :class:`Prediction`, in order, made at full size only when it is
        asked for: one batch through the network, then one image's full-size maps at a time
        (what a caller that writes each result before the next needs)."""
        if not images:
            return
        with torch.inference_mode():
            logits = self.batch_logits(images, self.logits)
        for image, item in zip(images, logits, strict=True):
            with torch.inference_mode():  # left before the yield: the caller's code is its own
                prediction = self._full_size(item, image)
            yield prediction

    def _full_size(self, item: Tensor, image: np.ndarray) -> Prediction:
        image_hw = image.shape[:2]
        if self.refine is not None:
            if item.shape[0] != 2:
                raise ConfigError(f"refine.guided needs a 2-class model, not {item.shape[0]}")
            raw = restore_logits(item[1:] - item[:1], image_hw, self.eval_size)[0].sigmoid_()
            prob = torch.empty_like(raw)
            for start, stop, q in self.refine.bands(
                image, lambda lo, hi: raw[:, lo:hi], self.eval_size
            ):
                prob[:, start:stop] = q
            return Prediction(mask=(prob > 0.5).cpu().numpy(), prob=prob.cpu().numpy())
        if item.shape[0] == 2:
            # Two classes: softmax = sigmoid of the logit difference, and resizing is linear,
            # so one full-size map serves both outputs (1/4 of the memory of two resized
            # logit maps, their softmax and an int64 argmax: 12000 x 12000 photos fit).
            diff = restore_logits(item[1:] - item[:1], image_hw, self.eval_size)[0]
            mask = diff > 0  # argmax == PERSON (a tie goes to background, as argmax's)
            prob = diff.sigmoid_()
        else:
            full = restore_logits(item, image_hw, self.eval_size)
            prob = full.softmax(dim=0)[PERSON]
            mask = full.argmax(dim=0) == PERSON
        return Prediction(mask=mask.cpu().numpy(), prob=prob.cpu().numpy())


def build_predictor(
    model: SegmentationModel,
    cfg: Config,
    device: str = "auto",
    tta: bool = False,
    column_devices: Sequence[str] = (),
    refine: GuidedRefiner | None = None,
) -> Predictor:
    """Place ``model`` on ``device`` (``auto``: a GPU, else Apple's MPS, else the CPU; see
    ``seg.devices.resolve_devices``), or its columns on ``column_devices`` when given (e.g.
    ``["cuda:0", "cuda:1"]``, as in training); with ``cfg``'s eval preset.

    ``cfg`` is the training config the model was trained with (a checkpoint carries it): its
    ``aug.eval_size``, mean and std define the input the model expects.
    """
    spec, key = (list(column_devices), "column_devices") if column_devices else (device, "device")
    model.place(resolve_devices(spec, model.num_columns, key=key, mps=True))
    eval_size = check_aug_config(cfg.aug).eval_size
    return Predictor(model, build_eval_transform(cfg.aug), eval_size, tta, refine)
