"""Choosing and loading what runs the network for prediction and evaluation: eager PyTorch
(the deploy-time model: batch norm folded, auxiliary heads dropped) or ONNX Runtime (the
checkpoint's cached, checked export). ``backend=auto`` takes ONNX Runtime on a CPU, where it
is the faster of the two (docs/benchmarks.md, "Inference backends"), and PyTorch on a GPU or
Apple MPS, and wherever columns are split over devices."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from seg.checkpoint import checkpoint_file, load_model_from_checkpoint
from seg.config import Backend, Config, InferenceOptions, InferencePrecision
from seg.devices import resolve_devices, warn_if_emulated_bf16
from seg.errors import ConfigError
from seg.inference.cache import runtime_model
from seg.models.deploy import AutocastModel, deploy_model
from seg.zoo import is_shipped

log = logging.getLogger(__name__)
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")  # the [export] extra
HALF = {InferencePrecision.bf16: torch.bfloat16, InferencePrecision.fp16: torch.float16}


def missing_onnx_packages() -> list[str]:
    return [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]


def choose_backend(
    backend: Backend | str,
    device: str = "auto",
    column_devices: Sequence[str] = (),
    precision: InferencePrecision | str = InferencePrecision.fp32,
) -> Backend:
    """``auto`` -> ``onnxruntime`` when the model runs whole on a CPU and the ``[export]``
    extra is installed, else ``torch``; an explicit choice is checked against the devices.
    ``precision=int8`` runs in ONNX Runtime only, ``bf16`` and ``fp16`` in eager PyTorch only
    (``auto`` takes the one that runs it)."""
    backend = Backend(backend)
    precision = InferencePrecision(precision)
    if precision is InferencePrecision.int8:
        if backend is Backend.torch:
            raise ConfigError(
                "precision=int8 runs in ONNX Runtime: use backend=onnxruntime (or auto)"
            )
        backend = Backend.onnxruntime
    if precision in HALF:
        if backend is Backend.onnxruntime:
            raise ConfigError(
                f"precision={precision.value} runs in eager PyTorch (autocast): use "
                "backend=torch (or auto)"
            )
        _check_half(precision, column_devices or [device])
        return Backend.torch
    if backend is Backend.torch:
        return backend
    on_cpu = not column_devices and resolve_devices(device, 1, mps=True)[0].type == "cpu"
    missing = missing_onnx_packages()
    if backend is Backend.onnxruntime:
        if column_devices:
            raise ConfigError("column_devices splits the model over devices: use backend=torch")
        if missing:
            raise ConfigError(
                f"backend=onnxruntime needs {', '.join(missing)}: pip install -e '.[export]'"
            )
        return backend
    if on_cpu and not missing:
        return Backend.onnxruntime
    if on_cpu:
        log.info("backend=auto: eager PyTorch (%s not installed)", ", ".join(missing))
    return Backend.torch


def _check_half(precision: InferencePrecision, spec: Sequence[str]) -> None:
    """fp16 needs a GPU; bf16 on a CPU without bf16 units is emulated (correct, but slow)."""
    devices = resolve_devices(list(spec), len(spec), mps=True)
    kind = devices[0].type
    if precision is InferencePrecision.fp16 and kind == "cpu":
        raise ConfigError(
            "precision=fp16 runs on a GPU (CUDA or MPS); on a CPU use precision=bf16 (CPUs with "
            "AVX512-BF16 or AMX), int8 or fp32"
        )
    if precision is InferencePrecision.bf16:
        warn_if_emulated_bf16(devices[0], "precision=bf16", "precision=fp32 or int8")


def load_inference_model(
    checkpoint: str | Path,
    backend: Backend | str = Backend.auto,
    device: str = "auto",
    column_devices: Sequence[str] = (),
    threads: int = 0,
    precision: InferencePrecision | str = InferencePrecision.fp32,
    calibration: str | None = None,
) -> tuple[Any, Config]:
    """``(model, training config)`` of a checkpoint (a file or a run folder), ready for
    ``build_predictor`` (which places it on ``device``):
    the deploy-time PyTorch model (under bf16 or fp16 autocast for those precisions) or an
    :class:`OnnxRuntimeModel` (fp32, or int8 calibrated on the training photos or the folder
    ``calibration``: ``seg.inference.quantize``).
    ``threads`` > 0 sets the CPU threads of either backend."""
    path = checkpoint_file(checkpoint)
    precision = InferencePrecision(precision)
    if precision is InferencePrecision.int8 and calibration is None and is_shipped(path):
        raise ConfigError(
            f"precision=int8 with the shipped model {path.stem} needs calibration=<a folder of "
            "your photos> to quantise on: it ships without its training photos"
        )
    chosen = choose_backend(backend, device, column_devices, precision)
    model, cfg = load_model_from_checkpoint(path, device="cpu")
    if chosen is Backend.onnxruntime:  # it owns its threads (seg.inference.runtime)
        return runtime_model(path, model, cfg, precision, calibration, threads), cfg
    if threads > 0:
        torch.set_num_threads(threads)
    deployed = deploy_model(model)
    dtype = HALF.get(precision)
    return (deployed if dtype is None else AutocastModel(deployed, dtype)), cfg


def load_for(cfg: InferenceOptions) -> tuple[Any, Config]:
    """:func:`load_inference_model` with the options of ``evaluate.py``, ``predict.py`` or
    ``demo.py``."""
    return load_inference_model(
        cfg.checkpoint,
        cfg.backend,
        cfg.device,
        cfg.column_devices,
        cfg.threads,
        cfg.precision,
        cfg.calibration,
    )
