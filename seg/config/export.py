"""Options of ``scripts/export.py`` (Hydra-style ``key=value`` overrides, no YAML file)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING


@dataclass
class ExportConfig:
    """Options of ``scripts/export.py`` (Hydra-style overrides)."""

    checkpoint: str = MISSING
    out: str = "model.onnx"
    opset: int | None = None  # None: the exporter's default (20 with torch 2.14)
    verify: bool = True  # compare with PyTorch in ONNX Runtime after exporting
    # Images to verify on: an image or a folder of them. None: seeded random images (a check
    # of the graph only: pass real photos to check the masks).
    images: str | None = None
    max_images: int = 8
    # (H, W) of the verification batches; None: the eval size and an odd size 1.25x larger
    sizes: list[list[int]] | None = None
    batch_sizes: list[int] = field(default_factory=lambda: [1, 3])
    tolerance: float = 1e-3  # largest acceptable |logit difference| (fp32)
    min_agreement: float = 0.999  # smallest acceptable fraction of agreeing mask pixels
