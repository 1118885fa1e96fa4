"""Segmentation networks behind one contract: ``forward(x) -> {"out": logits, "aux": [...]}``.

Their descriptions (``ModelConfig``) live in ``seg.config``, which imports no torch.
"""

from seg.models.build import MODELS, build_model, num_columns
from seg.models.layers import SegmentationModel
from seg.models.multicolumn import MultiColumnSegNet
from seg.models.summary import count_flops, format_summary, summarize_model
from seg.models.torchvision_models import TorchvisionSegNet
from seg.models.unet import UNet

__all__ = [
    "MODELS",
    "MultiColumnSegNet",
    "SegmentationModel",
    "TorchvisionSegNet",
    "UNet",
    "build_model",
    "count_flops",
    "format_summary",
    "num_columns",
    "summarize_model",
]
