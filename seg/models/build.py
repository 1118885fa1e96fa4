"""``build_model(cfg)``: the one place that reads a ``ModelConfig``."""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from seg.config import ModelConfig
from seg.errors import ConfigError
from seg.models.backbones import (
    BACKBONES,
    IMAGENET_MEAN,
    IMAGENET_STD,
    backbone_spec,
    imagenet_weights,
    load_backbone_weights,
)
from seg.models.layers import SegmentationModel
from seg.models.multicolumn import BackboneColumn, MultiColumnSegNet
from seg.models.torchvision_models import TorchvisionSegNet, build_torchvision_net
from seg.models.unet import UNet

log = logging.getLogger(__name__)


def _multicolumn(cfg: ModelConfig, pretrained: bool) -> SegmentationModel:
    model = MultiColumnSegNet(
        list(cfg.columns),
        num_classes=cfg.num_classes,
        exchange_stages=list(cfg.exchange_stages),
        decoder_channels=cfg.decoder_channels,
        aux_heads=cfg.aux_heads,
        channels_last=cfg.channels_last,
    )
    if pretrained:
        for column, c in zip(model.columns, cfg.columns, strict=True):
            if isinstance(column, BackboneColumn):
                state, source = imagenet_weights(column.backbone, str(c.weights))
                count = load_backbone_weights(column.net, column.backbone, state, source)
                log.info(
                    "column %s: %d tensors of %s loaded from %s",
                    c.name,
                    count,
                    column.backbone,
                    source,
                )
    return model


def _unet(cfg: ModelConfig, pretrained: bool) -> SegmentationModel:
    if cfg.aux_heads:
        raise ConfigError("the UNet baseline has no auxiliary heads; set model.aux_heads=false")
    return UNet(list(cfg.unet.widths), cfg.num_classes, channels_last=cfg.channels_last)


def _torchvision(cfg: ModelConfig, pretrained: bool) -> SegmentationModel:
    net = build_torchvision_net(str(cfg.name), cfg.num_classes, cfg.aux_heads, pretrained)
    return TorchvisionSegNet(net, channels_last=cfg.channels_last)


MODELS: dict[str, Callable[[ModelConfig, bool], SegmentationModel]] = {
    "multicolumn": _multicolumn,
    "unet": _unet,
    "lraspp_mobilenet_v3_large": _torchvision,
    "deeplabv3_mobilenet_v3_large": _torchvision,
    "fcn_resnet50": _torchvision,
}


def input_normalization(cfg: ModelConfig) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """``(mean, std)`` that the pretrained weights of ``cfg`` expect of their input, or None
    (no pretrained weights: any normalisation trains)."""
    if not cfg.pretrained:
        return None
    if cfg.name != "multicolumn":
        return IMAGENET_MEAN, IMAGENET_STD  # torchvision's ImageNet weights
    backbones = [backbone_spec(c.backbone) for c in cfg.columns if c.backbone]
    specs = {(spec.mean, spec.std) for spec in backbones}
    if len(specs) > 1:
        raise ConfigError(
            "model.columns: pretrained backbones that expect different input normalisations "
            f"{sorted(specs)} cannot share one input; use backbones of one family"
        )
    return specs.pop() if specs else None


def num_columns(cfg: ModelConfig) -> int:
    """How many columns (devices for ``model.place``) the model of ``cfg`` has."""
    return len(cfg.columns) if cfg.name == "multicolumn" else 1


def build_model(cfg: ModelConfig, pretrained: bool | None = None) -> SegmentationModel:
    """Build the model ``cfg.name`` on the CPU; ``model.place(devices)`` moves it.

    ``pretrained``: load the ImageNet weights ``cfg.pretrained`` asks for (None, the default),
    or not (False: the weights come from elsewhere, e.g. a checkpoint; nothing is read or
    downloaded). Returns a module with ``forward(x) -> {"out": (B,K,H,W), "aux": [...]}``.
    Raises ``ValueError`` naming the bad value for an unknown name or an inconsistent layout.
    """
    name = str(getattr(cfg.name, "value", cfg.name))
    if name not in MODELS:
        raise ConfigError(f"unknown model.name {name!r}; valid names: {sorted(MODELS)}")
    if cfg.num_classes < 1:
        raise ConfigError(f"model.num_classes must be >= 1, got {cfg.num_classes}")
    if cfg.pretrained and name == "unet":
        raise ConfigError("model.pretrained=true: the UNet baseline has no pretrained weights")
    if cfg.pretrained and name == "multicolumn" and not any(c.backbone for c in cfg.columns):
        raise ConfigError(
            "model.pretrained=true: no column of this multicolumn model has a backbone; give one "
            f"(model.columns[j].backbone, one of {sorted(BACKBONES)}) or set model.pretrained=false"
        )
    model = MODELS[name](cfg, cfg.pretrained if pretrained is None else pretrained)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model
