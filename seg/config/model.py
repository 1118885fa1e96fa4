"""Typed model configs (Hydra structured configs), one YAML per model under ``configs/model/``.

Kept free of torch imports so that composing a config stays fast. Only ``seg.models.build``
reads these objects; the modules take plain typed arguments.

Which fields each model reads:
  - ``multicolumn``: everything except ``unet``;
  - ``unet``: ``unet``, ``num_classes``, ``channels_last``;
  - torchvision baselines: ``num_classes``, ``aux_heads``, ``pretrained``, ``channels_last``.

A description says what the model is, not where it runs: placement is the caller's option
(``trainer.column_devices``, evaluation's and prediction's ``device`` / ``column_devices``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ColumnConfig:
    """One column: an encoder of 3x3 conv-BN-ReLU stages, each halving the resolution, or a
    pretrained backbone cut into its five stride levels (``backbone``)."""

    name: str = "detail"
    # The column sees the image resized by this factor (1, 1/2, 1/4 or 1/8), e.g. 0.5 for context.
    input_scale: float = 1.0
    # Output channels of each stage; stage i has stride 2**(i+1) in the column's own input.
    widths: list[int] = field(default_factory=lambda: [16, 32, 64, 128, 192])
    # 3x3 conv-BN-ReLU layers per stage, the first with stride 2 (the depth of the column).
    blocks: list[int] = field(default_factory=lambda: [1, 1, 2, 2, 2])
    # An ImageNet classifier as the column's stages instead (widths and blocks are then its
    # own): efficientnet_lite0 | efficientnet_lite1 | efficientnet_lite2 | resnet18 |
    # mobilenet_v3_large (seg/models/backbones.py).
    backbone: str | None = None
    # Where its weights come from when model.pretrained is true: imagenet (the backbone's
    # published weights) or the path of a state-dict file of the same classifier.
    weights: str = "imagenet"
    # Keep the backbone's BatchNorm statistics from ImageNet (their scale and shift train).
    freeze_bn: bool = True
    # Backbone only: its first N stages (0..5) are not trained at all (detectron2's FREEZE_AT):
    # generic edges and blobs, and the most expensive stages to backpropagate through.
    frozen_stages: int = 0


@dataclass
class UNetConfig:
    """The plain UNet baseline: two 3x3 conv-BN-ReLU per level, max-pool down, bilinear up."""

    widths: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])


@dataclass
class ModelConfig:
    # A family of seg.models.build.MODELS: multicolumn (configs dual_channel, single_column,
    # multi_column, dual_channel_pretrained), unet, or a torchvision baseline
    # (lraspp_mobilenet_v3_large, deeplabv3_mobilenet_v3_large, fcn_resnet50). An unknown name
    # fails when the model is built, naming the valid ones.
    name: str = "multicolumn"
    num_classes: int = 2
    columns: list[ColumnConfig] = field(default_factory=lambda: [ColumnConfig()])
    # After each of these stages (0-based, not the last one) every column's next stage also
    # receives the other columns' features of that stage, resized to its own resolution and
    # concatenated to its own (a backbone column adds them through zero-started 1x1 convs).
    exchange_stages: list[int] = field(default_factory=list)
    decoder_channels: int = 32
    # Deep supervision: one auxiliary head per column (torchvision: their aux classifier),
    # evaluated only in training; the loss weighs each by aux_weight.
    aux_heads: bool = False
    aux_weight: float = 0.4
    unet: UNetConfig = field(default_factory=UNetConfig)
    # Load ImageNet weights into the backbones: the columns that name one (their ``weights``),
    # or a torchvision baseline's (torchvision's weights API). False: random initialisation.
    pretrained: bool = False
    channels_last: bool = True
