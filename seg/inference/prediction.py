"""Prediction over images, folders and videos: read in batches, predict, render, write.

``run_predict(cfg, model, train_cfg)`` is what ``scripts/predict.py`` calls; the pieces
(``predict_images``, ``predict_video``) take a ready :class:`Predictor` and typed options.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn
from tqdm import tqdm

from seg.config import BadSamplePolicy, Config, OutputKind, PredictConfig
from seg.data.batching import pixel_batches
from seg.data.io import BadSampleError, header_pixels, read_image
from seg.errors import ConfigError
from seg.inference.media import (
    Inputs,
    UnreadableVideo,
    VideoWriter,
    find_inputs,
    frame_batches,
    open_video,
    write_image,
)
from seg.inference.predictor import Predictor, StageClock, predictor_from_options
from seg.inference.render import SUFFIXES, Background, RenderOptions, render
from seg.inference.temporal import TemporalFilter, TemporalOptions, temporal_options

log = logging.getLogger(__name__)


class Cancelled(Exception):
    """A video stopped on request (``predict_video``'s ``stop``) before its end; nothing of it
    was written."""


@dataclass
class OutputSpec:
    """Which outputs to write, where, and how to render them."""

    out_dir: Path
    kinds: list[OutputKind]
    options: RenderOptions
    jpeg_quality: int = 95
    video_ext: str = ".mp4"  # or .webm (seg.inference.media.VIDEO_FOURCC)

    def path(self, stem: str, kind: OutputKind, video: bool = False) -> Path:
        suffix, ext = SUFFIXES[kind]
        return self.out_dir / f"{stem}_{suffix}{self.video_ext if video else ext}"


def _read_batches(
    paths: list[Path], batch_size: int, policy: BadSamplePolicy, skipped: list[str]
) -> Iterator[tuple[list[Path], list[np.ndarray]]]:
    """(paths, RGB images) in batches of at most ``batch_size`` images and ``MAX_BATCH_PIXELS``
    pixels (sizes from the headers); unreadable files raise, or are logged and skipped."""
    for indices in pixel_batches([header_pixels(p) for p in paths], batch_size):
        batch: tuple[list[Path], list[np.ndarray]] = ([], [])
        for path in (paths[i] for i in indices):
            try:
                image = read_image(path)
            except BadSampleError as err:
                if policy is not BadSamplePolicy.skip:
                    raise
                log.warning("skipped %s", err)
                skipped.append(str(path))
                continue
            batch[0].append(path)
            batch[1].append(image)
        if batch[0]:
            yield batch


def predict_images(
    predictor: Predictor,
    paths: list[Path],
    spec: OutputSpec,
    batch_size: int = 8,
    on_bad_input: BadSamplePolicy = BadSamplePolicy.error,
    progress: bool = True,
) -> dict[str, Any]:
    """Predict ``paths`` in batches and write ``<stem>_<kind>.<ext>`` for every kind in ``spec``.

    Returns ``{"images": n, "written": [paths], "skipped": [unreadable files]}``. An unreadable
    image raises ``BadSampleError`` naming it (``on_bad_input=skip``: logged and counted).
    """
    written: list[str] = []
    skipped: list[str] = []
    done = 0
    with tqdm(total=len(paths), unit="img", desc="images", disable=not progress) as bar:
        for batch_paths, images in _read_batches(paths, batch_size, on_bad_input, skipped):
            preds = predictor.predictions(images)  # one full-size prediction at a time
            for path, image, pred in zip(batch_paths, images, preds, strict=True):
                for kind in spec.kinds:
                    out = render(kind, image, pred, spec.options)
                    written.append(
                        str(write_image(spec.path(path.stem, kind), out, spec.jpeg_quality))
                    )
            done += len(images)
            bar.update(len(batch_paths))
        bar.update(len(paths) - bar.n)  # skipped files
    return {"images": done, "written": written, "skipped": skipped}


def check_video_outputs(path: Path, kinds: list[OutputKind]) -> None:
    """Videos are mp4: there is no alpha channel for a cut-out."""
    if OutputKind.cutout in kinds:
        raise ConfigError(
            f"{path}: outputs=[cutout] needs an alpha channel, which mp4 videos lack; use "
            "replace (with background=COLOUR) or mask for videos"
        )


def predict_video(
    predictor: Predictor,
    path: Path,
    spec: OutputSpec,
    batch_size: int = 8,
    progress: bool = True,
    stop: threading.Event | None = None,
    temporal: TemporalOptions | None = None,
) -> dict[str, Any]:
    """Predict a video frame by frame in batches; one video ``<stem>_<kind><spec.video_ext>`` per
    kind (mp4v .mp4 or VP8 .webm). Once ``stop`` is set, the next batch raises
    :class:`Cancelled` instead (a server stopping: its videos end within a batch). With
    ``temporal``, the network's batches are steadied frame by frame, in order
    (``seg.inference.temporal``; the "steady" stage of the returned seconds).

    The outputs appear only once complete. Returns ``{"frames": n, "written": [paths],
    "seconds": {stage: s}}``, the wall time of each stage (decode, infer, render, encode). A
    video that decodes to fewer frames than its container reports (damaged, cut short) is
    written as far as it decodes, with a warning naming the file and both counts.
    """
    check_video_outputs(path, spec.kinds)
    capture, info = open_video(path)
    writers: list[tuple[OutputKind, VideoWriter]] = []
    frames = 0
    clock = StageClock()
    steady = TemporalFilter(temporal) if temporal is not None else None
    try:
        with tqdm(
            total=info.frames or None, unit="frame", desc=path.name, disable=not progress
        ) as bar:
            batches = frame_batches(capture, batch_size)
            while (images := clock.time("decode", next, batches, None)) is not None:
                if stop is not None and stop.is_set():
                    raise Cancelled(f"{path}: stopped after {frames} frames")
                if not writers:  # sized by the decoded frames, not the header (rotation)
                    size = images[0].shape[:2]
                    for kind in spec.kinds:
                        target = spec.path(path.stem, kind, video=True)
                        writers.append((kind, VideoWriter(target, info.fps, size)))
                predictions = clock.time("infer", predictor, images)
                for image, pred in zip(images, predictions, strict=True):
                    if steady is not None:
                        pred = clock.time("steady", steady, image, pred)
                    for kind, writer in writers:
                        frame = clock.time("render", render, kind, image, pred, spec.options)
                        clock.time("encode", writer.write, frame)
                frames += len(images)
                bar.update(len(images))
        if frames == 0:
            raise UnreadableVideo(
                f"{path}: corrupt or unreadable video (no frame could be decoded)"
            )
        if frames < info.frames:
            log.warning(
                "%s: the container reports %d frames, only %d could be decoded (damaged or cut "
                "short); the outputs hold those %d",
                path,
                info.frames,
                frames,
                frames,
            )
        written = [str(clock.time("encode", writer.commit)) for _, writer in writers]
    except BaseException:
        for _, writer in writers:
            writer.abort()
        raise
    finally:
        capture.release()
    return {"frames": frames, "written": written, "seconds": dict(clock.seconds)}


def build_output_spec(cfg: PredictConfig) -> OutputSpec:
    """The output half of ``cfg``: kinds, folder and render options."""
    options = RenderOptions(
        alpha=cfg.alpha,
        background=Background(cfg.background) if OutputKind.replace in cfg.outputs else None,
        blur_sigma=cfg.blur_sigma,
        overlay_colour=tuple(int(c) for c in cfg.overlay_colour),  # type: ignore[arg-type]
        overlay_opacity=cfg.overlay_opacity,
    )
    return OutputSpec(Path(cfg.out), list(cfg.outputs), options, cfg.jpeg_quality)


def run_predict(cfg: PredictConfig, model: nn.Module, train_cfg: Config) -> dict[str, Any]:
    """Predict ``cfg.input`` (image, folder or video) with ``model`` and write ``cfg.outputs``.

    ``train_cfg`` is the config the model was trained with (its eval size, mean and std).
    Returns ``{"images", "frames", "written", "skipped", "device", "backend"}``.
    """
    source = Path(cfg.input).expanduser()
    if source.is_dir() and source.resolve() == Path(cfg.out).expanduser().resolve():
        raise ConfigError(
            f"out={cfg.out!r} is the input folder: a second run would predict its own outputs; "
            "choose another folder (e.g. a subfolder)"
        )
    inputs = find_inputs(source)
    spec = build_output_spec(cfg)
    for video in inputs.videos:  # fail before any work is done
        check_video_outputs(video, spec.kinds)
    predictor = predictor_from_options(model, train_cfg, cfg)
    return _predict_all(cfg, predictor, inputs, spec)


def _predict_all(
    cfg: PredictConfig, predictor: Predictor, inputs: Inputs, spec: OutputSpec
) -> dict[str, Any]:
    backend = predictor.model.backend
    log.info(
        "predicting on %s with %s (tta %s, scales %s, sliding windows %s)",
        predictor.device,
        backend,
        [t.value for t in cfg.tta],
        list(cfg.scales),
        predictor.window,
    )
    summary = predict_images(
        predictor, inputs.images, spec, cfg.batch_size, cfg.on_bad_input, cfg.progress
    )
    summary.update(frames=0, device=str(predictor.device), backend=backend)
    for video in inputs.videos:
        try:
            result = predict_video(
                predictor, video, spec, cfg.batch_size, cfg.progress,
                temporal=temporal_options(cfg.temporal),
            )  # fmt: skip
        except UnreadableVideo as err:  # the skip policy holds for videos as for images
            if BadSamplePolicy(cfg.on_bad_input) is not BadSamplePolicy.skip:
                raise
            log.warning("skipped %s", err)
            summary["skipped"].append(str(video))
            continue
        summary["frames"] += result["frames"]
        summary["written"] += result["written"]
        for stage, seconds in result["seconds"].items():
            stages = summary.setdefault("video_seconds", {})
            stages[stage] = stages.get(stage, 0.0) + seconds
    return summary
