"""Options of ``scripts/export.py`` (Hydra-style ``key=value`` overrides, no YAML file)."""

from __future__ import annotations

from dataclasses import dataclass, field

from seg.config.inference import SHIPPED_MODEL
from seg.config.training import _check


@dataclass
class ExportConfig:
    """Options of ``scripts/export.py`` (Hydra-style overrides)."""

    checkpoint: str = SHIPPED_MODEL  # a checkpoint, a run folder or a shipped model's name
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

    def __post_init__(self) -> None:
        _check(self.max_images >= 1, "max_images", self.max_images, "an integer >= 1")
        _check(self.tolerance >= 0, "tolerance", self.tolerance, "a number >= 0")
        _check(
            0 <= self.min_agreement <= 1, "min_agreement", self.min_agreement, "a share in [0, 1]"
        )
        _check(
            bool(self.batch_sizes) and all(b >= 1 for b in self.batch_sizes),
            "batch_sizes",
            self.batch_sizes,
            "a list of integers >= 1",
        )
        for size in self.sizes or []:
            _check(len(size) == 2 and min(size) >= 1, "sizes", self.sizes, "(H, W) pairs >= 1")
