"""A plain UNet baseline: dense 3x3 conv-BN-ReLU pairs, max-pool down, bilinear up + concat."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seg.errors import ConfigError
from seg.models.layers import ConvBNReLU, SegmentationModel, pad_to_multiple


class DoubleConv(nn.Sequential):
    def __init__(self, in_ch: int, out_ch: int) -> None:
        super().__init__(ConvBNReLU(in_ch, out_ch), ConvBNReLU(out_ch, out_ch))


class UNet(SegmentationModel):
    """UNet with ``len(widths)`` levels (``len(widths) - 1`` poolings).

    Any input size works: the input is zero-padded to a multiple of ``2**(len(widths) - 1)``
    and the logits cropped back. Output: ``{"out": (B,K,H,W), "aux": []}``.
    """

    def __init__(self, widths: list[int], num_classes: int = 2, channels_last: bool = True) -> None:
        super().__init__(channels_last)
        if len(widths) < 2 or min(widths) < 1:
            raise ConfigError(f"UNet widths need >= 2 positive entries, got {widths}")
        self.size_divisor = 2 ** (len(widths) - 1)
        self.down = nn.ModuleList()
        prev = 3
        for width in widths:
            self.down.append(DoubleConv(prev, width))
            prev = width
        self.up = nn.ModuleList(
            DoubleConv(widths[i + 1] + widths[i], widths[i]) for i in range(len(widths) - 1)
        )
        self.classifier = nn.Conv2d(widths[0], num_classes, kernel_size=1)

    def forward(self, x: Tensor) -> dict[str, Tensor | list[Tensor]]:
        """(B,3,H,W) -> {"out": (B,K,H,W), "aux": []}."""
        height, width = x.shape[-2:]
        x = pad_to_multiple(self._prepare(x, self.devices[0]), self.size_divisor)
        skips = []
        for i, block in enumerate(self.down):
            x = block(F.max_pool2d(x, 2) if i > 0 else x)
            skips.append(x)
        y = skips.pop()
        for level in reversed(range(len(self.up))):
            skip = skips.pop()
            y = F.interpolate(y, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            y = self.up[level](torch.cat([y, skip], dim=1))
        out = self.classifier(y)
        return {"out": out[..., :height, :width], "aux": []}
