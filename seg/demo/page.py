"""The demo page (``scripts/demo.py``): photos, videos and the webcam, segmented by the
predictor and backends of ``predict.py`` (never a second inference path), in a Gradio page.

Gradio is the optional extra ``pip install -e ".[demo]"``, imported only when a page is built
or a handler wrapped (:func:`import_gradio`). What the page computes is plain functions of this
module (:class:`Models`, :func:`segment_photo`, :func:`segment_video`, :class:`FrameRate`); the
page's layout, one function per tab, is ``seg.demo.ui``, which only calls them, so the browser
test checks the page and these, not a copy of them. The runs it offers are found by
``seg.checkpoint.find_runs`` and summed up by ``seg.evaluation.report.run_summary``; serving
and stopping the page: ``seg.demo.server``.

A user's mistake (a corrupt or oversized photo, an unreadable video, a damaged checkpoint) is a
``UserError``; the page shows its message and keeps serving. Anything else is logged with its
traceback on the server and shown as one line on the page.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from seg.checkpoint import find_runs
from seg.config import (
    TTA,
    AlphaMode,
    Config,
    DemoConfig,
    InferenceOptions,
    OutputKind,
    PredictorOptions,
)
from seg.data.io import MAX_IMAGE_PIXELS, BadSampleError, read_image
from seg.errors import ConfigError, MissingFileError, UserError
from seg.inference.backend import load_for
from seg.inference.media import IMAGE_EXTENSIONS
from seg.inference.prediction import OutputSpec, predict_video
from seg.inference.predictor import Prediction, Predictor, predictor_from_options
from seg.inference.render import Background, RenderOptions, render
from seg.inference.temporal import TemporalFilter, TemporalOptions

log = logging.getLogger(__name__)

MULTI_SCALE = (0.75, 1.0, 1.25)  # the page's "scales" box, as docs/evaluation.md's recipe
PHOTO_KINDS = [OutputKind.mask, OutputKind.overlay, OutputKind.cutout, OutputKind.blur]
VIDEO_KINDS = [OutputKind.overlay, OutputKind.blur, OutputKind.replace, OutputKind.mask]


@dataclass
class Loaded:
    model: Any
    cfg: Config
    predictors: dict[tuple[bool, bool], Predictor] = field(default_factory=dict)


class Models:
    """The runs the page offers, each loaded once on first use as ``predict.py`` loads it
    (``load_for`` with the page's options), and one predictor per (flip, scales) setting, as
    ``predict.py`` builds it (``predictor_from_options``). Thread-safe: Gradio runs handlers in
    a thread pool."""

    def __init__(self, cfg: DemoConfig) -> None:
        self.cfg = cfg
        self.runs = find_runs(cfg.checkpoint)
        self._loaded: dict[str, Loaded] = {}
        self._lock = threading.Lock()

    @property
    def labels(self) -> list[str]:
        return list(self.runs)

    def predictor(self, label: str, flip: bool = False, scales: bool = False) -> Predictor:
        if label not in self.runs:
            raise ConfigError(f"model {label!r} is not one of {self.labels}")
        with self._lock:
            if label not in self._loaded:
                options = dataclasses.replace(self.cfg, checkpoint=str(self.runs[label]))
                self._loaded[label] = Loaded(*load_for(options))
            loaded = self._loaded[label]
            key = (flip, scales)
            if key not in loaded.predictors:
                shared = {f.name: getattr(self.cfg, f.name) for f in fields(InferenceOptions)}
                options = PredictorOptions(
                    **shared,
                    tta=[TTA.flip] if flip else [],
                    scales=list(MULTI_SCALE if scales else (1.0,)),
                )
                loaded.predictors[key] = predictor_from_options(loaded.model, loaded.cfg, options)
            return loaded.predictors[key]

    def predict(
        self, label: str, images: list[np.ndarray], flip: bool, scales: bool
    ) -> list[Prediction]:
        """The predictor's :class:`Prediction` of each image."""
        return self.predictor(label, flip, scales)(images)


def read_photo(path: str | Path, name: str, max_pixels: int = 0) -> np.ndarray:
    """An uploaded photo as ``predict.py`` reads it (EXIF orientation, pixel limit); errors
    name the file as the user knows it (``name``), not Gradio's temporary copy."""
    try:
        return read_image(Path(path), max_pixels or MAX_IMAGE_PIXELS)
    except BadSampleError as err:
        raise BadSampleError(name, err.problem) from None


def thresholded(pred: Prediction, threshold: float) -> Prediction:
    """``pred`` with its mask at another probability threshold (0.5: the predictor's own mask,
    the larger softmax, unchanged)."""
    if threshold == 0.5:
        return pred
    return Prediction(mask=pred.prob > threshold, prob=pred.prob)


@dataclass
class PhotoOptions:
    threshold: float = 0.5
    flip: bool = False
    scales: bool = False
    alpha: AlphaMode = AlphaMode.hard
    background: str = "green"  # a colour or an image file (Background's spec)
    blur_sigma: float = 0.02


def segment_photo(
    models: Models, label: str, image: np.ndarray, opts: PhotoOptions
) -> dict[OutputKind, np.ndarray]:
    """Every photo output of the page: ``{kind: uint8 image}`` for mask, overlay, cutout (RGBA),
    blur and replace, rendered by ``predict.py``'s renderers."""
    (pred,) = models.predict(label, [image], opts.flip, opts.scales)
    pred = thresholded(pred, opts.threshold)
    render_opts = RenderOptions(
        alpha=opts.alpha, background=Background(opts.background), blur_sigma=opts.blur_sigma
    )
    kinds = [*PHOTO_KINDS, OutputKind.replace]
    return {kind: render(kind, image, pred, render_opts) for kind in kinds}


def segment_video(
    models: Models,
    label: str,
    path: str | Path,
    kind: OutputKind,
    out_dir: Path,
    opts: PhotoOptions,
    stop: threading.Event | None = None,
    temporal: TemporalOptions | None = None,
) -> Path:
    """``predict.py``'s video path (``predict_video``) into ``out_dir``: a VP8 .webm, which
    browsers play. Its tqdm bar is what the page's progress bar follows. Once ``stop`` is set,
    it raises :class:`seg.inference.prediction.Cancelled` at the next batch."""
    predictor = models.predictor(label, opts.flip, opts.scales)
    render_opts = RenderOptions(
        alpha=opts.alpha, background=Background(opts.background), blur_sigma=opts.blur_sigma
    )
    spec = OutputSpec(out_dir, [kind], render_opts, video_ext=".webm")
    summary = predict_video(
        predictor, Path(path), spec, batch_size=4, progress=True, stop=stop, temporal=temporal
    )
    return Path(summary["written"][0])


@dataclass
class WebcamSession:
    """One browser session's webcam state (a ``gr.State``, never shared between visitors): its
    frame rate, and its temporal filter (None: per-frame prediction), begun again when the
    session's model changes."""

    temporal: TemporalOptions | None
    rate: FrameRate = field(default_factory=lambda: FrameRate())
    label: str | None = None
    steady: TemporalFilter | None = None

    def frame(self, label: str, image: np.ndarray, pred: Prediction) -> Prediction:
        """``pred`` of the session's next frame, steadied when the temporal mode is on."""
        if self.temporal is None:
            return pred
        if self.steady is None or label != self.label:
            self.steady, self.label = TemporalFilter(self.temporal), label
        return self.steady(image, pred)


class FrameRate:
    """Frames per second over the last ``window`` frames handled."""

    def __init__(self, window: int = 20) -> None:
        self.times: deque[float] = deque(maxlen=window)

    def tick(self, now: float | None = None) -> float:
        self.times.append(time.perf_counter() if now is None else now)
        if len(self.times) < 2:
            return 0.0
        return (len(self.times) - 1) / max(self.times[-1] - self.times[0], 1e-9)


class Requests:
    """The page's requests in flight, and whether the server is stopping. A handler runs inside
    :meth:`handling`: refused once :attr:`stopping` is set, counted while it runs, so that
    stopping can wait for the running ones (:meth:`wait`)."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._running = 0
        self._changed = threading.Condition()

    @contextmanager
    def handling(self) -> Iterator[None]:
        if self.stopping.is_set():
            raise UserError("the demo server is stopping; start it again to continue")
        with self._changed:
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    @property
    def running(self) -> int:
        with self._changed:
            return self._running

    def wait(self, deadline: float) -> int:
        """Wait until no request runs or ``time.monotonic()`` reaches ``deadline``; the number
        still running."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._running == 0, timeout=max(0.0, deadline - time.monotonic())
            )
            return self._running

    def handler(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as a page handler: counted and refused as above, its errors shown as
        :func:`user_errors` shows them."""

        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self.handling():
                return fn(*args, **kwargs)

        return user_errors(counted)


def example_photos(folder: str | None, limit: int) -> list[str]:
    """The first ``limit`` photos of ``folder`` (sorted by name), for the page's examples."""
    if not folder or limit == 0:
        return []
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise MissingFileError(f"examples={folder}: no such folder")
    photos = sorted(p for p in root.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
    return [str(p) for p in photos[:limit]]


def import_gradio() -> Any:
    """The ``gradio`` module (its usage analytics off: the page talks to no one but its
    users), or a ConfigError saying how to install it."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    try:
        import gradio
    except ImportError:
        raise ConfigError('the demo page needs Gradio: pip install -e ".[demo]"') from None
    return gradio


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A page handler whose errors reach the page as one message (``gradio.Error``): a user
    error's own, anything else "internal error" with its traceback in the server's log."""
    gr = import_gradio()

    @functools.wraps(fn)
    def handler(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except UserError as err:
            raise gr.Error(str(err), print_exception=False) from None
        except Exception as err:
            log.exception("demo page handler %s failed", fn.__name__)
            raise gr.Error(
                f"internal error ({type(err).__name__}); the server's log has the details",
                print_exception=False,
            ) from None

    return handler


def warm_up(models: Models, labels: Sequence[str] | None = None) -> None:
    """Load each model (its export made or found in the cache) before the page opens."""
    for label in labels or models.labels:
        models.predictor(label)
