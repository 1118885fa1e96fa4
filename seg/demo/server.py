"""Serving the demo page, and stopping it.

SIGINT (Ctrl-C), SIGTERM or SIGHUP is caught, never obeyed mid-way
(:class:`seg.signals.StopSignals`). The page then refuses new requests, a video being processed
stops at its next batch, the requests still running get until ``STOP_GRACE`` seconds after the
signal, the server closes without waiting for the browsers' open connections, and the page's
temporary folder is removed. Leaving the rest to the interpreter's exit is what hung or aborted
before: it joins the HTTP server for 5 s twice, then finalises while a worker thread is inside
ONNX Runtime or OpenCV, which ends in ``FATAL: exception not rethrown`` (SIGABRT) or waits on
that thread. ``scripts/demo.py`` therefore ends the process at once when a request is still
running at the deadline.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seg.config import DemoConfig
from seg.demo.page import Models, Requests
from seg.demo.ui import build_page
from seg.signals import StopSignals

log = logging.getLogger(__name__)

# Ctrl-C, kill / systemd / containers, a closed terminal: each stops the page cleanly.
SERVER_STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
STOP_GRACE = 5.0  # seconds after the signal that running requests get to finish


@dataclass(frozen=True)
class Stop:
    """How :func:`serve` ended: the signal that stopped it and the requests still running at
    the deadline (their threads are inside the backend: only the process's end stops them)."""

    signum: int
    running: int

    @property
    def exit_code(self) -> int:
        """0 after Ctrl-C (the way to stop the page), else 128 + the signal's number, as a
        process ended by it (143 for SIGTERM)."""
        return 0 if self.signum == signal.SIGINT else 128 + self.signum


def serve(
    cfg: DemoConfig,
    models: Models,
    ready: Callable[[str], None] = print,
    grace: float = STOP_GRACE,
) -> Stop:
    """Build the page and serve it on ``cfg.host``:``cfg.port`` until SIGINT, SIGTERM or
    SIGHUP (in the main thread); ``ready`` gets the address once the server listens. Stopping
    is described in this module's docstring; the page's temporary folder is gone on return."""
    requests = Requests()
    workdir = Path(tempfile.mkdtemp(prefix="seg-demo-"))
    running = 0
    try:
        with StopSignals(SERVER_STOP_SIGNALS) as signals:
            page = build_page(models, cfg, workdir, requests)
            page.queue(default_concurrency_limit=1)  # one prediction at a time: shared cores
            try:
                _, url, _ = page.launch(
                    server_name=cfg.host,
                    server_port=cfg.port or _free_port(cfg.host),
                    prevent_thread_lock=True,
                    quiet=True,
                    footer_links=[],
                    allowed_paths=[],
                )
                ready(url)
                signals.wait()
                log.info("%s: stopping the demo page", signal.Signals(signals.signum).name)
                # New requests are refused, videos stop at their next batch; the others get
                # until the deadline, their answers (or "stopping") reaching their pages.
                requests.stopping.set()
                running = requests.wait(time.monotonic() + grace)
            finally:
                _close(page)
    finally:
        _remove(workdir)
    if running:
        log.warning(
            "%d request(s) still running %.0f s after the signal: not waiting for them",
            running,
            grace,
        )
    return Stop(signals.signum, running)


def _close(page: Any) -> None:
    """Close Gradio's queue and HTTP server, waiting at most a second for open connections:
    uvicorn would wait for a browser tab's as long as the tab lives, and a request still queued
    keeps its event stream open for up to 10 s. Those it then cancels are logged as one line,
    not as uvicorn's error and traceback per connection."""
    if page.server is not None:
        page.server.config.timeout_graceful_shutdown = 1
    uvicorn_log = logging.getLogger("uvicorn.error")
    dropped = _DroppedConnections()
    uvicorn_log.addFilter(dropped)
    try:
        page.close(verbose=False)
    finally:
        uvicorn_log.removeFilter(dropped)
    if dropped.count:
        log.info("closed %d open connection(s) of pages still waiting", dropped.count)


class _DroppedConnections(logging.Filter):
    """Counts, and keeps out of the log, what uvicorn reports of the connections it cancels
    when its graceful shutdown times out."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Cancel %s running task(s)"):
            self.count += int(record.args[0]) if record.args else 1  # type: ignore[index]
            return False
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, asyncio.CancelledError)


def _remove(folder: Path) -> None:
    """Remove the page's temporary folder; a request still running may add a file while it
    goes, hence the second try."""
    for _ in range(3):
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            return
    log.warning("could not remove the demo page's temporary folder %s", folder)


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
