"""Person compositing (PastePeople) and the image-only degradations of the training preset."""

from __future__ import annotations

import dataclasses
import logging
import pickle
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from seg.config import AugConfig, BadSamplePolicy
from seg.data import SegDataset, build_loader
from seg.data.copy_paste import PastePeople
from seg.data.io import BadSampleError
from seg.data.listing import list_vikram
from seg.data.transforms import build_train_transform, denormalize

RED, GREEN, GREY, WHITE = (255, 0, 0), (0, 255, 0), (128, 128, 128), (255, 255, 255)
NO_AUG = dict(shift=0.0, scale=[1.0, 1.0], rotate=0.0, hflip=0.0, affine_p=0.0)


class Pool:
    """A pool of in-memory pairs, as ``SegDataset.load_raw`` gives them."""

    on_bad_sample = BadSamplePolicy.error

    def __init__(self, *pairs: tuple[np.ndarray, np.ndarray]) -> None:
        self.pairs = pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def load_raw(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        return self.pairs[index]


def red_person(height: int = 200, width: int = 120, box=(40, 160, 30, 90)):
    """Blue photo with a red rectangle "person" (rows box[0]:box[1], cols box[2]:box[3])."""
    image = np.zeros((height, width, 3), np.uint8)
    image[..., 2] = 255
    mask = np.zeros((height, width), np.uint8)
    y0, y1, x0, x1 = box
    image[y0:y1, x0:x1] = RED
    mask[y0:y1, x0:x1] = 1
    return image, mask


def red_ellipse() -> tuple[np.ndarray, np.ndarray]:
    """A red ellipse on blue: its box holds background, so edges show how alpha is made."""
    image, mask = red_person(box=(0, 0, 0, 0))
    cv2.ellipse(mask, (60, 100), (30, 60), 20, 0, 360, 1, -1)
    image[mask == 1] = RED
    return image, mask


def green_target(height: int = 300, width: int = 400):
    """Green photo with a grey person (mask 1) at the top left and a white ignore band."""
    image = np.zeros((height, width, 3), np.uint8)
    image[...] = GREEN
    mask = np.zeros((height, width), np.uint8)
    image[:60, :50], mask[:60, :50] = GREY, 1
    image[:, -20:], mask[:, -20:] = WHITE, 255
    return image, mask


def paste(pool, image, mask, seed: int, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    transform = PastePeople(pool, **{"max_people": 1, "feather": 0.0, "p": 1.0, **kwargs})
    transform.set_random_seed(seed)
    out = transform(image=image, mask=mask)
    return out["image"], out["mask"]


def is_colour(image: np.ndarray, colour) -> np.ndarray:
    return np.all(image == np.asarray(colour, np.uint8), axis=-1)


@pytest.mark.parametrize("seed", range(8))
def test_pasted_person_becomes_person_and_the_rest_is_kept(seed: int) -> None:
    image, mask = green_target()
    out_image, out_mask = paste(Pool(red_person()), image, mask, seed, scale=(0.2, 0.6))
    pasted = is_colour(out_image, RED)  # hard edge: the person's pixels are exactly red
    assert pasted.sum() > 50
    assert np.all(out_image[~pasted] == image[~pasted]), "only the person's pixels change"
    # Union: 1 under the pasted person, else the target's value (its person and ignore kept).
    assert np.array_equal(out_mask, np.where(pasted, 1, mask))


def grey_subject(height: int = 300, width: int = 400):
    """Green photo with a large grey person (mask 1) in the middle, as a portrait's subject."""
    image = np.zeros((height, width, 3), np.uint8)
    image[...] = GREEN
    mask = np.zeros((height, width), np.uint8)
    image[50:300, 120:280], mask[50:300, 120:280] = GREY, 1
    return image, mask


@pytest.mark.parametrize("feather", [0.0, 1.5])
def test_people_pasted_behind_stay_under_the_photos_own_people(feather: float) -> None:
    image, mask = grey_subject()
    subject = mask == 1
    shown = covered = 0
    for seed in range(12):
        kwargs = dict(scale=(0.5, 1.0), feather=feather, max_people=2, seed=seed)
        behind_image, behind_mask = paste(Pool(red_person()), image, mask, behind=1.0, **kwargs)
        # A tiny probability makes the same draws as 1.0 (the default 0 skips that draw).
        front_image, front_mask = paste(Pool(red_person()), image, mask, behind=1e-12, **kwargs)
        assert np.array_equal(behind_image[subject], image[subject]), "the subject stays on top"
        assert np.array_equal(behind_mask, front_mask), "the label is the same union"
        shown += int(is_colour(behind_image, RED).any())
        covered += int((front_image[subject] != image[subject]).any())
    assert shown >= 8, "pasted people show around the subject"
    assert covered >= 6, "in front (the default), pasted people cover the subject"


def test_behind_is_drawn_per_person() -> None:
    image, mask = grey_subject()
    subject = mask == 1
    outcomes = set()
    for seed in range(20):
        out, _ = paste(
            Pool(red_person()), image, mask, seed, scale=(0.8, 1.0), max_people=1, behind=0.5
        )
        outcomes.add(bool((out[subject] != image[subject]).any()))
    assert outcomes == {True, False}


@pytest.mark.parametrize("person", [red_person, red_ellipse])
@pytest.mark.parametrize("seed", range(4))
def test_feather_softens_only_the_boundary(seed: int, person) -> None:
    # Sources have no green and the target's background is pure green, so there the green
    # channel reads the blend: G = 255 * (1 - alpha).
    image, mask = green_target()
    on_green = mask == 0  # neither the target's person nor its ignore band
    feather = 2.0
    hard_image, hard_mask = paste(Pool(person()), image, mask, seed, scale=(0.3, 0.6))
    assert np.all(np.isin(hard_image[..., 1][on_green], [0, 255])), "feather 0: alpha is 0 or 1"
    soft_image, soft_mask = paste(
        Pool(person()), image, mask, seed, scale=(0.3, 0.6), feather=feather
    )
    pasted = (hard_image != image).any(axis=-1).astype(np.uint8)  # same draws: same place
    inside = cv2.distanceTransform(pasted, cv2.DIST_L2, 3)
    outside = cv2.distanceTransform(1 - pasted, cv2.DIST_L2, 3)
    alpha = 1.0 - soft_image[..., 1] / 255.0
    mixed = on_green & (alpha > 0) & (alpha < 1)
    near = np.ceil(3 * feather) + 1.5
    assert mixed.any(), "a feathered edge has intermediate values"
    assert np.all(np.maximum(inside, outside)[mixed] <= near), "only near the boundary"
    assert np.array_equal(soft_image[inside > near], hard_image[inside > near]), "opaque inside"
    assert np.array_equal(soft_image[outside > near], image[outside > near]), "untouched outside"
    # The label is the pasted person where alpha >= 0.5 (up to the rounding of G).
    assert np.all(alpha[on_green & (soft_mask == 1)] >= 0.5 - 1 / 255)
    assert np.all(alpha[on_green & (soft_mask == 0)] <= 0.5 + 1 / 255)
    assert abs(int((soft_mask == 1).sum()) - int((hard_mask == 1).sum())) < 0.1 * pasted.sum()


def test_scale_is_log_uniform_in_range_and_keeps_the_aspect_ratio() -> None:
    lo, hi = 0.08, 0.5
    image, mask = green_target(400, 600)
    mask[...] = 0  # no target person, so the mask's person is the pasted one
    heights = []
    for seed in range(150):
        _, out_mask = paste(Pool(red_person()), image, mask, seed, scale=(lo, hi))
        rows, cols = np.nonzero(out_mask == 1)
        if rows.min() == 0 or rows.max() == 399 or cols.min() == 0 or cols.max() == 599:
            continue  # clipped by the border: its size is not measurable
        height, width = np.ptp(rows) + 1, np.ptp(cols) + 1
        assert lo * 400 - 1 <= height <= hi * 400 + 1
        assert abs(width / height - 60 / 120) <= 1.0 / min(height, width) + 0.02
        heights.append(height / 400)
    assert len(heights) > 50
    # Log-uniform: as many below the geometric mean of the range as above it.
    below = np.mean(np.asarray(heights) < np.sqrt(lo * hi))
    assert 0.3 < below < 0.7 and min(heights) < 0.1 and max(heights) > 0.4


def two_colour_person() -> tuple[np.ndarray, np.ndarray]:
    """A person red on the left, yellow on the right, with an ignore band (255) to its right."""
    image, mask = red_person()
    image[40:160, 60:90] = (255, 255, 0)
    mask[40:160, 90:110] = 255
    return image, mask


def test_people_are_flipped_and_only_person_pixels_are_pasted() -> None:
    target, target_mask = green_target(400, 600)
    left_yellow = right_yellow = 0
    for seed in range(20):
        out_image, out_mask = paste(Pool(two_colour_person()), target, target_mask, seed)
        assert not is_colour(out_image, (0, 0, 255)).any(), "source background was pasted"
        new = (out_mask == 1) & (target_mask != 1)
        changed = (out_image != target).any(axis=-1)
        assert np.array_equal(new, changed & (target_mask != 1)), "label and pixels agree"
        assert cv2.connectedComponents(new.astype(np.uint8))[0] - 1 == 1  # one person
        red = np.nonzero(is_colour(out_image, RED).any(axis=0))[0]
        yellow = np.nonzero(is_colour(out_image, (255, 255, 0)).any(axis=0))[0]
        if red.size and yellow.size:
            left_yellow += yellow.mean() < red.mean()
            right_yellow += yellow.mean() > red.mean()
    assert left_yellow > 2 and right_yellow > 2, "people are flipped about half the time"


def test_people_cut_by_the_bottom_of_their_photo_keep_the_cut_at_the_bottom() -> None:
    upper_body = red_person(box=(40, 200, 30, 90))  # reaches the last row of its photo
    image, mask = green_target(400, 600)
    mask[...] = 0  # no target person, so the mask's person is the pasted one
    for seed in range(10):
        out_image, out_mask = paste(
            Pool(upper_body), image, mask, seed, scale=(0.1, 0.5), feather=2
        )
        rows = np.nonzero((out_mask == 1).any(axis=1))[0]
        assert rows.max() == 399 and rows.min() > 399 - 0.5 * 400 - 1
        # The cut is not feathered: the person is opaque down to the last row.
        inner = np.nonzero(out_mask[-1] == 1)[0][8:-8]
        assert np.array_equal(out_image[-1, inner], np.full((inner.size, 3), RED, np.uint8))


def test_up_to_max_people_are_pasted() -> None:
    target, target_mask = green_target(400, 600)
    counts = set()
    for seed in range(20):
        _, out_mask = paste(
            Pool(red_person()), target, target_mask, seed, scale=(0.1, 0.2), max_people=3
        )
        new = (out_mask == 1) & (target_mask != 1)
        counts.add(cv2.connectedComponents(new.astype(np.uint8))[0] - 1)
    assert {1, 2, 3} <= counts  # small people rarely touch, so each is a component


@pytest.mark.parametrize("feather", [0.0, 1.0])
@pytest.mark.parametrize(
    ("target_shape", "box"),
    [
        ((300, 400), (40, 160, 30, 90)),
        ((7, 5, 3), (40, 160, 30, 90)),
        ((31, 17, 1), (99, 100, 5, 6)),
    ],
)
def test_grayscale_and_odd_sizes(target_shape, box, feather: float) -> None:
    target = np.full(target_shape, 90, np.uint8)
    mask = np.zeros(target_shape[:2], np.uint8)
    for seed in range(5):
        out_image, out_mask = paste(
            Pool(red_person(box=box)), target, mask, seed, scale=(0.5, 1.0), feather=feather
        )
        assert out_image.shape == target.shape and out_image.dtype == np.uint8
        assert out_mask.shape == mask.shape and (out_mask == 1).any()
        changed = (out_image != 90).reshape(*mask.shape, -1).any(-1)
        if feather == 0:  # red in grey is 76: every pasted pixel changes
            assert np.array_equal(out_mask == 1, changed)
        else:
            assert np.all(changed[out_mask == 1])


def test_sources_without_a_person_are_passed_over() -> None:
    empty = red_person()[0], np.zeros((200, 120), np.uint8)
    image, mask = green_target()
    out_image, out_mask = paste(Pool(empty), image, mask, seed=0)
    assert np.array_equal(out_image, image) and np.array_equal(out_mask, mask)
    pool = Pool(empty, red_person())
    pasted = [is_colour(paste(pool, image, mask, seed=s)[0], RED).any() for s in range(10)]
    assert sum(pasted) >= 8  # up to 4 draws per wanted person


def test_bad_sources_are_skipped_or_raise_naming_the_file(
    vikram_subset: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (vikram_subset / "Training_Images" / "1.jpg").write_bytes(b"\xff\xd8 truncated")
    listing = list_vikram(vikram_subset, 0.0, 0.0)
    refs = [listing.refs[i] for i in ("1", "2", "3")]
    image, mask = green_target()
    skipping = SegDataset(refs, on_bad_sample=BadSamplePolicy.skip)
    with caplog.at_level(logging.WARNING):
        outs = [paste(skipping, image, mask, seed=s) for s in range(12)]
    assert "1.jpg" in caplog.text, "no draw hit the bad sample: the test proves nothing"
    pasted = sum((m == 1).sum() > (mask == 1).sum() for _, m in outs)
    assert pasted >= 10, "bad sources are replaced by other draws"
    with pytest.raises(BadSampleError, match=r"1\.jpg: corrupt or unreadable image"):
        for s in range(12):
            paste(SegDataset(refs), image, mask, seed=s)


def _aug(**overrides) -> AugConfig:
    base = dict(crop_size=[64, 48], paste_p=1.0, paste_scale=[0.2, 0.8], **NO_AUG)
    return dataclasses.replace(AugConfig(), **{**base, **overrides})


def test_seeded_pipeline_is_reproducible_and_seeds_differ() -> None:
    pool, (image, mask) = (
        Pool(red_person(), red_person(150, 150, (10, 140, 50, 80))),
        green_target(),
    )

    def run(seed: int) -> list[torch.Tensor]:
        transform = build_train_transform(_aug(paste_max_people=2), seed=seed, pool=pool)
        return [transform(image=image, mask=mask)["mask"] for _ in range(3)]

    first, again, other = run(3), run(3), run(4)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))
    assert not torch.equal(first[0], first[1]), "successive composites differ"


def test_paste_p_zero_is_the_pipeline_without_compositing() -> None:
    cfg = dataclasses.replace(AugConfig(), crop_size=[64, 48], photometric=True)
    image, mask = green_target()
    with_pool = build_train_transform(cfg, seed=5, pool=Pool(red_person()))
    plain = build_train_transform(cfg, seed=5)
    assert not any(isinstance(t, PastePeople) for t in with_pool.transforms)
    for _ in range(3):
        a, b = with_pool(image=image, mask=mask), plain(image=image, mask=mask)
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["mask"], b["mask"])
    on = build_train_transform(
        dataclasses.replace(cfg, paste_p=1.0), seed=5, pool=Pool(red_person())
    )
    assert isinstance(on.transforms[0], PastePeople), "compositing runs first, on the raw photo"


def test_paste_without_a_pool_says_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"aug\.paste_p=0\.5 .*pool="):
        build_train_transform(dataclasses.replace(AugConfig(), paste_p=0.5))


@pytest.fixture
def vikram_train(vikram_subset: Path) -> SegDataset:
    listing = list_vikram(vikram_subset, 0.0, 0.0)
    return SegDataset([listing.refs[i] for i in ("1", "2", "3", "10", "11")])


def test_dataset_pickles_with_itself_as_pool(vikram_train: SegDataset) -> None:
    vikram_train.transform = build_train_transform(_aug(), seed=0, pool=vikram_train)
    copy = pickle.loads(pickle.dumps(vikram_train))
    assert copy.transform.transforms[0].pool is copy
    assert torch.equal(copy[2]["image"], vikram_train[2]["image"])


def test_workers_composite_differently(vikram_train: SegDataset) -> None:
    # One target four times: every difference between items comes from the random draws.
    target = SegDataset([vikram_train.refs[1]] * 4)
    target.transform = build_train_transform(_aug(), seed=0, pool=vikram_train)

    def items(loader) -> list[torch.Tensor]:
        return [batch["mask"][0] for batch in loader]

    unseeded = items(DataLoader(target, batch_size=1, num_workers=2))
    assert torch.equal(unseeded[0], unseeded[1]), "workers repeat each other without seeding"
    seeded = items(build_loader(target, 1, train=False, num_workers=2, pin_memory=False))
    assert not any(torch.equal(a, b) for i, a in enumerate(seeded) for b in seeded[i + 1 :])


DEGRADATIONS = {
    "blur_p": dict(blur_p=1.0, blur_limit=[5, 7]),
    "noise_p": dict(noise_p=1.0),
    "jpeg_p": dict(jpeg_p=1.0, jpeg_quality=[30, 40]),
}


@pytest.mark.parametrize("name", sorted(DEGRADATIONS))
def test_degradations_change_only_the_image(name: str) -> None:
    rng = np.random.default_rng(0)
    image = np.kron(rng.integers(0, 256, (20, 15, 3), dtype=np.uint8), np.ones((6, 6, 1), np.uint8))
    mask = rng.choice(np.array([0, 1, 255], np.uint8), (120, 90))
    cfg = dataclasses.replace(AugConfig(), crop_size=[96, 72], photometric=True)
    for seed in range(3):
        base = build_train_transform(cfg, seed=seed)(image=image, mask=mask)
        degraded_cfg = dataclasses.replace(cfg, **DEGRADATIONS[name])
        out = build_train_transform(degraded_cfg, seed=seed)(image=image, mask=mask)
        assert torch.equal(out["mask"], base["mask"])
        before, after = (denormalize(o["image"], cfg.mean, cfg.std) for o in (base, out))
        diff = np.abs(after.astype(int) - before.astype(int))
        assert diff.mean() > 1.0, f"{name} did not change the image"
        if name == "noise_p":  # modest: std 2-6% of 255
            assert diff.mean() < 0.06 * 255


def test_show_augmentations_draws_the_pasted_people(
    vikram_pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/show_augmentations.py's grid: one row per sample, the eval view then the
    training views; with aug.paste_p=1 the training views change (people pasted) and the eval
    view does not."""
    import importlib.util

    from training_utils import REPO, make_folder_subset

    from seg.config import compose_config

    script = REPO / "scripts" / "show_augmentations.py"
    spec = importlib.util.spec_from_file_location("show", script)
    show = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(__import__("sys").modules, "show", show)  # its dataclass looks it up
    spec.loader.exec_module(show)
    root = make_folder_subset(vikram_pairs, tmp_path / "data")

    def grid(paste_p: float, split: str = "train") -> np.ndarray:
        # No other random step (no affine, no flip; the crop holds the whole photo), so a
        # training view changes only where people are pasted.
        only_paste = ["aug.affine_p=0", "aug.hflip=0", f"aug.paste_p={paste_p}"]
        base = compose_config(["data=folder", f"data.root={root}", *only_paste])
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
        return show.augmentation_grid(show.ShowConfig(**fields, samples=2, augs=2, split=split))

    plain, pasted = grid(0.0), grid(1.0)
    assert np.array_equal(plain, grid(0.0))  # the same seed: the same views
    height, width = plain.shape[0] // 2, plain.shape[1] // 3
    assert plain.shape == pasted.shape and plain.shape[0] % 2 == 0 and plain.shape[1] % 3 == 0
    assert np.array_equal(plain[:, :width], pasted[:, :width])  # the eval views
    for row in range(2):
        for k in (1, 2):
            cell = np.s_[row * height : (row + 1) * height, k * width : (k + 1) * width]
            assert not np.array_equal(plain[cell], pasted[cell]), (row, k)
    # Without pasting, a validation grid reads no training photos (the paste pool).
    splits = []
    real = show.build_dataset
    monkeypatch.setattr(
        show, "build_dataset", lambda data, split: splits.append(split) or real(data, split)
    )
    grid(0.0, split="val")
    assert splits == ["val"]
