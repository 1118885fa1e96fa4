"""Typed options of ``scripts/predict.py`` (a Hydra structured config, checked when composed).

Kept free of torch imports so that composing it stays fast. A typo (``outptus=...``) or a bad
enum value (``outputs=[masks]``) fails in ``compose_predict_config`` with Hydra's message that
names the key and, for enums, the valid choices; ``check_predict_config`` checks the ranges,
from ``__post_init__`` as every schema's checks run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from omegaconf import MISSING

from seg.config.compose import compose_options
from seg.config.data import BadSamplePolicy
from seg.config.inference import PredictorOptions, check_predictor_options
from seg.errors import ConfigError


class OutputKind(str, Enum):
    mask = "mask"  # <name>_mask.png: 0 background, 255 person
    overlay = "overlay"  # <name>_overlay.jpg: person tinted, outlined
    cutout = "cutout"  # <name>_cutout.png: RGBA, alpha = person (images only: mp4 has no alpha)
    blur = "blur"  # <name>_blur.jpg: background Gaussian-blurred
    replace = "replace"  # <name>_bg.jpg: background replaced by `background`


class AlphaMode(str, Enum):
    hard = "hard"  # alpha = mask (0 or 1): person pixels are copied unchanged
    soft = "soft"  # alpha = person probability: smooth edges, semi-transparent where unsure


@dataclass
class PredictConfig(PredictorOptions):
    """``scripts/predict.py``'s options: the shared inference options, and what to read and
    write."""

    input: str = MISSING  # an image, a folder (its images and videos) or a video
    out: str = "outputs/predict"  # folder for <name>_<kind>.<ext>
    outputs: list[OutputKind] = field(default_factory=lambda: [OutputKind.mask, OutputKind.overlay])
    batch_size: int = 8
    alpha: AlphaMode = AlphaMode.hard  # of cutout, blur and replace
    # replace: an image file (resized to cover each image, centre-cropped) or a colour:
    # a name (green, white, ...), "#RRGGBB" or "R,G,B".
    background: str = "green"
    blur_sigma: float = 0.02  # Gaussian sigma of the blurred background, fraction of the long side
    overlay_colour: list[int] = field(default_factory=lambda: [0, 255, 0])  # RGB
    overlay_opacity: float = 0.45
    jpeg_quality: int = 95
    on_bad_input: BadSamplePolicy = BadSamplePolicy.error  # skip: log an unreadable image, go on
    progress: bool = True

    def __post_init__(self) -> None:  # as every schema: range checks when the object is made
        check_predict_config(self)


def check_predict_config(cfg: PredictConfig) -> None:
    """Range checks Hydra's types cannot express; the message names the key and the value."""
    checks = [
        (len(cfg.outputs) > 0, "outputs", cfg.outputs, "at least one of " + _names(OutputKind)),
        (cfg.batch_size >= 1, "batch_size", cfg.batch_size, "an integer >= 1"),
        (0 < cfg.blur_sigma <= 1, "blur_sigma", cfg.blur_sigma, "a number in (0, 1]"),
        (0 <= cfg.overlay_opacity <= 1, "overlay_opacity", cfg.overlay_opacity, "in [0, 1]"),
        (1 <= cfg.jpeg_quality <= 100, "jpeg_quality", cfg.jpeg_quality, "an integer in 1..100"),
        (
            len(cfg.overlay_colour) == 3 and all(0 <= int(c) <= 255 for c in cfg.overlay_colour),
            "overlay_colour",
            cfg.overlay_colour,
            "3 integers in 0..255 (R, G, B)",
        ),
        (len(set(cfg.outputs)) == len(cfg.outputs), "outputs", cfg.outputs, "no repeats"),
        *check_predictor_options(cfg),
    ]
    for ok, key, value, expected in checks:
        if not ok:
            raise ConfigError.invalid(key, value, expected)


def _names(enum: type[Enum]) -> str:
    return "[" + ", ".join(m.value for m in enum) + "]"


def compose_predict_config(overrides: list[str]) -> PredictConfig:
    """``scripts/predict.py``'s overrides -> a checked ``PredictConfig``."""
    return compose_options(PredictConfig, "predict_config", [_tta_list(o) for o in overrides])


def _tta_list(override: str) -> str:
    """``tta=flip`` and ``tta=null``, the single value ``tta`` took before it was a list as
    in ``evaluate.py``, as ``tta=[flip]`` and ``tta=[]``: commands written then still work."""
    key, _, value = override.partition("=")
    if key != "tta" or not value or value.startswith("["):
        return override
    return "tta=[]" if value == "null" else f"tta=[{value}]"
