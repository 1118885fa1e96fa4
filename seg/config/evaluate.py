"""Typed options of ``scripts/evaluate.py`` (Hydra structured config ``configs/evaluate.yaml``).

``data=NAME`` picks a dataset config from ``configs/data/`` (any of them, ``folder`` with its
options included); without it the data the checkpoint was trained on is evaluated. Kept free of
torch imports so that composing stays fast. Unknown keys and bad enum values fail in
:func:`compose_eval_config` with Hydra's message naming them; :func:`check_eval_config` checks
the ranges, from ``__post_init__`` as every schema's checks run (the object cannot exist
with a bad value).
"""

from __future__ import annotations

from dataclasses import dataclass

from seg.config.compose import compose
from seg.config.data import DataConfig
from seg.config.inference import (
    TTA,
    Backend,
    InferenceOptions,
    InferencePrecision,
    PredictorOptions,
    RefineConfig,
    SlideConfig,
    check_predictor_options,
    pair,
)
from seg.errors import ConfigError

SPLITS = ("train", "val", "test", "all")  # all: every pair of the dataset, whatever its split


@dataclass
class EvalConfig(PredictorOptions):
    """``scripts/evaluate.py``'s options: the shared inference options (a checkpoint, where and
    how it runs, the predictor's test-time options) and what to score."""

    data: DataConfig | None = None  # data=NAME (configs/data/NAME.yaml); null = the checkpoint's
    split: str = "test"  # train | val | test | all
    out: str | None = None  # default <run_dir>/eval/<data>_<split>, else outputs/eval/...
    batch_size: int = 4
    num_workers: int = 2  # processes reading and decoding the images and masks
    # [H, W] model input for portrait images (bounds of the long and short side: landscape ones
    # get the transpose); null = the checkpoint's aug.eval_size
    eval_size: list[int] | None = None
    worst: int = 16  # K: images in the worst-cases gallery (0 = none)
    worst_height: int = 512  # gallery panels taller than this are shrunk to it (0 = never)
    max_images: int = 0  # per source, the first N of the split (0 = all): quick looks
    target_pixel_acc: float | None = None  # null = the checkpoint's trainer.target_pixel_acc
    progress: bool = True
    # Video: a clip folder (frames/ and masks/), a set of them (scripts/make_clips.py), or a
    # video with clip_masks=<a folder of one mask per frame>: flicker, lag and recovery after
    # a cut, per frame and with the temporal mode (temporal.*), instead of data= and split=
    clips: str | None = None
    clip_masks: str | None = None

    def __post_init__(self) -> None:  # as every schema: range checks when the object is made
        check_eval_config(self)


def check_eval_config(cfg: EvalConfig) -> None:
    """Range checks Hydra's types cannot express; the message names the key and the value."""
    checks = [
        (cfg.split in SPLITS, "split", cfg.split, f"one of {', '.join(SPLITS)}"),
        (cfg.batch_size >= 1, "batch_size", cfg.batch_size, "an integer >= 1"),
        (cfg.num_workers >= 0, "num_workers", cfg.num_workers, "an integer >= 0"),
        (cfg.worst >= 0, "worst", cfg.worst, "an integer >= 0"),
        (cfg.worst_height >= 0, "worst_height", cfg.worst_height, "an integer >= 0"),
        (cfg.max_images >= 0, "max_images", cfg.max_images, "an integer >= 0 (0 = all)"),
        (
            cfg.eval_size is None or pair(cfg.eval_size),
            "eval_size",
            cfg.eval_size,
            "null or 2 positive integers [H, W]",
        ),
        (
            cfg.target_pixel_acc is None or 0 < cfg.target_pixel_acc <= 1,
            "target_pixel_acc",
            cfg.target_pixel_acc,
            "null or a fraction in (0, 1]",
        ),
        (
            cfg.clip_masks is None or cfg.clips is not None,
            "clip_masks",
            cfg.clip_masks,
            "null, or a mask folder beside clips=<a video>",
        ),
        *check_predictor_options(cfg),
    ]
    for ok, key, value, expected in checks:
        if not ok:
            raise ConfigError.invalid(key, value, expected)


def compose_eval_config(overrides: list[str]) -> EvalConfig:
    """``scripts/evaluate.py``'s overrides -> a checked ``EvalConfig``.

    Raises Hydra's errors naming unknown keys, bad types and a missing ``checkpoint``.
    """
    given = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    if any(k.startswith("data.") for k in given) and "data" not in given:
        raise ConfigError(
            f"{[o for o in overrides if o.startswith('data.')]} needs the dataset config as "
            "well: give data=NAME first (e.g. data=folder data.root=PATH); without data=NAME "
            "the checkpoint's data is evaluated as it was configured"
        )
    return compose("evaluate", overrides, schemas={"eval_config": EvalConfig})


__all__ = [
    "SPLITS",
    "TTA",
    "Backend",
    "EvalConfig",
    "InferenceOptions",
    "InferencePrecision",
    "PredictorOptions",
    "RefineConfig",
    "SlideConfig",
    "check_eval_config",
    "compose_eval_config",
]
