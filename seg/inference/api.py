"""One call from Python: ``load_model()`` -> a :class:`Segmenter` over the shipped person model
(or any checkpoint), called on a path, an RGB NumPy array or a PIL image::

    from seg import load_model

    model = load_model()             # the shipped person model; or load_model("runs/myrun")
    result = model("photo.jpg")      # a path, an RGB NumPy array (H, W, 3) or a PIL image
    result.mask                      # bool (H, W): person
    result.prob                      # float32 (H, W): the person probability

It is ``predict.py``'s predictor, backend and defaults (ONNX Runtime on a CPU, the export cached
once), so its masks are ``predict.py``'s, pixel for pixel.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seg.config import TTA, Backend, Config, InferencePrecision
from seg.config.inference import SHIPPED_MODEL
from seg.data.io import read_image
from seg.errors import DataError
from seg.inference.backend import load_inference_model
from seg.inference.predictor import Prediction, Predictor, build_predictor

Image = str | Path | np.ndarray | Any  # Any: a PIL image (PIL is imported only to read one)


class Segmenter:
    """A loaded model and its predictor: ``segmenter(image)`` -> :class:`Prediction` (``mask``
    bool (H, W), ``prob`` float32 (H, W)) at the image's own size; ``segmenter.predict(images)``
    for several at once (one batch)."""

    def __init__(self, predictor: Predictor, config: Config, checkpoint: str) -> None:
        self.predictor, self.config, self.checkpoint = predictor, config, checkpoint

    def __call__(self, image: Image) -> Prediction:
        return self.predict([image])[0]

    def predict(self, images: Sequence[Image]) -> list[Prediction]:
        return self.predictor([as_rgb(image) for image in images])

    def __repr__(self) -> str:
        return f"Segmenter({self.checkpoint!r}, backend={self.predictor.model.backend})"


def as_rgb(image: Image) -> np.ndarray:
    """uint8 (H, W, 3) RGB from a path (read as ``predict.py`` reads it), a NumPy array (uint8
    RGB, or (H, W) gray) or a PIL image (converted to RGB)."""
    if isinstance(image, str | Path):
        return read_image(Path(image))
    if not isinstance(image, np.ndarray) and hasattr(image, "convert"):  # a PIL image
        image = np.asarray(image.convert("RGB"))
    if not isinstance(image, np.ndarray):
        raise DataError(
            f"expected a path, a NumPy array or a PIL image, not {type(image).__name__}"
        )
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=2)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or 0 in image.shape:
        raise DataError(
            f"expected a uint8 RGB array of shape (H, W, 3) or a (H, W) gray one, not "
            f"{image.dtype} {image.shape}"
        )
    return np.ascontiguousarray(image)


def load_model(
    checkpoint: str | Path = SHIPPED_MODEL,
    device: str = "auto",
    backend: Backend | str = Backend.auto,
    precision: InferencePrecision | str = InferencePrecision.fp32,
    calibration: str | None = None,
    threads: int = 0,
    tta: Sequence[TTA | str] = (),
    scales: Sequence[float] = (1.0,),
) -> Segmenter:
    """A :class:`Segmenter` over ``checkpoint``: the shipped model's name (``person``, the
    default), a checkpoint file or a run folder. The other arguments are ``predict.py``'s
    options of the same names."""
    model, cfg = load_inference_model(
        checkpoint, backend, device, (), threads, precision, calibration
    )
    predictor = build_predictor(model, cfg, device, tta=tta, scales=scales)
    return Segmenter(predictor, cfg, str(checkpoint))
