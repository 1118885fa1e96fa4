"""ONNX Runtime as the inference backend of prediction, evaluation and the demo: a session
over a graph file, and :class:`OnnxRuntimeModel`, which runs it with the interface the
predictors call (``model(batch)["out"]``) and owns its threads (``threads``: ONNX Runtime's
intra-op threads; torch's own work around it runs on one thread:
:meth:`OnnxRuntimeModel.threads_for_torch`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from seg.errors import ConfigError, DataError, MissingFileError
from seg.inference.graph import INPUT_NAME, OUTPUT_NAME


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op threads at ``n`` inside the block (None: unchanged), restored after."""
    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


class UnreadableOnnxError(DataError):
    """An ONNX file that ONNX Runtime cannot parse (damaged, truncated, not ONNX)."""


def onnx_session(
    path: Path, providers: list[Any] | None = None, threads: int = 0, optimize: bool = True
) -> Any:
    """An ONNX Runtime session (CPU unless ``providers`` says otherwise), with all graph
    optimisations (none with ``optimize=False``: every node runs as written, so a quantised
    graph's DequantizeLinear -> float op -> QuantizeLinear are not fused into integer kernels);
    ``threads`` > 0 caps its intra-op threads (0: ONNX Runtime's default, one per physical
    core)."""
    import onnxruntime as ort

    if not path.is_file():
        raise MissingFileError(f"{path}: ONNX file does not exist")
    options = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    options.graph_optimization_level = level.ORT_ENABLE_ALL if optimize else level.ORT_DISABLE_ALL
    if threads > 0:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1  # one graph at a time: the batch is the parallelism
    try:
        return ort.InferenceSession(
            str(path), options, providers=providers or ["CPUExecutionProvider"]
        )
    except (
        ort.capi.onnxruntime_pybind11_state.InvalidProtobuf,
        ort.capi.onnxruntime_pybind11_state.InvalidGraph,
    ) as err:
        raise UnreadableOnnxError(
            f"{path}: not a readable ONNX graph ({err}); if it is a cached export, delete it "
            "and it is exported again"
        ) from err


class OnnxRuntimeModel:
    """An exported model in ONNX Runtime with the interface the predictors call:
    ``model(batch) -> {"out": logits}`` (float32, on the CPU), ``devices``, ``place``,
    ``eval``. Inputs and outputs stay on the CPU; with a CUDA device placed, the session runs
    on ONNX Runtime's CUDA provider (``onnxruntime-gpu``)."""

    num_columns = 1
    backend = "onnxruntime"

    def __init__(self, path: Path, threads: int = 0) -> None:
        self.path = Path(path)
        self.threads = threads
        self.devices = [torch.device("cpu")]  # where the predictors put the batch
        self.session = onnx_session(self.path, threads=threads)

    def place(self, devices: Sequence[torch.device]) -> OnnxRuntimeModel:
        """One device: ``cpu`` or ``cuda[:N]`` (the CUDA provider must be installed)."""
        if len(devices) != 1:
            raise ConfigError(
                f"backend=onnxruntime runs the whole model on one device, got {list(devices)}: "
                "column_devices needs backend=torch"
            )
        device = torch.device(devices[0])
        if device.type == "cuda":
            import onnxruntime as ort

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise ConfigError(
                    f"device={device} with backend=onnxruntime needs ONNX Runtime's CUDA "
                    "provider (pip install onnxruntime-gpu); or use backend=torch"
                )
            provider = ("CUDAExecutionProvider", {"device_id": device.index or 0})
            providers = [provider, "CPUExecutionProvider"]
            self.session = onnx_session(self.path, providers, self.threads)
        elif device.type != "cpu":
            raise ConfigError(f"backend=onnxruntime runs on cpu or cuda, not {device}")
        return self

    def eval(self) -> OnnxRuntimeModel:
        return self

    def threads_for_torch(self) -> contextlib.AbstractContextManager[None]:
        """One torch thread while this model runs on a CPU (the predictor enters it around its
        work). After each parallel op torch's OpenMP threads spin-wait for the next one and take
        the cores from ONNX Runtime's own pool: that doubled its latency (6.1 -> 13.1 ms median,
        7.1 -> 19.0 p90 for dual_channel at 256x256; docs/benchmarks.md, "Inference
        backends"). The torch work beside it (padding, resizing logits) is small."""
        return torch_threads(1 if self.devices[0].type == "cpu" else None)

    def __call__(self, x: Tensor) -> dict[str, Tensor]:
        """Normalised (B, 3, H, W) of any H and W -> {"out": (B, K, H, W) float32 logits}."""
        array = x.detach().to("cpu", torch.float32).contiguous().numpy()
        return {"out": torch.from_numpy(self.session.run([OUTPUT_NAME], {INPUT_NAME: array})[0])}
