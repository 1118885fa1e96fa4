"""Write a PNG grid of augmented real samples with their masks overlaid, to check them by eye.

    python scripts/show_augmentations.py data=eg_portrait aug=strong out=/tmp/aug.png
    python scripts/show_augmentations.py data=human_mix samples=6 augs=5 split=train seed=3
    python scripts/show_augmentations.py data=human_mix aug=composite out=/tmp/composite.png

Each row is one sample; the first column is the evaluation view (no augmentation), the others are
training augmentations. Person pixels are tinted green with a yellow outline, ignore pixels
(255: padding and pixels a shift/rotation brought in) magenta. ``data.root`` (or the
environment variable SEG_DATA_DIR) says where the datasets are. With ``aug.paste_p > 0`` the
pasted people come from the training split, as in training.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import cv2
import hydra
import numpy as np
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from seg.config import Config, register_configs
from seg.data import build_dataset
from seg.data.transforms import build_eval_transform, build_train_transform, denormalize

log = logging.getLogger(__name__)

PERSON_RGB = (0, 255, 0)
OUTLINE_RGB = (255, 255, 0)
IGNORE_RGB = (255, 0, 255)
ALPHA = 0.45
LABEL_H = 18  # pixels of the caption strip above each cell


@dataclass
class ShowConfig(Config):
    """The training config plus this script's options (so ``out=...`` is typed and checked)."""

    samples: int = 4  # rows: dataset samples, drawn at random with ``seed``
    augs: int = 4  # training augmentations per sample, after the evaluation view
    split: str = "train"
    out: str = "outputs/augmentations.png"


def overlay(image: np.ndarray, mask: np.ndarray, ignore_value: int = 255) -> np.ndarray:
    """uint8 RGB (H, W, 3) + mask (H, W) -> RGB with person green (outlined), ignore magenta."""
    out = image.astype(np.float32)
    for value, colour in ((1, PERSON_RGB), (ignore_value, IGNORE_RGB)):
        sel = mask == value
        out[sel] = (1 - ALPHA) * out[sel] + ALPHA * np.asarray(colour, np.float32)
    out = np.clip(np.rint(out), 0, 255).astype(np.uint8)
    contours, _ = cv2.findContours(
        (mask == 1).astype(np.uint8), cv2.RETR_LIST, cv2.CHAIN_APPROX_NONE
    )
    cv2.drawContours(out, contours, -1, OUTLINE_RGB, 1)
    return out


def _cell(view: np.ndarray, caption: str, height: int, width: int) -> np.ndarray:
    """Place an RGB view at the top left of a (LABEL_H + height, width) cell under a caption."""
    cell = np.full((LABEL_H + height, width, 3), 32, np.uint8)
    h, w = min(view.shape[0], height), min(view.shape[1], width)
    cell[LABEL_H : LABEL_H + h, :w] = view[:h, :w]
    cv2.putText(
        cell, caption[:40], (3, LABEL_H - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 255, 255), 1
    )
    return cell


def augmentation_grid(cfg: ShowConfig) -> np.ndarray:
    """RGB uint8 grid: ``cfg.samples`` rows x (1 + ``cfg.augs``) columns of overlays."""
    dataset = build_dataset(cfg.data, cfg.split)
    if len(dataset) == 0:
        raise ValueError(f"the {cfg.split!r} split of data={cfg.data.name} is empty")
    rng = np.random.default_rng(cfg.seed)
    indices = sorted(rng.choice(len(dataset), min(cfg.samples, len(dataset)), replace=False))
    pool = None  # the people to paste: the training photos, read only when pasting
    if cfg.aug.paste_p > 0:
        pool = dataset if cfg.split == "train" else build_dataset(cfg.data, "train")
    train_tf = build_train_transform(cfg.aug, seed=cfg.seed, pool=pool)
    eval_tf = build_eval_transform(cfg.aug)
    long = max(cfg.aug.eval_size)  # the eval view is portrait or landscape, as its photo
    height, width = max(cfg.aug.crop_size[0], long), max(cfg.aug.crop_size[1], long)
    rows = []
    for i in indices:
        image, mask = dataset.load_raw(int(i))
        ref = dataset.refs[int(i)]
        cells = []
        for k in range(1 + cfg.augs):
            out = (eval_tf if k == 0 else train_tf)(image=image, mask=mask)
            rgb = denormalize(out["image"], cfg.aug.mean, cfg.aug.std)
            view = overlay(rgb, out["mask"].numpy())
            caption = f"{ref.source}/{ref.id} eval" if k == 0 else f"aug {k}"
            cells.append(_cell(view, caption, height, width))
        rows.append(np.concatenate(cells, axis=1))
        log.info("sample %s/%s: image %s", ref.source, ref.id, image.shape)
    return np.concatenate(rows, axis=0)


@hydra.main(config_path="../configs", config_name="train", version_base="1.3")
def main(raw: DictConfig) -> None:
    cfg: ShowConfig = OmegaConf.to_object(raw)  # type: ignore[assignment]
    if cfg.samples < 1 or cfg.augs < 0:
        raise ValueError(f"samples must be >= 1 and augs >= 0, got {cfg.samples} and {cfg.augs}")
    grid = augmentation_grid(cfg)
    # Hydra keeps the working directory (version_base 1.3), so a relative path is the caller's.
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(out), cv2.cvtColor(grid, cv2.COLOR_RGB2BGR)):
        raise OSError(f"could not write {out} (is the suffix an image format OpenCV knows?)")
    log.info("wrote %s (%dx%d)", out, grid.shape[1], grid.shape[0])


if __name__ == "__main__":
    register_configs()
    # The script's options extend the training schema: train.yaml lists ``base_config`` first.
    ConfigStore.instance().store(name="base_config", node=ShowConfig)
    main()
