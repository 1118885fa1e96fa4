"""``AugConfig`` checked and converted to plain values, naming the key of any bad value.

Both presets (``seg.data.transforms``) and everything that reads a checkpoint's augmentation
settings (export, inference) go through ``check_aug_config``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2

from seg.config import AugConfig, Interpolation
from seg.data.io import IGNORE_INDEX

_INTERPOLATIONS = {
    Interpolation.nearest.value: cv2.INTER_NEAREST,
    Interpolation.linear.value: cv2.INTER_LINEAR,
    Interpolation.cubic.value: cv2.INTER_CUBIC,
    Interpolation.area.value: cv2.INTER_AREA,
}


def _size(cfg: AugConfig, key: str) -> tuple[int, int]:
    value = getattr(cfg, key)
    try:
        items = list(value)
    except TypeError:
        items = []
    ok = len(items) == 2 and all(
        not isinstance(v, bool) and isinstance(v, int) and v > 0 for v in items
    )
    if not ok:
        raise ValueError(f"aug.{key} must be 2 positive integers [height, width], got {value!r}")
    return items[0], items[1]


def _number(cfg: AugConfig, key: str, lo: float, hi: float) -> float:
    value = getattr(cfg, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ValueError(f"aug.{key} must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def _floats(cfg: AugConfig, key: str, length: int) -> list[float]:
    value = getattr(cfg, key)
    try:
        items = [float(v) for v in value]
    except (TypeError, ValueError):
        items = []
    if len(items) != length or not all(math.isfinite(v) for v in items):
        raise ValueError(f"aug.{key} must be {length} finite numbers, got {value!r}")
    return items


def _count(cfg: AugConfig, key: str, lo: int, hi: int) -> int:
    value = getattr(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"aug.{key} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _range(cfg: AugConfig, key: str, lo: float, hi: float, integer: bool = False) -> tuple:
    """A [low, high] pair with lo <= low <= high <= hi."""
    value = getattr(cfg, key)
    try:
        items = list(value)
    except TypeError:
        items = []
    kind = int if integer else (int, float)
    ok = len(items) == 2 and all(isinstance(v, kind) and not isinstance(v, bool) for v in items)
    if not (ok and lo <= items[0] <= items[1] <= hi):
        what = "integers" if integer else "numbers"
        raise ValueError(
            f"aug.{key} must be 2 {what} [low, high] with {lo} <= low <= high <= {hi}, "
            f"got {value!r}"
        )
    return (items[0], items[1]) if integer else (float(items[0]), float(items[1]))


def _train_size(cfg: AugConfig) -> int:
    crop = _size(cfg, "crop_size")
    if cfg.train_size is None:
        return max(crop)
    return _count(cfg, "train_size", 16, 8192)


def _interpolation(cfg: AugConfig) -> int:
    name = getattr(cfg.interpolation, "value", cfg.interpolation)
    if name not in _INTERPOLATIONS:
        raise ValueError(
            f"aug.interpolation must be one of {sorted(_INTERPOLATIONS)}, got {cfg.interpolation!r}"
        )
    return _INTERPOLATIONS[name]


def _image_fill(cfg: AugConfig) -> int:
    value = cfg.image_fill
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
        raise ValueError(f"aug.image_fill must be an integer in [0, 255], got {value!r}")
    return value


def _mask_fill(cfg: AugConfig) -> int:
    # Any other value would be a class label: padding would become "person" or an unknown class.
    value = cfg.mask_fill
    if isinstance(value, bool) or value not in (0, IGNORE_INDEX):
        raise ValueError(
            f"aug.mask_fill must be 0 (background) or {IGNORE_INDEX} (ignore), got {value!r}"
        )
    return int(value)


@dataclass(frozen=True)
class AugParams:
    """``AugConfig`` checked and converted to plain values (what the builders use)."""

    crop_size: tuple[int, int]
    eval_size: tuple[int, int]
    train_size: int  # long side before the affine step (max(crop_size) when not set)
    shift: float
    scale: tuple[float, float]
    rotate: float
    hflip: float
    affine_p: float
    photometric: bool
    jitter: dict[str, float]  # ColorJitter's brightness, contrast, saturation, hue
    photometric_p: float
    paste_p: float
    paste_max_people: int
    paste_scale: tuple[float, float]
    paste_feather: float
    blur_p: float
    blur_limit: tuple[int, int]
    noise_p: float
    noise_std: tuple[float, float]
    jpeg_p: float
    jpeg_quality: tuple[int, int]
    gray_p: float
    interpolation: int  # OpenCV flag, for images only
    image_fill: int
    mask_fill: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


def check_aug_config(cfg: AugConfig) -> AugParams:
    """Validate every field (photometric ones too, even when off), naming the key on error."""
    lo, hi = _floats(cfg, "scale", 2)
    if not 0 < lo <= hi:
        raise ValueError(f"aug.scale must be [lo, hi] with 0 < lo <= hi, got {cfg.scale!r}")
    mean, std = _floats(cfg, "mean", 3), _floats(cfg, "std", 3)
    if not all(v > 0 for v in std):
        raise ValueError(f"aug.std must be 3 positive numbers, got {cfg.std!r}")
    jitter = {k: _number(cfg, k, 0.0, 1.0) for k in ("brightness", "contrast", "saturation")}
    blur_limit = _range(cfg, "blur_limit", 3, 31, integer=True)
    if blur_limit[0] % 2 == 0 or blur_limit[1] % 2 == 0:
        raise ValueError(f"aug.blur_limit must be odd kernel sizes, got {cfg.blur_limit!r}")
    paste_scale = _range(cfg, "paste_scale", 0.0, 1.0)
    if paste_scale[0] <= 0:  # drawn log-uniformly
        raise ValueError(f"aug.paste_scale must be > 0, got {cfg.paste_scale!r}")
    probabilities = ("photometric_p", "paste_p", "blur_p", "noise_p", "jpeg_p", "gray_p")
    return AugParams(
        crop_size=_size(cfg, "crop_size"),
        eval_size=_size(cfg, "eval_size"),
        train_size=_train_size(cfg),
        shift=_number(cfg, "shift", 0.0, 1.0),
        scale=(lo, hi),
        rotate=_number(cfg, "rotate", 0.0, 180.0),
        hflip=_number(cfg, "hflip", 0.0, 1.0),
        affine_p=_number(cfg, "affine_p", 0.0, 1.0),
        photometric=bool(cfg.photometric),
        jitter={**jitter, "hue": _number(cfg, "hue", 0.0, 0.5)},
        **{k: _number(cfg, k, 0.0, 1.0) for k in probabilities},
        paste_max_people=_count(cfg, "paste_max_people", 1, 10),
        paste_scale=paste_scale,
        paste_feather=_number(cfg, "paste_feather", 0.0, 10.0),
        blur_limit=blur_limit,
        noise_std=_range(cfg, "noise_std", 0.0, 1.0),
        jpeg_quality=_range(cfg, "jpeg_quality", 1, 100, integer=True),
        interpolation=_interpolation(cfg),
        image_fill=_image_fill(cfg),
        mask_fill=_mask_fill(cfg),
        mean=(mean[0], mean[1], mean[2]),
        std=(std[0], std[1], std[2]),
    )


__all__ = ["AugParams", "check_aug_config"]
