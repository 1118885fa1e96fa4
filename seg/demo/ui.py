"""The demo page's Gradio layout: one function per tab, each with its own handlers, all of
them calling what :mod:`seg.demo.page` computes (:class:`Models`, :func:`segment_photo`,
:func:`segment_video`), inside the page's :class:`Requests`. A new tab is one function here
and one line in :func:`build_page`.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seg.config import AlphaMode, DemoConfig, OutputKind
from seg.demo.page import (
    MULTI_SCALE,
    VIDEO_KINDS,
    Models,
    PhotoOptions,
    Requests,
    WebcamSession,
    example_photos,
    import_gradio,
    read_photo,
    segment_photo,
    segment_video,
)
from seg.errors import ConfigError, UserError
from seg.evaluation.report import run_summary
from seg.inference.media import write_image
from seg.inference.prediction import Cancelled
from seg.inference.render import Background, RenderOptions, render
from seg.inference.temporal import temporal_options

COLOURS = ["green", "white", "black", "blue", "grey"]


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


@dataclass
class Page:
    """What every tab shares: the Gradio module, the runs, where downloads go (``workdir``),
    the requests its handlers run in, the model dropdown and the option controls (threshold,
    flip, scales, soft, colour, background: :func:`photo_options`'s arguments)."""

    gr: Any
    models: Models
    cfg: DemoConfig
    workdir: Path
    requests: Requests
    model: Any
    controls: list[Any]

    def handler(self, fn: Any) -> Any:
        return self.requests.handler(fn)


def photo_options(
    threshold: float,
    flip: bool,
    scales: bool,
    soft: bool,
    colour: str,
    background: tuple[str, str] | None,
) -> PhotoOptions:
    """The option controls' values as :class:`PhotoOptions` (a background photo, when one is
    given, wins over the colour)."""
    return PhotoOptions(
        threshold=float(threshold),
        flip=bool(flip),
        scales=bool(scales),
        alpha=AlphaMode.soft if soft else AlphaMode.hard,
        background=background[0] if background else colour,
    )


def option_controls(gr: Any) -> list[Any]:
    """The options accordion; its controls in :func:`photo_options`'s order."""
    with gr.Accordion("options", open=False):
        with gr.Row():
            threshold = gr.Slider(
                0.05, 0.95, value=0.5, step=0.05, label="threshold (person probability)"
            )
            flip = gr.Checkbox(label="test-time flip")
            scales = gr.Checkbox(label=f"scales {list(MULTI_SCALE)}")
            soft = gr.Checkbox(label="soft edges (probability as alpha)")
        with gr.Row():
            colour = gr.Dropdown(COLOURS, value="green", label="background colour")
            background = photo_input(
                gr, label="background photo (optional)", sources=["upload"], height=160
            )
    return [threshold, flip, scales, soft, colour, background]


def photo_tab(page: Page) -> None:
    """A photo in; its mask, overlay, cut-out, blurred and replaced background out, and the
    cut-out as a PNG to download."""
    gr, models = page.gr, page.models

    @page.handler
    def on_photo(label, photo, threshold, flip, scales, soft, colour, background):
        if photo is None:
            raise ConfigError("upload, paste or pick a photo first")
        path, name = photo
        image = read_photo(path, name, page.cfg.max_pixels)
        started = time.perf_counter()
        opts = photo_options(threshold, flip, scales, soft, colour, background)
        out = segment_photo(models, label, image, opts)
        ms = 1000 * (time.perf_counter() - started)
        cut = page.workdir / f"{Path(name).stem}_cutout.png"
        write_image(cut, out[OutputKind.cutout])
        h, w = image.shape[:2]
        shown = [OutputKind.mask, OutputKind.overlay, OutputKind.cutout, OutputKind.blur]
        return (
            *(out[kind] for kind in shown),
            out[OutputKind.replace],
            str(cut),
            f"{name}: {w}x{h}, {ms:.0f} ms ({label})",
        )

    with gr.Tab("Photo"):
        with gr.Row():
            photo = photo_input(
                gr, label="photo", sources=["upload", "clipboard"], elem_id="photo", height=360
            )
            with gr.Column():
                go = gr.Button("Segment", variant="primary", elem_id="segment")
                info = gr.Markdown(elem_id="info")
                cut_file = gr.File(label="cut-out (PNG with transparency)", elem_id="cutout_file")
        examples = example_photos(page.cfg.examples, page.cfg.max_examples)
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
            [page.model, photo, *page.controls],
            [mask, overlay, cutout, blur, replace, cut_file, info],
        )


def video_tab(page: Page) -> None:
    """A video in, one output kind of it out as a .webm, with a progress bar."""
    gr = page.gr
    track = gr.Progress(track_tqdm=True)

    @page.handler
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
        out_dir = Path(tempfile.mkdtemp(dir=page.workdir))
        try:
            out = segment_video(
                page.models,
                label,
                video,
                OutputKind(kind),
                out_dir,
                photo_options(threshold, flip, scales, soft, colour, background),
                page.requests.stopping,
                temporal_options(page.cfg.temporal),
            )
        except Cancelled:
            raise UserError("the demo server is stopping: the video was not finished") from None
        return str(out)

    with gr.Tab("Video"):
        with gr.Row():
            video = gr.Video(label="video", sources=["upload"], elem_id="video_in")
            video_out = gr.Video(label="result", format="webm", elem_id="video_out")
        kind = gr.Radio([k.value for k in VIDEO_KINDS], value="overlay", label="output")
        gr.Button("Process video", elem_id="process_video").click(
            on_video, [page.model, video, kind, *page.controls], video_out
        )


def webcam_tab(page: Page) -> None:
    """The webcam's frames, streamed through the plain predictor, and the frame rate."""
    gr = page.gr

    @page.handler
    def on_frame(frame, label, kind, session):
        # one per browser session (gr.State): its frame rate and its temporal state
        session = session or WebcamSession(temporal_options(page.cfg.temporal))
        if frame is None:
            return None, "", session
        (pred,) = page.models.predict(label, [frame], False, False)
        pred = session.frame(label, frame, pred)
        shown = render(OutputKind(kind), frame, pred, RenderOptions(background=Background("green")))
        return shown, f"{session.rate.tick():.1f} frames/s", session

    with gr.Tab("Webcam"):
        with gr.Row():
            cam = gr.Image(sources=["webcam"], streaming=True, label="webcam")
            with gr.Column():
                cam_out = gr.Image(label="result", elem_id="webcam_result")
                fps = gr.Markdown(elem_id="fps")
        cam_kind = gr.Radio([k.value for k in VIDEO_KINDS], value="overlay", label="output")
        session = gr.State(None)
        cam.stream(
            on_frame,
            [cam, page.model, cam_kind, session],
            [cam_out, fps, session],
            stream_every=1 / page.cfg.webcam_fps,
            time_limit=600,
        )


def compare_tab(page: Page) -> None:
    """One photo through two runs side by side, each with its run's summary (shown only when
    the page offers more than one run)."""
    gr, models = page.gr, page.models
    labels = models.labels

    @page.handler
    def on_compare(left, right, photo):
        if photo is None:
            raise ConfigError("upload, paste or pick a photo first")
        path, name = photo
        image = read_photo(path, name, page.cfg.max_pixels)
        views = []
        for label in (left, right):
            (pred,) = models.predict(label, [image], False, False)
            views += [
                render(OutputKind.overlay, image, pred, RenderOptions()),
                run_summary(models.runs[label]),
            ]
        return tuple(views)

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


TABS = [photo_tab, video_tab, webcam_tab, compare_tab]


def build_page(
    models: Models, cfg: DemoConfig, workdir: Path, requests: Requests | None = None
) -> Any:
    """The Gradio page (``gradio.Blocks``): the model choice and its run's summary, the
    options, then :data:`TABS`. The files it makes for download (cut-outs, videos) go into
    ``workdir``; its handlers run inside ``requests`` (:meth:`Requests.handler`)."""
    gr = import_gradio()
    requests = requests or Requests()
    labels = models.labels
    with gr.Blocks(title="Person segmentation") as blocks:
        gr.Markdown(
            "# Person segmentation\nThe predictor of `scripts/predict.py`, on this machine."
        )
        model = gr.Dropdown(labels, value=labels[0], label="model", visible=len(labels) > 1)
        card = gr.Markdown(run_summary(models.runs[labels[0]]), elem_id="card")
        model.change(requests.handler(lambda label: run_summary(models.runs[label])), model, card)
        controls = option_controls(gr)
        page = Page(gr, models, cfg, workdir, requests, model, controls)
        for tab in TABS:
            tab(page)
    return blocks
