"""Typed model configs (Hydra structured configs), one YAML per model under ``configs/model/``.

Kept free of torch imports so that composing a config stays fast. Only ``seg.models.build``
reads these objects; the modules take plain typed arguments.

Which fields each model reads:
  - ``multicolumn``: everything except ``unet`` and ``pretrained``;
  - ``unet``: ``unet``, ``num_classes``, ``devices``, ``channels_last``;
  - torchvision baselines: ``num_classes``, ``aux_heads``, ``pretrained``, ``devices``,
    ``channels_last``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class ModelName(str, Enum):
    # seg/models/multicolumn.py: configs dual_channel, single_column, multi_column
    multicolumn = "multicolumn"
    unet = "unet"  # seg/models/unet.py
    lraspp_mobilenet_v3_large = "lraspp_mobilenet_v3_large"  # torchvision baselines
    deeplabv3_mobilenet_v3_large = "deeplabv3_mobilenet_v3_large"
    fcn_resnet50 = "fcn_resnet50"


class ExchangeMode(str, Enum):
    concat = "concat"  # a column's next stage sees its own channels followed by the others'
    sum = "sum"  # the others' features are added (widths at that stage must agree)


@dataclass
class ColumnConfig:
    """One column: an encoder of 3x3 conv-BN-ReLU stages, each halving the resolution."""

    name: str = "detail"
    # The column sees the image resized by this factor (1, 1/2, 1/4 or 1/8), e.g. 0.5 for context.
    input_scale: float = 1.0
    # Output channels of each stage; stage i has stride 2**(i+1) in the column's own input.
    widths: list[int] = field(default_factory=lambda: [16, 32, 64, 128, 192])
    # 3x3 conv-BN-ReLU layers per stage, the first with stride 2 (the depth of the column).
    blocks: list[int] = field(default_factory=lambda: [1, 1, 2, 2, 2])


@dataclass
class UNetConfig:
    """The plain UNet baseline: two 3x3 conv-BN-ReLU per level, max-pool down, bilinear up."""

    widths: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])


@dataclass
class ModelConfig:
    name: ModelName = ModelName.multicolumn
    num_classes: int = 2
    columns: list[ColumnConfig] = field(default_factory=lambda: [ColumnConfig()])
    # After each of these stages (0-based, not the last one) every column's next stage also
    # receives the other columns' features of that stage, resized to its own resolution.
    exchange_stages: list[int] = field(default_factory=list)
    exchange_mode: ExchangeMode = ExchangeMode.concat
    decoder_channels: int = 32
    # Deep supervision: one auxiliary head per column (torchvision: their aux classifier),
    # evaluated only in training; the loss weighs each by aux_weight.
    aux_heads: bool = False
    aux_weight: float = 0.4
    unet: UNetConfig = field(default_factory=UNetConfig)
    # One device per column ("cpu", "cuda:1", ...) or ["auto"]: one column per visible GPU
    # when there are enough (per torchrun replica), else everything on one device.
    devices: list[str] = field(default_factory=lambda: ["auto"])
    # torchvision baselines only: ImageNet backbone weights through torchvision's weights API.
    pretrained: bool = False
    channels_last: bool = True
