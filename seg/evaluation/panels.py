"""Pictures of a prediction against its truth: overlays, an error map, side-by-side panels;
and the grid of augmented samples that ``scripts/show_augmentations.py`` writes.

Used by the worst-images gallery of the evaluation, by the validation images in TensorBoard
and to check augmentations by eye. Every function takes uint8 (H, W, 3) RGB images and
returns uint8 arrays. Truth masks are uint8 (H, W) with 0 background, 1 person and 255
ignore; predictions are bool (H, W) person masks.
"""

from __future__ import annotations

import logging

import cv2
import numpy as np

from seg.config import AugConfig
from seg.data import SegDataset
from seg.data.io import IGNORE_INDEX
from seg.data.transforms import build_eval_transform, build_train_transform, denormalize
from seg.inference.render import overlay

log = logging.getLogger(__name__)

TRUTH_COLOUR = (0, 220, 0)  # green
PRED_COLOUR = (255, 0, 255)  # magenta: tells the prediction panel from the truth at a glance
FP_COLOUR = (255, 40, 40)  # red: predicted person, truly background
FN_COLOUR = (40, 90, 255)  # blue: missed person
IGNORE_COLOUR = (128, 128, 128)  # grey: not scored


def truth_overlay(image: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """The person of the truth tinted green and outlined; ignore pixels grey."""
    out = overlay(image, truth == 1, TRUTH_COLOUR)
    ignore = truth == IGNORE_INDEX
    out[ignore] = IGNORE_COLOUR
    return out


def prediction_overlay(image: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """The predicted person tinted magenta and outlined."""
    return overlay(image, pred.astype(bool), PRED_COLOUR)


def error_map(image: np.ndarray, pred: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """The image dimmed to grey, with false positives red, false negatives blue, ignore grey.

    Correct pixels keep the dimmed image, so the errors stand out where they are.
    """
    gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    out = np.repeat((gray // 3)[..., None], 3, axis=2)
    pred = pred.astype(bool)
    person = truth == 1
    labelled = truth != IGNORE_INDEX
    out[pred & ~person & labelled] = FP_COLOUR
    out[~pred & person] = FN_COLOUR
    out[~labelled] = IGNORE_COLOUR
    return out


def caption(image: np.ndarray, text: str) -> np.ndarray:
    """``text`` in white on a dark band at the top left (a copy; the size is unchanged)."""
    out = image.copy()
    h = out.shape[0]
    scale = max(0.35, h / 900)
    thickness = max(1, round(scale * 1.5))
    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
    pad = max(2, th // 3)
    cv2.rectangle(out, (0, 0), (tw + 2 * pad, th + base + 2 * pad), (0, 0, 0), -1)
    cv2.putText(
        out,
        text,
        (pad, pad + th),
        cv2.FONT_HERSHEY_SIMPLEX,
        scale,
        (255, 255, 255),
        thickness,
        cv2.LINE_AA,
    )
    return out


def side_by_side(panels: list[np.ndarray], max_height: int = 0) -> np.ndarray:
    """Panels of one size (H, W, 3) side by side -> (H', n * W', 3).

    ``max_height`` > 0 shrinks them (area interpolation, aspect kept) when H is larger.
    """
    shapes = {p.shape for p in panels}
    if len(shapes) != 1:
        raise ValueError(f"panels must share one shape, got {sorted(shapes)}")
    h, w = panels[0].shape[:2]
    if max_height > 0 and h > max_height:
        size = (max(1, round(w * max_height / h)), max_height)
        panels = [cv2.resize(p, size, interpolation=cv2.INTER_AREA) for p in panels]
    return np.concatenate(panels, axis=1)


def four_panels(
    image: np.ndarray, truth: np.ndarray, pred: np.ndarray, text: str = "", max_height: int = 0
) -> np.ndarray:
    """image | truth overlay | prediction overlay | error map, (H', 4 * W', 3).

    ``text`` (e.g. the name and the scores) is written on the image panel. Images more than
    twice ``max_height`` tall are drawn at twice ``max_height`` (the image by area, the masks
    by nearest neighbour), then shrunk: a 12000 x 12000 photo never makes full-size panels.
    """
    h, w = image.shape[:2]
    if max_height > 0 and h > 2 * max_height:
        size = (max(1, round(w * 2 * max_height / h)), 2 * max_height)
        image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
        truth = cv2.resize(truth, size, interpolation=cv2.INTER_NEAREST)
        pred = cv2.resize(pred.astype(np.uint8), size, interpolation=cv2.INTER_NEAREST) > 0
    first = caption(image, text) if text else image
    panels = [
        first,
        truth_overlay(image, truth),
        prediction_overlay(image, pred),
        error_map(image, pred, truth),
    ]
    return side_by_side(panels, max_height)


def three_panels(image: np.ndarray, truth: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """input | truth overlay | prediction overlay, (H, 3 * W, 3): TensorBoard's val images."""
    return side_by_side([image, truth_overlay(image, truth), prediction_overlay(image, pred)])


CAPTION_H = 18  # pixels of the caption strip above each cell of the augmentation grid


def _cell(view: np.ndarray, text: str, height: int, width: int) -> np.ndarray:
    """Place an RGB view at the top left of a (CAPTION_H + height, width) cell under ``text``."""
    cell = np.full((CAPTION_H + height, width, 3), 32, np.uint8)
    h, w = min(view.shape[0], height), min(view.shape[1], width)
    cell[CAPTION_H : CAPTION_H + h, :w] = view[:h, :w]
    cv2.putText(
        cell, text[:40], (3, CAPTION_H - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 255, 255), 1
    )
    return cell


def augmentation_grid(
    dataset: SegDataset,
    aug: AugConfig,
    samples: int,
    augs: int,
    seed: int,
    pool: SegDataset | None = None,
) -> np.ndarray:
    """RGB uint8 grid: ``samples`` rows of ``dataset`` (drawn at random with ``seed``) x
    (1 + ``augs``) columns: the evaluation view, then training augmentations (seeded with
    ``seed``; ``pool``: the people to paste when ``aug.paste_p > 0``), each with its mask drawn
    as the gallery's truth panel (person tinted and outlined, ignore pixels grey)."""
    rng = np.random.default_rng(seed)
    indices = sorted(rng.choice(len(dataset), min(samples, len(dataset)), replace=False))
    train_tf = build_train_transform(aug, seed=seed, pool=pool)
    eval_tf = build_eval_transform(aug)
    long = max(aug.eval_size)  # the eval view is portrait or landscape, as its photo
    height, width = max(aug.crop_size[0], long), max(aug.crop_size[1], long)
    rows = []
    for i in indices:
        image, mask = dataset.load_raw(int(i))
        ref = dataset.refs[int(i)]
        cells = []
        for k in range(1 + augs):
            out = (eval_tf if k == 0 else train_tf)(image=image, mask=mask)
            view = truth_overlay(denormalize(out["image"], aug.mean, aug.std), out["mask"].numpy())
            text = f"{ref.source}/{ref.id} eval" if k == 0 else f"aug {k}"
            cells.append(_cell(view, text, height, width))
        rows.append(np.concatenate(cells, axis=1))
        log.info("sample %s/%s: image %s", ref.source, ref.id, image.shape)
    return np.concatenate(rows, axis=0)
