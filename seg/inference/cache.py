"""The graph file of a checkpoint, for a precision and a calibration: one function,
:func:`graph_file`, owns its name (a key of the checkpoint's content and the exporter), the
check of the metadata of a file found under that name, the sweep of stale files and the
rebuild (the int8 file is derived from the fp32 one here). :func:`runtime_model` opens it,
making it again once when outside damage made it unreadable. A retrained checkpoint never runs
a stale graph, another checkpoint's file under this name is never run.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
from pathlib import Path

import numpy as np
import torch
from torch import nn

from seg.config import Config, InferencePrecision
from seg.data.io import read_image
from seg.data.transforms import check_aug_config
from seg.fileio import temp_beside
from seg.inference import graph, quantize
from seg.inference.graph import (
    CHECK_MIN_AGREEMENT,
    CHECK_TOLERANCE,
    ExportMismatchError,
    compare_with_onnx,
    image_batches,
    model_metadata,
)
from seg.inference.runtime import OnnxRuntimeModel, UnreadableOnnxError, onnx_session
from seg.zoo import is_shipped

log = logging.getLogger(__name__)

EXPORT_FORMAT = "seg-onnx-1"  # bump when the export procedure changes: old cached files go stale


# The metadata key of an export that names the checkpoint it was made from (its export_key).
EXPORT_KEY = "seg.export_key"


def stored_metadata(path: Path) -> dict[str, str] | None:
    """An ONNX file's metadata (``seg.*`` keys among them), None when the file cannot be
    parsed (read without its weights' external data)."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False)
    except Exception:  # onnx raises several kinds on damaged bytes
        return None
    return {p.key: p.value for p in graph.metadata_props}


def stored_export_key(path: Path) -> str | None:
    """The ``seg.export_key`` an ONNX file's metadata holds ("" when it has none), None when
    the file cannot be parsed."""
    metadata = stored_metadata(path)
    return None if metadata is None else metadata.get(EXPORT_KEY, "")


def export_key(checkpoint: Path, opset: int | None = None) -> str:
    """16 hex digits of the SHA-256 of the checkpoint's bytes and of what shapes the graph
    (this format, torch's version, the opset): a retrained checkpoint or a new exporter gets a
    new file, an unchanged one reuses its export."""
    digest = hashlib.sha256(f"{EXPORT_FORMAT} torch {torch.__version__} {opset}\n".encode())
    with open(checkpoint, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


# A folder we may not write to: no permission (EACCES, EPERM; not raised for root) or a
# read-only mount (EROFS, raised for root too).
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def cache_dir() -> Path:
    """Where exports go when the checkpoint's folder is read-only, and always for a shipped
    model (never written into the installed package)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "humanseg" / "onnx"


def export_folders(checkpoint: Path) -> tuple[Path, ...]:
    """Where a checkpoint's graph files are looked for and written, in that order: beside it,
    then :func:`cache_dir`; a shipped model's only in :func:`cache_dir`."""
    return (cache_dir(),) if is_shipped(checkpoint) else (checkpoint.parent, cache_dir())


def cached_export(
    checkpoint: Path, model: nn.Module, cfg: Config, opset: int | None = None
) -> Path:
    """The ONNX file of ``checkpoint`` (whose ``model`` and training ``cfg`` are given):
    ``<checkpoint stem>.<key>.onnx`` beside it (or in :func:`cache_dir` where that folder is
    read-only), exported, checked against PyTorch and written atomically the first time, reused
    while the key holds (:func:`export_key`). Older exports of the same checkpoint name are
    removed when a new one is written."""
    key = export_key(checkpoint, opset)
    name = f"{checkpoint.stem}.{key}.onnx"
    for folder in export_folders(checkpoint):
        path = folder / name
        if not path.is_file():
            continue
        stored = stored_export_key(path)
        if stored == key:
            return path
        if stored is not None:  # readable, but of another checkpoint: never run it
            log.warning(
                "%s is not the export of %s (its metadata says seg.export_key=%s, expected %s): "
                "exporting it again",
                path,
                checkpoint,
                stored or "none",
                key,
            )
            path.unlink(missing_ok=True)
        else:  # unreadable: ONNX Runtime names it and load_inference_model exports it again
            return path
    for folder in export_folders(checkpoint):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return _export_checked(model, cfg, folder / name, checkpoint, opset)
        except OSError as err:
            if err.errno not in _NOT_WRITABLE:
                raise
            log.warning(
                "cannot write the ONNX export beside the checkpoint (%s); using %s",
                err,
                cache_dir(),
            )
    folders = ", ".join(str(f) for f in export_folders(checkpoint))
    raise PermissionError(f"no writable folder for {name}: {folders}")


def _export_checked(
    model: nn.Module, cfg: Config, path: Path, checkpoint: Path, opset: int | None
) -> Path:
    eval_size = check_aug_config(cfg.aug).eval_size
    log.info("exporting %s to %s for ONNX Runtime (once per checkpoint)", checkpoint, path)
    tmp = temp_beside(path)  # its own name: torchrun's ranks may export the same file at once
    metadata = {**model_metadata(model, cfg), EXPORT_KEY: export_key(checkpoint, opset)}
    graph.export_onnx(model, tmp, eval_size, opset, metadata)
    try:
        # A graph check on seeded random photos at the eval size and an odd larger size, as
        # scripts/export.py's default check.
        rng = np.random.default_rng(0)
        photos = [rng.integers(0, 256, (*eval_size, 3), dtype=np.uint8) for _ in range(2)]
        sizes = [list(eval_size), [round(s * 1.25) | 1 for s in eval_size]]
        batches = image_batches(photos, cfg.aug, sizes, [2, 1])
        check = compare_with_onnx(model, onnx_session(tmp), batches)
        if not check.ok(CHECK_TOLERANCE, CHECK_MIN_AGREEMENT):
            raise ExportMismatchError(
                f"the ONNX export of {checkpoint} disagrees with PyTorch: max |logit diff| "
                f"{check.max_abs_diff:.3g}, mask agreement {check.mask_agreement:.5f}; "
                "run with backend=torch"
            )
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    remove_stale(path, checkpoint, r"\.onnx")
    return path


def remove_stale(path: Path, checkpoint: Path, suffix: str) -> None:
    """Remove the files beside ``checkpoint`` made from older versions of it: names
    ``<checkpoint stem>.<16 hex key><suffix>`` (``suffix`` a regular expression) whose key is
    not ``path``'s (just written, named the same way). Nothing is removed where ``path`` is not
    beside the checkpoint: the shared cache holds every run's ``best.pt``."""
    if path.parent != checkpoint.parent:
        return
    files = re.compile(rf"{re.escape(checkpoint.stem)}\.([0-9a-f]{{16}}){suffix}")
    current = files.fullmatch(path.name)
    if current is None:
        raise ValueError(f"{path.name} is not named <{checkpoint.stem}>.<key>{suffix}")
    for old in path.parent.iterdir():
        match = files.fullmatch(old.name)
        if match and match.group(1) != current.group(1):
            old.unlink(missing_ok=True)


INT8_KEY = "seg.int8"  # metadata: the calibration digest of the int8 file's name


def cached_int8(
    checkpoint: Path,
    model: nn.Module,
    cfg: Config,
    calibration: str | None = None,
    min_agreement: float = quantize.INT8_MIN_AGREEMENT,
) -> Path:
    """The int8 ONNX file of ``checkpoint`` (see the module docstring): made and checked the
    first time (argmax agreement with PyTorch >= ``min_agreement`` on the calibration photos),
    reused after. ``calibration``: a folder of photos, or None for the training photos of
    ``cfg.data``."""
    fp32 = cached_export(checkpoint, model, cfg)
    files = (
        quantize.folder_photos(calibration) if calibration else quantize.training_photos(cfg.data)
    )
    settings = quantize.int8_settings()
    digest = quantize.calibration_digest(files, settings)
    path = fp32.with_name(f"{fp32.stem}.int8.{digest}.onnx")
    if path.is_file():
        expected = {EXPORT_KEY: export_key(checkpoint), INT8_KEY: digest}
        stored = stored_metadata(path)
        if stored is None:  # unreadable: ONNX Runtime names it, load_inference_model redoes it
            return path
        found = {k: stored.get(k, "none") for k in expected}
        if found == expected:
            return path
        log.warning(
            "%s is not the int8 model of %s with these calibration photos (its metadata says "
            "%s, expected %s): quantising it again",
            path,
            checkpoint,
            found,
            expected,
        )
        path.unlink(missing_ok=True)
    log.info("quantising %s to int8 with %d calibration photos", fp32.name, len(files))
    size = check_aug_config(cfg.aug).eval_size
    photos = [read_image(f) for f in files]
    batches = image_batches(photos, cfg.aug, [size] * len(photos), [1] * len(photos))
    tmp = temp_beside(path)
    try:
        quantize.quantize_int8(fp32, tmp, batches, settings)
        _add_metadata(tmp, {INT8_KEY: digest})
        check = compare_with_onnx(model, onnx_session(tmp), batches)
        if check.mask_agreement < min_agreement:
            raise ExportMismatchError(
                f"the int8 model of {checkpoint} agrees with PyTorch on {check.mask_agreement:.4f} "
                f"of the calibration photos' pixels (at least {min_agreement} expected); "
                "use precision=fp32"
            )
        log.info(
            "int8 model agrees with PyTorch on %.4f of the calibration photos' pixels",
            check.mask_agreement,
        )
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    remove_stale(path, checkpoint, r"\.int8\.[0-9a-f]{8}\.onnx")  # other calibrations stay
    return path


def _add_metadata(path: Path, values: dict[str, str]) -> None:
    """Add ``values`` to the metadata of the ONNX file ``path`` (rewritten in place: a
    temporary file not yet under its final name)."""
    import onnx

    graph = onnx.load(str(path))
    onnx.helper.set_model_props(graph, {**{p.key: p.value for p in graph.metadata_props}, **values})
    onnx.save(graph, str(path))


def graph_file(
    checkpoint: Path,
    model: nn.Module,
    cfg: Config,
    precision: InferencePrecision = InferencePrecision.fp32,
    calibration: str | None = None,
) -> Path:
    """The graph file of ``checkpoint`` (whose ``model`` and training ``cfg`` are given) for
    ``precision`` (fp32, or int8 calibrated on ``calibration``'s photos: None, the training
    photos), found in the cache or made now (module docstring)."""
    if InferencePrecision(precision) is InferencePrecision.int8:
        return cached_int8(checkpoint, model, cfg, calibration)
    return cached_export(checkpoint, model, cfg)


def runtime_model(
    checkpoint: Path,
    model: nn.Module,
    cfg: Config,
    precision: InferencePrecision = InferencePrecision.fp32,
    calibration: str | None = None,
    threads: int = 0,
) -> OnnxRuntimeModel:
    """:func:`graph_file` in ONNX Runtime (``threads``: its intra-op threads, 0 its default).
    A cached file that ONNX Runtime cannot parse (written atomically, so only outside damage
    gets here) is deleted and made again, once."""
    path = graph_file(checkpoint, model, cfg, precision, calibration)
    try:
        return OnnxRuntimeModel(path, threads)
    except UnreadableOnnxError as err:
        log.warning("%s: exporting it again", err)
        path.unlink(missing_ok=True)
    return OnnxRuntimeModel(graph_file(checkpoint, model, cfg, precision, calibration), threads)
