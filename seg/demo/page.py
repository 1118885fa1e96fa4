"""The demo page (``scripts/demo.py``): photos, videos and the webcam, segmented by the
predictor and backends of ``predict.py`` (never a second inference path), in a Gradio page.

Gradio is the optional extra ``pip install -e ".[demo]"``; this module imports it only in
:func:`build_page`. What the page computes is plain functions of this module
(:class:`Models`, :func:`segment_photo`, :func:`segment_video`, :class:`FrameRate`), so the
browser test checks the page and these, not a copy of them. The runs it offers are found by
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
import tempfile
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
from seg.evaluation.report import run_summary
from seg.inference.backend import load_for
from seg.inference.media import IMAGE_EXTENSIONS, write_image
from seg.inference.prediction import Cancelled, OutputSpec, predict_video
from seg.inference.predictor import Prediction, Predictor, predictor_from_options
from seg.inference.render import Background, RenderOptions, render

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
) -> Path:
    """``predict.py``'s video path (``predict_video``) into ``out_dir``: a VP8 .webm, which
    browsers play. Its tqdm bar is what the page's progress bar follows. Once ``stop`` is set,
    it raises :class:`seg.inference.prediction.Cancelled` at the next batch."""
    predictor = models.predictor(label, opts.flip, opts.scales)
    render_opts = RenderOptions(
        alpha=opts.alpha, background=Background(opts.background), blur_sigma=opts.blur_sigma
    )
    spec = OutputSpec(out_dir, [kind], render_opts, video_ext=".webm")
    summary = predict_video(predictor, Path(path), spec, batch_size=4, progress=True, stop=stop)
    return Path(summary["written"][0])


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


def photo_input(gr: Any, **kwargs: Any) -> Any:
    """An image box whose value is ``(uploaded file, its name)``: the file itself, read by
    :func:`read_photo` as ``predict.py`` reads files (Gradio's own decoding would neither apply
    the pixel limit nor name the file in its errors, and a corrupt file would fail before any
    handler). The instance's ``preprocess`` is replaced: a subclass of a Gradio component
    makes Gradio write a ``.pyi`` file beside this module."""
    box = gr.Image(type="filepath", image_mode=None, **kwargs)

    def preprocess(payload: Any) -> tuple[str, str] | None:
        if payload is None:
            return None
        if payload.path is None:  # pasted as a data URL
            return str(gr.Image.preprocess(box, payload)), "pasted image"
        return payload.path, payload.orig_name or Path(payload.path).name

    box.preprocess = preprocess
    return box


def build_page(
    models: Models, cfg: DemoConfig, workdir: Path, requests: Requests | None = None
) -> Any:
    """The Gradio page (``gradio.Blocks``): Photo, Video, Webcam and Compare tabs. The files
    it makes for download (cut-outs, videos) go into ``workdir``; its handlers run inside
    ``requests`` (:meth:`Requests.handler`)."""
    gr = import_gradio()
    requests = requests or Requests()
    handler = requests.handler

    labels = models.labels
    tmp = workdir
    colours = ["green", "white", "black", "blue", "grey"]

    def options(threshold, flip, scales, soft, colour, background) -> PhotoOptions:
        return PhotoOptions(
            threshold=float(threshold),
            flip=bool(flip),
            scales=bool(scales),
            alpha=AlphaMode.soft if soft else AlphaMode.hard,
            background=background[0] if background else colour,
        )

    @handler
    def on_photo(label, photo, threshold, flip, scales, soft, colour, background):
        if photo is None:
            raise ConfigError("upload, paste or pick a photo first")
        path, name = photo
        image = read_photo(path, name, cfg.max_pixels)
        started = time.perf_counter()
        out = segment_photo(
            models, label, image, options(threshold, flip, scales, soft, colour, background)
        )
        ms = 1000 * (time.perf_counter() - started)
        cut = tmp / f"{Path(name).stem}_cutout.png"
        write_image(cut, out[OutputKind.cutout])
        h, w = image.shape[:2]
        info = f"{name}: {w}x{h}, {ms:.0f} ms ({label})"
        return (
            out[OutputKind.mask],
            out[OutputKind.overlay],
            out[OutputKind.cutout],
            out[OutputKind.blur],
            out[OutputKind.replace],
            str(cut),
            info,
        )

    track = gr.Progress(track_tqdm=True)

    @handler
    def on_video(
        label,
        video,
        kind,
        threshold,
        flip,
        scales,
        soft,
        colour,
        background,
        progress=track,  # Gradio fills it: the bar follows predict_video's tqdm
    ):
        if video is None:
            raise ConfigError("upload a video first")
        opts = options(threshold, flip, scales, soft, colour, background)
        out_dir = Path(tempfile.mkdtemp(dir=tmp))
        try:
            out = segment_video(
                models, label, video, OutputKind(kind), out_dir, opts, requests.stopping
            )
        except Cancelled:
            raise UserError("the demo server is stopping: the video was not finished") from None
        return str(out)

    @handler
    def on_frame(frame, label, kind, rate):
        rate = rate or FrameRate()  # one per browser session (gr.State)
        if frame is None:
            return None, "", rate
        (pred,) = models.predict(label, [frame], False, False)
        shown = render(OutputKind(kind), frame, pred, RenderOptions(background=Background("green")))
        return shown, f"{rate.tick():.1f} frames/s", rate

    @handler
    def on_compare(left, right, photo):
        if photo is None:
            raise ConfigError("upload, paste or pick a photo first")
        path, name = photo
        image = read_photo(path, name, cfg.max_pixels)
        views = []
        for label in (left, right):
            (pred,) = models.predict(label, [image], False, False)
            views += [
                render(OutputKind.overlay, image, pred, RenderOptions()),
                run_summary(models.runs[label]),
            ]
        return tuple(views)

    examples = example_photos(cfg.examples, cfg.max_examples)
    with gr.Blocks(title="Person segmentation") as page:
        gr.Markdown(
            "# Person segmentation\nThe predictor of `scripts/predict.py`, on this machine."
        )
        model = gr.Dropdown(labels, value=labels[0], label="model", visible=len(labels) > 1)
        card = gr.Markdown(run_summary(models.runs[labels[0]]), elem_id="card")
        model.change(handler(lambda label: run_summary(models.runs[label])), model, card)
        with gr.Accordion("options", open=False):
            with gr.Row():
                threshold = gr.Slider(
                    0.05, 0.95, value=0.5, step=0.05, label="threshold (person probability)"
                )
                flip = gr.Checkbox(label="test-time flip")
                scales = gr.Checkbox(label=f"scales {list(MULTI_SCALE)}")
                soft = gr.Checkbox(label="soft edges (probability as alpha)")
            with gr.Row():
                colour = gr.Dropdown(colours, value="green", label="background colour")
                background = photo_input(
                    gr, label="background photo (optional)", sources=["upload"], height=160
                )
        controls = [threshold, flip, scales, soft, colour, background]
        with gr.Tab("Photo"):
            with gr.Row():
                photo = photo_input(
                    gr, label="photo", sources=["upload", "clipboard"], elem_id="photo", height=360
                )
                with gr.Column():
                    go = gr.Button("Segment", variant="primary", elem_id="segment")
                    info = gr.Markdown(elem_id="info")
                    cut_file = gr.File(
                        label="cut-out (PNG with transparency)", elem_id="cutout_file"
                    )
            if examples:
                gr.Examples(examples, inputs=photo)
            with gr.Row():
                mask = gr.Image(label="mask", format="png", elem_id="mask", height=360)
                overlay = gr.Image(label="overlay", format="jpeg", elem_id="overlay", height=360)
                cutout = gr.Image(
                    label="cut-out", format="png", image_mode="RGBA", elem_id="cutout", height=360
                )
            with gr.Row():
                blur = gr.Image(label="background blurred", format="jpeg", height=360)
                replace = gr.Image(label="background replaced", format="jpeg", height=360)
            go.click(
                on_photo,
                [model, photo, *controls],
                [mask, overlay, cutout, blur, replace, cut_file, info],
            )
        with gr.Tab("Video"):
            with gr.Row():
                video = gr.Video(label="video", sources=["upload"], elem_id="video_in")
                video_out = gr.Video(label="result", format="webm", elem_id="video_out")
            kind = gr.Radio([k.value for k in VIDEO_KINDS], value="overlay", label="output")
            gr.Button("Process video", elem_id="process_video").click(
                on_video, [model, video, kind, *controls], video_out
            )
        with gr.Tab("Webcam"):
            with gr.Row():
                cam = gr.Image(sources=["webcam"], streaming=True, label="webcam")
                with gr.Column():
                    cam_out = gr.Image(label="result", elem_id="webcam_result")
                    fps = gr.Markdown(elem_id="fps")
            cam_kind = gr.Radio([k.value for k in VIDEO_KINDS], value="overlay", label="output")
            rate = gr.State(None)
            cam.stream(
                on_frame,
                [cam, model, cam_kind, rate],
                [cam_out, fps, rate],
                stream_every=1 / cfg.webcam_fps,
                time_limit=600,
            )
        with gr.Tab("Compare", visible=len(labels) > 1):
            with gr.Row():
                left = gr.Dropdown(labels, value=labels[0], label="left")
                right = gr.Dropdown(labels, value=labels[-1], label="right")
            both = photo_input(gr, label="photo", sources=["upload", "clipboard"], height=360)
            compare = gr.Button("Compare", variant="primary")
            with gr.Row():
                with gr.Column():
                    left_view, left_card = gr.Image(label="left", format="jpeg"), gr.Markdown()
                with gr.Column():
                    right_view, right_card = gr.Image(label="right", format="jpeg"), gr.Markdown()
            compare.click(
                on_compare, [left, right, both], [left_view, left_card, right_view, right_card]
            )
    return page


def warm_up(models: Models, labels: Sequence[str] | None = None) -> None:
    """Load each model (its export made or found in the cache) before the page opens."""
    for label in labels or models.labels:
        models.predictor(label)
