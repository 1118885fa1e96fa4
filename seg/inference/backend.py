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
from seg.config import Backend, Config
from seg.devices import resolve_devices
from seg.inference.onnx import OnnxRuntimeModel, cached_export
from seg.models.deploy import deploy_model

log = logging.getLogger(__name__)
ONNX_PACKAGES = ("onnx", "onnxscript", "onnxruntime")  # the [export] extra


def missing_onnx_packages() -> list[str]:
    return [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None]


def choose_backend(
    backend: Backend | str, device: str = "auto", column_devices: Sequence[str] = ()
) -> Backend:
    """``auto`` -> ``onnxruntime`` when the model runs whole on a CPU and the ``[export]``
    extra is installed, else ``torch``; an explicit choice is checked against the devices."""
    backend = Backend(backend)
    if backend is Backend.torch:
        return backend
    on_cpu = not column_devices and resolve_devices(device, 1, mps=True)[0].type == "cpu"
    missing = missing_onnx_packages()
    if backend is Backend.onnxruntime:
        if column_devices:
            raise ValueError("column_devices splits the model over devices: use backend=torch")
        if missing:
            raise ValueError(
                f"backend=onnxruntime needs {', '.join(missing)}: pip install -e '.[export]'"
            )
        return backend
    if on_cpu and not missing:
        return Backend.onnxruntime
    if on_cpu:
        log.info("backend=auto: eager PyTorch (%s not installed)", ", ".join(missing))
    return Backend.torch


def load_inference_model(
    checkpoint: str | Path,
    backend: Backend | str = Backend.auto,
    device: str = "auto",
    column_devices: Sequence[str] = (),
    threads: int = 0,
) -> tuple[Any, Config]:
    """``(model, training config)`` of a checkpoint (a file or a run folder), ready for
    ``build_predictor`` / ``build_probability_predictor`` (which place it on ``device``):
    the deploy-time PyTorch model or an :class:`OnnxRuntimeModel`. ``threads`` > 0 sets the
    CPU threads of either backend."""
    path = checkpoint_file(checkpoint)
    chosen = choose_backend(backend, device, column_devices)
    model, cfg = load_model_from_checkpoint(path, device="cpu")
    if threads > 0:
        torch.set_num_threads(threads)
    if chosen is Backend.onnxruntime:
        return OnnxRuntimeModel(cached_export(path, model, cfg), threads), cfg
    return deploy_model(model), cfg
