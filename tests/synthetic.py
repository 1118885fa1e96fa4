"""Drawn stand-ins for the few real vikram_human_seg pairs the core tests use, for machines
without ``../shared/datasets`` (the datasets are never copied into the repository).

Each photo is a figure (head, torso, arms, legs, in textured clothes) on a cluttered background,
drawn with OpenCV from a seed: the same files every time, with the real pairs' sizes,
orientations and encodings (RGB JPEG, one grayscale; mask PNG, 8-bit {0, 255}). They exercise
the mechanics (loading, training, resuming, evaluating, exporting); facts about the real data
(counts, official splits, odd files) stay in the tests that need ``shared_datasets``.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

# id -> (width, height, grayscale): the real files' sizes, so orientation-dependent tests hold.
VIKRAM_LIKE = {
    "1": (276, 183, False),
    "2": (299, 168, False),
    "3": (183, 275, False),
    "10": (275, 183, False),
    "11": (299, 168, False),
    "12": (300, 168, False),
    "20": (259, 194, False),
    "21": (301, 167, False),
    "22": (183, 275, False),
    "56": (300, 300, True),
}


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A vertical colour gradient with random rectangles and circles, then sensor noise."""
    top, bottom = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    t = np.linspace(0.0, 1.0, h)[:, None, None]
    image = np.broadcast_to(top * (1 - t) + bottom * t, (h, w, 3)).copy()
    for _ in range(int(rng.integers(3, 9))):
        colour = rng.uniform(0, 255, 3).tolist()
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        if rng.random() < 0.5:
            x1, y1 = x0 + int(rng.integers(10, w // 2)), y0 + int(rng.integers(10, h // 2))
            cv2.rectangle(image, (x0, y0), (x1, y1), colour, -1)
        else:
            cv2.circle(image, (x0, y0), int(rng.integers(5, min(h, w) // 4)), colour, -1)
    return image


def _figure(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A uint8 {0, 1} mask of a standing figure, 45-85% of the photo's height."""
    mask = np.zeros((h, w), np.uint8)
    height = rng.uniform(0.45, 0.85) * h
    cx = rng.uniform(0.3, 0.7) * w
    feet = rng.uniform(height, h)
    top = feet - height
    head = height / 8
    cv2.ellipse(mask, (int(cx), int(top + head)), (int(head * 0.8), int(head)), 0, 0, 360, 1, -1)
    shoulder, hip = top + 2.2 * head, top + 4.6 * head
    half = head * rng.uniform(1.0, 1.5)
    torso = np.array([[cx - half, shoulder], [cx + half, shoulder], [cx + half * 0.8, hip]])
    torso = np.vstack([torso, [[cx - half * 0.8, hip]]]).astype(np.int32)
    cv2.fillPoly(mask, [torso], 1)
    limb = max(2, int(head * 0.45))
    for side in (-1, 1):  # arms hang or reach out, legs stand apart
        hand = (cx + side * (half + rng.uniform(0, 2.5) * head), hip + rng.uniform(-2, 0.5) * head)
        cv2.line(mask, (int(cx + side * half), int(shoulder)), tuple(map(int, hand)), 1, limb)
        foot = (cx + side * rng.uniform(0.3, 1.5) * head, feet)
        cv2.line(mask, (int(cx + side * half * 0.5), int(hip)), tuple(map(int, foot)), 1, limb + 2)
    return mask


def _dress(rng: np.random.Generator, image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Paint the figure: striped clothes below the head, a skin tone above."""
    h, w = mask.shape
    ys, xs = np.mgrid[0:h, 0:w]
    period = rng.uniform(4, 12)
    stripes = (np.sin((xs * rng.uniform(-1, 1) + ys) / period) > 0)[..., None]
    cloth = np.where(stripes, rng.uniform(0, 255, 3), rng.uniform(0, 255, 3))
    neck = np.argmax(mask.any(axis=1)) + 0.22 * mask.any(axis=1).sum()
    skin = np.array([224, 172, 138]) * rng.uniform(0.4, 1.1)
    paint = np.where((ys < neck)[..., None], skin, cloth)
    return np.where(mask[..., None] > 0, paint, image)


def draw_pair(seed: int, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """A uint8 RGB photo and its uint8 {0, 1} person mask, the same for the same arguments."""
    rng = np.random.default_rng(seed)
    mask = _figure(rng, height, width)
    image = _dress(rng, _background(rng, height, width), mask)
    image = cv2.GaussianBlur(image, (3, 3), 0.8) + rng.normal(0, 6, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8), mask


def write_vikram_like(dst: Path, ids: dict[str, tuple[int, int, bool]] = VIKRAM_LIKE) -> Path:
    """``dst/Training_Images/N.jpg`` and ``dst/Ground_Truth/N.png``, the published layout."""
    (dst / "Training_Images").mkdir(parents=True, exist_ok=True)
    (dst / "Ground_Truth").mkdir(parents=True, exist_ok=True)
    for stem, (width, height, gray) in ids.items():
        image, mask = draw_pair(int(stem), width, height)
        pixels = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY if gray else cv2.COLOR_RGB2BGR)
        quality = [cv2.IMWRITE_JPEG_QUALITY, 92]
        cv2.imwrite(str(dst / "Training_Images" / f"{stem}.jpg"), pixels, quality)
        cv2.imwrite(str(dst / "Ground_Truth" / f"{stem}.png"), mask * 255)
    return dst
