"""The deploy-time model: batch norm folded into the convolutions before it, auxiliary heads
dropped. Both are exact in eval mode (the folded conv computes ``bn(conv(x))`` with the running
statistics), and both only remove work: one pass over each feature map fewer per BatchNorm,
and no auxiliary parameters in the exported file.

Which pairs are folded: a ``Conv2d`` followed by a ``BatchNorm2d`` inside an ``nn.Sequential``
(``ConvBNReLU``, the UNet's double convs, torchvision's ``Conv2dNormActivation`` and
downsample paths), the pairs a module names in ``FOLD_PAIRS`` (EfficientNet-Lite's
``_depthwise_conv`` / ``_bn1`` ...), and torchvision's ``convN`` / ``bnN`` attribute pairs
(ResNet blocks and stems), which its forwards always call back to back.
"""

from __future__ import annotations

import copy
import itertools
import re

import torch
from torch import Tensor, nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from seg.models.layers import SegmentationModel

_TORCHVISION_PAIR = re.compile(r"conv(\d+)$")


def _foldable(conv: nn.Module, bn: nn.Module) -> bool:
    return (
        isinstance(conv, nn.Conv2d)
        and type(bn) is nn.BatchNorm2d
        and bn.track_running_stats
        and bn.running_mean is not None
        and conv.out_channels == bn.num_features
    )


def _pairs(module: nn.Module) -> list[tuple[str, str]]:
    """Names of (conv, bn) children of ``module`` whose forward applies bn right after conv."""
    children = dict(module.named_children())
    if isinstance(module, nn.Sequential):
        names = list(children)
        return list(itertools.pairwise(names))
    pairs = list(getattr(module, "FOLD_PAIRS", ()))
    for name in children:
        match = _TORCHVISION_PAIR.match(name)
        if (
            match
            and f"bn{match.group(1)}" in children
            and type(module).__module__.startswith("torchvision.models")
        ):
            pairs.append((name, f"bn{match.group(1)}"))
    return pairs


def fold_batchnorm(model: nn.Module) -> tuple[nn.Module, int]:
    """An eval-mode copy of ``model`` with every foldable BatchNorm folded into its conv (and
    replaced by ``nn.Identity``); returns ``(copy, number folded)``. The caller's model is
    untouched."""
    model = copy.deepcopy(model).eval()
    folded = 0
    for module in list(model.modules()):
        for conv_name, bn_name in _pairs(module):
            conv, bn = getattr(module, conv_name, None), getattr(module, bn_name, None)
            if conv is None or bn is None or not _foldable(conv, bn):
                continue
            setattr(module, conv_name, fuse_conv_bn_eval(conv, bn))
            setattr(module, bn_name, nn.Identity())
            folded += 1
    return model, folded


def drop_aux_heads(model: nn.Module) -> nn.Module:
    """Remove the training-only auxiliary heads (ours: ``aux_heads``; torchvision's:
    ``aux_classifier``) in place; returns ``model``."""
    if getattr(model, "aux_heads", None) is not None:
        model.aux_heads = None
    net = getattr(model, "net", None)
    if getattr(net, "aux_classifier", None) is not None:
        net.aux_classifier = None
    return model


def deploy_model(model: nn.Module) -> nn.Module:
    """The model to run for inference or export: an eval-mode copy with batch norm folded and
    auxiliary heads dropped; its ``"out"`` equals the original's up to float rounding."""
    folded, _ = fold_batchnorm(model)
    return drop_aux_heads(folded)


class AutocastModel(SegmentationModel):
    """``model`` run under ``torch.autocast(dtype)`` on the device its input goes to (bf16 or
    fp16 inference); logits come back in float32. Placement is the wrapped model's (its
    columns may sit on several GPUs); parts that keep float32 under autocast (a depthwise
    backbone column on a CPU) keep it here too."""

    def __init__(self, model: SegmentationModel, dtype: torch.dtype) -> None:
        super().__init__(channels_last=getattr(model, "channels_last", False))
        self.net = model
        self.dtype = dtype
        self.devices = list(model.devices)

    @property
    def num_columns(self) -> int:
        return self.net.num_columns

    def place(self, devices: list[torch.device]) -> AutocastModel:
        self.net.place(devices)
        self.devices = list(self.net.devices)
        return self

    def forward(self, x: Tensor) -> dict[str, Tensor | list[Tensor]]:
        with torch.autocast(self.devices[0].type, dtype=self.dtype):
            out = self.net(x)
        return {"out": out["out"].float(), "aux": [a.float() for a in out.get("aux", [])]}
