"""Training and evaluation transforms: two named presets built from ``AugConfig``.

Both take ``image`` uint8 (H, W, 3) RGB and ``mask`` uint8 (H, W) in {0, 1, 255} (255 = ignore)
and return ``image`` float32 tensor (3, H, W), normalised with ``cfg.mean``/``cfg.std``, and
``mask`` uint8 tensor (H, W) (the dataset casts it to long).

Masks are always resized and warped with nearest-neighbour, so they stay discrete; pixels that a
shift, rotation or pad brings in get ``IMAGE_FILL`` (0, black, as mmsegmentation pads) in the
image and ``cfg.mask_fill`` in the mask (255 = ignored by the loss by default, 0 = background).

Seeding (albumentations 2.0.x): a ``Compose`` holds its own random generators, seeded once when
it is built, and global ``random``/``numpy``/``torch`` seeds do not reach them. DataLoader workers
get copies of the dataset (forked or pickled) with the *same* generator state, and nothing in
albumentations 2.0.8 reseeds them from torch's worker seed. Without help, every worker repeats
the same augmentations, and with non-persistent workers every epoch repeats the previous one.
Pass ``seed_worker`` (or ``functools.partial(seed_worker, rank=rank)``) as the DataLoader's
``worker_init_fn``: it reseeds the dataset's transform from the per-worker, per-epoch seed that
torch derives from the loader's generator, so runs with a seeded generator are reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import albumentations as A
import cv2
import numpy as np
import torch
from albumentations.augmentations.geometric import functional as fgeometric
from albumentations.pytorch import ToTensorV2
from torch import Tensor

from seg.config import AugConfig, Interpolation
from seg.config.data import check_aug_config_ranges
from seg.data.copy_paste import PastePeople, RawPool
from seg.errors import ConfigError

IMAGE_FILL = 0  # image pixels that a shift, rotation or pad brings in (before normalisation)
_INTERPOLATIONS = {
    Interpolation.nearest: cv2.INTER_NEAREST,
    Interpolation.linear: cv2.INTER_LINEAR,
    Interpolation.cubic: cv2.INTER_CUBIC,
    Interpolation.area: cv2.INTER_AREA,
}


def check_aug_config(cfg: AugConfig) -> AugConfig:
    """``cfg`` with its ranges checked again (it may have been changed in place since it was
    made): what every builder of a transform, and everything that reads a checkpoint's
    augmentation settings, calls first."""
    check_aug_config_ranges(cfg)
    return cfg


def _interpolation(cfg: AugConfig) -> int:
    """``cfg.interpolation`` as OpenCV's flag (images only; masks are always nearest)."""
    return _INTERPOLATIONS[Interpolation(cfg.interpolation)]


def _degradations(p: AugConfig) -> list[A.BasicTransform]:
    """Image-only defects of cameras and of the web, each behind its own switch for ablations."""
    lo, hi = int(p.blur_limit[0]), int(p.blur_limit[1])
    sigma_hi = 0.3 * ((hi - 1) * 0.5 - 1) + 0.8  # what OpenCV derives from the largest kernel
    blur = A.OneOf(
        [
            A.GaussianBlur(blur_limit=(lo, hi), sigma_limit=(min(0.5, sigma_hi), sigma_hi)),
            A.MotionBlur(blur_limit=(lo, hi)),
        ],
        p=p.blur_p,
    )
    chosen = [
        (p.blur_p, blur),
        (p.noise_p, A.GaussNoise(std_range=tuple(p.noise_std), p=p.noise_p)),
        (p.jpeg_p, A.ImageCompression(quality_range=tuple(p.jpeg_quality), p=p.jpeg_p)),
    ]
    return [transform for prob, transform in chosen if prob > 0]


def build_train_transform(
    cfg: AugConfig, seed: int | None = None, pool: RawPool | None = None
) -> A.Compose:
    """Training preset: paste people, resize, shift/scale/rotate, flip, pad + random crop,
    jitter, degradations, normalise.

    With ``cfg.paste_p > 0`` a ``PastePeople`` step first pastes people from ``pool`` (the
    training dataset: ``build_train_dataset`` passes it) onto the full-resolution photo. The
    longest side is resized to ``cfg.train_size`` (default ``max(cfg.crop_size)``: a crop holds
    the whole photo); one ``Affine`` does the case study's
    shift (up to ``cfg.shift`` of each side, x and y drawn independently), isotropic scale
    (``cfg.scale``) and rotation (up to ``±cfg.rotate`` degrees) with probability
    ``cfg.affine_p``; then ``HorizontalFlip(p=cfg.hflip)``, centre padding and a random
    crop to ``cfg.crop_size``. Then, on the image only: optional ColorJitter (``cfg.photometric``),
    blur, noise and JPEG (``cfg.blur_p``, ``noise_p``, ``jpeg_p``; those at
    0 are left out, so the defaults build the same pipeline as before they existed). Output:
    image float32 (3, crop_h, crop_w), mask uint8 (crop_h, crop_w). With ``seed`` the same
    inputs give the same samples; see ``seed_worker`` for DataLoaders.
    """
    p = check_aug_config(cfg)
    if p.paste_behind > 0 and p.paste_p == 0:
        # paste_behind places the people paste_p pastes: alone it would train without either.
        # Refused here, where training starts, not in the schema: checkpoints that carry it
        # still load.
        raise ConfigError.invalid(
            "aug.paste_behind",
            p.paste_behind,
            "0 while aug.paste_p=0 (nothing is pasted): set aug.paste_p > 0 to paste people, "
            "e.g. aug.paste_p=0.5",
        )
    if p.paste_p > 0 and pool is None:
        raise ConfigError(
            f"aug.paste_p={p.paste_p} pastes people from the training samples: pass "
            "pool=<the training dataset> (seg.data.build_train_dataset does) or set aug.paste_p=0"
        )
    crop_h, crop_w = p.crop_size
    fills = {"border_mode": cv2.BORDER_CONSTANT, "fill": IMAGE_FILL, "fill_mask": p.mask_fill}
    jitter = {k: getattr(p, k) for k in ("brightness", "contrast", "saturation", "hue")}
    photometric = [A.ColorJitter(**jitter, p=p.photometric_p)] if p.photometric else []
    paste = []
    if p.paste_p > 0:
        scale = (p.paste_scale[0], p.paste_scale[1])
        paste = [
            PastePeople(
                pool, p.paste_max_people, scale, p.paste_feather, p.paste_behind, p=p.paste_p
            )
        ]
    transforms = [
        *paste,
        A.LongestMaxSize(
            max_size=max(p.crop_size) if p.train_size is None else p.train_size,
            interpolation=_interpolation(p),
            mask_interpolation=cv2.INTER_NEAREST,
        ),
        A.Affine(
            # A dict draws x and y shifts independently; keep_ratio makes the scale isotropic.
            translate_percent={"x": (-p.shift, p.shift), "y": (-p.shift, p.shift)},
            scale=(p.scale[0], p.scale[1]),
            keep_ratio=True,
            rotate=(-p.rotate, p.rotate),
            interpolation=_interpolation(p),
            mask_interpolation=cv2.INTER_NEAREST,
            p=p.affine_p,
            **fills,
        ),
        A.HorizontalFlip(p=p.hflip),
        A.PadIfNeeded(min_height=crop_h, min_width=crop_w, **fills),
        A.RandomCrop(height=crop_h, width=crop_w),
        *photometric,
        *_degradations(p),
        A.Normalize(mean=p.mean, std=p.std, max_pixel_value=255.0),
        ToTensorV2(),
    ]
    transform = A.Compose(transforms, seed=seed)
    if seed is not None:
        seed_transform(transform, seed)
    return transform


class LongShortResize(A.DualTransform):
    """Resize keeping the aspect ratio so that the long side is at most ``long_side`` and the
    short side at most ``short_side``, whatever the orientation (mmsegmentation's
    ``Resize(scale=(long, short), keep_ratio=True)``): an image and its transpose get the same
    scale. The size is :func:`eval_content_size`'s; images with ``interpolation``, masks with
    nearest neighbour. Image (H, W, C) or (H, W), mask (H, W).
    """

    def __init__(
        self, long_side: int, short_side: int, interpolation: int = cv2.INTER_LINEAR, p: float = 1.0
    ) -> None:
        super().__init__(p=p)
        if not 1 <= short_side <= long_side:
            raise ConfigError(f"need 1 <= short_side <= long_side, got {short_side}, {long_side}")
        self.long_side, self.short_side = int(long_side), int(short_side)
        self.interpolation = interpolation

    def get_params_dependent_on_data(
        self, params: dict[str, Any], data: dict[str, Any]
    ) -> dict[str, Any]:
        return {"size": eval_content_size(params["shape"][:2], (self.long_side, self.short_side))}

    def apply(self, img: np.ndarray, size: tuple[int, int], **params: Any) -> np.ndarray:
        return fgeometric.resize(img, size, self.interpolation)

    def apply_to_mask(self, mask: np.ndarray, size: tuple[int, int], **params: Any) -> np.ndarray:
        return fgeometric.resize(mask, size, cv2.INTER_NEAREST)


class PadToCanvas(A.PadIfNeeded):
    """Pad bottom/right to ``canvas`` (H, W) turned to the content's orientation: as given for
    square content, otherwise with its long side along the content's long side (a landscape
    image in a portrait ``canvas`` gets the transposed one). Content larger than that canvas is
    left as it is on that side."""

    def __init__(self, canvas: Sequence[int], fill: float = 0, fill_mask: float = 0) -> None:
        super().__init__(
            min_height=int(canvas[0]),
            min_width=int(canvas[1]),
            position="top_left",
            border_mode=cv2.BORDER_CONSTANT,
            fill=fill,
            fill_mask=fill_mask,
        )

    def get_params_dependent_on_data(
        self, params: dict[str, Any], data: dict[str, Any]
    ) -> dict[str, Any]:
        h, w = params["shape"][:2]
        canvas_h, canvas_w = oriented_canvas((h, w), (self.min_height, self.min_width))
        return {
            "pad_top": 0,
            "pad_bottom": max(0, canvas_h - h),
            "pad_left": 0,
            "pad_right": max(0, canvas_w - w),
        }


def build_eval_transform(cfg: AugConfig) -> A.Compose:
    """Evaluation preset (deterministic): resize into ``cfg.eval_size``, pad bottom/right,
    normalise.

    ``cfg.eval_size`` bounds the long and the short side, not H and W (mmsegmentation's
    keep-ratio rule): the image is resized, aspect ratio kept, by
    ``s = min(max(eval_size) / max(h, w), min(eval_size) / min(h, w))``, so that a landscape
    photo gets the scale of its transpose, as in training (whose ``LongestMaxSize`` ignores
    orientation too). It is then padded at the bottom and right (image ``IMAGE_FILL``,
    mask ``cfg.mask_fill``) to the canvas :func:`oriented_canvas` gives: ``eval_size`` for
    portrait or square content with a portrait ``eval_size``, transposed for landscape content.
    Predictions are cropped back to ``[:h', :w']`` with
    ``(h', w') = eval_content_size((h, w), cfg.eval_size)``; samples of both orientations are
    batched with ``seg.data.batching``. Scoring at the original resolution belongs to
    evaluation, not to this transform. Output: image float32 (3, H, W), mask uint8 (H, W).
    """
    return A.Compose([*_eval_geometry(cfg), _eval_normalize(cfg), ToTensorV2()])


def _eval_geometry(cfg: AugConfig) -> list[A.BasicTransform]:
    p = check_aug_config(cfg)
    return [
        LongShortResize(max(p.eval_size), min(p.eval_size), _interpolation(p)),
        PadToCanvas(p.eval_size, fill=IMAGE_FILL, fill_mask=p.mask_fill),
    ]


def _eval_normalize(cfg: AugConfig) -> A.Normalize:
    p = check_aug_config(cfg)
    return A.Normalize(mean=p.mean, std=p.std, max_pixel_value=255.0)


class EvalImageTransform:
    """The eval preset of :func:`build_eval_transform` for images alone (prediction): the
    same float32 (3, H, W) tensor bit for bit, in about a third of the time.

    The resize and pad run on uint8 as in the preset; the normalisation is a lookup in the
    table albumentations' own ``Normalize`` gives for the 256 values of each channel (it
    normalises uint8 images by such a table too), looked up by OpenCV per channel plane
    straight into a contiguous channels-first tensor (``cv2.LUT``: 0.09 ms at 256x256 against
    0.18 for torch's ``index_select`` on the channel-last planes). The preset's ``ToTensorV2``
    returns a channels-last view instead, whose copy into a batch cost more than the
    normalisation (0.34 of 0.51 ms at 256x256).
    Called as the preset is: ``transform(image=image)["image"]``.
    """

    def __init__(self, cfg: AugConfig) -> None:
        self.geometry = A.Compose(_eval_geometry(cfg))
        ramp = np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 3, axis=2)
        table = _eval_normalize(cfg)(image=ramp)["image"]  # (1, 256, 3) float32
        self.table = np.ascontiguousarray(table[0].T, dtype=np.float32)  # (3, 256)

    def __call__(self, *, image: np.ndarray) -> dict[str, Tensor]:
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"expected a uint8 (H, W, 3) image, got {image.dtype} {image.shape}")
        pixels = self.geometry(image=image)["image"]
        out = np.empty((3, *pixels.shape[:2]), np.float32)
        for channel, plane in enumerate(cv2.split(pixels)):
            cv2.LUT(plane, self.table[channel], dst=out[channel])
        return {"image": torch.from_numpy(out)}


def eval_pad_value(cfg: AugConfig) -> tuple[float, float, float]:
    """What the eval preset's padded image pixels hold after normalisation, per channel:
    ``IMAGE_FILL`` through the same ``Normalize`` (the value to pad batches with)."""
    p = check_aug_config(cfg)
    pixel = np.full((1, 1, 3), IMAGE_FILL, np.uint8)
    out = A.Normalize(mean=p.mean, std=p.std, max_pixel_value=255.0)(image=pixel)["image"]
    return float(out[0, 0, 0]), float(out[0, 0, 1]), float(out[0, 0, 2])


def eval_content_size(image_hw: Sequence[int], eval_size: Sequence[int]) -> tuple[int, int]:
    """Size (h', w') of the image inside the eval transform's padded output; the rest is padding.

    ``eval_size`` bounds the long and the short side whatever their order: scale
    ``s = min(max(eval_size) / max(h, w), min(eval_size) / min(h, w))``, sides rounded with
    Python's ``round`` as albumentations' resizes do. ``LongShortResize`` resizes to this size.
    """
    (h, w), (a, b) = image_hw, eval_size
    s = min(max(a, b) / max(h, w), min(a, b) / min(h, w))
    return max(1, round(h * s)), max(1, round(w * s))


def oriented_canvas(content_hw: Sequence[int], eval_size: Sequence[int]) -> tuple[int, int]:
    """The eval canvas (H, W) for resized content (h', w'): ``eval_size`` as given for square
    content, else its long side along the content's long side (``eval_size`` or its transpose).
    """
    (h, w), (a, b) = content_hw, eval_size
    if h == w:
        return int(a), int(b)
    long, short = int(max(a, b)), int(min(a, b))
    return (long, short) if h > w else (short, long)


class SourceTransforms:
    """Training pipelines chosen by each sample's source: ``default`` for most, ``by_source``
    for the sources named there (``data.train_scales``: their photos resized to another
    ``aug.train_size``). ``SegDataset`` calls :meth:`for_source` with each sample's source;
    called directly it is ``default``. :func:`seed_transform` seeds every pipeline, each from
    its own stream of the seed, so no two replay the same numbers."""

    def __init__(self, default: A.BaseCompose, by_source: dict[str, A.BaseCompose]) -> None:
        self.default = default
        self.by_source = dict(by_source)

    def for_source(self, source: str) -> A.BaseCompose:
        return self.by_source.get(source, self.default)

    def pipelines(self) -> list[A.BaseCompose]:
        """``default`` first, then those of ``by_source`` in name order."""
        return [self.default, *(self.by_source[name] for name in sorted(self.by_source))]

    def __call__(self, **data: Any) -> dict:
        return self.default(**data)


def pipelines(transform: Any) -> list[A.BaseCompose]:
    """The albumentations pipelines of a dataset's transform: a :class:`SourceTransforms`' own,
    a pipeline itself, none for anything else (whose random state is not ours to save)."""
    if isinstance(transform, SourceTransforms):
        return transform.pipelines()
    return [transform] if isinstance(transform, A.BaseCompose) else []


def seed_transform(transform: A.BaseCompose | SourceTransforms, seed: int) -> None:
    """Reseed a pipeline so that its next samples depend only on ``seed`` (>= 0).

    ``Compose(seed=s)`` in albumentations 2.0.x gives each transform its own generator seeded with
    the same ``s``, so all of them replay one number sequence at different offsets. Here they
    share one generator pair instead, consumed in pipeline order, which is just as reproducible.
    A :class:`SourceTransforms`' pipelines get ``seed`` (the default) and streams
    ``(seed, k)`` for the others.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    if isinstance(transform, SourceTransforms):
        for k, pipeline in enumerate(transform.pipelines()):
            seed_transform(pipeline, int(seed) if k == 0 else _stream(int(seed), k))
        return
    state = np.random.SeedSequence(int(seed))
    py_seed = int(state.generate_state(1, np.uint64)[0])
    transform.set_random_state(np.random.default_rng(state), random.Random(py_seed))


def _stream(seed: int, k: int) -> int:
    return int(np.random.SeedSequence([seed, k]).generate_state(1, np.uint64)[0] % 2**63)


def denormalize(image: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """Undo ``Normalize``: float (3, H, W) tensor -> uint8 (H, W, 3) RGB array, for viewing."""
    mean_a = np.asarray(mean, dtype=np.float32)
    std_a = np.asarray(std, dtype=np.float32)
    rgb = image.detach().cpu().numpy().transpose(1, 2, 0) * std_a + mean_a
    return np.clip(np.rint(rgb * 255.0), 0, 255).astype(np.uint8)


__all__ = [
    "IMAGE_FILL",
    "EvalImageTransform",
    "SourceTransforms",
    "build_eval_transform",
    "build_train_transform",
    "check_aug_config",
    "denormalize",
    "eval_content_size",
    "eval_pad_value",
    "oriented_canvas",
    "pipelines",
    "seed_transform",
]
