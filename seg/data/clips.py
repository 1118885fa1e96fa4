"""Clips with ground truth in every frame, made from still photos and their masks: what the
temporal metrics (``seg.metrics.temporal``) and the temporal mode are measured on.

Two sets: **val** clips are made from the validation splits of the training sources
(eg_portrait, ccp, vikram_human_seg), for choosing options and defaults; **test** clips from
their test splits, for reporting only. Backgrounds are coco128_seg's photos without people
(never trained on), alternately given to the two sets. Every clip is drawn from one seed, so
``scripts/make_clips.py`` writes the same pixels on any machine: the drawing uses NumPy's
seeded generator, and the pixel work is integer (OpenCV's fixed-point warps of uint8 images,
integer blends, box motion blur) so that it does not depend on the CPU's vector instructions.

Kinds (:data:`KINDS`), each a person moving along a smooth path or a photo under camera motion:

- ``pan``: a person standing in a scene the camera pans across;
- ``zoom``: the camera zooms in on a scene with a person off its centre;
- ``walk``: a person walks across the frame (with a step's bob);
- ``swing``: a person swings fast from side to side, tilting;
- ``shake``: a test photo under a shaking hand-held camera;
- ``slow_zoom``: a test photo under a slow zoom, slow on purpose (no fast frames);
- ``degraded``: a walk with motion blur along the motion, sensor noise and a slow drift in
  light (the masks are those of the sharp frames);
- ``cut``: a walk, then a shaking photo of another person, with no transition.

Each clip folder holds ``frames/NNNNN.jpg`` (quality 95), ``masks/NNNNN.png`` (0 background,
255 person) and ``clip.json`` (kind, seed, sources, the frame indices that start a new scene,
and the SHA-256 of its frames' and masks' pixels, before JPEG encoding).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import cv2
import numpy as np

from seg.config import DataConfig
from seg.data.datasets import read_pair
from seg.data.listing import SampleRef, natural_key
from seg.data.registry import list_dataset
from seg.errors import DataError
from seg.fileio import atomic_path, write_json

KINDS = ("pan", "zoom", "walk", "swing", "shake", "slow_zoom", "degraded", "cut")
PERSON_SOURCES = ("eg_portrait", "ccp", "vikram_human_seg")
BACKGROUND_SOURCE = "coco128_seg"
SETS = {"val": "val", "test": "test"}  # clip set -> the sources' split it is made from
LANDSCAPE = (360, 480)  # frame (H, W) of composited clips; photo clips keep the photo's side
VERSION = 1  # bump when a change alters the pixels a seed draws


@dataclass(frozen=True)
class ClipSpec:
    """What one clip is drawn from: its kind, seed, frame count, the people's photos
    (``source/id``) and the background (a coco128_seg id, or None for photo clips)."""

    name: str
    kind: str
    seed: int
    frames: int
    people: tuple[str, ...]
    background: str | None
    size_hw: tuple[int, int] = LANDSCAPE  # composited clips' (photo clips keep the photo's)


@dataclass
class Clip:
    spec: ClipSpec
    frames: list[np.ndarray] = field(default_factory=list)  # uint8 (H, W, 3) RGB
    masks: list[np.ndarray] = field(default_factory=list)  # uint8 (H, W) in {0, 1}
    cuts: list[int] = field(default_factory=list)  # frames that start a new scene

    def sha256(self) -> str:
        """The digest of every frame's and mask's pixels, in order (not of the encoded files)."""
        digest = hashlib.sha256()
        for frame, mask in zip(self.frames, self.masks, strict=True):
            digest.update(np.asarray(frame.shape, np.int64).tobytes() + frame.tobytes())
            digest.update(mask.tobytes())
        return digest.hexdigest()


# --- what a clip is made of --------------------------------------------------------------


@dataclass(frozen=True)
class Sprite:
    """A person cut out of a photo: RGB and alpha (0/255) cropped to the mask's box, and
    whether the person reaches the photo's bottom edge (then kept on the frame's bottom)."""

    rgb: np.ndarray
    alpha: np.ndarray
    grounded: bool


def sprite(image: np.ndarray, mask: np.ndarray, name: str) -> Sprite:
    ys, xs = np.nonzero(mask == 1)
    if not len(xs):
        raise DataError(f"{name}: its mask has no person, so it cannot make a clip")
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    alpha = np.where(mask[y0:y1, x0:x1] == 1, 255, 0).astype(np.uint8)
    grounded = y1 >= image.shape[0] - 2
    return Sprite(np.ascontiguousarray(image[y0:y1, x0:x1]), alpha, bool(grounded))


def affine(scale: float, angle: float, src: Sequence[float], dst: Sequence[float]) -> np.ndarray:
    """2x3: rotate by ``angle`` degrees and scale about ``src``, which lands on ``dst``."""
    m = cv2.getRotationMatrix2D((float(src[0]), float(src[1])), angle, scale)
    m[:, 2] += np.asarray(dst, np.float64) - np.asarray(src, np.float64)
    return m


def warp(image: np.ndarray, m: np.ndarray, size_hw: tuple[int, int], border: int) -> np.ndarray:
    h, w = size_hw
    mode = cv2.BORDER_REFLECT101 if border < 0 else cv2.BORDER_CONSTANT
    return cv2.warpAffine(
        image, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=mode, borderValue=max(border, 0)
    )


def composite(background: np.ndarray, rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Integer alpha blend: (bg * (255 - a) + fg * a + 127) // 255."""
    a = alpha.astype(np.uint32)[..., None]
    out = background.astype(np.uint32) * (255 - a) + rgb.astype(np.uint32) * a + 127
    return (out // 255).astype(np.uint8)


def cover(image: np.ndarray, size_hw: tuple[int, int]) -> np.ndarray:
    """2x3 that scales ``image`` to cover ``size_hw`` (centred)."""
    h, w = image.shape[:2]
    s = max(size_hw[0] / h, size_hw[1] / w)
    return affine(s, 0.0, (w / 2, h / 2), (size_hw[1] / 2, size_hw[0] / 2))


def then(outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """The 2x3 affine ``outer`` after ``inner``."""
    return (np.vstack([outer, [0, 0, 1]]) @ np.vstack([inner, [0, 0, 1]]))[:2]


def ease(t: float) -> float:
    """Smoothstep: 0 -> 1 with zero speed at both ends (peak speed 1.5x the mean)."""
    return t * t * (3 - 2 * t)


# --- the kinds -------------------------------------------------------------------------


def _person_frames(
    person: Sprite,
    background: np.ndarray,
    size_hw: tuple[int, int],
    poses: Iterator[tuple[np.ndarray, np.ndarray]],
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Frames of ``person`` over ``background``: each pose is (camera 2x3 from the
    background's pixels to the frame, person 2x3 from the sprite's to the frame)."""
    for camera, place in poses:
        scene = warp(background, camera, size_hw, -1)
        rgb = warp(person.rgb, place, size_hw, 0)
        alpha = warp(person.alpha, place, size_hw, 0)
        yield composite(scene, rgb, alpha), (alpha >= 128).astype(np.uint8)


def _anchor(person: Sprite) -> tuple[float, float]:
    h, w = person.alpha.shape
    return (w / 2, h - 1.0) if person.grounded else (w / 2, h / 2)


def _poses(kind: str, person: Sprite, bg: np.ndarray, size_hw, n: int, rng) -> Iterator:
    """(camera, person) affines of each frame of a composited kind."""
    h, w = size_hw
    src = _anchor(person)
    height = person.alpha.shape[0]
    side = 1 if rng.random() < 0.5 else -1
    if kind == "pan":  # the camera pans across a scene the person stands in
        span = 0.6 * w  # the person goes from 0.8 to 0.2 of the frame's width (or back)
        base = cover(bg, (h, int(w + span)))
        scale = rng.uniform(0.6, 0.8) * h / height
        x_world = (0.8 * w) if side > 0 else (0.2 * w + span)
        for i in range(n):
            shift = -span * ease(i / (n - 1)) if side > 0 else -span * (1 - ease(i / (n - 1)))
            camera = then(affine(1.0, 0.0, (0, 0), (shift, 0)), base)
            foot = (x_world + shift, h - 1.0 if person.grounded else h / 2)
            yield camera, affine(scale, 0.0, src, foot)
    elif kind == "zoom":  # the camera zooms in and out twice about the frame's centre
        base = cover(bg, size_hw)
        scale = rng.uniform(0.45, 0.6) * h / height
        x = w * (0.5 + side * rng.uniform(0.12, 0.18))
        for i in range(n):
            z = 1.0 + 0.35 * (1 - math.cos(4 * math.pi * i / (n - 1)))
            zoom = affine(z, 0.0, (w / 2, h / 2), (w / 2, h / 2))
            foot = (x, h - 1.0 if person.grounded else h / 2)
            yield then(zoom, base), then(zoom, affine(scale, 0.0, src, foot))
    elif kind in ("walk", "degraded"):  # across the frame at a walker's steady pace
        base = cover(bg, size_hw)
        scale = rng.uniform(0.6, 0.8) * h / height
        x0, x1 = (0.05 * w, 0.95 * w)[::side]
        for i in range(n):
            x = x0 + (x1 - x0) * i / (n - 1)
            bob = 4.0 * abs(math.sin(math.pi * i / 4))
            foot = (x, (h - 1.0 if person.grounded else h / 2) - bob)
            yield base, affine(scale, 0.0, src, foot)
    elif kind == "swing":  # side to side and back, fast, tilting with the swing
        base = cover(bg, size_hw)
        scale = rng.uniform(0.5, 0.65) * h / height
        amplitude, period = 0.25 * w, rng.uniform(12, 18)
        phase = rng.uniform(0, 2 * math.pi)
        for i in range(n):
            s = math.sin(2 * math.pi * i / period + phase)
            foot = (w / 2 + amplitude * s, h - 1.0 if person.grounded else h / 2)
            yield base, affine(scale, 15.0 * s, src, foot)
    else:
        raise ValueError(f"{kind!r} is not a composited kind")


def _photo_frames(
    image: np.ndarray, mask: np.ndarray, kind: str, n: int, rng
) -> tuple[tuple[int, int], list[tuple[np.ndarray, np.ndarray]]]:
    """A photo under camera motion, at the photo's orientation (long side 480)."""
    h, w = image.shape[:2]
    size_hw = LANDSCAPE if w >= h else LANDSCAPE[::-1]
    out_h, out_w = size_hw
    base = cover(image, size_hw)
    centre = (out_w / 2, out_h / 2)
    walk = np.zeros(3)
    out = []
    for i in range(n):
        if kind == "shake":  # a hand-held camera: a smoothed random walk of shift and roll
            walk = 0.6 * walk + rng.normal(0, [12.0, 12.0, 1.5])
            camera = affine(1.2, walk[2], centre, (centre[0] + walk[0], centre[1] + walk[1]))
        elif kind == "slow_zoom":
            camera = affine(1.0 + 0.3 * i / max(1, n - 1), 0.0, centre, centre)
        else:
            raise ValueError(f"{kind!r} is not a photo kind")
        m = then(camera, base)
        frame = warp(image, m, size_hw, -1)
        truth = warp((mask == 1).astype(np.uint8) * 255, m, size_hw, 0)
        out.append((frame, (truth >= 128).astype(np.uint8)))
    return size_hw, out


def degrade(frames: list[np.ndarray], speed: float, rng) -> list[np.ndarray]:
    """Motion blur along x (a box of ``speed / 2`` pixels), noise (sigma 6) and a slow drift
    of light (gain 0.75 to 1.25 and back), in integers."""
    length = int(np.clip(round(abs(speed) / 2), 1, 15))
    out = []
    for i, frame in enumerate(frames):
        acc = np.zeros(frame.shape, np.uint32)
        padded = np.pad(frame, ((0, 0), (length // 2, length - 1 - length // 2), (0, 0)), "edge")
        for k in range(length):
            acc += padded[:, k : k + frame.shape[1]]
        blurred = (acc + length // 2) // length
        gain = 1.0 + 0.25 * math.sin(2 * math.pi * i / len(frames))
        noise = np.rint(rng.normal(0.0, 6.0, frame.shape)).astype(np.int32)
        lit = (blurred.astype(np.int32) * round(gain * 256) + 128) // 256 + noise
        out.append(np.clip(lit, 0, 255).astype(np.uint8))
    return out


def render(spec: ClipSpec, people: dict[str, SampleRef], backgrounds: dict[str, SampleRef]) -> Clip:
    """Draw one clip (deterministic in ``spec``)."""
    rng = np.random.default_rng(spec.seed)
    clip = Clip(spec)
    if spec.kind in ("shake", "slow_zoom"):
        image, mask, _ = read_pair(people[spec.people[0]])
        _, pairs = _photo_frames(image, mask, spec.kind, spec.frames, rng)
    elif spec.kind == "cut":
        first = spec.frames // 2
        pairs = _composited(spec, "walk", spec.people[0], first, people, backgrounds, rng)
        image, mask, _ = read_pair(people[spec.people[1]])
        size_hw, shaken = _photo_frames(image, mask, "shake", spec.frames - first, rng)
        if size_hw != spec.size_hw:  # a portrait photo: its frames letterboxed into the clip's
            shaken = [_fit(f, m, spec.size_hw) for f, m in shaken]
        pairs += shaken
        clip.cuts.append(first)
    else:
        kind = "walk" if spec.kind == "degraded" else spec.kind
        pairs = _composited(spec, kind, spec.people[0], spec.frames, people, backgrounds, rng)
    clip.frames = [f for f, _ in pairs]
    clip.masks = [m for _, m in pairs]
    if spec.kind == "degraded":
        clip.frames = degrade(clip.frames, 0.9 * spec.size_hw[1] / spec.frames, rng)
    return clip


def _composited(spec, kind, person_id, n, people, backgrounds, rng) -> list:
    image, mask, _ = read_pair(people[person_id])
    background, _, _ = read_pair(backgrounds[spec.background])
    person = sprite(image, mask, person_id)
    poses = _poses(kind, person, background, spec.size_hw, n, rng)
    return list(_person_frames(person, background, spec.size_hw, poses))


def _fit(frame: np.ndarray, mask: np.ndarray, size_hw: tuple[int, int]) -> tuple:
    (h, w), (out_h, out_w) = frame.shape[:2], size_hw
    m = affine(min(out_h / h, out_w / w), 0.0, (w / 2, h / 2), (out_w / 2, out_h / 2))
    return warp(frame, m, size_hw, 0), (warp(mask * 255, m, size_hw, 0) >= 128).astype(np.uint8)


# --- sets ----------------------------------------------------------------------------


def pools(root: Path, split: str) -> tuple[dict[str, SampleRef], list[str]]:
    """The people of ``split`` of each person source (``source/id``, ordered) and every id."""
    cfg = DataConfig()
    people: dict[str, SampleRef] = {}
    for source in PERSON_SOURCES:
        listing = list_dataset(cfg, source, root)
        for sample_id in listing.splits[split]:
            people[f"{source}/{sample_id}"] = listing.refs[sample_id]
    return people, list(people)


def people_free(root: Path) -> dict[str, list[SampleRef]]:
    """coco128_seg's photos without people, in id order, alternately for val and test."""
    listing = list_dataset(DataConfig(), BACKGROUND_SOURCE, root)
    free = []
    for sample_id in sorted(listing.refs, key=natural_key):
        ref = listing.refs[sample_id]
        if ref.mask is None or not read_pair(ref)[1].any():
            free.append(ref)
    return {"val": free[0::2], "test": free[1::2]}


def plan(
    set_name: str,
    people: Sequence[str],
    backgrounds: Sequence[str],
    seed: int,
    clips_per_kind: int,
    frames: int,
    kinds: Sequence[str] = KINDS,
) -> list[ClipSpec]:
    """The clips of one set: people and backgrounds drawn without repeats while they last."""
    rng = np.random.default_rng([seed, list(SETS).index(set_name)])
    order = [people[i] for i in rng.permutation(len(people))]
    bgs = [backgrounds[i] for i in rng.permutation(len(backgrounds))]
    specs = []
    for k, kind in enumerate(kinds):
        for c in range(clips_per_kind):
            i = k * clips_per_kind + c
            chosen = (order[(2 * i) % len(order)], order[(2 * i + 1) % len(order)])
            specs.append(
                ClipSpec(
                    name=f"{kind}_{c:02d}",
                    kind=kind,
                    seed=int(rng.integers(2**31)),
                    frames=frames,
                    people=chosen if kind == "cut" else chosen[:1],
                    background=None if kind in ("shake", "slow_zoom") else bgs[i % len(bgs)],
                )
            )
    return specs


def write_clip(clip: Clip, folder: Path) -> dict:
    """``folder/frames``, ``folder/masks`` and ``folder/clip.json`` (written last: a folder
    without it is unfinished). Returns the clip's record."""
    for sub in ("frames", "masks"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for i, (frame, mask) in enumerate(zip(clip.frames, clip.masks, strict=True)):
        _encode(folder / "frames" / f"{i:05d}.jpg", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
        _encode(folder / "masks" / f"{i:05d}.png", mask * 255)
    record = {
        **asdict(clip.spec),
        "size_hw": list(clip.frames[0].shape[:2]),
        "cuts": clip.cuts,
        "sha256": clip.sha256(),
        "version": VERSION,
    }
    write_json(folder / "clip.json", record)
    return record


def _encode(path: Path, array: np.ndarray) -> None:
    params = [cv2.IMWRITE_JPEG_QUALITY, 95] if path.suffix == ".jpg" else []
    ok, data = cv2.imencode(path.suffix, array, params)
    if not ok:
        raise OSError(f"{path}: OpenCV could not encode it")
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.tobytes())


def make_clip_sets(
    root: Path,
    out: Path,
    seed: int = 0,
    clips_per_kind: int = 3,
    frames: int = 30,
    sets: Sequence[str] = tuple(SETS),
    kinds: Sequence[str] = KINDS,
) -> dict:
    """Write ``out/<set>/<clip>/`` for each set and ``out/clips.json`` (the index)."""
    backgrounds = people_free(root)
    index: dict = {"seed": seed, "version": VERSION, "frames": frames, "sets": {}}
    for set_name in sets:
        people, ids = pools(root, SETS[set_name])
        bg_refs = {r.id: r for r in backgrounds[set_name]}
        specs = plan(set_name, ids, list(bg_refs), seed, clips_per_kind, frames, kinds)
        records = []
        for spec in specs:
            records.append(write_clip(render(spec, people, bg_refs), out / set_name / spec.name))
        index["sets"][set_name] = records
    write_json(out / "clips.json", index)
    return index
