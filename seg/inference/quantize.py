"""int8 inference through ONNX Runtime: a checkpoint's checked fp32 export, quantised with
static calibration on real photos (``precision=int8`` of ``predict.py`` and ``evaluate.py``).

ONNX Runtime's ``quantize_static`` in QDQ format: weights int8 per output channel, activations
uint8 per tensor (the U8S8 pair its x86 kernels are fastest with), ranges from min/max over the
calibration photos sent through the eval preset at the eval size. The calibration photos are
the training photos of the checkpoint's own data config (its train split: never a test image),
``CALIBRATION_PHOTOS`` of them spread evenly over the listing, or the images of a folder
(``calibration=<folder>``) where the training data is not at hand.

The weights' range follows the CPU, so that the integer kernels compute the quantised model
exactly on both kinds of x86 CPU (issue 25). With VNNI (``vpdpbusd``, 32-bit sums) ONNX
Runtime's uint8 x int8 kernels are exact with all 8 bits of the weights (``U8S8``). Without it
(AVX2, AVX-512 before VNNI) those kernels use ``vpmaddubsw``, which adds each pair of products
in 16 bits and saturates (2 x 255 x 127 = 64770 > 32767): a trained model's int8 file agreed
with PyTorch on 0.9807 of the pixels there against 0.9964 in exact arithmetic, the tests'
random net on 0.86. There the weights keep 7 bits (``U8S8_7BIT``, ONNX Runtime's
``reduce_range``: within +-64, so every pair stays within 2 x 255 x 64 = 32640), as ONNX
Runtime's quantisation guide recommends for such CPUs: exact, for 0.1-0.5 points of test IoU
(uint8 weights, exact too, ran 5-7x slower than fp32 there; docs/benchmarks.md). Each kind of
CPU makes and caches its own file (the settings are part of its name), so a run folder that
moves between machines never runs a file made for the other kind.

The int8 file (``seg.inference.cache.cached_int8``) is cached beside the fp32 export as
``<stem>.<key>.int8.<digest>.onnx``: the key is the fp32 export's (the checkpoint's content and
the exporter), ``digest`` one of the quantisation settings (``int8_settings``) and the
calibration files' names and sizes. Both are in its metadata too (``seg.export_key``, kept from
the fp32 file, and ``seg.int8``) and checked on every use, as the fp32 export's key is: a file
of another checkpoint or calibration under this name (copied, swapped) is replaced, never run.
Before it takes its name it must agree with PyTorch on the argmax of ``INT8_MIN_AGREEMENT`` of
the calibration photos' pixels; its accuracy on the test splits is measured in
docs/benchmarks.md ("int8")."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from seg.config import DataConfig
from seg.data import list_source, train_source_names
from seg.devices import cpu_has_vnni, x86_cpu
from seg.errors import ConfigError, DataError
from seg.fileio import temp_beside
from seg.inference.graph import INPUT_NAME
from seg.inference.media import IMAGE_EXTENSIONS

log = logging.getLogger(__name__)

CALIBRATION_PHOTOS = 64
INT8_MIN_AGREEMENT = 0.98  # argmax agreement with PyTorch on the calibration photos


@dataclass(frozen=True)
class Int8Settings:
    """How one kind of CPU gets its int8 file (weights int8 per output channel, activations
    uint8): the weights' range, and a name for the cache file."""

    name: str
    reduce_range: bool  # 7-bit weights (within +-64)


U8S8 = Int8Settings("qdq-u8s8-per-channel", reduce_range=False)  # x86 with VNNI, other CPUs
U8S8_7BIT = Int8Settings("qdq-u8s8-per-channel-w7", reduce_range=True)  # x86 without VNNI


def int8_settings(x86: bool | None = None, vnni: bool | None = None) -> Int8Settings:
    """The settings for this CPU (or the one described): ``U8S8_7BIT`` on x86 without VNNI,
    where uint8 x int8 kernels saturate with 8-bit weights, ``U8S8`` elsewhere (module
    docstring)."""
    x86 = x86_cpu() if x86 is None else x86
    vnni = cpu_has_vnni() if vnni is None else vnni
    return U8S8_7BIT if x86 and not vnni else U8S8


def training_photos(data: DataConfig, count: int = CALIBRATION_PHOTOS) -> list[Path]:
    """``count`` image files of the train split of ``data``'s training sources, spread evenly
    over them in listing order (the same files every time)."""
    sources = train_source_names(data)
    local = dataclasses.replace(data, download=False)  # never a download to calibrate
    try:
        refs = [ref for name in sources for ref in list_source(local, name).split_refs("train")]
    except (OSError, ValueError, RuntimeError) as err:
        raise ConfigError(
            f"precision=int8 calibrates on the checkpoint's training photos ({', '.join(sources)}, "
            f"train split), which could not be listed: {err}. Point SEG_DATA_DIR (or data.root) "
            "at the datasets, or give calibration=<a folder of photos like yours>"
        ) from err
    return _spread([ref.image for ref in refs], count)


def folder_photos(folder: str | Path, count: int = CALIBRATION_PHOTOS) -> list[Path]:
    """Up to ``count`` images of ``folder`` (sorted by name, spread evenly)."""
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"calibration={folder}: not a folder (expected a folder of photos)")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise DataError(f"calibration={folder}: no images ({', '.join(IMAGE_EXTENSIONS)})")
    return _spread(files, count)


def _spread(files: Sequence[Path], count: int) -> list[Path]:
    if len(files) <= count:
        return list(files)
    return [files[(i * len(files)) // count] for i in range(count)]


def calibration_digest(files: Sequence[Path], settings: Int8Settings) -> str:
    """8 hex digits naming an int8 file's making: the quantisation ``settings`` and the
    calibration files' names and sizes, in order."""
    digest = hashlib.sha256(f"{settings.name}\n".encode())
    for f in files:
        digest.update(f"{Path(f).name} {Path(f).stat().st_size}\n".encode())
    return digest.hexdigest()[:8]


class _Reader:
    """ONNX Runtime's ``CalibrationDataReader`` interface over a list of batches."""

    def __init__(self, batches: Sequence[Tensor]) -> None:
        self.batches: Iterator[Tensor] = iter(batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        batch = next(self.batches, None)
        return None if batch is None else {INPUT_NAME: batch.numpy()}


def quantize_int8(
    fp32: Path, out: Path, batches: Sequence[Tensor], settings: Int8Settings | None = None
) -> Path:
    """Static int8 quantisation of the ONNX file ``fp32`` into ``out`` (QDQ, weights int8 per
    output channel in ``settings``' range, this CPU's by default; activations uint8),
    calibrated with min/max over ``batches``."""
    settings = settings or int8_settings()
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(_Reader, CalibrationDataReader):
        pass

    prepared = temp_beside(out)  # its own name: processes may quantise the same model at once
    try:
        quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=True)
        quantize_static(
            str(prepared),
            str(out),
            Reader(batches),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            reduce_range=settings.reduce_range,
        )
    finally:
        prepared.unlink(missing_ok=True)
    return out


def int8_ops(path: Path) -> dict[str, Any]:
    """Counts of the quantisation ops in an ONNX file (``QuantizeLinear``, ...)."""
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path)).graph.node:
        if "quantize" in node.op_type.lower() or node.op_type.startswith("QLinear"):
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
