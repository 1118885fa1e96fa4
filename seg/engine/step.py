"""One training step, the same for the loop (``seg.engine.train``) and the speed benchmark
(``seg.benchmark``): forward under autocast, the loss's named terms, a scaled backward, then
unscale, clip, optimiser and schedule."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel as DDP

from seg.config import Config
from seg.engine.losses import build_loss
from seg.engine.optim import (
    autocast_dtype,
    build_optimizer,
    build_scaler,
    build_scheduler,
    resolve_precision,
)
from seg.models import SegmentationModel


@dataclass(kw_only=True)
class Stepper:
    """What a training step touches; ``model`` is DDP-wrapped with several replicas."""

    model: nn.Module
    model_without_ddp: SegmentationModel  # what is saved and evaluated
    criterion: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    precision: str  # trainer.precision resolved on this replica's device: 32, bf16 or 16
    scaler: torch.amp.GradScaler
    amp_dtype: torch.dtype | None
    device: torch.device  # inputs go here (the first column's device)
    grad_clip: float = 0.0  # max global gradient norm; 0 = off
    accumulate: int = 1  # forward passes per optimiser step

    def forward_backward(
        self, images: Tensor, masks: Tensor, sync: bool = True
    ) -> dict[str, Tensor]:
        """One forward and backward pass of (B, 3, H, W) images and (B, H, W) masks; returns
        the loss terms. With ``sync=False`` (a pass before the last one of a step under
        gradient accumulation) DDP keeps the gradients local: it all-reduces once per step."""
        images = images.to(self.device, non_blocking=True)
        masks = masks.to(self.device, non_blocking=True)
        local = isinstance(self.model, DDP) and not sync
        with self.model.no_sync() if local else contextlib.nullcontext():
            with torch.autocast(
                self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None
            ):
                outputs = self.model(images)
            terms = self.criterion(outputs, masks)
            self.scaler.scale(terms["loss"] / self.accumulate).backward()
        return terms

    def optimizer_step(self) -> float:
        """One optimiser step (unscale, clip, step, schedule); returns the LR it used."""
        lr = self.optimizer.param_groups[0]["lr"]
        if self.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model_without_ddp.parameters(), self.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return lr

    def step(self, images: Tensor, masks: Tensor) -> dict[str, Tensor]:
        """A whole step of one batch (``accumulate`` = 1): forward, backward, optimiser."""
        terms = self.forward_backward(images, masks)
        self.optimizer_step()
        return terms


def build_stepper(
    model: nn.Module, model_without_ddp: SegmentationModel, cfg: Config, total_steps: int
) -> Stepper:
    """The loss, optimiser, schedule over ``total_steps``, precision and scaler of ``cfg`` for
    a model already placed on its devices (inputs go to its first)."""
    device = model_without_ddp.devices[0]
    precision = resolve_precision(cfg.trainer.precision, device)
    optimizer = build_optimizer(model_without_ddp, cfg.optim)
    return Stepper(
        model=model,
        model_without_ddp=model_without_ddp,
        criterion=build_loss(cfg.loss, cfg.model.num_classes, cfg.model.aux_weight).to(device),
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, cfg.optim, total_steps),
        precision=precision,
        scaler=build_scaler(precision, device),
        amp_dtype=autocast_dtype(precision, device),
        device=device,
        grad_clip=cfg.trainer.grad_clip,
        accumulate=cfg.trainer.accumulate,
    )
