"""Typed options of ``scripts/demo.py``, the local demo page (torch-free, checked when composed).

The page predicts with the same predictor and backends as ``predict.py``: the options that
choose them have predict's names and defaults (ONNX Runtime on a CPU). What a user changes per
photo (threshold, flip, background, ...) is a control on the page, not an option here.
"""

from __future__ import annotations

from dataclasses import dataclass

from seg.config.compose import compose_options
from seg.config.inference import InferenceOptions, check_inference_options
from seg.errors import ConfigError

LOCALHOST = "127.0.0.1"


@dataclass
class DemoConfig(InferenceOptions):
    """``scripts/demo.py``'s options: the shared inference options (``checkpoint``: a .pt, a
    run folder, or a folder of run folders: the page then offers a model picker and a
    side-by-side view), and the page's."""

    host: str = LOCALHOST  # 0.0.0.0 exposes the page to the network (README, "Demo page")
    port: int = 7860  # 0: a free port (the address is printed)
    examples: str | None = None  # a folder whose first `max_examples` photos are examples
    max_examples: int = 6
    webcam_fps: float = 10.0  # frames per second the browser sends at most
    max_pixels: int = 0  # a larger photo is refused with a message (0: predict.py's limit)

    def __post_init__(self) -> None:
        checks = [
            (0 <= self.port <= 65535, "port", self.port, "an integer in 0..65535 (0: a free one)"),
            (self.max_pixels >= 0, "max_pixels", self.max_pixels, "an integer >= 0"),
            (self.max_examples >= 0, "max_examples", self.max_examples, "an integer >= 0"),
            (0 < self.webcam_fps <= 60, "webcam_fps", self.webcam_fps, "a number in (0, 60]"),
            (bool(self.host.strip()), "host", self.host, "an address such as 127.0.0.1"),
            *check_inference_options(self),
        ]
        for ok, key, value, expected in checks:
            if not ok:
                raise ConfigError.invalid(key, value, expected)


def compose_demo_config(overrides: list[str]) -> DemoConfig:
    """``scripts/demo.py``'s overrides -> a checked ``DemoConfig``."""
    return compose_options(DemoConfig, "demo_config", overrides)
