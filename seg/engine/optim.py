"""Optimiser, learning-rate schedule (poly / cosine after a linear warm-up) and mixed precision."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.optim import SGD, AdamW, Optimizer
from torch.optim.lr_scheduler import LambdaLR

from seg.config import OptimConfig, OptimizerName, ScheduleName
from seg.devices import native_bf16, warn_if_emulated_bf16
from seg.errors import ConfigError

log = logging.getLogger(__name__)

_NORMS = (
    nn.modules.batchnorm._BatchNorm,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.modules.instancenorm._InstanceNorm,
)


def param_groups(
    model: nn.Module,
    weight_decay: float,
    norm_weight_decay: float | None,
    backbone_lr_mult: float = 1.0,
) -> list[dict]:
    """Weights, and normalisation-layer parameters plus biases (as torchvision's
    ``set_weight_decay``), whose decay is ``norm_weight_decay`` (None: ``weight_decay``); with
    ``backbone_lr_mult != 1`` the same two again for the pretrained backbones
    (``model.backbone_parameters()``), with ``lr_mult`` set. Empty groups are left out; the
    new layers' groups come first (the first group's LR is the one logged)."""
    backbone_ids: set[int] = set()
    if backbone_lr_mult != 1.0 and hasattr(model, "backbone_parameters"):
        backbone_ids = {id(p) for p in model.backbone_parameters()}
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {
        key: [] for key in ((False, True), (False, False), (True, True), (True, False))
    }
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            decays = norm_weight_decay is None or not (isinstance(module, _NORMS) or name == "bias")
            groups[(id(p) in backbone_ids, decays)].append(p)
    out = []
    for (backbone, decays), params in groups.items():
        if params:
            decay = weight_decay if decays else norm_weight_decay
            group = {"params": params, "weight_decay": decay}
            if backbone:
                group["lr_mult"] = backbone_lr_mult
            out.append(group)
    return out


OPTIMIZERS: dict[str, Callable[[list[dict], OptimConfig], Optimizer]] = {
    "sgd": lambda groups, c: SGD(groups, lr=c.lr, momentum=c.momentum),
    "adamw": lambda groups, c: AdamW(groups, lr=c.lr, betas=tuple(c.betas)),
}


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> Optimizer:
    """``optim.name`` (sgd | adamw) over ``model``'s trainable parameters."""
    if cfg.name not in set(OptimizerName):  # a plain dataclass, not composed through the schema
        raise ConfigError(f"unknown optim.name {cfg.name!r}; valid names: {sorted(OPTIMIZERS)}")
    name = OptimizerName(cfg.name).value
    groups = param_groups(model, cfg.weight_decay, cfg.norm_weight_decay, cfg.backbone_lr_mult)
    optimizer = OPTIMIZERS[name](groups, cfg)
    for group in optimizer.param_groups:  # LambdaLR scales each group's initial_lr
        group["lr"] = cfg.lr * group.get("lr_mult", 1.0)
    return optimizer


class WarmupSchedule:
    """LR factor at optimiser step ``t``: linear warm-up, then poly, cosine or constant.

    A callable object rather than a closure, so ``LambdaLR.state_dict()`` stores its fields
    (plain numbers) and a checkpoint stays loadable with ``weights_only=True``.
    """

    def __init__(
        self,
        total_steps: int,
        schedule: str = "poly",
        warmup_steps: int = 0,
        warmup_factor: float = 0.01,
        power: float = 0.9,
        min_lr_ratio: float = 0.0,
    ) -> None:
        if schedule not in ("poly", "cosine", "constant"):
            raise ConfigError(f"optim.schedule={schedule!r}; valid: poly, cosine, constant")
        if total_steps < 1:
            raise ConfigError(
                f"the schedule needs at least one step, got total_steps={total_steps}"
            )
        self.total_steps = total_steps
        self.schedule = schedule
        self.warmup_steps = min(warmup_steps, total_steps)
        self.warmup_factor = warmup_factor
        self.power = power
        self.min_lr_ratio = min_lr_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.warmup_factor + (1 - self.warmup_factor) * step / self.warmup_steps
        t = min((step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1), 1.0)
        if self.schedule == "poly":
            decay = (1 - t) ** self.power
        elif self.schedule == "cosine":
            decay = 0.5 * (1 + math.cos(math.pi * t))
        else:
            decay = 1.0
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * decay


def build_scheduler(optimizer: Optimizer, cfg: OptimConfig, total_steps: int) -> LambdaLR:
    """Per-optimiser-step schedule over ``total_steps`` (call ``.step()`` after each step)."""
    schedule = WarmupSchedule(
        total_steps,
        ScheduleName(cfg.schedule).value,
        cfg.warmup_steps,
        power=cfg.power,
        min_lr_ratio=cfg.min_lr_ratio,
    )
    return LambdaLR(optimizer, schedule)


def resolve_precision(precision: str, device: torch.device) -> str:
    """``trainer.precision`` -> the precision to run on ``device``: "32", "bf16" or "16".

    "auto" is bf16 where ``device`` computes it natively (:func:`native_bf16`), else fp16 with a
    gradient scaler on CUDA (a V100 has no bf16 units), else fp32. An explicit value is kept,
    with a warning when bf16 would be emulated on a CPU (correct, but several times slower).
    """
    precision = str(precision)
    if precision == "auto":
        if native_bf16(device):
            return "bf16"
        return "16" if device.type == "cuda" else "32"
    if precision == "bf16":
        warn_if_emulated_bf16(device, "trainer.precision=bf16", "trainer.precision=auto or 32")
    return precision


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """A resolved precision (:func:`resolve_precision`) -> the autocast dtype on ``device``
    (None: float32, no autocast).

    bf16 works on CPUs and on GPUs that support it; fp16 ("16") needs CUDA and a gradient
    scaler (:func:`build_scaler`).
    """
    precision = str(precision)
    if precision == "32":
        return None
    if precision == "bf16":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError(
                f"trainer.precision=bf16: {torch.cuda.get_device_name(device)} does not support "
                "bfloat16; use trainer.precision=16 (fp16 with a gradient scaler), auto or 32"
            )
        return torch.bfloat16
    if precision == "16":
        if device.type != "cuda":
            raise ConfigError(
                f"trainer.precision=16 (fp16 with a gradient scaler) needs a CUDA device, but "
                f"this replica runs on {device}; use trainer.precision=auto, bf16 or 32"
            )
        return torch.float16
    raise ConfigError(f"trainer.precision={precision!r}; valid: 32, bf16, 16, auto")


def build_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """A gradient scaler, enabled only for fp16 (bf16 has float32's range and needs none)."""
    return torch.amp.GradScaler(device.type, enabled=str(precision) == "16")
