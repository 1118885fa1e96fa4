"""``scripts/export.py``: a checkpoint to an ONNX file, checked against PyTorch in ONNX Runtime
on real images before it takes its name. The graph, its metadata and the check itself live in
``seg.inference.graph`` (the ONNX Runtime backend of prediction and evaluation uses it too).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from seg.config import Config, ExportConfig
from seg.data.io import read_image
from seg.data.transforms import check_aug_config
from seg.errors import ConfigError, DataError
from seg.inference.cache import (
    EXPORT_KEY,
    export_key,
)
from seg.inference.graph import (
    AXES,
    INPUT_NAME,
    OUTPUT_NAME,
    ExportCheck,
    ExportMismatchError,
    LogitsOnly,
    compare_with_onnx,
    cpu_copy,
    export_onnx,
    image_batches,
    model_metadata,
)
from seg.inference.runtime import (
    onnx_session,
)

__all__ = [
    "AXES",
    "INPUT_NAME",
    "OUTPUT_NAME",
    "ExportCheck",
    "ExportMismatchError",
    "LogitsOnly",
    "check_out",
    "compare_with_onnx",
    "cpu_copy",
    "export_onnx",
    "image_batches",
    "model_metadata",
    "onnx_session",
    "read_images",
    "run_export",
]


def check_out(out: Path, checkpoint: Path) -> None:
    """Refuse an ``out`` that could overwrite a checkpoint: it must name an ``.onnx`` file,
    and not the checkpoint itself under another spelling (a link, ``..``, a relative path)."""
    if out.suffix.lower() != ".onnx":
        raise ConfigError(f"out={str(out)!r}: expected the name of an .onnx file")
    if out.exists() and checkpoint.exists() and out.resolve() == checkpoint.resolve():
        raise ConfigError(f"out={str(out)!r} is the checkpoint {checkpoint}: choose another file")


def read_images(paths: Sequence[Path]) -> list[np.ndarray]:
    """uint8 RGB images; an unreadable one raises ``BadSampleError`` naming it."""
    return [read_image(Path(p)) for p in paths]


def _verification_images(cfg: ExportConfig) -> list[np.ndarray]:
    if cfg.images is None:
        rng = np.random.default_rng(0)
        return [rng.integers(0, 256, (480, 360, 3), dtype=np.uint8) for _ in range(2)]
    from seg.inference.media import find_inputs

    paths = find_inputs(Path(cfg.images)).images[: cfg.max_images]
    if not paths:
        raise DataError(f"images={cfg.images!r} holds no image to verify the export on")
    return read_images(paths)


def run_export(cfg: ExportConfig, model: nn.Module, train_cfg: Config) -> dict[str, Any]:
    """Export ``model`` to ``cfg.out`` and, with ``cfg.verify``, check it in ONNX Runtime.

    Returns ``{"path", "max_abs_diff", "mask_agreement", "cases"}`` (no figures without
    verify). The file is written as ``<stem>.unverified.onnx`` and takes its name only once the
    check passes; when the figures miss ``cfg.tolerance`` or ``cfg.min_agreement``,
    :class:`ExportMismatchError` gives them and the unverified file stays for inspection
    (an earlier file at ``cfg.out`` is left as it was).
    """
    eval_size = check_aug_config(train_cfg.aug).eval_size
    final = Path(cfg.out)
    check_out(final, Path(cfg.checkpoint))
    path = final.with_name(f"{final.stem}.unverified{final.suffix}")
    metadata = model_metadata(model, train_cfg)
    if Path(cfg.checkpoint).is_file():  # names the checkpoint it was made from
        metadata[EXPORT_KEY] = export_key(Path(cfg.checkpoint), cfg.opset)
    export_onnx(model, path, eval_size, cfg.opset, metadata)
    result: dict[str, Any] = {"path": str(final)}
    if not cfg.verify:
        os.replace(path, final)
        return result
    sizes = cfg.sizes or [list(eval_size), [round(s * 1.25) | 1 for s in eval_size]]
    batches = image_batches(_verification_images(cfg), train_cfg.aug, sizes, cfg.batch_sizes)
    check = compare_with_onnx(model, onnx_session(path), batches)
    result.update(dataclasses.asdict(check))
    if not check.ok(cfg.tolerance, cfg.min_agreement):
        raise ExportMismatchError(
            f"{path}: ONNX Runtime disagrees with PyTorch: max |logit diff| "
            f"{check.max_abs_diff:.3g} (tolerance {cfg.tolerance:g}), mask agreement "
            f"{check.mask_agreement:.5f} (minimum {cfg.min_agreement:g}); cases {check.cases}. "
            f"Kept for inspection; {final} was not written"
        )
    os.replace(path, final)
    return result
