"""Building blocks shared by the project's networks, and the base class of their contract."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seg.errors import ConfigError


class ConvBNReLU(nn.Sequential):
    """Dense conv + batch norm + ReLU: the layer CPUs and GPUs both run fastest per FLOP."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int = 3, stride: int = 1) -> None:
        super().__init__(
            nn.Conv2d(in_ch, out_ch, kernel_size, stride, padding=kernel_size // 2, bias=False),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True),
        )


def resize_to(x: Tensor, size: tuple[int, int] | torch.Size) -> Tensor:
    """Resize (B,C,h,w) features to (B,C,*size): average pooling down, nearest up.

    Callers pad their input so that sizes differ by integer factors, where average pooling is
    exact and anti-aliased (bilinear sampling would skip pixels when shrinking by 4 or more)
    and nearest upsampling replicates each value into its block, as FPN does. The 3x3 conv
    that follows smooths the blocks; bilinear upsampling of wide channels_last maps cost 3-5x
    more on the CPU, mostly in its backward (docs/benchmarks.md).
    """
    size = tuple(size)
    if tuple(x.shape[-2:]) == size:
        return x
    if x.shape[-2] >= size[0] and x.shape[-1] >= size[1]:
        return F.adaptive_avg_pool2d(x, size)
    return F.interpolate(x, size=size, mode="nearest")


def pad_to_multiple(x: Tensor, multiple: int) -> Tensor:
    """Zero-pad (B,C,H,W) at the bottom and right so H and W are multiples of ``multiple``.

    Zero is the dataset mean once images are normalized; the caller crops the logits back.
    """
    h, w = x.shape[-2:]
    pad_h, pad_w = -h % multiple, -w % multiple
    if pad_h == 0 and pad_w == 0:
        return x
    return F.pad(x, (0, pad_w, 0, pad_h))


class SegmentationModel(nn.Module):
    """Contract of every model: ``forward(x (B,3,H,W)) -> {"out": (B,K,H,W), "aux": [...]}``.

    ``aux`` holds auxiliary logits at the input size in training mode and is empty in eval mode.
    A model is built on the CPU; :meth:`place` moves it (``devices``: one per column, inputs go
    to ``devices[0]``). Subclasses whose parts live on several devices override it.
    """

    backend = "torch"  # what runs it (seg.inference.runtime.OnnxRuntimeModel says onnxruntime)

    def __init__(self, channels_last: bool) -> None:
        super().__init__()
        self.channels_last = channels_last
        self.devices: list[torch.device] = [torch.device("cpu")]

    @property
    def num_columns(self) -> int:
        """How many devices :meth:`place` expects (one per column)."""
        return 1

    def place(self, devices: list[torch.device]) -> SegmentationModel:
        """Move the model to ``devices[0]`` (single-device models take a list of one)."""
        if len(devices) != self.num_columns:
            raise ConfigError(
                f"{type(self).__name__} needs {self.num_columns} device(s), got {len(devices)}: "
                f"{[str(d) for d in devices]}"
            )
        self.to(devices[0])
        self.devices = list(devices)
        return self

    def backbone_parameters(self) -> list[nn.Parameter]:
        """Parameters of pretrained backbones (``optim.backbone_lr_mult`` scales their LR)."""
        return []

    def parts(self) -> dict[str, list[nn.Module]]:
        """Named groups of submodules for the summary (columns, decoder, ...)."""
        return {name: [child] for name, child in self.named_children()}

    def _prepare(self, x: Tensor, device: torch.device) -> Tensor:
        """Move an input to ``device`` in the memory format the weights use."""
        x = x.to(device, non_blocking=True)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x
