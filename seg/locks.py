"""Advisory file locks between processes (``fcntl.flock``), for the dataset downloader and the
training run folder. The kernel drops a lock when its holder dies, so a killed run never leaves
a stale lock behind; the lock file itself stays (removing it would race with a new holder)."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path


class LockHeld(RuntimeError):
    """Another process holds the lock; ``holder`` is what it wrote into the lock file."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is locked by {holder}")
        self.path, self.holder = path, holder


def holder_note() -> str:
    """What a holder writes into its lock file: ``PID n on host h``."""
    return f"PID {os.getpid()} on {socket.gethostname()}"


@contextlib.contextmanager
def file_lock(path: Path, *, blocking: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the ``with`` block.

    ``blocking=False``: raise :class:`LockHeld`, naming the holder, when another process holds
    it. Without ``fcntl`` (Windows) nothing is locked.
    """
    try:
        import fcntl
    except ImportError:
        yield
        return
    # "a+": opening must not truncate the holder's note before we know whether we get the lock.
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.seek(0)
            raise LockHeld(path, handle.read().strip() or "another process") from None
        try:
            handle.truncate(0)
            handle.write(holder_note() + "\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
