"""Inference latency per backend: the paths ``predict.py`` and ``evaluate.py`` can take, side by
side in one process on the same random input, each call timed on its own (median and p90).

Rows, for each model and batch size: eager PyTorch fp32 as built (batch norm unfolded, as the
engine trains it), the deploy-time model (``seg.models.deploy``: batch norm folded, auxiliary
heads dropped) in fp32 and, where the CPU computes bf16 natively, under bf16 autocast, and
ONNX Runtime fp32 on the model's export (``backend=onnxruntime``) and int8 (``precision=int8``,
calibrated here on random inputs: the latency does not depend on the ranges); then the whole of
``predict.py``'s per-image work for each backend (``Predictor``: eval preset, padding, the
network, logits resized to the photo, mask and probability), from uint8 photos of the input
size, and for those rows a profile of the predictor's stages (``PREDICTOR_STAGES``: the
preset, the network, the work at the photo's size; means over ``PROFILE_CALLS`` more calls,
with the clock's few microseconds in them). Each row runs after an untimed warm-up (the first
calls pay for allocation and, in ONNX Runtime, graph planning). ONNX Runtime rows run with one
torch thread, as prediction and evaluation run it (``OnnxRuntimeModel.threads_for_torch``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from seg.benchmark.models import ModelBenchSettings, load_config, split_model_spec
from seg.data.transforms import EvalImageTransform
from seg.devices import native_bf16
from seg.inference.graph import export_onnx
from seg.inference.predictor import PREDICTOR_STAGES, Predictor, Scale, StageClock
from seg.inference.quantize import quantize_int8
from seg.inference.runtime import OnnxRuntimeModel, torch_threads
from seg.models import build_model
from seg.models.deploy import AutocastModel, deploy_model

WARMUP_CALLS = 5
CALLS = 200  # timed calls per row at most (or the settings' seconds): enough for a p90
PROFILE_CALLS = 50  # calls of a predictor row with its stages timed (after the timed ones)


@dataclass(frozen=True)
class InferencePath:
    """One inference path: a name, how to run a batch through it (``run(batch_size)``, the
    inputs made beforehand), the torch threads it runs with (None: the process's) and, for
    ``predict.py``'s paths, the predictor whose stages are profiled."""

    name: str
    run: Callable[[int], Any]
    torch_threads: int | None = None
    predictor: Predictor | None = None


def call_times(fn: Callable[[], object], calls: int, seconds: float) -> list[float]:
    """``WARMUP_CALLS`` untimed calls, then up to ``calls`` timed ones (at least 3, fewer once
    ``seconds`` are spent): each call's seconds."""
    for _ in range(WARMUP_CALLS):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < calls and (len(times) < 3 or time.perf_counter() - start < seconds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation, as numpy's default."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _paths(name: str, s: ModelBenchSettings, folder: Path) -> Iterator[InferencePath]:
    """The paths of one model, made one at a time. Each ONNX Runtime session (fp32, then int8)
    exists only while its own rows run: a second session that has run in the same process
    slows the first (the pretrained model's fp32 session: 10.8 -> 15-19 ms at batch 1 on the
    2-core machine, back to 10.2 once the other is freed), and ``predict.py`` and
    ``evaluate.py`` only ever hold one."""
    spec = split_model_spec(name)
    cfg = load_config(spec.name, s, spec.overrides)
    torch.manual_seed(0)
    model = build_model(cfg.model, pretrained=False).eval()  # random weights: same FLOPs
    deployed = deploy_model(model)
    tensors = {b: torch.randn(b, 3, *s.size) for b in s.infer_batches}
    rng = np.random.default_rng(0)
    photos = [rng.integers(0, 256, (*s.size, 3), dtype=np.uint8) for _ in range(max(tensors))]

    def eager(net: Any, dtype: torch.dtype | None = None) -> Callable[[int], Any]:
        def run(batch: int) -> Any:
            autocast = torch.autocast("cpu", dtype=dtype) if dtype else contextlib.nullcontext()
            with torch.inference_mode(), autocast:
                return net(tensors[batch])

        return run

    def predictor(name: str, net: Any, threads: int | None = None) -> InferencePath:
        aug = dataclasses.replace(cfg.aug, eval_size=list(s.size))
        run = Predictor(net, [Scale(s.size, EvalImageTransform(aug))])
        return InferencePath(name, lambda batch: run(photos[:batch]), threads, run)

    yield InferencePath("torch fp32, as trained", eager(model))
    yield InferencePath("torch fp32, BN folded", eager(deployed))
    native = native_bf16(torch.device("cpu"))
    if native:
        yield InferencePath("torch bf16, BN folded", eager(deployed, torch.bfloat16))
    yield predictor("predict.py, torch", deployed)
    if native:
        yield predictor("predict.py, torch bf16", AutocastModel(deployed, torch.bfloat16))

    onnx_file = export_onnx(model, folder / f"{name}.onnx", s.size)
    calibration = [torch.randn(1, 3, *s.size) for _ in range(4)]  # latency only: any ranges
    int8_file = quantize_int8(onnx_file, folder / f"{name}.int8.onnx", calibration)
    for label, file, predict_label in (
        ("fp32", onnx_file, "predict.py, onnxruntime"),
        ("int8", int8_file, "predict.py, ort int8"),
    ):
        session = OnnxRuntimeModel(file, threads=s.threads or 0)
        yield InferencePath(f"onnxruntime {label}", eager(session), torch_threads=1)
        yield predictor(predict_label, session, threads=1)
        del session  # the caller drops the last path before running the next session's rows
        gc.collect()


def measure_backends(names: list[str], s: ModelBenchSettings) -> list[dict[str, Any]]:
    """One row per model, path and batch size of ``s.infer_batches``: ms per image, median
    and p90 over the timed calls (each call a whole batch)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for path in _paths(name, s, Path(tmp)):
                for batch in s.infer_batches:
                    with torch_threads(path.torch_threads):
                        times = call_times(lambda b=batch, p=path: p.run(b), CALLS, s.seconds)
                    row = {
                        "model": name,
                        "path": path.name,
                        "batch": batch,
                        "calls": len(times),
                        "median_ms_per_img": 1000 * statistics.median(times) / batch,
                        "p90_ms_per_img": 1000 * percentile(times, 0.9) / batch,
                    }
                    if path.predictor is not None:
                        row["stages_ms_per_img"] = profile_stages(path, batch)
                    rows.append(row)
                del path  # frees an ONNX Runtime session before the next one runs
    return rows


def profile_stages(path: InferencePath, batch: int) -> dict[str, float]:
    """Mean ms per image in each of ``PREDICTOR_STAGES`` over ``PROFILE_CALLS`` calls of a
    predictor path (already warm)."""
    assert path.predictor is not None
    clock = path.predictor.clock = StageClock()
    try:
        with torch_threads(path.torch_threads):
            for _ in range(PROFILE_CALLS):
                path.run(batch)
    finally:
        path.predictor.clock = None
    return {k: 1000 * clock.seconds.get(k, 0.0) / PROFILE_CALLS / batch for k in PREDICTOR_STAGES}


def format_backends(rows: list[dict[str, Any]], size: tuple[int, int]) -> str:
    head = (
        f"  {'model':<24} {'path':<26} {'batch':>5} {'calls':>5} "
        f"{'median ms/img':>13} {'p90 ms/img':>10}"
    )
    lines = [f"inference backends ({size[0]}x{size[1]}, eval mode, each call timed)", head]
    for r in rows:
        lines.append(
            f"  {r['model']:<24} {r['path']:<26} {r['batch']:>5} {r['calls']:>5} "
            f"{r['median_ms_per_img']:>13.2f} {r['p90_ms_per_img']:>10.2f}"
        )
    profiled = [r for r in rows if "stages_ms_per_img" in r]
    if profiled:
        names = "".join(f" {stage:>10}" for stage in PREDICTOR_STAGES)
        lines += [
            f"predict.py's stages (mean ms/img over {PROFILE_CALLS} calls; around = the share of "
            "the time outside the network, relative to it)",
            f"  {'model':<24} {'path':<26} {'batch':>5}{names} {'around':>7}",
        ]
        for r in profiled:
            stages = r["stages_ms_per_img"]
            network = stages["network"]
            around = sum(stages.values()) - network
            cells = "".join(f" {stages[stage]:>10.2f}" for stage in PREDICTOR_STAGES)
            ratio = f"{around / network:>6.2f}x" if network > 0 else f"{'-':>7}"
            lines.append(f"  {r['model']:<24} {r['path']:<26} {r['batch']:>5}{cells} {ratio}")
    return "\n".join(lines)


def predictor_latency(checkpoint: str, seconds: float = 10.0) -> dict[str, Any]:
    """``predict.py``'s whole per-photo work on ``checkpoint`` (a shipped model's name, a
    checkpoint or a run folder) with its default backend, batch 1, on seeded random photos:
    median ms for a 256x256 photo at a 256x256 input (``"256x256"``) and for a photo of the eval
    size at the eval size (``"eval_size"``), each after ``WARMUP_CALLS`` untimed calls."""
    from seg.inference.backend import load_inference_model
    from seg.inference.predictor import build_predictor

    model, cfg = load_inference_model(checkpoint, device="cpu")
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {"backend": model.backend, "batch": 1}
    calls = []
    for key, size in (("256x256", [256, 256]), ("eval_size", [int(v) for v in cfg.aug.eval_size])):
        at_size = dataclasses.replace(cfg, aug=dataclasses.replace(cfg.aug, eval_size=size))
        predictor = build_predictor(model, at_size, "cpu")
        photo = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
        times = call_times(lambda p=predictor, x=photo: p([x]), CALLS, seconds)
        out[key] = round(1000 * statistics.median(times), 2)
        calls.append(len(times))
    out["calls"] = min(calls)
    return out
