"""Schemas of the data and augmentation groups (``configs/data/``, ``configs/aug/``).

A typo (``data.nmae=...``) or a bad value (``data.on_bad_sample=maybe``) fails when the config
is composed, with a message that names the key and, for enums, the valid choices.
Only builders read these objects; modules take plain typed arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class DatasetName(str, Enum):
    eg_portrait = "eg_portrait"
    ccp = "ccp"
    vikram_human_seg = "vikram_human_seg"
    folder = "folder"
    human_mix = "human_mix"


class BadSamplePolicy(str, Enum):
    error = "error"
    skip = "skip"


class MaskEncoding(str, Enum):
    binary01 = "binary01"  # 0 background, 1 person
    binary255 = "binary255"  # 0 background, 255 person
    labels = "labels"  # label map, every label > 0 is (a part of) the person
    instances = "instances"  # instance ids, every id > 0 is a person
    alpha = "alpha"  # alpha matte 0..255, person where alpha >= alpha_threshold


class Interpolation(str, Enum):
    nearest = "nearest"
    linear = "linear"
    cubic = "cubic"
    area = "area"


@dataclass
class FolderConfig:
    """A user's own data: an images folder and a masks folder paired by file name."""

    images: str = "images"  # relative to data.root, or absolute
    masks: str = "masks"
    mask_pattern: str = (
        "{stem}.png"  # e.g. "{stem}_mask.png"; {stem} is the image name without suffix
    )
    encoding: MaskEncoding = MaskEncoding.binary255
    alpha_threshold: int = 128
    ignore_value: int | None = None  # a mask value marking "don't care" pixels (e.g. 255 in VOC)
    image_extensions: list[str] = field(
        default_factory=lambda: [".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"]
    )


@dataclass
class DataConfig:
    name: DatasetName = DatasetName.human_mix
    # Where datasets live. null: $SEG_DATA_DIR, else data/ (relative to the working directory);
    # a value given here or on the command line wins over the environment variable.
    root: str | None = None
    # human_mix only: the sources reported by validation and test (one table row each) ...
    sources: list[str] = field(default_factory=lambda: ["eg_portrait", "ccp", "vikram_human_seg"])
    # ... and those whose train splits are joined: null = all of ``sources``. Naming fewer holds
    # sources out, to measure how a model trained on the others generalises to them.
    train_sources: list[str] | None = None
    # Fractions for the deterministic splits of sets that publish none (ccp, vikram, folder),
    # and val_fraction also for the validation split carved from eg_portrait's official train list.
    val_fraction: float = 0.1
    test_fraction: float = 0.2
    on_bad_sample: BadSamplePolicy = BadSamplePolicy.error
    download: bool = True  # fetch a missing dataset from its public source
    # A mask smaller than its image is resized to it (nearest) when the aspect ratios agree
    # within this relative tolerance; otherwise the pair is bad.
    mask_resize_tolerance: float = 0.01
    folder: FolderConfig = field(default_factory=FolderConfig)


@dataclass
class AugConfig:
    """Training and evaluation transforms (see seg/data/transforms.py)."""

    # H, W of training samples; portrait-shaped like the data (eg_portrait is 800x600, ccp ~830x550)
    crop_size: list[int] = field(default_factory=lambda: [256, 192])
    eval_size: list[int] = field(default_factory=lambda: [256, 192])  # H, W fed to the model
    # Long side each training photo is resized to before the affine step and the crop; null =
    # max(crop_size): a crop holds the whole photo. Larger (e.g. max(eval_size)): crops of a
    # sharper photo, at the scale evaluation sees, for the cost of crop_size (mmseg's
    # resize-then-crop).
    train_size: int | None = None
    # The case study's four augmentations.
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
    # Degradations of the image only, after the crop; each a probability, 0 = off.
    blur_p: float = 0.0  # Gaussian or motion blur (one of the two)
    blur_limit: list[int] = field(default_factory=lambda: [3, 7])  # odd kernel sizes, pixels
    noise_p: float = 0.0  # Gaussian noise
    noise_std: list[float] = field(default_factory=lambda: [0.02, 0.06])  # fraction of 255
    jpeg_p: float = 0.0  # JPEG re-compression
    jpeg_quality: list[int] = field(default_factory=lambda: [30, 95])
    gray_p: float = 0.0  # grayscale (kept 3 channels)
    interpolation: Interpolation = Interpolation.linear  # images; masks are always nearest
    image_fill: int = 0  # value of image pixels that shift/rotate/pad bring in
    mask_fill: int = 255  # value of mask pixels they bring in (255 = ignore, 0 = background)
    mean: list[float] = field(default_factory=lambda: [0.485, 0.456, 0.406])
    std: list[float] = field(default_factory=lambda: [0.229, 0.224, 0.225])
