"""torchvision's segmentation models behind the project's output contract (baselines)."""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.models import MobileNet_V3_Large_Weights, ResNet50_Weights, WeightsEnum
from torchvision.models import segmentation as tvseg

from seg.errors import ConfigError, MissingFileError
from seg.models.backbones import damaged_cache_error, torch_cache_file
from seg.models.layers import SegmentationModel

# name -> (torchvision builder, ImageNet weights of its backbone, has an auxiliary classifier)
TORCHVISION_MODELS: dict[str, tuple[Callable[..., nn.Module], type[WeightsEnum], bool]] = {
    "lraspp_mobilenet_v3_large": (
        tvseg.lraspp_mobilenet_v3_large,
        MobileNet_V3_Large_Weights,
        False,
    ),
    "deeplabv3_mobilenet_v3_large": (
        tvseg.deeplabv3_mobilenet_v3_large,
        MobileNet_V3_Large_Weights,
        True,
    ),
    "fcn_resnet50": (tvseg.fcn_resnet50, ResNet50_Weights, True),
}


def build_torchvision_net(
    name: str, num_classes: int, aux_heads: bool, pretrained: bool
) -> nn.Module:
    """One of torchvision's segmentation models with ``num_classes`` outputs.

    ``pretrained`` loads torchvision's ImageNet weights for the backbone (the heads start fresh
    for the new classes, as in torchvision's reference recipe). Without it no weights are
    loaded, nor fetched: torchvision's builders load backbone weights by default.
    """
    if name not in TORCHVISION_MODELS:
        raise ConfigError(
            f"unknown torchvision model {name!r}; valid: {sorted(TORCHVISION_MODELS)}"
        )
    builder, backbone_weights, has_aux = TORCHVISION_MODELS[name]
    if aux_heads and not has_aux:
        raise ConfigError(f"{name} has no auxiliary head; set model.aux_heads=false")
    kwargs = {"aux_loss": True} if aux_heads else {}
    if not pretrained:
        return builder(weights=None, weights_backbone=None, num_classes=num_classes, **kwargs)
    weights = backbone_weights.DEFAULT
    try:
        return builder(weights=None, weights_backbone=weights, num_classes=num_classes, **kwargs)
    except OSError as err:  # urllib's URLError and socket errors are OSErrors
        raise MissingFileError(
            f"model.pretrained=true: could not download torchvision's {weights} weights "
            f"for {name} from {weights.url} ({err}). Without internet, copy that file into "
            f"{torch_cache_file(weights.url).parent} (TORCH_HOME sets the cache) or set "
            "model.pretrained=false."
        ) from err
    except Exception as err:
        damaged = damaged_cache_error(weights.url)
        if damaged is None:
            raise
        raise damaged from err


class TorchvisionSegNet(SegmentationModel):
    """Wraps a torchvision segmentation model: ``{"out": (B,K,H,W), "aux": [...]}``.

    The auxiliary classifier (DeepLabV3, FCN) runs in training mode only.
    """

    def __init__(self, net: nn.Module, channels_last: bool = True) -> None:
        super().__init__(channels_last)
        self.net = net

    def parts(self) -> dict[str, list[nn.Module]]:
        return {name: [child] for name, child in self.net.named_children() if child is not None}

    def backbone_parameters(self) -> list[nn.Parameter]:
        return list(self.net.backbone.parameters())

    def forward(self, x: Tensor) -> dict[str, Tensor | list[Tensor]]:
        """(B,3,H,W) -> {"out": (B,K,H,W), "aux": [] or [(B,K,H,W)]}."""
        x = self._prepare(x, self.devices[0])
        aux_classifier = getattr(self.net, "aux_classifier", None)
        if aux_classifier is None:  # LR-ASPP, or DeepLab/FCN built without aux head
            return {"out": self.net(x)["out"], "aux": []}
        # torchvision's own forward, minus the aux head outside training.
        size = x.shape[-2:]
        features = self.net.backbone(x)
        out = F.interpolate(
            self.net.classifier(features["out"]), size=size, mode="bilinear", align_corners=False
        )
        aux = []
        if self.training:
            a = aux_classifier(features["aux"])
            aux.append(F.interpolate(a, size=size, mode="bilinear", align_corners=False))
        return {"out": out, "aux": aux}
