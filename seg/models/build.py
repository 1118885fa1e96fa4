"""``build_model(cfg)``: the one place that reads a ``ModelConfig``."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import torch

from seg.models.config import ModelConfig
from seg.models.devices import resolve_devices
from seg.models.layers import SegmentationModel
from seg.models.multicolumn import ColumnSpec, MultiColumnSegNet
from seg.models.torchvision_models import TorchvisionSegNet, build_torchvision_net
from seg.models.unet import UNet


def _value(x: object) -> str:
    """An enum member (typed config) or its plain string (dict config) -> the string."""
    return x.value if isinstance(x, Enum) else str(x)


def _multicolumn(cfg: ModelConfig) -> SegmentationModel:
    columns = [
        ColumnSpec(
            name=str(c.name),
            input_scale=float(c.input_scale),
            widths=tuple(c.widths),
            blocks=tuple(c.blocks),
        )
        for c in cfg.columns
    ]
    return MultiColumnSegNet(
        columns,
        num_classes=cfg.num_classes,
        exchange_stages=list(cfg.exchange_stages),
        exchange_mode=_value(cfg.exchange_mode),
        decoder_channels=cfg.decoder_channels,
        aux_heads=cfg.aux_heads,
        channels_last=cfg.channels_last,
    )


def _unet(cfg: ModelConfig) -> SegmentationModel:
    if cfg.aux_heads:
        raise ValueError("the UNet baseline has no auxiliary heads; set model.aux_heads=false")
    return UNet(list(cfg.unet.widths), cfg.num_classes, channels_last=cfg.channels_last)


def _torchvision(cfg: ModelConfig) -> SegmentationModel:
    net = build_torchvision_net(_value(cfg.name), cfg.num_classes, cfg.aux_heads, cfg.pretrained)
    return TorchvisionSegNet(net, channels_last=cfg.channels_last)


MODELS: dict[str, Callable[[ModelConfig], SegmentationModel]] = {
    "multicolumn": _multicolumn,
    "unet": _unet,
    "lraspp_mobilenet_v3_large": _torchvision,
    "deeplabv3_mobilenet_v3_large": _torchvision,
    "fcn_resnet50": _torchvision,
}


def num_columns(cfg: ModelConfig) -> int:
    """How many devices ``cfg.devices`` must list (unless ``["auto"]``): one per column."""
    return len(cfg.columns) if _value(cfg.name) == "multicolumn" else 1


def build_model(cfg: ModelConfig) -> SegmentationModel:
    """Build the model ``cfg.name`` and put its columns on ``cfg.devices`` (see ``devices.py``).

    Returns a module with ``forward(x) -> {"out": (B,K,H,W), "aux": [...]}`` whose inputs go
    to ``model.devices[0]``. Raises ``ValueError`` naming the bad value for an unknown name,
    an inconsistent column layout or unavailable devices.
    """
    name = _value(cfg.name)
    if name not in MODELS:
        raise ValueError(f"unknown model.name {name!r}; valid names: {sorted(MODELS)}")
    if cfg.num_classes < 1:
        raise ValueError(f"model.num_classes must be >= 1, got {cfg.num_classes}")
    if cfg.pretrained and name in ("multicolumn", "unet"):
        raise ValueError(
            f"model.pretrained=true: there are no pretrained weights for {name!r}; they exist "
            f"for the torchvision baselines only"
        )
    # Devices first: a bad device list fails before a large model is built.
    devices = resolve_devices(list(cfg.devices), num_columns(cfg))
    model = MODELS[name](cfg)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model.place(devices)
