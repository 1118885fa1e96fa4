"""The options every inference script shares (``evaluate.py``, ``predict.py``, ``demo.py``):
the checkpoint, where and how its network runs, and the predictor's options. Declared once
(:class:`InferenceOptions`, :class:`PredictorOptions`); each script's config extends them, so a
new option of the backend or the predictor is one field here. Torch-free, as every schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

# The shipped model's name (seg.zoo.DEFAULT; the schemas stay torch-free, so it is spelt here).
SHIPPED_MODEL = "person"


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


@dataclass
class TemporalConfig:
    """Video only (``predict.py``'s videos, the demo's Video and Webcam tabs, ``evaluate.py
    clips=``): each frame's person probability blended with the previous frame's, carried by
    the optical flow, where the frame is doubtful and the flow explains the pixel; a label
    changes only past 0.5 +- ``hysteresis``; a scene cut resets it (seg/inference/temporal.py,
    docs/evaluation.md "Video")."""

    enabled: bool = False  # per-frame prediction until the val clips say otherwise
    blend: float = 0.5  # weight of the carried previous probability
    hysteresis: float = 0.1
    occlusion: float = 0.05  # no blending where the carried frame differs more (0-1)
    cut: float = 0.12  # mean difference the flow leaves that makes a scene cut (0-1)


def check_inference_options(cfg: InferenceOptions) -> list[tuple[bool, str, object, str]]:
    """The range checks of the options every inference script shares (for the callers' check
    lists)."""
    slide, refine = cfg.slide, cfg.refine
    return [
        (cfg.threads >= 0, "threads", cfg.threads, "an integer >= 0 (0: the default)"),
        (
            slide.window is None or pair(slide.window),
            "slide.window",
            slide.window,
            "null or 2 positive integers [H, W]",
        ),
        (
            slide.stride is None or (pair(slide.stride) and slide.window is not None),
            "slide.stride",
            slide.stride,
            "null or 2 positive integers [H, W], with slide.window set",
        ),
        (refine.radius > 0, "refine.radius", refine.radius, "a number > 0 (model-input pixels)"),
        (refine.eps > 0, "refine.eps", refine.eps, "a number > 0, e.g. 1e-3"),
        *check_temporal(cfg.temporal),
    ]


def check_temporal(t: TemporalConfig) -> list[tuple[bool, str, object, str]]:
    """The range checks of ``temporal.*``."""
    return [
        (0 <= t.blend < 1, "temporal.blend", t.blend, "a number in [0, 1), e.g. 0.5"),
        (0 <= t.hysteresis < 0.5, "temporal.hysteresis", t.hysteresis, "a number in [0, 0.5)"),
        (0 < t.occlusion <= 1, "temporal.occlusion", t.occlusion, "a number in (0, 1]"),
        (0 < t.cut <= 1, "temporal.cut", t.cut, "a number in (0, 1], e.g. 0.12"),
    ]


@dataclass
class InferenceOptions:
    """A checkpoint, and where and how its network runs."""

    # A checkpoint, a run folder (its checkpoints/best.pt), or a shipped model's name: the
    # default, "person", is the model the package ships (seg/zoo/person.md; seg.zoo.DEFAULT).
    checkpoint: str = SHIPPED_MODEL
    device: str = "auto"  # auto (cuda, mps, cpu) | cpu | cuda | cuda:N | mps
    # One device per column ([cuda:0,cuda:1]) to split a multi-column model over GPUs as in
    # training; empty: the whole model on `device`.
    column_devices: list[str] = field(default_factory=list)
    backend: Backend = Backend.auto  # auto: ONNX Runtime on a CPU, else torch
    threads: int = 0  # CPU threads of the backend (0: torch's / ONNX Runtime's default)
    # fp32 | int8 (ONNX Runtime, calibrated on training photos) | bf16 | fp16 (eager PyTorch
    # under autocast): docs/evaluation.md, "Backends"
    precision: InferencePrecision = InferencePrecision.fp32
    calibration: str | None = None  # int8: a folder of photos; null: the training photos
    # The predictor's options that every script takes (docs/evaluation.md, "Options").
    slide: SlideConfig = field(default_factory=SlideConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)  # refine.guided=true: on
    temporal: TemporalConfig = field(default_factory=TemporalConfig)  # videos only


@dataclass
class PredictorOptions(InferenceOptions):
    """... and the test-time augmentations a script's command line chooses (the demo page
    offers them as controls instead)."""

    tta: list[TTA] = field(default_factory=list)  # [] or [flip] (twice the compute)
    scales: list[float] = field(default_factory=lambda: [1.0])  # of eval_size; softmax averaged


def check_predictor_options(cfg: PredictorOptions) -> list[tuple[bool, str, object, str]]:
    """:func:`check_inference_options` and the test-time augmentations'."""
    return [
        *check_inference_options(cfg),
        (
            len(cfg.scales) >= 1 and all(0 < x <= 8 for x in cfg.scales),
            "scales",
            cfg.scales,
            "one or more numbers in (0, 8], e.g. [0.75, 1.0, 1.25]",
        ),
        (len(set(cfg.tta)) == len(cfg.tta), "tta", cfg.tta, "no repeats"),
    ]


def pair(value: list[int] | None) -> bool:
    """Whether ``value`` is two positive integers (an [H, W] size)."""
    return value is not None and len(value) == 2 and all(int(v) >= 1 for v in value)
