"""Schemas of training: trainer, optimiser, loss, logging, and the root ``Config`` that
``configs/train.yaml`` composes (every group in one object).

Hydra checks types and enum values when it composes the config; the range checks below run when
the config becomes a typed object (``OmegaConf.to_object``, done first thing by ``train``), so a
bad value fails at start with a message that names the key and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from seg.config.data import AugConfig, DataConfig
from seg.config.fields import incidental
from seg.config.model import ModelConfig
from seg.errors import ConfigError

# The case study's accuracy: training reports when validation pixel accuracy first reaches it.
TARGET_PIXEL_ACC = 0.88
PRECISIONS = ("32", "bf16", "16", "auto")


class OptimizerName(str, Enum):
    sgd = "sgd"
    adamw = "adamw"


class ScheduleName(str, Enum):
    poly = "poly"  # (1 - t)^power, as in DeepLab and torchvision's segmentation recipe
    cosine = "cosine"
    constant = "constant"


def _check(ok: bool, key: str, value: Any, expected: str) -> None:
    """A range check; a NaN or infinite number never passes (``inf > 0`` holds)."""
    if not ok or (isinstance(value, float) and not math.isfinite(value)):
        raise ConfigError.invalid(key, value, expected)


@dataclass
class TrainerConfig:
    epochs: int = 30
    # Optimiser steps; > 0 ends training there, and the LR schedule ends there too.
    max_steps: int = -1
    batch_size: int = 8  # per replica and forward pass
    accumulate: int = 1  # forward passes per optimiser step (gradient accumulation)
    grad_clip: float = 0.0  # max global gradient norm; 0 = off
    precision: str = "32"  # 32 | bf16 (autocast) | 16 (fp16 + gradient scaler, CUDA) | auto
    # Replicas that `python scripts/train.py` starts itself (torch elastic): N or auto (one per
    # visible GPU, 1 on CPU). Ignored under torchrun, which decides.
    devices: str = incidental("1")
    max_restarts: int = incidental(0)  # with devices > 1: restarts of all workers after a failure
    # Where each replica's model columns run: auto (one visible GPU per column when there are
    # enough for every replica on this node, else the replica's GPU, else the CPU), one device
    # for all columns ([cuda:1], [cpu]), or one per column ([cuda:0,cuda:1]): the case study's
    # layout, each GPU carrying one column (docs/training.md, "Many devices"); GPU indices
    # with several replicas per node are refused (they would share GPUs): auto splits them.
    column_devices: list[str] = incidental(default_factory=lambda: ["auto"])
    sync_bn: bool = True  # SyncBatchNorm when there is more than one replica (CUDA only)
    deterministic: bool = False  # torch.use_deterministic_algorithms, no cuDNN autotuning
    # torch.compile the model in place (nn.Module.compile: checkpoints keep their keys). Pays
    # off on GPUs; on CPU training it measured slower (docs/benchmarks.md).
    compile: bool = False
    num_workers: int = incidental(4)
    eval_every: int = 1  # validate every N epochs (and at the end); 0 = only at the end
    eval_batch_size: int = 8
    val_split: str = "val"
    target_pixel_acc: float = TARGET_PIXEL_ACC
    stop_at_target: bool = False
    # Overall validation metric (higher is better) that picks best.pt. Person IoU, not pixel
    # accuracy: with most pixels background, accuracy rewards missing small people.
    best_metric: str = "iou_person"
    # Also write last.pt every N steps; 0 = at epoch ends only.
    ckpt_every_steps: int = incidental(0)
    keep_last: int = incidental(3)  # step checkpoints kept beside last.pt and best.pt; 0 = none
    # auto (run_dir's last.pt, if any) | a checkpoint | a run dir
    resume: str | None = incidental(None)
    # A new run from a trained model's weights (fine-tuning): a checkpoint, a run dir or a
    # shipped model's name (person). Its model config and aug.mean/std come along unless the
    # command sets them; a fresh optimiser and schedule (seg/engine/init_from.py).
    init_from: str | None = incidental(None)
    run_dir: str | None = incidental(None)  # default: Hydra's output directory, else outputs/<time>
    # A new run may replace the run already in run_dir (else refused).
    overwrite: bool = incidental(False)
    dist_timeout_s: int = incidental(1800)

    def __post_init__(self) -> None:
        for key in ("epochs", "batch_size", "accumulate", "eval_batch_size", "dist_timeout_s"):
            value = getattr(self, key)
            _check(value >= 1, f"trainer.{key}", value, "an integer >= 1")
        for key in ("num_workers", "eval_every", "ckpt_every_steps", "keep_last", "max_restarts"):
            value = getattr(self, key)
            _check(value >= 0, f"trainer.{key}", value, "an integer >= 0")
        _check(
            self.max_steps == -1 or self.max_steps >= 1,
            "trainer.max_steps",
            self.max_steps,
            "-1 (no limit) or an integer >= 1",
        )
        _check(self.grad_clip >= 0, "trainer.grad_clip", self.grad_clip, "a number >= 0 (0 = off)")
        _check(
            str(self.precision) in PRECISIONS,
            "trainer.precision",
            self.precision,
            f"one of {', '.join(PRECISIONS)}",
        )
        devices = str(self.devices)
        _check(
            devices == "auto" or (devices.isdigit() and int(devices) >= 1),
            "trainer.devices",
            self.devices,
            "auto or an integer >= 1",
        )
        _check(
            0 < self.target_pixel_acc <= 1,
            "trainer.target_pixel_acc",
            self.target_pixel_acc,
            "a fraction in (0, 1], e.g. 0.88",
        )
        _check(
            self.val_split in ("val", "test"), "trainer.val_split", self.val_split, "val or test"
        )


@dataclass
class OptimConfig:
    name: OptimizerName = OptimizerName.sgd
    lr: float = 0.01  # peak learning rate, reached at the end of the warm-up
    momentum: float = 0.9  # sgd
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # adamw
    weight_decay: float = 1e-4
    # Weight decay of normalisation layers and biases; null = the same as weight_decay.
    norm_weight_decay: float | None = 0.0
    # LR of pretrained backbones as a fraction of lr (the new layers get lr): fine-tuning moves
    # ImageNet features gently, as DETR's and Mask2Former's 0.1 do. 1 = one LR for all.
    backbone_lr_mult: float = 1.0
    schedule: ScheduleName = ScheduleName.poly
    power: float = 0.9  # poly
    min_lr_ratio: float = 0.0  # final LR of poly / cosine, as a fraction of lr
    warmup_steps: int = 0  # linear warm-up from 0.01 * lr to lr

    def __post_init__(self) -> None:
        _check(self.lr > 0, "optim.lr", self.lr, "a number > 0")
        _check(self.weight_decay >= 0, "optim.weight_decay", self.weight_decay, "a number >= 0")
        _check(
            self.norm_weight_decay is None or self.norm_weight_decay >= 0,
            "optim.norm_weight_decay",
            self.norm_weight_decay,
            "null or a number >= 0",
        )
        _check(0 <= self.momentum < 1, "optim.momentum", self.momentum, "a number in [0, 1)")
        _check(
            0 <= self.backbone_lr_mult <= 1,
            "optim.backbone_lr_mult",
            self.backbone_lr_mult,
            "a fraction in [0, 1] of optim.lr",
        )
        _check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "optim.betas",
            self.betas,
            "two numbers in [0, 1)",
        )
        _check(self.power > 0, "optim.power", self.power, "a number > 0")
        _check(
            0 <= self.min_lr_ratio <= 1,
            "optim.min_lr_ratio",
            self.min_lr_ratio,
            "a fraction in [0, 1]",
        )
        _check(self.warmup_steps >= 0, "optim.warmup_steps", self.warmup_steps, "an integer >= 0")


@dataclass
class LossConfig:
    """Cross-entropy (ignore index 255) on the main and auxiliary logits, optional Dice and OHEM.

    The auxiliary heads' weight is ``model.aux_weight``.
    """

    class_weights: list[float] | None = None  # one per class; null = equal
    dice_weight: float = 0.0  # adds dice_weight * (1 - soft Dice of the person class); 0 = off
    ohem: bool = False  # online hard example mining: average CE over the hardest pixels only
    ohem_thresh: float = 0.7  # hard = probability of the true class below this
    ohem_min_kept: int = 10000  # ... but at least this many pixels per forward pass

    def __post_init__(self) -> None:
        _check(self.dice_weight >= 0, "loss.dice_weight", self.dice_weight, "a number >= 0")
        _check(
            0 < self.ohem_thresh <= 1,
            "loss.ohem_thresh",
            self.ohem_thresh,
            "a probability in (0, 1]",
        )
        _check(self.ohem_min_kept >= 1, "loss.ohem_min_kept", self.ohem_min_kept, "an integer >= 1")
        _check(
            self.class_weights is None or all(w >= 0 for w in self.class_weights),
            "loss.class_weights",
            self.class_weights,
            "null or numbers >= 0",
        )


@dataclass
class LoggingConfig:
    log_every: int = 10  # steps between log lines and TensorBoard points
    tensorboard: bool = True
    progress_bar: bool = True  # tqdm on rank 0, on a terminal
    # TensorBoard: input | truth | prediction of the first N validation samples at every
    # validation (val_images/<i>); 0 = none.
    val_images: int = 4

    def __post_init__(self) -> None:
        _check(self.log_every >= 1, "logging.log_every", self.log_every, "an integer >= 1")
        _check(self.val_images >= 0, "logging.val_images", self.val_images, "an integer >= 0")


@dataclass
class Config:
    """What ``scripts/train.py`` runs: one typed object per config group."""

    data: DataConfig = field(default_factory=DataConfig)
    aug: AugConfig = field(default_factory=AugConfig)
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    logging: LoggingConfig = incidental(default_factory=LoggingConfig)
