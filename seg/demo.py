"""The local demo page of ``scripts/demo.py``: photos, videos and the webcam, segmented by the
predictor and backends of ``predict.py`` (never a second inference path), in a Gradio page.

Gradio is the optional extra ``pip install -e ".[demo]"``; this module imports it only in
:func:`build_page`. What the page computes is plain functions of this module
(:class:`Models`, :func:`segment_photo`, :func:`segment_video`, :class:`FrameRate`), so the
browser test checks the page and these, not a copy of them.

A user's mistake (a corrupt or oversized photo, an unreadable video, a damaged checkpoint) is a
``UserError``; the page shows its message and keeps serving. Anything else is logged with its
traceback on the server and shown as one line on the page.

Stopping (:func:`serve`): SIGINT (Ctrl-C), SIGTERM or SIGHUP is caught, never obeyed mid-way
(:class:`seg.signals.StopSignals`). The page then refuses new requests, a video being processed
stops at its next batch, the server closes without waiting for the browsers' open connections,
the requests still running get until ``STOP_GRACE`` seconds after the signal, and the page's
temporary folder is removed. Leaving the rest to the interpreter's exit is what hung or aborted
before: it joins the HTTP server for 5 s twice, then finalises while a worker thread is inside
ONNX Runtime or OpenCV, which ends in ``FATAL: exception not rethrown`` (SIGABRT) or waits on
that thread. ``scripts/demo.py`` therefore ends the process at once when a request is still
running at the deadline.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seg.checkpoint import CheckpointError, checkpoint_file, load_checkpoint
from seg.config import TTA, AlphaMode, Config, DemoConfig, OutputKind, to_config
from seg.data.io import MAX_IMAGE_PIXELS, BadSampleError, read_image
from seg.errors import ConfigError, MissingFileError, UserError
from seg.inference.backend import load_inference_model
from seg.inference.media import IMAGE_EXTENSIONS, write_image
from seg.inference.prediction import Cancelled, OutputSpec, predict_video
from seg.inference.predictor import Prediction, Predictor, build_predictor
from seg.inference.refine import build_refiner
from seg.inference.render import Background, RenderOptions, render
from seg.metrics.keys import metric_key, metric_sources
from seg.runs import CHECKPOINTS
from seg.signals import StopSignals

log = logging.getLogger(__name__)

# Ctrl-C, kill / systemd / containers, a closed terminal: each stops the page cleanly.
SERVER_STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
STOP_GRACE = 5.0  # seconds after the signal that running requests get to finish
MULTI_SCALE = (0.75, 1.0, 1.25)  # the page's "scales" box, as docs/evaluation.md's recipe
PHOTO_KINDS = [OutputKind.mask, OutputKind.overlay, OutputKind.cutout, OutputKind.blur]
VIDEO_KINDS = [OutputKind.overlay, OutputKind.blur, OutputKind.replace, OutputKind.mask]


def find_runs(path: str | Path) -> dict[str, Path]:
    """``{label: checkpoint file}``: ``path`` itself (a checkpoint or a run folder), or else
    every run folder in it (a folder with ``checkpoints/best.pt``), sorted by name."""
    root = Path(path).expanduser()
    if not root.exists():
        raise MissingFileError(f"checkpoint={path}: no such file or folder")
    if root.is_file():
        run = root.parent.parent if root.parent.name == CHECKPOINTS else root.parent
        return {f"{run.name}/{root.name}": root}
    try:
        return {root.name: checkpoint_file(root)}
    except CheckpointError:
        pass
    runs = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            runs[sub.name] = checkpoint_file(sub)
        except CheckpointError:
            continue
    if not runs:
        raise CheckpointError(
            f"checkpoint={path}: neither a checkpoint nor a run folder, and no run folder (one "
            "with checkpoints/best.pt) in it"
        )
    return runs


def run_card(checkpoint: Path) -> str:
    """Markdown: a run's recipe (from its checkpoint's config) and its validation figures at the
    checkpoint's step (those that chose it), per source."""
    ckpt = load_checkpoint(checkpoint, mmap=True)
    cfg = to_config(ckpt["config"])
    metrics = ckpt.get("metrics") or {}
    columns = ", ".join(
        f"{c.name}{f' ({c.backbone})' if c.backbone else ''} x{c.input_scale:g}"
        for c in cfg.model.columns
    )
    lines = [
        f"**{checkpoint.name}** of `{checkpoint.parent}`",
        f"- model: {cfg.model.name}" + (f" [{columns}]" if cfg.model.columns else ""),
        f"- trained: epoch {ckpt.get('epoch', '?')}, step {ckpt.get('step', '?')} of "
        f"{cfg.trainer.epochs} epochs on {', '.join(cfg.data.sources)}"
        + (f" + {cfg.data.negatives_p:.0%} photos without people" if cfg.data.negatives_p else ""),
        f"- evaluated at {cfg.aug.eval_size[0]}x{cfg.aug.eval_size[1]} (long x short side)",
    ]
    sources = metric_sources(metrics)
    if sources:
        lines += ["", "| validation | pixel acc | person IoU | empty px |", "|---|---|---|---|"]
        for source in [*sources, None]:
            empty = metrics.get(metric_key("empty_person_share", source))
            lines.append(
                f"| {source or 'all'} | {_pct(metrics.get(metric_key('pixel_acc', source)))} | "
                f"{_pct(metrics.get(metric_key('iou_person', source)))} | {_pct(empty)} |"
            )
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{100 * value:.2f}%"


@dataclass
class Loaded:
    model: Any
    cfg: Config
    predictors: dict[tuple[bool, bool], Predictor] = field(default_factory=dict)


class Models:
    """The runs the page offers, each loaded once on first use (as ``predict.py`` loads it:
    ``load_inference_model`` with the page's backend options), and one predictor per
    (flip, scales) setting. Thread-safe: Gradio runs handlers in a thread pool."""

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
                c = self.cfg
                model, train_cfg = load_inference_model(
                    self.runs[label],
                    c.backend,
                    c.device,
                    c.column_devices,
                    c.threads,
                    c.precision,
                    c.calibration,
                )
                self._loaded[label] = Loaded(model, train_cfg)
            loaded = self._loaded[label]
            key = (flip, scales)
            if key not in loaded.predictors:
                loaded.predictors[key] = build_predictor(
                    loaded.model,
                    loaded.cfg,
                    self.cfg.device,
                    self.cfg.column_devices,
                    [TTA.flip] if flip else [],
                    MULTI_SCALE if scales else (1.0,),
                    self.cfg.slide.window,
                    self.cfg.slide.stride,
                    build_refiner(self.cfg.refine),
                )
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
                run_card(models.runs[label]),
            ]
        return tuple(views)

    examples = example_photos(cfg.examples, cfg.max_examples)
    with gr.Blocks(title="Person segmentation") as page:
        gr.Markdown(
            "# Person segmentation\nThe predictor of `scripts/predict.py`, on this machine."
        )
        model = gr.Dropdown(labels, value=labels[0], label="model", visible=len(labels) > 1)
        card = gr.Markdown(run_card(models.runs[labels[0]]), elem_id="card")
        model.change(handler(lambda label: run_card(models.runs[label])), model, card)
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


def warm_up(models: Models, labels: Sequence[str] | None = None) -> None:
    """Load each model (its export made or found in the cache) before the page opens."""
    for label in labels or models.labels:
        models.predictor(label)
