"""Helpers of the training tests: a few pairs as a ``data=folder`` dataset, tiny overrides,
a subprocess environment for multi-process runs, and BatchNorm statistics from real images."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from torch import nn

from seg.config import Config, compose_config

REPO = Path(__file__).resolve().parents[1]
TRAIN_IDS = ("1", "2", "3", "10", "11", "12")  # 3 steps/epoch at batch 2 (or 2 ranks x 1)
VAL_IDS = ("20", "21", "22")  # odd: two ranks get 2 + 1 samples, no padding allowed


def make_folder_subset(src: Path, dst: Path) -> Path:
    """Copy pairs of the vikram_human_seg folder ``src`` (the ``vikram_pairs`` fixture) into
    ``dst/{images,masks}/{train,val}`` (mmseg layout)."""
    for split, ids in (("train", TRAIN_IDS), ("val", VAL_IDS)):
        (dst / "images" / split).mkdir(parents=True, exist_ok=True)
        (dst / "masks" / split).mkdir(parents=True, exist_ok=True)
        for i in ids:
            shutil.copy(src / "Training_Images" / f"{i}.jpg", dst / "images" / split)
            shutil.copy(src / "Ground_Truth" / f"{i}.png", dst / "masks" / split)
    return dst


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (its ``main(argv)`` runs in this process)."""
    path = REPO / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"script_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_config() -> Config:
    """A dual-column net of a few channels at a 128x96 eval size: for inference tests."""
    cfg = compose_config(["model=dual_channel", "aug.eval_size=[128,96]"])
    for column in cfg.model.columns:
        column.widths = [4, 8, 8, 8, 8]
        column.blocks = [1, 1, 1, 1, 1]
    return cfg


def tiny_overrides(data_root: Path, run_dir: Path | None = None) -> list[str]:
    """The single-column net on 64x64 crops of the folder subset, on the CPU, in-process loading."""
    out = [
        "+exp=single_column",
        "data=folder",
        f"data.root={data_root}",
        "debug=default",
        "trainer.column_devices=[cpu]",
        "logging.tensorboard=false",
        "logging.progress_bar=false",
        "trainer.deterministic=true",
    ]
    return out + ([f"trainer.run_dir={run_dir}"] if run_dir else [])


def subprocess_env() -> dict[str, str]:
    """The environment of spawned training processes: one thread each, no data-dir override,
    nothing of an enclosing launcher."""
    launcher = (
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
    )
    drop = ("SEG_DATA_DIR", "CRASH_STEP", "CRASH_RANK", *launcher)
    env = {k: v for k, v in os.environ.items() if k not in drop and "TORCHELASTIC" not in k}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def torchrun() -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run"]


def parameters(path: Path) -> dict[str, torch.Tensor]:
    """The trainable parameters (not the BatchNorm buffers) stored in a checkpoint."""
    from seg.checkpoint import load_model_from_checkpoint

    model, _ = load_model_from_checkpoint(path)
    return {k: v.detach().clone() for k, v in model.named_parameters()}


@torch.no_grad()
def calibrate_batchnorm(model: nn.Module, batch: torch.Tensor) -> nn.Module:
    """``model`` in eval mode with BatchNorm statistics of ``batch`` (B, 3, H, W) (real images
    through the eval preset): unlike a fresh or barely trained model (running variances near
    1), its logits are large enough for masks with both classes."""
    model.train()
    for m in model.modules():
        # BatchNorm kept in eval mode in training (a pretrained backbone's frozen statistics)
        # keeps its statistics: reset, they would never be re-estimated.
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training:
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration batch
    model(batch)
    return model.eval()


def calibrated_model(cfg: Config, images: list[np.ndarray]) -> nn.Module:
    """A random ``cfg.model`` (seed 0) whose BatchNorm statistics come from ``images`` through
    the eval preset, padded into one batch: unlike a fresh model, its logits have a real scale
    and its masks hold both classes."""
    from seg.data.batching import pad_batch
    from seg.data.transforms import build_eval_transform, eval_pad_value
    from seg.models import build_model

    torch.manual_seed(0)
    model = build_model(cfg.model)
    transform = build_eval_transform(cfg.aug)
    batch, _ = pad_batch(
        [transform(image=im)["image"] for im in images], image_fill=eval_pad_value(cfg.aug)
    )
    return calibrate_batchnorm(model, batch)
