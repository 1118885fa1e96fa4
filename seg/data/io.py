"""Reading images and masks from disk into the project's canonical arrays.

Canonical forms: image uint8 (H, W, 3) RGB; mask uint8 (H, W) with 0 background, 1 person and
IGNORE_INDEX for pixels that carry no label. Every failure raises ``BadSampleError`` naming the
file and the problem.
"""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path

import cv2
import numpy as np
import scipy.io

from seg.config.data import IGNORE_INDEX, MaskEncoding
from seg.errors import ConfigError, DataError

# Largest image decoded, in pixels: PIL's decompression-bomb limit (2 x 89,478,485, ~179 MP,
# 537 MB as RGB). A 875 KB PNG can claim 30000 x 30000 pixels (2.7 GB decoded); it is refused
# from its header, before anything is decoded. A 12000 x 12000 photo (144 MP) still reads.
MAX_IMAGE_PIXELS = 2 * 89_478_485


class BadSampleError(DataError):
    """A sample that cannot be used: corrupt file, missing mask, size mismatch, bad values.

    ``BadSampleError(message)`` alone is how torch's DataLoader re-raises one from a worker
    (``type(message)``): the message is then the original one, ``path`` and ``problem`` empty.
    """

    def __init__(self, path: Path | str, problem: str | None = None) -> None:
        self.path = str(path) if problem is not None else ""
        self.problem = problem or ""
        super().__init__(f"{path}: {problem}" if problem is not None else str(path))


def read_image(path: Path, max_pixels: int = MAX_IMAGE_PIXELS) -> np.ndarray:
    """Decode an image file into uint8 (H, W, 3) RGB; grayscale and RGBA become RGB.

    The photo as every viewer shows it: its EXIF orientation applied (OpenCV's default, the
    same pixels as PIL's ``ImageOps.exif_transpose``; Ultralytics and torchvision's readers do
    the same), so a phone photo stored sideways is predicted, masked and scored upright. Masks
    are label grids and are read as stored (``read_mask_array``): they are expected on the
    photo as displayed (data/README.md). An image of more than ``max_pixels`` (its header says)
    raises ``BadSampleError`` naming the file and its size, without being decoded.
    """
    data = _read_bytes(path)
    _check_pixels(data, path, max_pixels)
    image = _decode(data, cv2.IMREAD_COLOR, path, max_pixels)
    if image is None:
        raise BadSampleError(path, "corrupt or unreadable image (the decoder could not read it)")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB, dst=image)  # in place: one copy of a big photo


def _decode(data: np.ndarray, flags: int, path: Path, max_pixels: int) -> np.ndarray | None:
    """``cv2.imdecode`` under the pixel limit on every path: where PIL could not read the
    header, OpenCV refuses from its own header (``OPENCV_IO_MAX_IMAGE_PIXELS``, set by
    ``seg/__init__.py``), and a decoded image beyond ``max_pixels`` is refused too."""
    try:
        array = cv2.imdecode(data, flags)
    except cv2.error as err:
        if "MAX_IMAGE_PIXELS" in str(err):
            limit = os.environ.get("OPENCV_IO_MAX_IMAGE_PIXELS", "?")
            raise BadSampleError(
                path,
                f"its header claims more pixels than the decode limit ({limit} pixels, "
                "OPENCV_IO_MAX_IMAGE_PIXELS): downscale it first",
            ) from None
        raise BadSampleError(path, f"corrupt or unreadable image ({err})") from None
    if array is not None and array.shape[0] * array.shape[1] > max_pixels:
        h, w = array.shape[:2]
        raise BadSampleError(
            path,
            f"{w} x {h} pixels ({w * h:,}) exceed the decode limit of {max_pixels:,} pixels: "
            "downscale it first",
        )
    return array


def _check_pixels(data: np.ndarray, path: Path, max_pixels: int) -> None:
    """Refuse an image whose header claims more than ``max_pixels`` (PIL reads only the
    header; a format it does not know is left to OpenCV)."""
    try:
        size = _header_size(io.BytesIO(data.tobytes()))
    except _TooLarge as err:  # beyond PIL's own limit: its message says
        raise BadSampleError(path, f"too large to decode ({err})") from None
    if size is None:  # not a format PIL reads, or a damaged header: OpenCV decides
        return
    w, h = size
    if w * h > max_pixels:
        raise BadSampleError(
            path,
            f"{w} x {h} pixels ({w * h:,}) exceed the decode limit of {max_pixels:,} pixels: "
            "downscale it first",
        )


def _one_channel(array: np.ndarray, data: np.ndarray, path: Path) -> np.ndarray:
    """The label channel of a mask image that OpenCV decoded to colour: a palette PNG's indices
    (VOC-style label masks; OpenCV expands the palette to colours), an RGBA mask's alpha where
    it varies (a matte, or a cut-out PNG), else the colour channels where they agree."""
    if bytes(data[:8]) == b"\x89PNG\r\n\x1a\n":
        from PIL import Image

        with Image.open(io.BytesIO(data.tobytes())) as image:
            if image.mode == "P":
                return np.asarray(image)
    if array.shape[2] == 4 and (array[..., 3] != array[0, 0, 3]).any():
        return array[..., 3]
    colour = array[..., :3]
    if not (colour == colour[..., :1]).all():
        raise BadSampleError(
            path,
            f"mask has {array.shape[2]} channels that differ; expected a 1-channel mask (or a "
            "palette PNG, or an RGBA matte whose alpha holds the mask)",
        )
    return colour[..., 0]


def read_mask_array(path: Path, mat_key: str | None = None) -> np.ndarray:
    """Read a raw 2-D mask array from an image file (PNG, BMP, ...) or a MATLAB ``.mat`` file."""
    if path.suffix.lower() == ".mat":
        try:
            content = scipy.io.loadmat(str(path))
        except FileNotFoundError:
            raise BadSampleError(path, "mask file is missing") from None
        except Exception as exc:  # scipy raises several types for corrupt files
            raise BadSampleError(path, f"corrupt or unreadable .mat file ({exc})") from exc
        keys = [k for k in content if not k.startswith("__")]
        if mat_key is None and len(keys) == 1:
            mat_key = keys[0]
        if mat_key not in content:
            raise BadSampleError(
                path, f"expected variable {mat_key!r} in the .mat file, found {keys}"
            )
        array = np.asarray(content[mat_key])
    else:
        data = _read_bytes(path)
        _check_pixels(data, path, MAX_IMAGE_PIXELS)
        array = _decode(data, cv2.IMREAD_UNCHANGED, path, MAX_IMAGE_PIXELS)
        if array is None:
            raise BadSampleError(path, "corrupt or unreadable mask image")
        if array.ndim == 3:
            array = _one_channel(array, data, path)
    if array.ndim != 2:
        raise BadSampleError(path, f"mask must be 2-D, got shape {array.shape}")
    return array


def encode_mask(
    raw: np.ndarray,
    encoding: MaskEncoding,
    path: Path,
    alpha_threshold: int = 128,
    ignore_value: int | None = None,
) -> np.ndarray:
    """Turn a raw mask of a given encoding into the canonical {0, 1, IGNORE_INDEX} uint8 mask."""
    ignore = raw == ignore_value if ignore_value is not None else None
    values = np.unique(raw[~ignore] if ignore is not None else raw)
    if encoding in (MaskEncoding.binary01, MaskEncoding.binary255):
        on = 1 if encoding is MaskEncoding.binary01 else 255
        unexpected = np.setdiff1d(values, [0, on])
        if unexpected.size:
            raise BadSampleError(
                path,
                f"unexpected mask values {_preview(unexpected)} for encoding {encoding.value} "
                f"(expected only 0 and {on})",
            )
        person = raw == on
    elif encoding in (MaskEncoding.labels, MaskEncoding.instances):
        if values.size and values.min() < 0:
            raise BadSampleError(path, f"negative {encoding.value} in mask: {_preview(values)}")
        person = raw > 0
    elif encoding is MaskEncoding.alpha:
        if values.size and (values.min() < 0 or values.max() > 255):
            raise BadSampleError(path, f"alpha values outside 0..255: {_preview(values)}")
        person = raw >= alpha_threshold
    else:  # pragma: no cover - the enum is exhaustive
        raise ConfigError(f"unknown mask encoding {encoding!r}")
    mask = person.astype(np.uint8)
    if ignore is not None:
        mask[ignore] = IGNORE_INDEX
    return mask


# A mask smaller than its photo is resized to it when their aspect ratios agree within this
# (relative): vikram_human_seg stores masks at a rounded fraction of the photo's size.
MASK_ASPECT_TOLERANCE = 0.01


def fit_mask_to_image(
    mask: np.ndarray,
    image_hw: tuple[int, int],
    path: Path,
    tolerance: float = MASK_ASPECT_TOLERANCE,
) -> np.ndarray:
    """Return ``mask`` at the image's size.

    A mask smaller than its image (e.g. vikram_human_seg) is resized with nearest neighbour when
    the aspect ratios agree within ``tolerance`` (relative); anything else is a size mismatch.
    """
    mh, mw = mask.shape
    ih, iw = image_hw
    if (mh, mw) == (ih, iw):
        return mask
    aspect_gap = abs((mw / mh) / (iw / ih) - 1.0)
    if mh <= ih and mw <= iw and aspect_gap <= tolerance:
        return cv2.resize(mask, (iw, ih), interpolation=cv2.INTER_NEAREST)
    hint = ""
    if (mh, mw) == (iw, ih):
        hint = (
            "; the mask is the photo's size turned by 90 degrees: masks follow the photo as "
            "displayed (its EXIF orientation applied), not its stored pixel grid"
        )
    raise BadSampleError(
        path,
        f"mask size {mw}x{mh} does not match image size {iw}x{ih} (W x H); a smaller mask is "
        f"resized only when the aspect ratios agree within {tolerance:.0%} (here {aspect_gap:.1%})"
        + hint,
    )


class _TooLarge(Exception):
    pass


def _header_size(source: Path | io.BytesIO) -> tuple[int, int] | None:
    """(W, H) from an image header (a path or a file object), without decoding the pixels;
    None when PIL cannot read the header. Beyond PIL's own limit: ``_TooLarge``."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(source) as im:
                return im.size
    except Image.DecompressionBombError as err:
        raise _TooLarge(str(err)) from None
    except Exception:
        return None


def header_pixels(path: Path) -> int:
    """The pixel count an image file's header claims, 0 when it cannot be read (the decoder
    then reports the problem); for sizing batches before anything is decoded."""
    try:
        size = _header_size(path)
    except _TooLarge:
        return MAX_IMAGE_PIXELS + 1
    return 0 if size is None else size[0] * size[1]


def _read_bytes(path: Path) -> np.ndarray:
    try:
        data = np.fromfile(str(path), dtype=np.uint8)
    except FileNotFoundError:
        raise BadSampleError(path, "file is missing") from None
    except OSError as exc:
        raise BadSampleError(path, f"cannot read file ({exc})") from exc
    if data.size == 0:
        raise BadSampleError(path, "file is empty")
    return data


def _preview(values: np.ndarray, limit: int = 8) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    return f"[{shown}{', ...' if values.size > limit else ''}]"
