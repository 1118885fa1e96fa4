"""The local demo page of ``scripts/demo.py``: what the page computes (``seg.demo.page``),
its Gradio layout (``seg.demo.ui``), serving it and stopping it (``seg.demo.server``)."""

from seg.demo.page import (
    FrameRate,
    Models,
    PhotoOptions,
    Requests,
    example_photos,
    import_gradio,
    read_photo,
    segment_photo,
    segment_video,
    thresholded,
    user_errors,
    warm_up,
)
from seg.demo.server import STOP_GRACE, Stop, serve
from seg.demo.ui import build_page

__all__ = [
    "STOP_GRACE",
    "FrameRate",
    "Models",
    "PhotoOptions",
    "Requests",
    "Stop",
    "build_page",
    "example_photos",
    "import_gradio",
    "read_photo",
    "segment_photo",
    "segment_video",
    "serve",
    "thresholded",
    "user_errors",
    "warm_up",
]
