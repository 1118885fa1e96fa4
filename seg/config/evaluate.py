"""Typed options of ``scripts/evaluate.py`` (Hydra structured config ``configs/evaluate.yaml``).

``data=NAME`` picks a dataset config from ``configs/data/`` (any of them, ``folder`` with its
options included); without it the data the checkpoint was trained on is evaluated. Kept free of
torch imports so that composing stays fast. Unknown keys and bad enum values fail in
:func:`compose_eval_config` with Hydra's message naming them; :func:`check_eval_config` checks
the ranges, from ``__post_init__`` as every schema's checks run (the object cannot exist
with a bad value).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from omegaconf import MISSING

from seg.config.compose import compose
from seg.config.data import DataConfig
from seg.errors import ConfigError

SPLITS = ("train", "val", "test", "all")  # all: every pair of the dataset, whatever its split


class TTA(str, Enum):
    """Test-time augmentations of evaluation and prediction (``tta=[flip]``)."""

    flip = "flip"  # average the logits of the image and of its horizontal mirror


class Backend(str, Enum):
    """What runs the network in evaluation and prediction (docs/evaluation.md, "Backends")."""

    auto = "auto"  # onnxruntime on a CPU when it is installed, else torch
    torch = "torch"  # eager PyTorch, batch norm folded; the only one that splits columns
    onnxruntime = "onnxruntime"  # the checkpoint exported once (cached beside it), fp32


class InferencePrecision(str, Enum):
    """Arithmetic of the network in evaluation and prediction."""

    fp32 = "fp32"
    int8 = "int8"  # ONNX Runtime, statically quantised (docs/evaluation.md, "Backends")
    bf16 = "bf16"  # eager PyTorch under bf16 autocast (GPUs; CPUs with AVX512-BF16 or AMX)
    fp16 = "fp16"  # eager PyTorch under fp16 autocast (GPUs only)


@dataclass
class SlideConfig:
    """Sliding-window inference over the model input (the image fit into ``eval_size``).

    For large images: raise ``eval_size`` (e.g. [1024, 768]) and slide windows of the size the
    model was trained on; overlapping logits are averaged. ``window: null`` turns it off. The
    window and stride are [H, W] as given, on portrait and landscape inputs alike (not turned
    with a landscape image's canvas); a window larger than an input shrinks to it.
    """

    window: list[int] | None = None  # [H, W]
    stride: list[int] | None = None  # [H, W]; null = two thirds of the window


@dataclass
class RefineConfig:
    """Edge-aware refinement of the person probability at each photo's own resolution: the
    guided filter (``seg/inference/refine.py``; 2-class models). The network sees a photo at
    about half its size and its logits are a quarter of that: the guided filter puts the
    resized outline back on the photo's edges (docs/evaluation.md, "Refinement")."""

    guided: bool = False
    radius: float = 4.0  # window radius in pixels of the model input, scaled to each photo
    eps: float = 1e-3  # regulariser: local variances of [0, 1] intensities below it count as flat
    color: bool = False  # guide by the three channels (a 3x3 solve per pixel) instead of luma


def check_predictor_options(
    tta: list[TTA], scales: list[float], slide: SlideConfig, refine: RefineConfig
) -> list[tuple[bool, str, object, str]]:
    """The range checks of the predictor's options, which ``evaluate.py`` and ``predict.py``
    share (for the callers' check lists)."""
    return [
        (
            len(scales) >= 1 and all(0 < x <= 8 for x in scales),
            "scales",
            scales,
            "one or more numbers in (0, 8], e.g. [0.75, 1.0, 1.25]",
        ),
        (len(set(tta)) == len(tta), "tta", tta, "no repeats"),
        (
            slide.window is None or _pair(slide.window),
            "slide.window",
            slide.window,
            "null or 2 positive integers [H, W]",
        ),
        (
            slide.stride is None or (_pair(slide.stride) and slide.window is not None),
            "slide.stride",
            slide.stride,
            "null or 2 positive integers [H, W], with slide.window set",
        ),
        (refine.radius > 0, "refine.radius", refine.radius, "a number > 0 (model-input pixels)"),
        (refine.eps > 0, "refine.eps", refine.eps, "a number > 0, e.g. 1e-3"),
    ]


@dataclass
class EvalConfig:
    checkpoint: str = MISSING  # a checkpoint written by training
    data: DataConfig | None = None  # data=NAME (configs/data/NAME.yaml); null = the checkpoint's
    split: str = "test"  # train | val | test | all
    out: str | None = None  # default <run_dir>/eval/<data>_<split>, else outputs/eval/...
    device: str = "auto"  # auto (cuda, mps, cpu) | cpu | cuda | cuda:N | mps
    column_devices: list[str] = field(default_factory=list)  # one per model column
    backend: Backend = Backend.auto
    threads: int = 0  # CPU threads of the backend (0: torch's / ONNX Runtime's default)
    # fp32 | int8 (ONNX Runtime, calibrated on training photos) | bf16 | fp16 (eager PyTorch
    # under autocast): docs/evaluation.md, "Backends"
    precision: InferencePrecision = InferencePrecision.fp32
    calibration: str | None = None  # int8: a folder of photos; null: the training photos
    batch_size: int = 4
    num_workers: int = 2  # processes reading and decoding the images and masks
    # [H, W] model input for portrait images (bounds of the long and short side: landscape ones
    # get the transpose); null = the checkpoint's aug.eval_size
    eval_size: list[int] | None = None
    tta: list[TTA] = field(default_factory=list)  # [] or [flip]
    scales: list[float] = field(default_factory=lambda: [1.0])  # of eval_size; softmax averaged
    slide: SlideConfig = field(default_factory=SlideConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)  # refine.guided=true: on
    worst: int = 16  # K: images in the worst-cases gallery (0 = none)
    worst_height: int = 512  # gallery panels taller than this are shrunk to it (0 = never)
    max_images: int = 0  # per source, the first N of the split (0 = all): quick looks
    target_pixel_acc: float | None = None  # null = the checkpoint's trainer.target_pixel_acc
    progress: bool = True

    def __post_init__(self) -> None:  # as every schema: range checks when the object is made
        check_eval_config(self)


def _pair(value: list[int] | None) -> bool:
    return value is not None and len(value) == 2 and all(int(v) >= 1 for v in value)


def check_eval_config(cfg: EvalConfig) -> None:
    """Range checks Hydra's types cannot express; the message names the key and the value."""
    checks = [
        (cfg.split in SPLITS, "split", cfg.split, f"one of {', '.join(SPLITS)}"),
        (cfg.batch_size >= 1, "batch_size", cfg.batch_size, "an integer >= 1"),
        (cfg.threads >= 0, "threads", cfg.threads, "an integer >= 0 (0: the default)"),
        (cfg.num_workers >= 0, "num_workers", cfg.num_workers, "an integer >= 0"),
        (cfg.worst >= 0, "worst", cfg.worst, "an integer >= 0"),
        (cfg.worst_height >= 0, "worst_height", cfg.worst_height, "an integer >= 0"),
        (cfg.max_images >= 0, "max_images", cfg.max_images, "an integer >= 0 (0 = all)"),
        (
            cfg.eval_size is None or _pair(cfg.eval_size),
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
        *check_predictor_options(cfg.tta, cfg.scales, cfg.slide, cfg.refine),
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
