"""Stop signals caught instead of obeyed at once, so that a process stops where it chooses.

SIGTERM is how clusters, ``kill``, systemd and containers stop a process, SIGINT is Ctrl-C,
SIGHUP a closed terminal, and SLURM sends SIGUSR1 ahead of a time limit when asked. Obeyed at
once (Python's defaults: SIGTERM ends the process on the spot, SIGINT raises
``KeyboardInterrupt`` wherever the main thread happens to be) they leave temporary folders
behind and interrupt a checkpoint half-written. While a :class:`StopSignals` is entered in the
main thread, each signal it watches only records itself (:attr:`StopSignals.signum` and
:attr:`StopSignals.event`); the training loop checks it between steps, the demo server's main
thread waits on it. A second SIGINT raises ``KeyboardInterrupt`` (Ctrl-C twice: now).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from types import FrameType, TracebackType

STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1")


class StopSignals:
    """While entered (in the main thread), the signals named in ``names`` set :attr:`signum`
    (the first one's number) and :attr:`event` instead of ending the process; the previous
    handlers come back on exit. Names this platform lacks are left out."""

    def __init__(self, names: Sequence[str] = STOP_SIGNALS) -> None:
        self.names = tuple(names)
        self.signum = 0
        self.event = threading.Event()
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for name in self.names:
                sig = getattr(signal, name, None)
                if sig is not None:
                    self._previous[sig] = signal.signal(sig, self._record)
        return self

    def _record(self, signum: int, frame: FrameType | None) -> None:
        if self.signum and signum == signal.SIGINT:  # Ctrl-C twice: stop now
            raise KeyboardInterrupt
        self.signum = self.signum or signum
        self.event.set()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def wait(self, poll: float = 0.5) -> int:
        """Block until one of the signals comes; its number. Waits in short slices: the
        handler runs in the main thread between them."""
        while not self.event.wait(poll):
            pass
        return self.signum


__all__ = ["STOP_SIGNALS", "StopSignals"]
