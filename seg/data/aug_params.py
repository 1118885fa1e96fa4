"""``AugConfig`` converted to plain values (its ranges are the schema's: ``seg.config.data``).

Both presets (``seg.data.transforms``) and everything that reads a checkpoint's augmentation
settings (export, inference) go through ``check_aug_config``.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2

from seg.config import AugConfig, Interpolation
from seg.config.data import check_aug_config_ranges

_INTERPOLATIONS = {
    Interpolation.nearest.value: cv2.INTER_NEAREST,
    Interpolation.linear.value: cv2.INTER_LINEAR,
    Interpolation.cubic.value: cv2.INTER_CUBIC,
    Interpolation.area.value: cv2.INTER_AREA,
}


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
    rotate_wide_p: float
    rotate_wide: float
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
    """``cfg`` (its ranges checked again: it may have been changed in place since it was
    made) as the plain values the builders use."""
    check_aug_config_ranges(cfg)
    crop = (int(cfg.crop_size[0]), int(cfg.crop_size[1]))
    jitter = {k: float(getattr(cfg, k)) for k in ("brightness", "contrast", "saturation", "hue")}
    probabilities = (
        *("photometric_p", "paste_p", "blur_p", "noise_p", "jpeg_p", "gray_p", "rotate_wide_p"),
    )
    name = getattr(cfg.interpolation, "value", cfg.interpolation)
    return AugParams(
        crop_size=crop,
        eval_size=(int(cfg.eval_size[0]), int(cfg.eval_size[1])),
        train_size=max(crop) if cfg.train_size is None else int(cfg.train_size),
        shift=float(cfg.shift),
        scale=(float(cfg.scale[0]), float(cfg.scale[1])),
        rotate=float(cfg.rotate),
        hflip=float(cfg.hflip),
        affine_p=float(cfg.affine_p),
        rotate_wide=float(cfg.rotate_wide),
        photometric=bool(cfg.photometric),
        jitter=jitter,
        **{k: float(getattr(cfg, k)) for k in probabilities},
        paste_max_people=int(cfg.paste_max_people),
        paste_scale=(float(cfg.paste_scale[0]), float(cfg.paste_scale[1])),
        paste_feather=float(cfg.paste_feather),
        blur_limit=(int(cfg.blur_limit[0]), int(cfg.blur_limit[1])),
        noise_std=(float(cfg.noise_std[0]), float(cfg.noise_std[1])),
        jpeg_quality=(int(cfg.jpeg_quality[0]), int(cfg.jpeg_quality[1])),
        interpolation=_INTERPOLATIONS[name],
        image_fill=int(cfg.image_fill),
        mask_fill=int(cfg.mask_fill),
        mean=(float(cfg.mean[0]), float(cfg.mean[1]), float(cfg.mean[2])),
        std=(float(cfg.std[0]), float(cfg.std[1]), float(cfg.std[2])),
    )


__all__ = ["AugParams", "check_aug_config"]
