"""Segmentation networks behind one contract: ``forward(x) -> {"out": logits, "aux": [...]}``.

Names are imported lazily (PEP 562) so that ``seg.config`` can import ``seg.models.config``
without loading torch: composing a config stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seg.models.build import MODELS, build_model, num_columns
    from seg.models.config import ColumnConfig, ExchangeMode, ModelConfig, ModelName, UNetConfig
    from seg.models.devices import auto_device_indices, resolve_devices
    from seg.models.layers import SegmentationModel
    from seg.models.multicolumn import ColumnSpec, MultiColumnSegNet
    from seg.models.summary import count_flops, format_summary, summarize_model
    from seg.models.torchvision_models import TorchvisionSegNet
    from seg.models.unet import UNet

_WHERE = {
    "MODELS": "build",
    "build_model": "build",
    "num_columns": "build",
    "ColumnConfig": "config",
    "ExchangeMode": "config",
    "ModelConfig": "config",
    "ModelName": "config",
    "UNetConfig": "config",
    "auto_device_indices": "devices",
    "resolve_devices": "devices",
    "SegmentationModel": "layers",
    "ColumnSpec": "multicolumn",
    "MultiColumnSegNet": "multicolumn",
    "count_flops": "summary",
    "format_summary": "summary",
    "summarize_model": "summary",
    "TorchvisionSegNet": "torchvision_models",
    "UNet": "unet",
}
__all__ = [
    "MODELS",
    "ColumnConfig",
    "ColumnSpec",
    "ExchangeMode",
    "ModelConfig",
    "ModelName",
    "MultiColumnSegNet",
    "SegmentationModel",
    "TorchvisionSegNet",
    "UNet",
    "UNetConfig",
    "auto_device_indices",
    "build_model",
    "count_flops",
    "format_summary",
    "num_columns",
    "resolve_devices",
    "summarize_model",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'seg.models' has no attribute {name!r}")
    return getattr(importlib.import_module(f"seg.models.{_WHERE[name]}"), name)
