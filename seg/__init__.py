"""Human segmentation: a multi-column network, its training, evaluation and deployment.

``from seg import load_model``: the shipped person model (or any checkpoint) in one call
(``seg.inference.api``); imported when first asked for, so that ``import seg`` stays light.
"""

import os
from typing import Any

# OpenCV refuses an image whose header claims more pixels than this, before decoding it: the
# limit of seg.data.io.MAX_IMAGE_PIXELS (PIL's) on the formats PIL cannot read (a Radiance HDR
# named .png decodes to 4 GB otherwise). OpenCV reads it once, when cv2 is first imported, so
# it is set here, before any module of the package imports cv2; a limit of the user's stays.
os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(2 * 89_478_485))

__all__ = ["load_model"]


def __getattr__(name: str) -> Any:
    if name == "load_model":
        from seg.inference.api import load_model

        return load_model
    raise AttributeError(f"module 'seg' has no attribute {name!r}")
