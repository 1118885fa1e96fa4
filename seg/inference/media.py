"""Inputs (an image, a folder, a video) and outputs that are never left half-written.

Every output is written to a hidden temporary file in the output folder and renamed over its
final name only once complete, so an interrupted run leaves either the old file or the new
one, never a truncated image or video.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from seg.errors import DataError, MissingFileError
from seg.fileio import atomic_path, temp_beside

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg")
# The codec of each video container the writers make: mp4v for predict.py's .mp4 (plays in
# desktop players), VP8 for .webm (plays in every browser: the demo page's videos).
VIDEO_FOURCC = {".mp4": "mp4v", ".webm": "VP80"}


@dataclass
class Inputs:
    images: list[Path] = field(default_factory=list)
    videos: list[Path] = field(default_factory=list)


def find_inputs(path: Path) -> Inputs:
    """An image or video file -> itself; a folder -> its images and videos (sorted, not recursive).

    Raises ``FileNotFoundError`` for a missing path and ``ValueError`` for an unsupported file
    or a folder without any supported file, naming the path and the supported extensions.
    """
    supported = f"images {list(IMAGE_EXTENSIONS)}, videos {list(VIDEO_EXTENSIONS)}"
    if not path.exists():
        raise MissingFileError(f"{path}: input does not exist")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        found = Inputs(
            images=[p for p in files if p.suffix.lower() in IMAGE_EXTENSIONS],
            videos=[p for p in files if p.suffix.lower() in VIDEO_EXTENSIONS],
        )
        if not found.images and not found.videos:
            raise DataError(f"{path}: folder holds no supported file ({supported})")
        _check_unique_stems([*found.images, *found.videos])
        return found
    suffix = path.suffix.lower()
    if suffix in IMAGE_EXTENSIONS:
        return Inputs(images=[path])
    if suffix in VIDEO_EXTENSIONS:
        return Inputs(videos=[path])
    raise DataError(f"{path}: unsupported file type {suffix!r}; supported: {supported}")


def _check_unique_stems(paths: list[Path]) -> None:
    """Outputs are named after the input's stem: a.jpg and a.png would overwrite each other."""
    seen: dict[str, Path] = {}
    for p in paths:
        if p.stem in seen:
            raise DataError(
                f"{seen[p.stem]} and {p} would write the same outputs ({p.stem}_*): rename one"
            )
        seen[p.stem] = p


def write_image(path: Path, array: np.ndarray, jpeg_quality: int = 95) -> Path:
    """Write uint8 (H, W) gray, (H, W, 3) RGB or (H, W, 4) RGBA atomically; returns ``path``."""
    if array.ndim == 3:
        code = cv2.COLOR_RGBA2BGRA if array.shape[2] == 4 else cv2.COLOR_RGB2BGR
        array = cv2.cvtColor(array, code)
    params = [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality] if path.suffix.lower() == ".jpg" else []
    ok, data = cv2.imencode(path.suffix, array, params)
    if not ok:
        raise OSError(f"{path}: OpenCV could not encode an image of shape {array.shape}")
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.tobytes())
    return path


class UnreadableVideo(DataError):
    """A video that cannot be opened or yields no frame (``on_bad_input=skip`` skips it)."""


@dataclass(frozen=True)
class VideoInfo:
    fps: float
    frames: int  # as the container reports it (may be approximate, 0 when unknown)


def open_video(path: Path) -> tuple[cv2.VideoCapture, VideoInfo]:
    """Open a video for reading; raises :class:`UnreadableVideo` naming the file if it cannot
    be decoded."""
    capture = cv2.VideoCapture(str(path))
    if not capture.isOpened():
        raise UnreadableVideo(f"{path}: corrupt or unreadable video (OpenCV could not open it)")
    fps = capture.get(cv2.CAP_PROP_FPS)
    info = VideoInfo(
        fps=fps if fps and fps > 0 else 25.0,  # some containers do not store a rate
        frames=max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT))),
    )
    return capture, info


def frame_batches(capture: cv2.VideoCapture, batch_size: int) -> Iterator[list[np.ndarray]]:
    """Decoded frames as uint8 (H, W, 3) RGB, ``batch_size`` at a time (the last may be short)."""
    batch: list[np.ndarray] = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        batch.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


class VideoWriter:
    """Writer of RGB (or gray) frames into a temporary file, renamed on :meth:`commit`; the
    codec follows ``path``'s suffix (``VIDEO_FOURCC``: .mp4 or .webm)."""

    def __init__(self, path: Path, fps: float, size_hw: tuple[int, int]) -> None:
        self.path = path
        self.size_hw = size_hw
        h, w = size_hw
        codec = VIDEO_FOURCC.get(path.suffix.lower())
        if codec is None:
            raise ValueError(f"{path}: videos are written as {sorted(VIDEO_FOURCC)}")
        self._tmp = temp_beside(path)
        self._writer = cv2.VideoWriter(str(self._tmp), cv2.VideoWriter_fourcc(*codec), fps, (w, h))
        if not self._writer.isOpened():
            self.abort()
            raise OSError(f"{path}: OpenCV could not open a {codec} video writer")

    def write(self, frame: np.ndarray) -> None:
        """Append uint8 (H, W) gray or (H, W, 3) RGB."""
        if frame.shape[:2] != self.size_hw:
            raise ValueError(
                f"{self.path}: frame of size {frame.shape[:2]} in a video of size {self.size_hw}"
            )
        code = cv2.COLOR_GRAY2BGR if frame.ndim == 2 else cv2.COLOR_RGB2BGR
        self._writer.write(cv2.cvtColor(frame, code))

    def commit(self) -> Path:
        """Finish the file and move it to its final name."""
        self._writer.release()
        os.replace(self._tmp, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the temporary file; the final name is untouched."""
        self._writer.release()
        self._tmp.unlink(missing_ok=True)
