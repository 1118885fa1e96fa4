"""Train/eval presets: image-mask alignment, fill values, shapes, seeding, config validation."""

from __future__ import annotations

import dataclasses
import re

import albumentations as A
import cv2
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, Dataset

from seg.config import AugConfig, DataConfig, compose_config
from seg.data.loader import seed_worker
from seg.data.transforms import (
    EvalImageTransform,
    build_eval_transform,
    build_train_transform,
    check_aug_config,
    denormalize,
    eval_content_size,
    eval_pad_value,
)

SEEDS = (0, 1, 7)
NO_AUG = dict(shift=0.0, scale=[1.0, 1.0], rotate=0.0, hflip=0.0, affine_p=0.0)
# interpolation=nearest keeps the image's marker channels exactly 0 or 255.
GEOMETRY = {
    "shift": dict(NO_AUG, shift=0.2, affine_p=1.0),
    "scale": dict(NO_AUG, scale=[0.5, 0.8], affine_p=1.0),  # zoom out: brings pixels in
    "rotate": dict(NO_AUG, rotate=30.0, affine_p=1.0),
    "all": dict(shift=0.15, scale=[0.6, 1.4], rotate=25.0, hflip=0.5, affine_p=1.0),
}


def _aug(**overrides) -> AugConfig:
    base = dict(crop_size=[96, 96], eval_size=[96, 96], interpolation="nearest")
    return dataclasses.replace(AugConfig(), **{**base, **overrides})


def _blocks(height: int = 90, width: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Channel 0: random 6x6-pixel blocks of 0/255; channel 1: 255 everywhere (marks real
    pixels, so that pixels a transform brings in show as 0); mask = channel 0 > 127."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 2, (height // 6, width // 6), dtype=np.uint8) * 255
    ch0 = np.kron(blocks, np.ones((6, 6), np.uint8))
    image = np.stack([ch0, np.full_like(ch0, 255), np.full_like(ch0, 128)], axis=-1)
    return image, (ch0 > 127).astype(np.uint8)


def _run(transform, image, mask, cfg: AugConfig) -> tuple[np.ndarray, np.ndarray]:
    out = transform(image=image, mask=mask)
    assert out["image"].dtype == torch.float32
    return denormalize(out["image"], cfg.mean, cfg.std), out["mask"].numpy()


def _assert_aligned(rgb: np.ndarray, mask: np.ndarray, fill: int) -> None:
    real = rgb[..., 1] == 255
    assert np.all(np.isin(rgb[..., 1], [0, 255])), "marker channel was interpolated"
    assert np.array_equal(mask[real], (rgb[..., 0][real] > 127).astype(np.uint8))
    assert np.all(mask[~real] == fill), "pixels brought in must carry mask_fill"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(GEOMETRY))
def test_geometry_keeps_image_and_mask_aligned(name: str, seed: int) -> None:
    cfg = _aug(**GEOMETRY[name])
    image, mask = _blocks(seed=seed)
    rgb, out_mask = _run(build_train_transform(cfg, seed=seed), image, mask, cfg)
    assert out_mask.shape == rgb.shape[:2] == (96, 96)
    _assert_aligned(rgb, out_mask, fill=255)
    # The transform did act; all but "all" (which may zoom in) bring in more than padding does.
    base_rgb, base_mask = _run(build_train_transform(_aug(**NO_AUG), seed=seed), image, mask, cfg)
    _assert_aligned(base_rgb, base_mask, fill=255)
    assert not np.array_equal(rgb, base_rgb)
    if name != "all":
        assert (out_mask == 255).sum() > (base_mask == 255).sum()
    if name == "scale":  # zoomed out, the whole image stays in view: scaling is isotropic
        rows, cols = np.nonzero(rgb[..., 1] == 255)
        height, width = np.ptp(rows) + 1, np.ptp(cols) + 1
        assert abs(height / width - 90 / 120) < 0.05 and width < 96


@pytest.mark.parametrize("seed", SEEDS)
def test_flip_mirrors_image_and_mask(seed: int) -> None:
    cfg = _aug(**dict(NO_AUG, hflip=1.0))
    image, mask = _blocks(seed=seed)
    rgb, out_mask = _run(build_train_transform(cfg, seed=seed), image, mask, cfg)
    base_rgb, base_mask = _run(build_train_transform(_aug(**NO_AUG)), image, mask, cfg)
    _assert_aligned(rgb, out_mask, fill=255)
    assert np.array_equal(rgb, base_rgb[:, ::-1]) and np.array_equal(out_mask, base_mask[:, ::-1])


def test_linear_interpolation_keeps_mask_values_discrete() -> None:
    cfg = dataclasses.replace(AugConfig(), crop_size=[64, 80], photometric=True)
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (150, 110, 3), dtype=np.uint8)
    mask = rng.choice(np.array([0, 1, 255], np.uint8), (150, 110))
    for seed in SEEDS:
        out = build_train_transform(cfg, seed=seed)(image=image, mask=mask)
        assert out["image"].shape == (3, 64, 80) and out["image"].dtype == torch.float32
        assert out["mask"].shape == (64, 80)
        assert set(np.unique(out["mask"].numpy())) <= {0, 1, 255}


@pytest.mark.parametrize("name", sorted(GEOMETRY))
def test_mask_fill_zero_gives_no_ignore_pixels(name: str) -> None:
    cfg = _aug(**GEOMETRY[name], mask_fill=0)
    image, mask = _blocks()
    rgb, out_mask = _run(build_train_transform(cfg, seed=3), image, mask, cfg)
    assert set(np.unique(out_mask)) <= {0, 1}
    _assert_aligned(rgb, out_mask, fill=0)
    assert (rgb[..., 1] == 0).any(), "expected padded or brought-in pixels"


def test_same_seed_same_sample_different_seed_different() -> None:
    cfg = dataclasses.replace(AugConfig(), crop_size=[64, 64], photometric=True)
    image, mask = _blocks()

    def samples(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        transform = build_train_transform(cfg, seed=seed)
        return [tuple(transform(image=image, mask=mask).values()) for _ in range(3)]

    first, again, other = samples(5), samples(5), samples(6)
    for (img_a, mask_a), (img_b, mask_b) in zip(first, again, strict=True):
        assert torch.equal(img_a, img_b) and torch.equal(mask_a, mask_b)
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(first, other, strict=True))
    assert not torch.equal(first[0][0], first[1][0]), "successive samples must differ"


def test_seeded_transforms_draw_independently() -> None:
    # Compose(seed=s) alone seeds every transform with the same s, so the first flip and the
    # first affine coin flip of a freshly seeded pipeline (every worker, every epoch) coincide.
    cfg = dataclasses.replace(AugConfig(), crop_size=[48, 48], hflip=0.5, affine_p=0.5)
    image, mask = _blocks()
    same = []
    for seed in range(40):
        transform = build_train_transform(cfg, seed=seed)
        transform.save_applied_params = True
        applied = {name for name, _ in transform(image=image, mask=mask)["applied_transforms"]}
        same.append(("HorizontalFlip" in applied) == ("Affine" in applied))
    assert 5 < sum(same) < 35


class _AugmentedConstant(Dataset):
    """Every item is the same input; the output depends only on the transform's random draws."""

    def __init__(self, transform) -> None:
        self.transform = transform
        self.image, self.mask = _blocks()

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.transform(image=self.image, mask=self.mask)["image"]


def _epochs(worker_init_fn, n_epochs: int = 2) -> list[list[torch.Tensor]]:
    cfg = dataclasses.replace(AugConfig(), crop_size=[48, 48])
    loader = DataLoader(
        _AugmentedConstant(build_train_transform(cfg, seed=0)),
        batch_size=1,
        num_workers=2,
        worker_init_fn=worker_init_fn,
        generator=torch.Generator().manual_seed(11),
    )
    return [[batch[0] for batch in loader] for _ in range(n_epochs)]


def test_seed_worker_gives_workers_and_epochs_their_own_draws() -> None:
    # Without it (albumentations 2.0.x) both workers replay the same draws, every epoch.
    plain = _epochs(None)
    repeats = torch.equal(plain[0][0], plain[0][1]) and torch.equal(plain[0][0], plain[1][0])
    assert repeats, "albumentations now reseeds workers itself: revisit seed_worker"
    seeded = _epochs(seed_worker)
    flat = [x for epoch in seeded for x in epoch]
    assert not any(torch.equal(a, b) for i, a in enumerate(flat) for b in flat[i + 1 :])
    again = _epochs(seed_worker)  # reproducible from the loader's generator
    assert all(torch.equal(a, b) for a, b in zip(flat, [x for e in again for x in e], strict=True))


def test_seed_worker_outside_a_worker_raises() -> None:
    with pytest.raises(RuntimeError, match="DataLoader worker"):
        seed_worker(0)


# Portrait, landscape (a 854x480 video frame), square, odd and extreme sizes.
IMAGE_SIZES = [(800, 600), (600, 800), (480, 854), (90, 45), (256, 256), (37, 300), (101, 100)]
IMAGE_SIZES += [(100, 101), (333, 333), (1, 7), (7, 1), (241, 321)]


@pytest.mark.parametrize("image_hw", IMAGE_SIZES)
@pytest.mark.parametrize("eval_size", [[256, 256], [128, 96], [321, 241], [96, 128]])
def test_eval_fits_pads_bottom_right_and_is_deterministic(image_hw, eval_size) -> None:
    cfg = dataclasses.replace(AugConfig(), eval_size=eval_size)
    rng = np.random.default_rng(0)
    # Bright image, mask without ignore pixels: every 255 in the output mask is padding.
    image = rng.integers(100, 256, (*image_hw, 3), dtype=np.uint8)
    mask = rng.integers(0, 2, image_hw, dtype=np.uint8)
    transform = build_eval_transform(cfg)
    out, again = transform(image=image, mask=mask), transform(image=image, mask=mask)
    assert torch.equal(out["image"], again["image"]) and torch.equal(out["mask"], again["mask"])
    # eval_size bounds the long and short sides: the canvas follows the content's orientation.
    long, short = max(eval_size), min(eval_size)
    h, w = eval_content_size(image_hw, eval_size)
    canvas = tuple(eval_size) if h == w else (long, short) if h > w else (short, long)
    assert out["image"].shape == (3, *canvas) and out["image"].dtype == torch.float32
    assert max(h, w) == long or min(h, w) == short, "the image must touch one bound"
    assert max(h, w) <= long and min(h, w) <= short
    assert abs(h / w - image_hw[0] / image_hw[1]) <= max(1.0 / min(h, w), 1.0 / min(image_hw))
    # eval_content_size agrees with the transform: the content is exactly [:h, :w].
    out_mask = out["mask"].numpy()
    valid = np.zeros(canvas, bool)
    valid[:h, :w] = True
    assert np.all(out_mask[valid] != 255) and np.all(out_mask[~valid] == 255)
    rgb = denormalize(out["image"], cfg.mean, cfg.std)
    assert np.all(rgb[~valid] == 0) and rgb[valid].min() > 50
    if not valid.all():  # padded pixels hold the value batches are padded with
        pad = out["image"][:, ~torch.from_numpy(valid)]
        assert torch.equal(pad, torch.tensor(eval_pad_value(cfg))[:, None].expand_as(pad))


def test_a_landscape_photo_gets_the_scale_of_its_transpose_and_of_training(data_env) -> None:
    """People are as large in pixels in a landscape photo as in the same photo turned portrait,
    and as training's resize (longest side to max(crop_size)) makes them."""
    from seg.data import build_dataset

    cfg = DataConfig(name="vikram_human_seg", root=str(data_env), download=False)
    data = build_dataset(cfg, "train")
    index = next(i for i, r in enumerate(data.refs) if r.id == "1")
    image, mask = data.load_raw(index)  # 183 x 276, people in it
    assert image.shape[0] < image.shape[1] and 0 < mask.mean() < 1
    aug = _aug(eval_size=[256, 192], crop_size=[256, 192], interpolation="linear")
    transform = build_eval_transform(aug)
    wide = transform(image=image, mask=mask)
    tall = transform(image=image.transpose(1, 0, 2).copy(), mask=mask.T.copy())
    assert wide["image"].shape == (3, 192, 256) and tall["image"].shape == (3, 256, 192)
    np.testing.assert_array_equal(wide["mask"].numpy(), tall["mask"].numpy().T)
    # Training's scale (before its random affine): the longest side to max(crop_size).
    trained = A.LongestMaxSize(max_size=max(aug.crop_size))(image=image)["image"]
    assert eval_content_size(image.shape[:2], aug.eval_size) == trained.shape[:2] == (170, 256)
    # The previous rule fit H x W as given: 183 x 276 became 127 x 192, people (256/192)^2 =
    # 1.78x smaller in area than training made them.
    old = A.LongestMaxSize(max_size_hw=(256, 192))(image=image, mask=mask)["mask"]
    assert old.shape == (127, 192)
    person = int((wide["mask"] == 1).sum())
    assert person == int((tall["mask"] == 1).sum()) > 1.7 * (old == 1).sum()


BAD_VALUES = [
    ("crop_size", [256]),
    ("crop_size", [0, 256]),
    ("crop_size", [256.5, 256]),
    ("eval_size", [256, 256, 3]),
    ("scale", [1.2, 0.8]),
    ("scale", [0.0, 1.0]),
    ("scale", [1.0]),
    ("shift", -0.1),
    ("rotate", 200.0),
    ("hflip", 1.5),
    ("affine_p", -0.1),
    ("photometric_p", 2.0),
    ("hue", 0.7),
    ("brightness", -0.2),
    ("mean", [0.5, 0.5]),
    ("std", [0.2, 0.0, 0.2]),
    ("std", [0.2, 0.2]),
    ("mask_fill", -1),
    ("mask_fill", 1),
    ("interpolation", "bilinear"),
    ("paste_p", 1.5),
    ("paste_p", -0.1),
    ("paste_max_people", 0),
    ("paste_max_people", 1.5),
    ("paste_max_people", True),
    ("paste_scale", [0.5, 0.1]),
    ("paste_scale", [0.0, 0.5]),
    ("paste_scale", [0.5, 1.5]),
    ("paste_scale", [0.5]),
    ("paste_feather", -1.0),
    ("paste_feather", "soft"),
    ("paste_behind", 1.5),
    ("paste_behind", -0.5),
    ("blur_p", 2.0),
    ("blur_limit", [3, 8]),
    ("blur_limit", [1, 3]),
    ("blur_limit", [7, 3]),
    ("blur_limit", [3.0, 7.0]),
    ("noise_p", -0.5),
    ("noise_std", [0.1, 0.05]),
    ("noise_std", [0.0, 2.0]),
    ("jpeg_p", 1.1),
    ("jpeg_quality", [0, 50]),
    ("jpeg_quality", [90, 30]),
    ("jpeg_quality", [30.5, 90]),
]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_bad_config_values_name_the_key(key: str, value) -> None:
    message = rf"aug\.{key}={re.escape(repr(value))} is invalid: expected"
    with pytest.raises(ValueError, match=message):  # the schema refuses to be made with it
        dataclasses.replace(AugConfig(), **{key: value})
    cfg = AugConfig()
    setattr(cfg, key, value)  # changed in place after it was made: the builders refuse it
    for build in (build_train_transform, build_eval_transform):
        with pytest.raises(ValueError, match=message):
            build(cfg)


def test_paste_behind_without_pasting_is_refused() -> None:
    """aug.paste_behind places the people aug.paste_p pastes: on its own it changes nothing, so
    a run given only it would silently train without pasting (2026-12-06, a 72-minute run)."""
    message = r"aug\.paste_behind=0\.5 is invalid: expected 0 while aug\.paste_p=0"
    cfg = compose_config(["+exp=dual_channel_pretrained_cpu", "aug.paste_behind=0.5"])
    with pytest.raises(ValueError, match=message):
        build_train_transform(cfg.aug, pool=_OnePersonPool())
    # A checkpoint's config that carries it still loads and evaluates.
    build_eval_transform(cfg.aug)
    pasting = dataclasses.replace(cfg.aug, paste_p=0.5)
    build_train_transform(pasting, pool=_OnePersonPool())


def test_builders_accept_an_omegaconf_config() -> None:
    cfg = OmegaConf.structured(AugConfig(crop_size=[64, 48], interpolation="cubic"))
    image, mask = _blocks()
    assert build_train_transform(cfg, seed=0)(image=image, mask=mask)["mask"].shape == (64, 48)
    # _blocks() is landscape (90 x 120): the default 256 x 192 canvas turned.
    assert build_eval_transform(cfg)(image=image, mask=mask)["image"].shape == (3, 192, 256)


class _OnePersonPool:
    """The pool ``aug=composite`` pastes from (any object with ``load_raw``, like SegDataset)."""

    on_bad_sample = "error"

    def __len__(self) -> int:
        return 1

    def load_raw(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return _blocks(seed=index)


@pytest.mark.parametrize("aug", ["default", "none", "strong", "composite"])
def test_every_aug_config_builds(aug: str) -> None:
    cfg = compose_config([f"aug={aug}"]).aug
    image, mask = _blocks()
    out = build_train_transform(cfg, seed=0, pool=_OnePersonPool())(image=image, mask=mask)
    assert out["image"].shape == (3, *cfg.crop_size)
    landscape = tuple(sorted(cfg.eval_size))  # _blocks() is landscape
    assert build_eval_transform(cfg)(image=image, mask=mask)["mask"].shape == landscape


@pytest.mark.parametrize("source", ["eg_portrait", "ccp", "vikram_human_seg"])
def test_real_samples(source: str, data_env) -> None:
    from seg.data import build_dataset

    cfg = DataConfig(name=source, root=str(data_env), download=False)
    aug = _aug(crop_size=[128, 128], eval_size=[128, 128])
    plain = build_dataset(cfg, "train")
    ds = build_dataset(cfg, "train", transform=build_train_transform(aug, seed=0))
    for i in (0, len(ds) - 1):
        sample = ds[i]
        assert sample["image"].shape == (3, 128, 128) and sample["image"].dtype == torch.float32
        assert set(torch.unique(sample["mask"]).tolist()) <= {0, 1, 255}
        # Alignment on real sizes: carry the real mask in channel 0 of the real image, and mark
        # ignore pixels like brought-in ones (channel 1 = 0) since both must come out as 255.
        image, mask = plain.load_raw(i)
        image = image.copy()
        image[..., 0] = np.where(mask == 1, 255, 0)
        image[..., 1] = np.where(mask == 255, 0, 255)
        rgb, out_mask = _run(build_train_transform(aug, seed=i), image, mask, aug)
        _assert_aligned(rgb, out_mask, fill=255)
        assert (out_mask == 1).any(), f"{source} sample {i}: no person left after augmentation"


def test_train_size_crops_a_sharper_photo_at_the_scale_it_names() -> None:
    """``aug.train_size`` resizes the long side before the crop: with 2x the crop's long side,
    a crop is a window of the photo at that size (not the whole photo shrunk into the crop);
    unset, the crop holds the whole photo, as before."""
    image, mask = _blocks(180, 240)  # 6x6-pixel blocks, nearest interpolation: exact windows
    for train_size, seed in ((None, 0), (192, 1), (192, 2)):
        cfg = _aug(crop_size=[72, 96], train_size=train_size, **NO_AUG)
        rgb, out_mask = _run(build_train_transform(cfg, seed=seed), image, mask, cfg)
        size = train_size or 96
        resized = cv2.resize(image, (size, size * 3 // 4), interpolation=cv2.INTER_NEAREST)
        windows = [
            (y, x)
            for y in range(resized.shape[0] - 72 + 1)
            for x in range(resized.shape[1] - 96 + 1)
            if np.array_equal(resized[y : y + 72, x : x + 96], rgb)
        ]
        assert windows, f"train_size={train_size}: the crop is no window of the resized photo"
        _assert_aligned(rgb, out_mask, fill=0)
    with pytest.raises(ValueError, match=r"aug\.train_size"):
        check_aug_config(_aug(train_size=4))


@pytest.mark.parametrize("eval_size", [[96, 96], [120, 90], [90, 120], [37, 61]])
@pytest.mark.parametrize("interpolation", ["linear", "area", "nearest"])
def test_the_fast_eval_image_transform_equals_the_preset_bit_for_bit(
    eval_size: list[int], interpolation: str
) -> None:
    """Prediction's EvalImageTransform (uint8 geometry, table normalisation, channels first)
    gives exactly the eval preset's image, for photos of every orientation and size."""
    aug = _aug(eval_size=eval_size, interpolation=interpolation, mean=[0.5, 0.4, 0.3])
    preset, fast = build_eval_transform(aug), EvalImageTransform(aug)
    rng = np.random.default_rng(0)
    for hw in ((96, 96), (150, 100), (100, 150), (500, 23), (5, 7)):
        image = rng.integers(0, 256, (*hw, 3), dtype=np.uint8)
        want, got = preset(image=image)["image"], fast(image=image)["image"]
        assert got.dtype == want.dtype == torch.float32
        assert got.is_contiguous() and torch.equal(got, want), hw
    with pytest.raises(ValueError, match="uint8 \\(H, W, 3\\)"):
        fast(image=np.zeros((8, 8), np.uint8))
