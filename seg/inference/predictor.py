"""Batched prediction at each image's own resolution: the one predictor of ``predict.py`` and
``evaluate.py``.

The images go through the evaluation preset (resize into ``eval_size``, which bounds the long
and the short side, pad bottom/right to a canvas of the image's orientation), so images of any
sizes share one batch (``seg.data.batching``). Test-time options: the horizontal flip (logits
averaged with those of the mirrored input), several scales of ``eval_size`` (probabilities
averaged) and sliding windows over each model input (overlapping logits averaged, as
mmsegmentation's ``slide`` mode). Each image's logits are cropped back to its content
(``eval_content_size``) and resized bilinearly to its original H x W, band by band of columns,
and only then turned into probabilities: resizing logits rather than masks gives smooth,
sub-pixel contours, and the bands bound the memory of a photo of any size at a few bytes per
pixel. The guided filter (``seg.inference.refine``) optionally puts the person's outline back
on the photo's edges.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from seg.config import PERSON, TTA, Config, PredictorOptions
from seg.config.data import scaled_sides
from seg.data.batching import pad_batch, run_by_size
from seg.data.transforms import EvalImageTransform, check_aug_config, eval_content_size
from seg.devices import resolve_devices
from seg.errors import ConfigError
from seg.inference.refine import GuidedRefiner, build_refiner
from seg.metrics import class_map, class_mask
from seg.models import SegmentationModel

T = TypeVar("T")

# What Predictor.clock times: the eval preset and the batch (uint8 photos -> a normalised
# batch), the network (with flip and sliding windows), and each photo's work at its full size
# (logits cropped and resized, softmax, mask and probability, or class map).
PREDICTOR_STAGES = ("preset", "network", "full size")

# Values (classes x rows x columns) of full-size logits worked on at once: 4 M floats, 16 MB
# (with their softmax and argmax a few times that, beside an image's full-size results).
BAND_VALUES = 1 << 22


class StageClock:
    """Wall seconds spent in each named stage: ``time(stage, fn, *args)`` runs ``fn`` and times
    it, ``with clock.stage(name):`` times a block."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def time(self, stage: str, fn: Callable[..., T], *args: Any) -> T:
        with self.stage(stage):
            return fn(*args)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


@dataclass(frozen=True)
class Prediction:
    """One image's result at its original size."""

    mask: np.ndarray  # bool (H, W): person where the person probability is the largest
    prob: np.ndarray  # float32 (H, W) in [0, 1]: softmax probability of person


@dataclass(frozen=True)
class Scale:
    """The eval preset fitting images into ``eval_size`` (H, W: bounds of the long and the
    short side; landscape images get the transpose)."""

    eval_size: tuple[int, int]
    transform: Callable[..., dict]


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
    not turned for a landscape input. Where windows overlap their logits are averaged.
    ``logits_fn``: (B, 3, h, w) -> (B, K, h, w).
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


class Predictor:
    """uint8 (H, W, 3) RGB images of any sizes -> results at each image's own size:
    ``predictor(images)`` / :meth:`predictions` (person masks and probabilities, for
    ``predict.py``), :meth:`labels` (class maps, for ``evaluate.py``), :meth:`probabilities`.

    ``model`` must already sit on its devices (``model.devices[0]`` receives the batch) and
    return ``{"out": (B, K, H, W)}`` with K >= 2, class 1 = person. ``scales``: one eval preset
    per input size; their probabilities are averaged. ``flip`` averages the logits with those
    of the horizontally mirrored input (twice the compute). ``window`` / ``stride`` (H, W):
    sliding windows over each model input. ``eval_size``: the unscaled eval size (default: the
    first scale's), which sets ``refine``'s radius whatever the order of the scales.
    """

    def __init__(
        self,
        model: SegmentationModel,
        scales: Sequence[Scale],
        flip: bool = False,
        window: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        refine: GuidedRefiner | None = None,
        eval_size: Sequence[int] | None = None,
    ) -> None:
        if not scales:
            raise ConfigError("at least one scale is needed")
        self.model = model.eval()
        self.scales = list(scales)
        self.flip = flip
        self.window = tuple(window) if window else None
        if self.window and not stride:  # default: a third of each window overlaps the next
            stride = [max(1, (2 * s) // 3) for s in self.window]
        self.stride = tuple(stride) if self.window and stride else None
        self.refine = refine
        self.eval_size = tuple(eval_size) if eval_size else self.scales[0].eval_size
        self.device = model.devices[0]
        self.clock: StageClock | None = None  # set one to time PREDICTOR_STAGES

    def _stage(self, name: str) -> contextlib.AbstractContextManager[None]:
        return self.clock.stage(name) if self.clock is not None else contextlib.nullcontext()

    def logits(self, batch: Tensor) -> Tensor:
        """Normalised (B, 3, h, w) -> float32 logits (B, K, h, w), flipped too with ``flip``."""
        batch = batch.to(self.device, non_blocking=True)
        out = self.model(batch)["out"].float()
        if out.shape[1] < 2:
            raise ConfigError(
                f"the model has {out.shape[1]} output channel(s); prediction needs >= 2 "
                "classes (0 background, 1 person)"
            )
        if self.flip:
            out = (out + self.model(batch.flip(-1))["out"].float().flip(-1)) / 2
        return out

    def _input_logits(self, batch: Tensor) -> Tensor:
        if self.window is None or self.stride is None:
            return self.logits(batch)
        return slide_logits(self.logits, batch, self.window, self.stride)

    def _scale_logits(self, images: Sequence[np.ndarray]) -> list[list[Tensor]]:
        """Per image, per scale, its network logits (K, h, w) (padded canvases): portrait and
        landscape canvases padded into one batch, and each canvas size run on its own
        (``run_by_size``), so an image's logits never depend on its batch."""
        per_image: list[list[Tensor]] = [[] for _ in images]
        for scale in self.scales if images else []:
            with self._stage("preset"):
                tensors = [scale.transform(image=image)["image"] for image in images]
                if len(tensors) == 1:  # a view: nothing writes into a model's input
                    batch = tensors[0][None]
                else:
                    batch, _ = pad_batch(tensors)  # the padding never reaches the model
            with self._stage("network"):
                logits = run_by_size(self._input_logits, batch, [t.shape[-2:] for t in tensors])
            for items, item in zip(per_image, logits, strict=True):
                items.append(item)
        return per_image

    def _bands(
        self, image: np.ndarray, logits: list[Tensor], max_values: int
    ) -> Iterator[tuple[int, int, Tensor]]:
        """``(start, stop, p)`` over one image's columns, ``p`` the band's probabilities: for a
        2-class model (1, H, stop - start), the person's alone; otherwise (K, H, stop - start).
        Each scale's restored map is turned into probabilities, then the scales are averaged.

        Two classes are one map: the person's logit minus the background's, restored to full
        size (resizing is linear, so this is the difference of the restored logits, to float
        rounding, at half the work) and turned into the person's softmax probability by
        ``sigmoid`` (softmax of two logits is the sigmoid of their difference). Its class map
        is ``q > 0.5``, exactly the argmax of ``[1 - q, q]`` (:meth:`probabilities`' rows):
        for q >= 0.5, 1 - q is exact. With ``refine``, the refined person probability."""
        binary = logits[0].shape[0] == 2
        if binary:
            logits = [item[PERSON:] - item[:PERSON] for item in logits]
        elif self.refine is not None:
            raise ConfigError(f"refine.guided needs a 2-class model, not {logits[0].shape[0]}")
        restorers = [
            LogitRestorer(item, image.shape[:2], scale.eval_size)
            for item, scale in zip(logits, self.scales, strict=True)
        ]
        normalise = torch.sigmoid if binary else lambda x: x.softmax(dim=0)

        def probabilities(start: int, stop: int) -> Tensor:
            total = normalise(restorers[0].columns(start, stop))
            for restorer in restorers[1:]:
                total += normalise(restorer.columns(start, stop))
            return total / len(restorers) if len(restorers) > 1 else total

        if self.refine is None:
            for start, stop in restorers[0].bands(max_values):
                yield start, stop, probabilities(start, stop)
            return
        person = lambda lo, hi: probabilities(lo, hi)[0]  # noqa: E731
        for start, stop, q in self.refine.bands(image, person, self.eval_size):
            yield start, stop, q[None]

    def __call__(self, images: Sequence[np.ndarray]) -> list[Prediction]:
        return list(self.predictions(images))

    def threads(self) -> contextlib.AbstractContextManager[None]:
        """The backend's thread policy for the predictor's own torch work (an ONNX Runtime
        model's :meth:`~seg.inference.runtime.OnnxRuntimeModel.threads_for_torch`)."""
        policy = getattr(self.model, "threads_for_torch", None)
        return policy() if policy is not None else contextlib.nullcontext()

    def predictions(self, images: Sequence[np.ndarray]) -> Iterator[Prediction]:
        """Each image's :class:`Prediction`, in order, made at full size only when it is
        asked for: one batch through the network, then one image's full-size maps at a time
        (what a caller that writes each result before the next needs)."""
        with torch.inference_mode(), self.threads():
            logits = self._scale_logits(images)
        for image, items in zip(images, logits, strict=True):
            # Both left before the yield: the caller's code is its own.
            with torch.inference_mode(), self.threads(), self._stage("full size"):
                prob = torch.empty(image.shape[:2])
                mask = torch.empty(image.shape[:2], dtype=torch.bool)
                for start, stop, p in self._bands(image, items, BAND_VALUES):
                    if len(p) == 1:  # a 2-class band: the person's probability alone
                        prob[:, start:stop] = p[0]
                        mask[:, start:stop] = p[0] > 0.5
                    else:
                        prob[:, start:stop] = p[PERSON]
                        mask[:, start:stop] = class_mask(p, PERSON)
            yield Prediction(mask=mask.numpy(), prob=prob.numpy())

    @torch.inference_mode()
    def labels(self, images: Sequence[np.ndarray], max_values: int = BAND_VALUES) -> list[Tensor]:
        """uint8 (H, W) class maps (the argmax of :meth:`probabilities`), on the CPU, computed
        band by band: the full-size floats in memory at any time are ``max_values`` per scale,
        whatever the photo's size."""
        with self.threads():
            return self._labels(images, max_values)

    def _labels(self, images: Sequence[np.ndarray], max_values: int) -> list[Tensor]:
        out = []
        for image, items in zip(images, self._scale_logits(images), strict=True):
            if items[0].shape[0] > 255:  # uint8 labels, 255 being the ignore index
                raise ValueError(f"labels() holds 255 classes at most, not {items[0].shape[0]}")
            label = torch.empty(image.shape[:2], dtype=torch.uint8)
            for start, stop, p in self._bands(image, items, max_values):
                label[:, start:stop] = _class_map(p).cpu()
            out.append(label)
        return out

    @torch.inference_mode()
    def probabilities(self, images: Sequence[np.ndarray]) -> list[Tensor]:
        """(K, H, W) float32 probabilities on ``self.device``: K maps of each image's full
        size (:meth:`labels` and :meth:`predictions` need a few bytes per pixel instead)."""
        with self.threads():
            return self._probabilities(images)

    def _probabilities(self, images: Sequence[np.ndarray]) -> list[Tensor]:
        out = []
        for image, items in zip(images, self._scale_logits(images), strict=True):
            full = items[0].new_empty(items[0].shape[0], *image.shape[:2])
            for start, stop, p in self._bands(image, items, BAND_VALUES):
                full[:, :, start:stop] = torch.cat([1 - p, p]) if len(p) == 1 else p
            out.append(full)
        return out


def _class_map(p: Tensor) -> Tensor:
    """uint8 class map of a band of :meth:`Predictor._bands`: a 2-class band (the person's
    probability q alone) is person where q > 0.5, the argmax of ``[1 - q, q]``."""
    if len(p) == 1:
        return (p[0] > 0.5).to(torch.uint8)
    return class_map(p, dtype=torch.uint8)


def build_predictor(
    model: SegmentationModel,
    cfg: Config,
    device: str = "auto",
    column_devices: Sequence[str] = (),
    tta: Sequence[TTA | str] = (),
    scales: Sequence[float] = (1.0,),
    window: Sequence[int] | None = None,
    stride: Sequence[int] | None = None,
    refine: GuidedRefiner | None = None,
) -> Predictor:
    """Place ``model`` on ``device`` (``auto``: a GPU, else Apple's MPS, else the CPU; see
    ``seg.devices.resolve_devices``), or its columns on ``column_devices`` when given (e.g.
    ``["cuda:0", "cuda:1"]``, as in training), and make its :class:`Predictor` with the
    options of ``predict.py`` and ``evaluate.py`` (``tta``, ``scales``, ``slide.window``,
    ``slide.stride``, ``refine``).

    ``cfg`` is the training config the model was trained with (a checkpoint carries it): its
    ``aug.eval_size``, mean and std define the input the model expects.
    """
    spec, key = (list(column_devices), "column_devices") if column_devices else (device, "device")
    model.place(resolve_devices(spec, model.num_columns, key=key, mps=True))
    eval_size = tuple(int(v) for v in check_aug_config(cfg.aug).eval_size)
    views = []
    for scale in scales:
        h, w = scaled_sides(eval_size, scale)
        aug = dataclasses.replace(cfg.aug, eval_size=[h, w])
        views.append(Scale((h, w), EvalImageTransform(aug)))
    flip = TTA.flip in [TTA(t) for t in tta]
    return Predictor(model, views, flip, window, stride, refine, eval_size)


def predictor_from_options(
    model: SegmentationModel, cfg: Config, options: PredictorOptions
) -> Predictor:
    """:func:`build_predictor` with a script config's ``device``, ``column_devices``, ``tta``,
    ``scales``, ``slide`` and ``refine``; ``cfg`` is the model's training config."""
    return build_predictor(
        model,
        cfg,
        options.device,
        options.column_devices,
        options.tta,
        options.scales,
        options.slide.window,
        options.slide.stride,
        build_refiner(options.refine),
    )
