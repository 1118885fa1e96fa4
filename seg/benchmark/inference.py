"""Inference latency per backend: the paths ``predict.py`` and ``evaluate.py`` can take, side by
side in one process on the same random input, each call timed on its own (median and p90).

Rows, for each model and batch size: eager PyTorch fp32 as built (batch norm unfolded, as the
engine trains it), the deploy-time model (``seg.models.deploy``: batch norm folded, auxiliary
heads dropped) in fp32 and, where the CPU computes bf16 natively, under bf16 autocast, and
ONNX Runtime fp32 on the model's export (``backend=onnxruntime``). Each row runs after an
untimed warm-up (the first calls pay for allocation and, in ONNX Runtime, graph planning).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seg.benchmark.models import ModelBenchSettings, load_config
from seg.engine.optim import native_bf16
from seg.inference.onnx import OnnxRuntimeModel, export_onnx
from seg.models import build_model
from seg.models.deploy import deploy_model

WARMUP_CALLS = 5
CALLS = 200  # timed calls per row at most (or the settings' seconds): enough for a p90


@dataclass(frozen=True)
class InferencePath:
    """One inference path: a name and how to run a batch through it."""

    name: str
    run: Callable[[torch.Tensor], Any]


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


def _paths(name: str, s: ModelBenchSettings, folder: Path) -> list[InferencePath]:
    cfg = load_config(name, s)
    torch.manual_seed(0)
    model = build_model(cfg.model, pretrained=False).eval()  # random weights: same FLOPs
    deployed = deploy_model(model)
    onnx_file = export_onnx(model, folder / f"{name}.onnx", s.size)
    session = OnnxRuntimeModel(onnx_file, threads=s.threads or 0)

    def eager(net: torch.nn.Module, dtype: torch.dtype | None = None) -> Callable:
        def run(x: torch.Tensor) -> Any:
            autocast = torch.autocast("cpu", dtype=dtype) if dtype else contextlib.nullcontext()
            with torch.inference_mode(), autocast:
                return net(x)

        return run

    paths = [
        InferencePath("torch fp32, as trained", eager(model)),
        InferencePath("torch fp32, BN folded", eager(deployed)),
    ]
    if native_bf16(torch.device("cpu")):
        paths.append(InferencePath("torch bf16, BN folded", eager(deployed, torch.bfloat16)))
    paths.append(InferencePath("onnxruntime fp32", session))
    return paths


def measure_backends(names: list[str], s: ModelBenchSettings) -> list[dict[str, Any]]:
    """One row per model, path and batch size of ``s.infer_batches``: ms per image, median
    and p90 over the timed calls (each call a whole batch)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for path in _paths(name, s, Path(tmp)):
                for batch in s.infer_batches:
                    x = torch.randn(batch, 3, *s.size)
                    times = call_times(lambda x=x, p=path: p.run(x), CALLS, s.seconds)
                    rows.append(
                        {
                            "model": name,
                            "path": path.name,
                            "batch": batch,
                            "calls": len(times),
                            "median_ms_per_img": 1000 * statistics.median(times) / batch,
                            "p90_ms_per_img": 1000 * percentile(times, 0.9) / batch,
                        }
                    )
    return rows


def format_backends(rows: list[dict[str, Any]], size: tuple[int, int]) -> str:
    head = (
        f"  {'model':<24} {'path':<24} {'batch':>5} {'calls':>5} "
        f"{'median ms/img':>13} {'p90 ms/img':>10}"
    )
    lines = [f"inference backends ({size[0]}x{size[1]}, eval mode, each call timed)", head]
    for r in rows:
        lines.append(
            f"  {r['model']:<24} {r['path']:<24} {r['batch']:>5} {r['calls']:>5} "
            f"{r['median_ms_per_img']:>13.2f} {r['p90_ms_per_img']:>10.2f}"
        )
    return "\n".join(lines)
