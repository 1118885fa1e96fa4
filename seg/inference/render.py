"""What a prediction becomes: masks, overlays, cut-outs, blurred or replaced backgrounds.

Every function takes the original image, uint8 (H, W, 3) RGB, and returns uint8 arrays of the
same H x W. ``alpha`` is float32 (H, W) in [0, 1]: 1 keeps the image's pixel, 0 takes the
background's. With a hard alpha (the mask) person pixels are copied exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from seg.config import AlphaMode, OutputKind
from seg.data.io import read_image
from seg.errors import ConfigError
from seg.inference.predictor import Prediction

BAND_PIXELS = 1 << 20  # pixels blended at once in float32 (composite, cutout)

COLOURS = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "grey": (128, 128, 128),
    "gray": (128, 128, 128),
    "red": (255, 0, 0),
    "green": (0, 177, 64),  # chroma-key green
    "blue": (0, 71, 187),  # chroma-key blue
}

# Output name suffix and file extension of each kind (images; videos are always .mp4).
SUFFIXES = {
    OutputKind.mask: ("mask", ".png"),
    OutputKind.overlay: ("overlay", ".jpg"),
    OutputKind.cutout: ("cutout", ".png"),
    OutputKind.blur: ("blur", ".jpg"),
    OutputKind.replace: ("bg", ".jpg"),
}


def _row_bands(height: int, width: int) -> Iterator[slice]:
    """Slices of rows holding about ``BAND_PIXELS`` pixels each: float work on a 12000 x 12000
    photo then needs tens of MB at a time instead of GB."""
    step = max(1, BAND_PIXELS // max(1, width))
    for start in range(0, height, step):
        yield slice(start, min(start + step, height))


def mask_image(mask: np.ndarray) -> np.ndarray:
    """bool (H, W) -> uint8 (H, W): 0 background, 255 person."""
    return mask.astype(np.uint8) * np.uint8(255)  # uint8 throughout: 1 byte per pixel


def overlay(
    image: np.ndarray,
    mask: np.ndarray,
    colour: tuple[int, int, int] = (0, 255, 0),
    opacity: float = 0.45,
) -> np.ndarray:
    """Person pixels tinted with ``colour`` at ``opacity`` and outlined; background unchanged."""
    # A lookup table per channel: no float copy of the image (a 12000 x 12000 photo has 432 M
    # values), the same float32 arithmetic per value.
    tint = np.asarray(colour, np.float32)
    values = np.arange(256, dtype=np.float32)[:, None]
    lut = np.clip(np.rint((1 - opacity) * values + opacity * tint), 0, 255).astype(np.uint8)
    out = image.copy()
    for rows in _row_bands(*image.shape[:2]):
        np.copyto(out[rows], cv2.LUT(image[rows], lut[:, None, :]), where=mask[rows, :, None])
    contours, _ = cv2.findContours(mask.astype(np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_NONE)
    thickness = max(1, round(max(image.shape[:2]) / 400))
    cv2.drawContours(out, contours, -1, tuple(int(c) for c in colour), thickness)
    return out


def composite(image: np.ndarray, background: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``alpha * image + (1 - alpha) * background``, rounded; uint8 (H, W, 3)."""
    out = np.empty(image.shape, np.uint8)
    for rows in _row_bands(*image.shape[:2]):
        a = alpha[rows, :, None]
        mix = a * image[rows].astype(np.float32) + (1 - a) * background[rows].astype(np.float32)
        out[rows] = np.clip(np.rint(mix), 0, 255).astype(np.uint8)
    return out


def cutout(image: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """uint8 (H, W, 4) RGBA: the image with alpha = ``round(alpha * 255)``."""
    out = np.empty((*image.shape[:2], 4), np.uint8)
    out[..., :3] = image
    for rows in _row_bands(*image.shape[:2]):
        out[rows, :, 3] = np.clip(np.rint(alpha[rows] * 255), 0, 255).astype(np.uint8)
    return out


def blur_background(image: np.ndarray, alpha: np.ndarray, sigma: float) -> np.ndarray:
    """The person sharp over a Gaussian-blurred copy of the image (``sigma`` in pixels)."""
    blurred = cv2.GaussianBlur(image, (0, 0), sigmaX=sigma, sigmaY=sigma)
    return composite(image, blurred, alpha)


def parse_colour(text: str) -> tuple[int, int, int] | None:
    """``"green"``, ``"#00ff00"`` or ``"0,255,0"`` -> RGB; ``None`` if it is not a colour."""
    text = text.strip().lower()
    if text in COLOURS:
        return COLOURS[text]
    if text.startswith("#") and len(text) == 7:
        try:
            return tuple(int(text[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]
        except ValueError:
            return None
    parts = text.split(",")
    if len(parts) == 3 and all(p.strip().isdigit() and int(p) <= 255 for p in parts):
        return tuple(int(p) for p in parts)  # type: ignore[return-value]
    return None


def cover(background: np.ndarray, size_hw: tuple[int, int]) -> np.ndarray:
    """Resize ``background`` to cover (H, W), keeping its aspect ratio, and centre-crop it."""
    h, w = size_hw
    bh, bw = background.shape[:2]
    s = max(h / bh, w / bw)
    rh, rw = max(h, round(bh * s)), max(w, round(bw * s))
    resized = cv2.resize(background, (rw, rh), interpolation=cv2.INTER_AREA)
    top, left = (rh - h) // 2, (rw - w) // 2
    return resized[top : top + h, left : left + w]


class Background:
    """The ``background`` option: a solid colour or an image, made to fit each frame size."""

    def __init__(self, spec: str) -> None:
        self.colour = parse_colour(spec)
        self.image: np.ndarray | None = None
        if self.colour is None:
            path = Path(spec)
            if not path.is_file():
                raise ConfigError(
                    f"background={spec!r} is neither an image file nor a colour (a name from "
                    f"{sorted(COLOURS)}, '#RRGGBB' or 'R,G,B')"
                )
            self.image = read_image(path)
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    def fit(self, size_hw: tuple[int, int]) -> np.ndarray:
        """uint8 (H, W, 3) RGB background for an image of ``size_hw`` (cached per size)."""
        if size_hw not in self._cache:
            if self.image is not None:
                self._cache[size_hw] = cover(self.image, size_hw)
            else:
                self._cache[size_hw] = np.full((*size_hw, 3), self.colour, np.uint8)
        return self._cache[size_hw]


@dataclass
class RenderOptions:
    alpha: AlphaMode = AlphaMode.hard
    background: Background | None = None  # needed by OutputKind.replace
    blur_sigma: float = 0.02  # fraction of the image's long side
    overlay_colour: tuple[int, int, int] = (0, 255, 0)
    overlay_opacity: float = 0.45


def alpha_of(pred: Prediction, mode: AlphaMode) -> np.ndarray:
    """float32 (H, W) alpha: the mask (hard) or the person probability (soft)."""
    return pred.prob if mode is AlphaMode.soft else pred.mask.astype(np.float32)


def _replace(image: np.ndarray, pred: Prediction, opts: RenderOptions) -> np.ndarray:
    if opts.background is None:
        raise ConfigError("outputs=[replace] needs a background (image file or colour)")
    background = opts.background.fit(image.shape[:2])
    return composite(image, background, alpha_of(pred, opts.alpha))


RENDERERS: dict[OutputKind, Callable[[np.ndarray, Prediction, RenderOptions], np.ndarray]] = {
    OutputKind.mask: lambda image, pred, opts: mask_image(pred.mask),
    OutputKind.overlay: lambda image, pred, opts: overlay(
        image, pred.mask, opts.overlay_colour, opts.overlay_opacity
    ),
    OutputKind.cutout: lambda image, pred, opts: cutout(image, alpha_of(pred, opts.alpha)),
    OutputKind.blur: lambda image, pred, opts: blur_background(
        image, alpha_of(pred, opts.alpha), opts.blur_sigma * max(image.shape[:2])
    ),
    OutputKind.replace: _replace,
}


def render(
    kind: OutputKind, image: np.ndarray, pred: Prediction, opts: RenderOptions
) -> np.ndarray:
    """The output ``kind`` for one image: uint8 (H, W) mask, (H, W, 3) RGB or (H, W, 4) RGBA."""
    if kind not in RENDERERS:
        raise ConfigError(f"unknown output {kind!r}; valid: {[k.value for k in RENDERERS]}")
    return RENDERERS[kind](image, pred, opts)
