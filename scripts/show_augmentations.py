"""Write a PNG grid of augmented real samples with their masks overlaid, to check them by eye.

    python scripts/show_augmentations.py data=eg_portrait aug=strong out=/tmp/aug.png
    python scripts/show_augmentations.py data=human_mix samples=6 augs=5 split=train seed=3
    python scripts/show_augmentations.py data=human_mix aug=composite out=/tmp/composite.png

Each row is one sample; the first column is the evaluation view (no augmentation), the others are
training augmentations. Masks are drawn as in the evaluation's gallery: person pixels tinted
green and outlined, ignore pixels (255: padding and pixels a shift/rotation brought in) grey.
``data.root`` (or the environment variable SEG_DATA_DIR) says where the datasets are. With
``aug.paste_p > 0`` the pasted people come from the training split, as in training. The grid
is drawn by ``seg.evaluation.panels.augmentation_grid``.
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
from seg.errors import ConfigError, DataError
from seg.evaluation import panels

log = logging.getLogger(__name__)


@dataclass
class ShowConfig(Config):
    """The training config plus this script's options (so ``out=...`` is typed and checked)."""

    samples: int = 4  # rows: dataset samples, drawn at random with ``seed``
    augs: int = 4  # training augmentations per sample, after the evaluation view
    split: str = "train"
    out: str = "outputs/augmentations.png"


def augmentation_grid(cfg: ShowConfig) -> np.ndarray:
    """RGB uint8 grid of ``cfg``'s data and augmentations (``panels.augmentation_grid``)."""
    dataset = build_dataset(cfg.data, cfg.split)
    if len(dataset) == 0:
        raise DataError(f"the {cfg.split!r} split of data={cfg.data.name} is empty")
    pool = None  # the people to paste: the training photos, read only when pasting
    if cfg.aug.paste_p > 0:
        pool = dataset if cfg.split == "train" else build_dataset(cfg.data, "train")
    return panels.augmentation_grid(dataset, cfg.aug, cfg.samples, cfg.augs, cfg.seed, pool)


@hydra.main(config_path="../configs", config_name="train", version_base="1.3")
def main(raw: DictConfig) -> None:
    cfg: ShowConfig = OmegaConf.to_object(raw)  # type: ignore[assignment]
    if cfg.samples < 1:
        raise ConfigError.invalid("samples", cfg.samples, "an integer >= 1")
    if cfg.augs < 0:
        raise ConfigError.invalid("augs", cfg.augs, "an integer >= 0")
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
