"""Schemas of the data and augmentation groups (``configs/data/``, ``configs/aug/``).

A typo (``data.nmae=...``) or a bad value (``data.on_bad_sample=maybe``) fails when the config
is composed, with a message that names the key and, for enums, the valid choices.
Only builders read these objects; modules take plain typed arguments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from seg.config.fields import incidental
from seg.errors import ConfigError

IGNORE_INDEX = 255  # mask value of unlabelled and padded pixels: never scored, no loss
PERSON = 1  # class index of a person in masks and logits (0 is background)


class BadSamplePolicy(str, Enum):
    error = "error"
    skip = "skip"


class MaskEncoding(str, Enum):
    binary01 = "binary01"  # 0 background, 1 person
    binary255 = "binary255"  # 0 background, 255 person
    labels = "labels"  # label map, every label > 0 is (a part of) the person
    instances = "instances"  # instance ids, every id > 0 is a person
    alpha = "alpha"  # alpha matte 0..255, person where alpha >= alpha_threshold
    yolo = "yolo"  # YOLO segmentation labels: class-0 (COCO person) polygons (seg/data/coco.py)
    coco = "coco"  # a COCO instances file: person instances, crowds ignored (seg/data/coco.py)


class Interpolation(str, Enum):
    nearest = "nearest"
    linear = "linear"
    cubic = "cubic"
    area = "area"


@dataclass
class FolderConfig:
    """A user's own data: an images folder and a masks folder paired by file name."""

    images: str = incidental("images")  # relative to data.root, or absolute
    masks: str = incidental("masks")
    mask_pattern: str = (
        "{stem}.png"  # e.g. "{stem}_mask.png"; {stem} is the image name without suffix
    )
    encoding: MaskEncoding = MaskEncoding.binary255
    alpha_threshold: int = 128
    ignore_value: int | None = None  # a mask value marking "don't care" pixels (e.g. 255 in VOC)
    image_extensions: list[str] = incidental(
        default_factory=lambda: [".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"]
    )


@dataclass
class CocoConfig:
    """A COCO instances file and its photos (``data=coco``): person = the union of the person
    instances (category 1), crowd regions (``iscrowd``) ignored."""

    images: str = incidental("images")  # relative to data.root, or absolute
    annotations: str = incidental("annotations/instances.json")  # instances_*.json
    # true: every photo is training material (no val or test split: give validation sources
    # beside it in human_mix); false: val and test drawn by hash (data.val_fraction, ...)
    train_only: bool = False


@dataclass
class DataConfig:
    # A dataset of seg.data.registry (configs/data/<name>.yaml), or human_mix: the datasets of
    # ``sources`` and ``val_sources`` together. An unknown name fails when the data is first
    # listed, naming the valid ones.
    name: str = "human_mix"
    # Where datasets live. null: $SEG_DATA_DIR, else data/ (relative to the working directory);
    # a value given here or on the command line wins over the environment variable.
    root: str | None = incidental(None)
    # human_mix only: the sources reported by validation and test (one table row each) ...
    sources: list[str] = field(default_factory=lambda: ["eg_portrait", "ccp", "vikram_human_seg"])
    # ... and those whose train splits are joined: null = all of ``sources``. Naming fewer holds
    # sources out, to measure how a model trained on the others generalises to them.
    train_sources: list[str] | None = None
    # human_mix only: sources that are validated and tested, never trained on and never steering
    # a run (as a held-out source): coco128_seg, photos unlike the training sources, with and
    # without people. [] = none.
    val_sources: list[str] = field(default_factory=lambda: ["coco128_seg"])
    # Shares of each epoch's photos with people that named training sources make up, reached by
    # repeating their photos (each used before any repeats, in a seeded order; the other sources
    # keep their counts), as mmsegmentation's and detectron2's repeat-factor samplers do for
    # scarce data: {coco_mini_person: 0.15}. {} = every photo once, sources by their size.
    source_shares: dict[str, float] = field(default_factory=dict)
    # Photos without people mixed into training as all-background samples: ``negatives_p`` of
    # each epoch's samples (0 = none), from ``negatives``: "imagenet_negatives" (a dataset
    # fetched like the others) or a folder of photos (relative to data.root, or absolute).
    negatives: str = "imagenet_negatives"
    negatives_p: float = 0.0
    # Multiples of aug.eval_size at which named validation and test sources are scored, as
    # mmsegmentation gives each dataset its own test scale: {coco128_seg: 1.6667} scores COCO's
    # photos at 800x600 where aug.eval_size is 480x360, enlarging its far people towards the
    # scale the close-up sources teach (docs/results.md, "Every person in the frame"). {} =
    # every source at aug.eval_size; evaluate.py's eval_size=... scores every source at it.
    eval_scales: dict[str, float] = field(default_factory=dict)
    # Multiples of the training resize (aug.train_size, or max(aug.crop_size) when null) for
    # named training sources' photos, as eval_scales is for scoring: {coco_mini_person: 1.6667}
    # trains COCO's photos at long side 800 where the others are at 480, its people at the
    # scale coco128_seg is scored at. The crop (aug.crop_size) and its cost stay the same.
    # {} = every source at aug.train_size.
    train_scales: dict[str, float] = field(default_factory=dict)
    # Fractions for the deterministic splits of sets that publish none (ccp, vikram, folder),
    # and val_fraction also for the validation split carved from eg_portrait's official train list.
    val_fraction: float = 0.1
    test_fraction: float = 0.2
    on_bad_sample: BadSamplePolicy = incidental(BadSamplePolicy.error)
    download: bool = incidental(True)  # fetch a missing dataset from its public source
    folder: FolderConfig = field(default_factory=FolderConfig)
    coco: CocoConfig = field(default_factory=CocoConfig)

    def __post_init__(self) -> None:  # as every schema: range checks when the object is made
        for key in ("val_fraction", "test_fraction", "negatives_p"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and 0.0 <= value < 1.0):
                raise ConfigError.invalid(f"data.{key}", value, "a share in [0, 1)")
        for name, share in dict(self.source_shares or {}).items():
            if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
                raise ConfigError.invalid(f"data.source_shares.{name}", share, "a share in (0, 1)")
        _check_scales("data.eval_scales", self.eval_scales, "aug.eval_size")
        _check_scales("data.train_scales", self.train_scales, "aug.train_size")
        if sum(dict(self.source_shares or {}).values()) >= 1:
            raise ConfigError(
                f"data.source_shares={dict(self.source_shares)} sum to 1 or more: the other "
                "training sources would get no share"
            )
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ConfigError(
                f"data.val_fraction + data.test_fraction = "
                f"{self.val_fraction + self.test_fraction} leaves no training data; their sum "
                "must be below 1"
            )


def _check_scales(key: str, scales: dict[str, float] | None, of: str) -> None:
    """Each value of ``scales`` (``key``) is a multiple of ``of`` in (0, 8]."""
    for name, scale in dict(scales or {}).items():
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale <= 8:
            raise ConfigError.invalid(f"{key}.{name}", scale, f"a multiple of {of} in (0, 8]")


def scaled_sides(sides: Sequence[int], scale: float) -> list[int]:
    """``sides`` (pixels) times ``scale``, rounded, at least 1 pixel each: a source's eval size
    of ``data.eval_scales``, a test-time scale's of ``scales=[...]``, a source's training size
    of ``data.train_scales``."""
    return [max(1, round(int(v) * scale)) for v in sides]


@dataclass
class AugConfig:
    """Training and evaluation transforms (see seg/data/transforms.py)."""

    # Keys by concern: sizes; geometry (the case study's four, and wide rotations); photometric
    # jitter; person compositing; degradations; resampling and normalisation. Flat keys, so that
    # every command line and checkpoint written so far stays valid.
    # Sizes. H, W of training samples; portrait-shaped like the data (eg_portrait is 800x600,
    # ccp ~830x550)
    crop_size: list[int] = field(default_factory=lambda: [256, 192])
    eval_size: list[int] = field(default_factory=lambda: [256, 192])  # H, W fed to the model
    # Long side each training photo is resized to before the affine step and the crop; null =
    # max(crop_size): a crop holds the whole photo. Larger (e.g. max(eval_size)): crops of a
    # sharper photo, at the scale evaluation sees, for the cost of crop_size (mmseg's
    # resize-then-crop).
    train_size: int | None = None
    # Geometry: the case study's four augmentations.
    shift: float = 0.1  # max translation, fraction of the side
    scale: list[float] = field(default_factory=lambda: [0.75, 1.25])
    rotate: float = 15.0  # max rotation, degrees
    hflip: float = 0.5  # probability
    affine_p: float = 1.0  # probability of the shift/scale/rotate step
    # Optional photometric jitter.
    photometric: bool = False
    brightness: float = 0.2
    contrast: float = 0.2
    saturation: float = 0.2
    hue: float = 0.02
    photometric_p: float = 0.8
    # Person compositing (Simple Copy-Paste, seg/data/copy_paste.py), on the full-size photo
    # before the geometric steps: people cut from other training photos by their masks.
    paste_p: float = 0.0  # probability per training sample; 0 = off
    paste_max_people: int = 2  # 1..this many people per composite
    paste_scale: list[float] = field(
        default_factory=lambda: [0.1, 1.0]  # pasted person's height / image height, log-uniform
    )
    paste_feather: float = 1.5  # Gaussian sigma of the soft edge, pixels at pasted size; 0 = hard
    # Probability that a pasted person goes behind the photo's own people (a crowd behind the
    # subject, which the training sources never label) instead of in front of them.
    paste_behind: float = 0.0
    # Degradations of the image only, after the crop; each a probability, 0 = off.
    blur_p: float = 0.0  # Gaussian or motion blur (one of the two)
    blur_limit: list[int] = field(default_factory=lambda: [3, 7])  # odd kernel sizes, pixels
    noise_p: float = 0.0  # Gaussian noise
    noise_std: list[float] = field(default_factory=lambda: [0.02, 0.06])  # fraction of 255
    jpeg_p: float = 0.0  # JPEG re-compression
    jpeg_quality: list[int] = field(default_factory=lambda: [30, 95])
    # Resampling and normalisation, training and evaluation alike.
    # How images are resized and warped (masks always nearest): linear, as torchvision's and
    # mmsegmentation's references; nearest keeps a synthetic image's values exact (the tests'
    # marker images); cubic or area for sharper or smoother downscaling.
    interpolation: Interpolation = Interpolation.linear
    # Mask pixels that a shift, rotation or pad brings in: 255 = ignore (no loss), 0 = background.
    # Their image pixels are black (seg.data.transforms.IMAGE_FILL).
    mask_fill: int = 255
    # The one normalisation of every image the model sees, (x / 255 - mean) / std: ImageNet's
    # here; recipes with pretrained columns set their backbones' (checked against them).
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])

    def __post_init__(self) -> None:  # as every schema: range checks when the object is made
        check_aug_config_ranges(self)


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
        raise ConfigError.invalid(f"aug.{key}", value, "2 positive integers [height, width]")
    return items[0], items[1]


def _number(cfg: AugConfig, key: str, lo: float, hi: float) -> float:
    value = getattr(cfg, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ConfigError.invalid(f"aug.{key}", value, f"a number in [{lo}, {hi}]")
    return float(value)


def _floats(cfg: AugConfig, key: str, length: int) -> list[float]:
    value = getattr(cfg, key)
    try:
        items = [float(v) for v in value]
    except (TypeError, ValueError):
        items = []
    if len(items) != length or not all(math.isfinite(v) for v in items):
        raise ConfigError.invalid(f"aug.{key}", value, f"{length} finite numbers")
    return items


def _count(cfg: AugConfig, key: str, lo: int, hi: int) -> int:
    value = getattr(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError.invalid(f"aug.{key}", value, f"an integer in [{lo}, {hi}]")
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
        raise ConfigError.invalid(
            f"aug.{key}", value, f"2 {what} [low, high] with {lo} <= low <= high <= {hi}"
        )
    return (items[0], items[1]) if integer else (float(items[0]), float(items[1]))


def _mask_fill(cfg: AugConfig) -> int:
    # Any other value would be a class label: padding would become "person" or an unknown class.
    value = cfg.mask_fill
    if isinstance(value, bool) or value not in (0, IGNORE_INDEX):
        raise ConfigError.invalid(
            "aug.mask_fill", value, f"0 (background) or {IGNORE_INDEX} (ignore)"
        )
    return int(value)


def check_aug_config_ranges(cfg: AugConfig) -> None:
    """Every range of ``cfg`` (photometric ones too, even when off), naming the key on error;
    run by ``AugConfig.__post_init__``, so a bad value cannot be made, and by the builders for
    a config changed in place after it was made."""
    lo, hi = _floats(cfg, "scale", 2)
    if not 0 < lo <= hi:
        raise ConfigError.invalid("aug.scale", cfg.scale, "[lo, hi] with 0 < lo <= hi")
    if not all(v > 0 for v in _floats(cfg, "std", 3)):
        raise ConfigError.invalid("aug.std", cfg.std, "3 positive numbers")
    _floats(cfg, "mean", 3)
    for key in ("brightness", "contrast", "saturation", "shift", "hflip", "affine_p"):
        _number(cfg, key, 0.0, 1.0)
    for key in (
        "photometric_p",
        "paste_p",
        "paste_behind",
        "blur_p",
        "noise_p",
        "jpeg_p",
    ):
        _number(cfg, key, 0.0, 1.0)
    _number(cfg, "hue", 0.0, 0.5)
    _number(cfg, "rotate", 0.0, 180.0)
    _number(cfg, "paste_feather", 0.0, 10.0)
    blur_limit = _range(cfg, "blur_limit", 3, 31, integer=True)
    if blur_limit[0] % 2 == 0 or blur_limit[1] % 2 == 0:
        raise ConfigError.invalid("aug.blur_limit", cfg.blur_limit, "odd kernel sizes")
    if _range(cfg, "paste_scale", 0.0, 1.0)[0] <= 0:  # drawn log-uniformly
        raise ConfigError.invalid("aug.paste_scale", cfg.paste_scale, "sizes > 0")
    _count(cfg, "paste_max_people", 1, 10)
    _range(cfg, "noise_std", 0.0, 1.0)
    _range(cfg, "jpeg_quality", 1, 100, integer=True)
    _size(cfg, "crop_size")
    _size(cfg, "eval_size")
    if cfg.train_size is not None:
        _count(cfg, "train_size", 16, 8192)
    names = [m.value for m in Interpolation]
    if getattr(cfg.interpolation, "value", cfg.interpolation) not in names:
        raise ConfigError.invalid("aug.interpolation", cfg.interpolation, f"one of {names}")
    _mask_fill(cfg)
