"""Files that are either whole or absent: the one write-to-a-temporary-then-rename helper.

Every file the project writes for a user to keep (checkpoints, ``metrics.json``, reports,
split lists, predictions, ONNX models, downloads) goes through :func:`atomic_path`, so a crash,
a ``kill -9`` or a full disk mid-write leaves the old file (or none), never a truncated one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def temp_beside(final: Path) -> Path:
    """A new hidden temporary file in ``final``'s folder, ending in ``final``'s suffix (OpenCV
    and ONNX pick the format from it); renaming it over ``final`` is then atomic."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.stem}.", suffix=final.suffix, dir=final.parent)
    os.close(fd)
    # mkstemp makes the file private (0600); outputs get the usual permissions instead.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    return Path(tmp)


@contextlib.contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; rename it over ``final`` when the block ends
    without an exception. On an exception the temporary file is removed and ``final`` is left
    as it was.

    >>> with atomic_path(Path("out/metrics.json")) as tmp:
    ...     tmp.write_text("{}")
    """
    final = Path(final)
    tmp = temp_beside(final)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return path


def write_json(path: Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON atomically (values JSON cannot hold as ``str``)."""
    return write_text(path, json.dumps(obj, indent=2, default=str) + "\n")


def link_or_copy(src: Path, dst: Path) -> None:
    """``dst`` becomes ``src``'s content, atomically; a hard link costs no space (a copy where
    the file system has no hard links)."""
    with atomic_path(dst) as tmp:
        tmp.unlink()
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
