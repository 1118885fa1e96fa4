"""Scoring clips frame by frame (``evaluate.py clips=<folder>``): per-frame prediction and
the temporal mode in one pass over the frames, the network run once per frame.

A clip is a folder of frames (``frames/``, or any images in it) with ``masks/`` beside them
(paired by file stem; 0 background, anything else person; a missing masks folder means a
clip without labels, scored by the flow-based figures only) and, for the generated clips, a
``clip.json`` naming its kind and the frames that start a new scene; or a video file with a
masks folder of one mask per frame. A folder of clip folders (a clip set of
``scripts/make_clips.py``) is scored clip by clip and summed per kind.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seg.checkpoint import checkpoint_file
from seg.config import EvalConfig
from seg.data.io import read_image, read_mask_array
from seg.data.manifest import sha256_file
from seg.errors import DataError, MissingFileError
from seg.evaluation.report import json_safe
from seg.evaluation.scoring import default_out_dir
from seg.fileio import write_json, write_text
from seg.inference.backend import load_for
from seg.inference.media import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, frame_batches, open_video
from seg.inference.predictor import Predictor, predictor_from_options
from seg.inference.temporal import TemporalFilter, TemporalOptions
from seg.metrics.temporal import ClipMeter, Motion, TemporalCounts

log = logging.getLogger(__name__)

PER_FRAME = "per-frame"


@dataclass(frozen=True)
class ClipSource:
    """One clip: its frames (image files, or a video), its masks folder (None: no labels),
    its kind and the frames that start a new scene (None: unknown, found from the frames)."""

    name: str
    frames: tuple[Path, ...] | Path
    masks: Path | None
    kind: str = "video"
    cuts: tuple[int, ...] | None = None


def find_clips(path: Path, masks: Path | None = None) -> list[ClipSource]:
    """The clips under ``path``: a video file (``masks``: its mask folder), a clip folder, or
    a folder of clip folders."""
    if not path.exists():
        raise MissingFileError(f"clips={path} does not exist")
    if path.is_file():
        if path.suffix.lower() not in VIDEO_EXTENSIONS:
            raise DataError(f"clips={path}: a video ({list(VIDEO_EXTENSIONS)}) or a folder")
        return [ClipSource(path.stem, path, masks)]
    if (path / "frames").is_dir() or _images(path):
        return [_clip_folder(path, masks)]
    found = [_clip_folder(sub, None) for sub in sorted(path.iterdir()) if sub.is_dir()]
    if not found:
        raise DataError(f"clips={path}: no frames/ folder, images or clip folders in it")
    return found


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)


def _clip_folder(folder: Path, masks: Path | None) -> ClipSource:
    frames_dir = folder / "frames" if (folder / "frames").is_dir() else folder
    frames = _images(frames_dir)
    if not frames:
        raise DataError(f"{frames_dir}: no frames ({list(IMAGE_EXTENSIONS)})")
    info_path = folder / "clip.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    masks = masks or (folder / "masks" if (folder / "masks").is_dir() else None)
    cuts = tuple(info["cuts"]) if "cuts" in info else None
    return ClipSource(folder.name, tuple(frames), masks, info.get("kind", "video"), cuts)


def _truth(
    masks: Path | None, stem: str, index: int, size_hw: tuple[int, int]
) -> np.ndarray | None:
    if masks is None:
        return None
    candidates = [masks / f"{stem}.png", masks / f"{index:05d}.png"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise MissingFileError(f"missing mask: expected {candidates[0]} (frame {index})")
    mask = read_mask_array(path)
    if mask.shape != size_hw:
        raise DataError(f"{path}: mask of size {mask.shape} for a frame of size {size_hw}")
    return (mask > 0).astype(np.uint8)


def clip_frames(clip: ClipSource, batch_size: int) -> Iterator[list[tuple[np.ndarray, str]]]:
    """The clip's frames in order, in batches: (uint8 RGB, stem)."""
    if isinstance(clip.frames, Path):
        capture, _ = open_video(clip.frames)
        try:
            index = 0
            for batch in frame_batches(capture, batch_size):
                yield [(f, f"{index + i:05d}") for i, f in enumerate(batch)]
                index += len(batch)
        finally:
            capture.release()
        return
    for start in range(0, len(clip.frames), batch_size):
        paths = clip.frames[start : start + batch_size]
        yield [(read_image(p), p.stem) for p in paths]


def score_clip(
    predictor: Predictor,
    clip: ClipSource,
    modes: Mapping[str, TemporalOptions | None],
    batch_size: int = 8,
) -> dict[str, TemporalCounts]:
    """Each mode's counts on ``clip`` (None: per-frame prediction)."""
    filters = {m: TemporalFilter(o) if o is not None else None for m, o in modes.items()}
    meters = {m: ClipMeter() for m in modes}
    motion = Motion()  # the frames' flow, computed once for every mode and meter
    index = 0
    for batch in clip_frames(clip, batch_size):
        predictions = predictor([f for f, _ in batch])
        for (frame, stem), pred in zip(batch, predictions, strict=True):
            truth = _truth(clip.masks, stem, index, frame.shape[:2])
            cut = None if clip.cuts is None else index in clip.cuts
            field = motion.step(frame)
            for mode, temporal in filters.items():
                out = temporal(frame, pred, field) if temporal is not None else pred
                meters[mode].update(frame, out.mask, truth, cut, field)
            index += 1
    return {m: meter.counts for m, meter in meters.items()}


def score_clips(
    predictor: Predictor,
    clips: list[ClipSource],
    modes: Mapping[str, TemporalOptions | None],
    batch_size: int = 8,
) -> dict[str, dict[str, TemporalCounts]]:
    """``{mode: {kind: counts, ..., "all": counts}}`` summed over ``clips``."""
    totals: dict[str, dict[str, TemporalCounts]] = {m: {} for m in modes}
    for clip in clips:
        for mode, counts in score_clip(predictor, clip, modes, batch_size).items():
            totals[mode].setdefault(clip.kind, TemporalCounts()).merge_(counts)
            totals[mode].setdefault("all", TemporalCounts()).merge_(counts)
    return totals


def clip_table(modes: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """The printed table: a row per kind of clip (and all), per mode; figures in %."""
    head = (
        f"{'kind':10s} {'mode':10s} {'frames':>6s} {'flicker':>8s} {'unexpl.':>8s} "
        f"{'TC IoU':>7s} {'IoU':>6s} {'fast':>6s} {'n fast':>6s} {'cut':>6s}"
    )
    lines = [head, "-" * len(head)]
    kinds = sorted({k for per_kind in modes.values() for k in per_kind}, key=lambda k: k == "all")
    for kind in kinds:
        for mode, per_kind in modes.items():
            f = per_kind.get(kind)
            if f is None:
                continue
            lines.append(
                f"{kind:10s} {mode:10s} {f['frames']:6d} {_pct(f['flicker'], 3):>8s} "
                f"{_pct(f['unexplained'], 3):>8s} {_pct(f['tc_iou'], 2):>7s} "
                f"{_pct(f['iou'], 2):>6s} {_pct(f['iou_fast'], 2):>6s} {f['fast_frames']:6d} "
                f"{_pct(f['iou_after_cut'], 2):>6s}"
            )
    return "\n".join(lines)


def _pct(value: float | None, digits: int) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{100 * value:.{digits}f}"


def run_clip_evaluation(cfg: EvalConfig) -> dict[str, Any]:
    """``evaluate.py clips=...``: per-frame prediction and the temporal mode (``temporal.*``,
    whether or not ``temporal.enabled``) on the clips; writes ``metrics.json`` and
    ``report.txt`` into ``out`` (default ``<run>/eval/clips_<folder name>``)."""
    assert cfg.clips is not None
    checkpoint = checkpoint_file(cfg.checkpoint)
    clips = find_clips(
        Path(cfg.clips).expanduser(), Path(cfg.clip_masks).expanduser() if cfg.clip_masks else None
    )
    model, train_cfg = load_for(dataclasses.replace(cfg, checkpoint=str(checkpoint)))
    predictor = predictor_from_options(model, train_cfg, cfg)
    t = cfg.temporal
    modes = {
        PER_FRAME: None,
        "temporal": TemporalOptions(t.blend, t.hysteresis, t.occlusion, t.cut),
    }
    log.info("scoring %d clip(s) of %s, per frame and with the temporal mode %s", len(clips),
             cfg.clips, modes["temporal"])  # fmt: skip
    started = time.perf_counter()
    totals = score_clips(predictor, clips, modes, cfg.batch_size)
    seconds = time.perf_counter() - started
    figures = {m: {k: c.summary() for k, c in per_kind.items()} for m, per_kind in totals.items()}
    name = Path(cfg.clips).name
    out = Path(cfg.out) if cfg.out else default_out_dir(checkpoint, "clips", name)
    result = {
        "checkpoint": str(checkpoint),
        "sha256": sha256_file(checkpoint),
        "clips": str(Path(cfg.clips).expanduser().absolute()),
        "eval_size": list(train_cfg.aug.eval_size),
        "backend": predictor.model.backend,
        "temporal": dataclasses.asdict(t),
        "modes": figures,
        "timing_s": {"total": round(seconds, 1)},
    }
    table = clip_table(figures)
    write_json(out / "metrics.json", json_safe(result))
    write_text(out / "report.txt", table + "\n")
    return {**result, "out_dir": str(out), "table": table}
