"""The multi-column segmentation network: columns that may each live on their own device.

Like the first two-GPU convnets, every column is a separate encoder that exchanges features
with the others only at chosen stages. The columns may differ in input scale (full resolution
for detail, half for context), width and depth. A light FPN-like decoder fuses them.

Placement: column ``j`` (and its auxiliary head) lives on ``devices[j]``, the decoder on
``devices[0]``; tensors move only at the exchange points and into the decoder, and the output
comes back on ``devices[0]``. The forward pass walks the columns stage by stage; since CUDA
kernels launch asynchronously, columns on different GPUs run concurrently.

Data parallelism: a model whose columns span several GPUs is a multi-device module, so wrap it
with ``DistributedDataParallel(model, device_ids=None)`` and feed inputs on ``model.devices[0]``.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seg.config import ColumnConfig
from seg.errors import ConfigError
from seg.models.backbones import backbone_spec
from seg.models.layers import ConvBNReLU, SegmentationModel, pad_to_multiple, resize_to

VALID_INPUT_SCALES = (1.0, 0.5, 0.25, 0.125)


class Column(nn.Module):
    """Encoder of 3x3 conv-BN-ReLU stages; each stage starts with a stride-2 conv.

    ``out_channels[i]`` is the width of stage ``i``, whose output has stride ``2**(i+1)`` in the
    column's input. Stage ``i`` takes ``extra_in[i]`` more input channels than the previous
    stage produces: the features other columns join in by concatenation.
    """

    def __init__(
        self,
        widths: tuple[int, ...],
        blocks: tuple[int, ...],
        in_channels: int = 3,
        extra_in: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__()
        extra_in = extra_in or (0,) * len(widths)
        self.out_channels = list(widths)
        stages, prev = [], in_channels
        for width, depth, extra in zip(widths, blocks, extra_in, strict=True):
            layers = [ConvBNReLU(prev + extra, width, stride=2)]
            layers += [ConvBNReLU(width, width) for _ in range(depth - 1)]
            stages.append(nn.Sequential(*layers))
            prev = width
        self.stages = nn.ModuleList(stages)

    def stage(self, i: int, x: Tensor) -> Tensor:
        """Run stage ``i`` on its input (the previous stage's output, joined with the others')."""
        return self.stages[i](x)


class BackboneColumn(nn.Module):
    """A column whose five stages are a pretrained classifier's stride levels (``backbone``).

    The other columns' features join it additively: ``inject[i]``, a 1x1 conv that starts at
    zero, maps what the others send at stage ``i``'s input (``extra_in[i]`` channels) to its
    own width. A zero start leaves the pretrained features untouched at the first step, where
    concatenation would change the first layer's input and break its weights.
    """

    def __init__(
        self,
        backbone: str,
        extra_in: tuple[int, ...],
        freeze_bn: bool = True,
        frozen_stages: int = 0,
    ) -> None:
        super().__init__()
        self.spec = backbone_spec(backbone)
        self.backbone = backbone
        self.net = self.spec.build(False)
        self.out_channels = list(self.spec.channels)
        self.freeze_bn = freeze_bn
        self.frozen_stages = frozen_stages
        if any(extra_in[:frozen_stages]):
            raise ConfigError(
                f"backbone column: frozen_stages={frozen_stages} would freeze a stage that "
                f"receives other columns' features (stage inputs with extra channels: {extra_in})"
            )
        for p in self.frozen_parameters():
            p.requires_grad_(False)
        self.inject = nn.ModuleDict()
        for i, extra in enumerate(extra_in):
            if extra:
                conv = nn.Conv2d(extra, self.out_channels[i - 1], kernel_size=1)
                nn.init.zeros_(conv.weight)
                nn.init.zeros_(conv.bias)
                self.inject[str(i)] = conv

    def stage(self, i: int, x: Tensor) -> Tensor:
        # No graph in frozen stages: nothing before them needs gradients.
        grad = torch.no_grad() if i < self.frozen_stages else contextlib.nullcontext()
        cpu = x.device.type == "cpu"
        if self.spec.depthwise and cpu and torch.is_autocast_enabled("cpu"):
            # Depthwise convolutions run slower in bf16 than in fp32 on CPUs (docs/benchmarks.md):
            # a run-time choice of this device, not part of the model's description.
            with grad, torch.autocast(x.device.type, enabled=False):
                return self.spec.stage(self.net, i, x.float())
        with grad:
            return self.spec.stage(self.net, i, x)

    def frozen_parameters(self) -> list[nn.Parameter]:
        """Parameters of the first ``frozen_stages`` stages (found by running them once)."""
        if self.frozen_stages == 0:
            return []
        used: list[nn.Parameter] = []
        hooks = [
            m.register_forward_hook(lambda mod, *_: used.extend(mod.parameters(recurse=False)))
            for m in self.net.modules()
        ]
        modes = {m: m.training for m in self.net.modules()}
        try:
            self.net.eval()  # a probe: no BatchNorm statistics may change
            with torch.no_grad():
                x = torch.zeros(1, 3, 64, 64, device=next(self.net.parameters()).device)
                for i in range(self.frozen_stages):
                    x = self.spec.stage(self.net, i, x)
        finally:
            for m, mode in modes.items():
                m.training = mode
            for h in hooks:
                h.remove()
        return list({id(p): p for p in used}.values())

    def join(self, i: int, own: Tensor, others: list[Tensor]) -> Tensor:
        """Stage ``i``'s input: its own previous output plus the others' projected features."""
        return own + self.inject[str(i)](torch.cat(others, dim=1))

    def train(self, mode: bool = True) -> BackboneColumn:
        """With ``freeze_bn`` the backbone's BatchNorm layers keep their ImageNet statistics:
        batches of a few crops estimate them worse than the millions of images they came from.
        Their scale and shift still train."""
        super().train(mode)
        if mode:
            for module in self.net.modules():
                frozen = self.freeze_bn or not any(p.requires_grad for p in module.parameters())
                if isinstance(module, nn.modules.batchnorm._BatchNorm) and frozen:
                    module.eval()
        return self


class FusionDecoder(nn.Module):
    """Joins the columns level by level (concat + 1x1), then decodes top-down (FPN-like).

    ``in_channels[l]`` is the summed width of all columns at decoder level ``l`` (finest first).
    """

    def __init__(self, in_channels: list[int], channels: int, num_classes: int) -> None:
        super().__init__()
        self.lateral = nn.ModuleList(ConvBNReLU(c, channels, kernel_size=1) for c in in_channels)
        self.refine = nn.ModuleList(ConvBNReLU(channels, channels) for _ in in_channels[:-1])
        self.classifier = nn.Conv2d(channels, num_classes, kernel_size=1)

    def forward(self, levels: list[list[Tensor]]) -> Tensor:
        """levels[l][j]: column j's features at level l -> logits at the finest level."""
        joined = []
        for features in levels:
            size = max((f.shape[-2:] for f in features), key=lambda s: s[0])
            joined.append(torch.cat([resize_to(f, size) for f in features], dim=1))
        y = self.lateral[-1](joined[-1])
        for level in reversed(range(len(joined) - 1)):
            y = resize_to(y, joined[level].shape[-2:]) + self.lateral[level](joined[level])
            y = self.refine[level](y)
        return self.classifier(y)


def _with_backbone_widths(spec: ColumnConfig) -> ColumnConfig:
    """A backbone column's widths are its backbone's stage channels, whatever the spec said."""
    if not spec.backbone:
        return spec
    channels = list(backbone_spec(spec.backbone).channels)
    return dataclasses.replace(spec, widths=channels, blocks=[1] * len(channels))


def _validate(columns: list[ColumnConfig], exchange_stages: list[int]) -> None:
    if not columns:
        raise ConfigError("a multi-column model needs at least one column, got none")
    for spec in columns:
        where = f"column {spec.name!r}"
        if spec.input_scale not in VALID_INPUT_SCALES:
            raise ConfigError(
                f"{where}: input_scale {spec.input_scale} is not one of {VALID_INPUT_SCALES}"
            )
        if spec.backbone:  # its widths are the backbone's (see _with_backbone_widths)
            if not 0 <= spec.frozen_stages <= len(spec.widths):
                raise ConfigError(
                    f"{where}: frozen_stages={spec.frozen_stages}; valid: 0..{len(spec.widths)} "
                    f"(the stages of {spec.backbone})"
                )
            continue
        if spec.frozen_stages:
            raise ConfigError(
                f"{where}: frozen_stages={spec.frozen_stages} applies to a pretrained backbone "
                "column only (backbone=...); a from-scratch column takes 0"
            )
        if len(spec.widths) != len(spec.blocks) or len(spec.widths) < 2:
            raise ConfigError(
                f"{where}: widths {list(spec.widths)} and blocks {list(spec.blocks)} need the "
                "same length, at least 2 (one entry per stage)"
            )
        if min(spec.widths) < 1 or min(spec.blocks) < 1:
            raise ConfigError(f"{where}: widths and blocks must be >= 1, got {spec}")
    num_stages = {len(spec.widths) for spec in columns}
    if len(num_stages) > 1:
        stages = {spec.name: len(spec.widths) for spec in columns}
        raise ConfigError(f"all columns need the same number of stages, got {stages}")
    if exchange_stages and len(columns) < 2:
        raise ConfigError(f"exchange_stages {exchange_stages} need at least two columns")
    last = len(columns[0].widths) - 1
    for stage in exchange_stages:
        if not 0 <= stage < last:
            raise ConfigError(
                f"exchange stage {stage} is out of range: a later stage must consume it, "
                f"so valid stages are 0..{last - 1}"
            )


class MultiColumnSegNet(SegmentationModel):
    """N encoder columns, feature exchange at chosen stages, fusion decoder, optional aux heads.

    ``columns`` are the model config's own column descriptions (``seg.config.ColumnConfig``;
    their ``weights`` is the builder's business). At an exchange stage a column's next stage
    sees its own channels followed by the others' (a backbone column adds them, see
    :class:`BackboneColumn`).

    Any input size works: the input is zero-padded to a multiple of :attr:`size_divisor` and the
    logits are cropped back. Output: ``{"out": (B,K,H,W), "aux": [(B,K,H,W) per column]}``,
    ``aux`` only in training mode with ``aux_heads``.
    """

    def __init__(
        self,
        columns: list[ColumnConfig],
        num_classes: int = 2,
        exchange_stages: list[int] | None = None,
        decoder_channels: int = 32,
        aux_heads: bool = False,
        channels_last: bool = True,
    ) -> None:
        super().__init__(channels_last)
        columns = [_with_backbone_widths(spec) for spec in columns]
        exchange_stages = sorted(set(exchange_stages or []))
        _validate(columns, exchange_stages)
        self.specs = list(columns)
        self.exchange_stages = exchange_stages
        num_stages = len(columns[0].widths)
        self.size_divisor = max(round(2**num_stages / c.input_scale) for c in columns)
        self.columns = nn.ModuleList(
            BackboneColumn(
                spec.backbone,
                self._extra_in(j, num_stages),
                spec.freeze_bn,
                spec.frozen_stages,
            )
            if spec.backbone
            else Column(spec.widths, spec.blocks, extra_in=self._extra_in(j, num_stages))
            for j, spec in enumerate(columns)
        )
        # The first stage (stride 2) stays out of the decoder: its maps have four times the
        # positions of stride 4 (joining it gained nothing: docs/notes, "decoder at stride 2").
        self.first_level = 1
        level_channels = [
            sum(c.widths[i] for c in columns) for i in range(self.first_level, num_stages)
        ]
        self.decoder = FusionDecoder(level_channels, decoder_channels, num_classes)
        self.aux_heads = None
        if aux_heads:
            self.aux_heads = nn.ModuleList(
                nn.Sequential(
                    ConvBNReLU(spec.widths[-1], decoder_channels),
                    nn.Conv2d(decoder_channels, num_classes, kernel_size=1),
                )
                for spec in columns
            )
        self.devices = [torch.device("cpu")] * len(columns)  # built on the CPU: see place()

    def _extra_in(self, j: int, num_stages: int) -> tuple[int, ...]:
        """Channels that the other columns add to column j's stage inputs."""
        extra = [0] * num_stages
        for stage in self.exchange_stages:
            extra[stage + 1] = sum(c.widths[stage] for k, c in enumerate(self.specs) if k != j)
        return tuple(extra)

    @property
    def num_columns(self) -> int:
        return len(self.columns)

    def place(self, devices: list[torch.device]) -> MultiColumnSegNet:
        """Put column j and its aux head on ``devices[j]``, the decoder on ``devices[0]``."""
        if len(devices) != self.num_columns:
            raise ConfigError(
                f"{self.num_columns} columns ({[s.name for s in self.specs]}) need "
                f"{self.num_columns} devices, got {len(devices)}: {[str(d) for d in devices]}"
            )
        for j, device in enumerate(devices):
            self.columns[j].to(device)
            if self.aux_heads is not None:
                self.aux_heads[j].to(device)
        self.decoder.to(devices[0])
        self.devices = list(devices)
        return self

    def backbone_parameters(self) -> list[nn.Parameter]:
        """The pretrained backbones' own parameters (not their zero-started inject convs)."""
        backbones = [c for c in self.columns if isinstance(c, BackboneColumn)]
        return [p for c in backbones for p in c.net.parameters() if p.requires_grad]

    def parts(self) -> dict[str, list[nn.Module]]:
        parts = {}
        for j, spec in enumerate(self.specs):
            modules = [self.columns[j]]
            if self.aux_heads is not None:
                modules.append(self.aux_heads[j])
            parts[f"column{j}:{spec.name}"] = modules
        parts["decoder"] = [self.decoder]
        return parts

    def _exchange(self, outputs: list[Tensor], j: int, stage: int) -> Tensor:
        """Column j's own stage output joined with the others', resized and moved to it."""
        own = outputs[j]
        others = [
            resize_to(f, own.shape[-2:]).to(own.device) for k, f in enumerate(outputs) if k != j
        ]
        column = self.columns[j]
        if isinstance(column, BackboneColumn):
            return column.join(stage + 1, own, others)
        return torch.cat([own, *others], dim=1)

    def encode(self, x: Tensor) -> list[list[Tensor]]:
        """Padded (B,3,H,W) on devices[0] -> features[j][i] of column j at stage i."""
        inputs = []
        for spec, device in zip(self.specs, self.devices, strict=True):
            factor = round(1 / spec.input_scale)
            # Average pooling by an integer factor is an exact, anti-aliased downscale.
            scaled = F.avg_pool2d(x, factor) if factor > 1 else x
            inputs.append(self._prepare(scaled, device))
        features: list[list[Tensor]] = [[] for _ in self.specs]
        for i in range(len(self.specs[0].widths)):
            outputs = [col.stage(i, inp) for col, inp in zip(self.columns, inputs, strict=True)]
            for j, out in enumerate(outputs):
                features[j].append(out)
            if i in self.exchange_stages:
                inputs = [self._exchange(outputs, j, i) for j in range(len(outputs))]
            else:
                inputs = outputs
        return features

    def forward(self, x: Tensor) -> dict[str, Tensor | list[Tensor]]:
        """(B,3,H,W) -> {"out": (B,K,H,W), "aux": list of (B,K,H,W)}, on ``devices[0]``."""
        height, width = x.shape[-2:]
        x = pad_to_multiple(self._prepare(x, self.devices[0]), self.size_divisor)
        features = self.encode(x)
        home = self.devices[0]
        levels = [
            [features[j][i].to(home) for j in range(len(features))]
            for i in range(self.first_level, len(features[0]))
        ]
        # Two-channel logits upsample faster on CPUs in NCHW than in channels_last, and in
        # fp32 (under bf16 autocast too: the loss needs fp32 logits, cast here at low
        # resolution instead of after upsampling).
        logits = self.decoder(levels).float().contiguous()
        out = F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)
        aux = []
        if self.training and self.aux_heads is not None:
            for head, feats in zip(self.aux_heads, features, strict=True):
                a = head(feats[-1]).to(home).float().contiguous()
                a = F.interpolate(a, size=x.shape[-2:], mode="bilinear", align_corners=False)
                aux.append(a[..., :height, :width])
        return {"out": out[..., :height, :width], "aux": aux}
