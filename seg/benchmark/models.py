"""Model speed: training throughput, inference latency, FLOPs and peak memory of a model config.

Each model is measured in a fresh process (``measure_model_isolated``) so that its peak memory
is its own: the peak resident set of that process while it builds, trains and runs the model,
minus its resident set just before (weights, activations, gradients, optimiser state and
allocator caches); on CUDA, ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch

from seg.benchmark.timing import time_calls
from seg.config import CONFIG_DIR, Config, ModelConfig, compose_config
from seg.devices import resolve_devices
from seg.engine.optim import autocast_dtype, resolve_precision
from seg.engine.step import build_stepper
from seg.errors import ConfigError
from seg.models import SegmentationModel, build_model

# The engine's trainer.precision values the tables compare (fp16 needs CUDA: measure it there).
PRECISIONS = ("32", "bf16")
DTYPES = {"32": torch.float32, "bf16": torch.bfloat16}  # of the compute-limit kernels
# A model spec is a configs/model name with optional ":"-separated options, so that variants
# of one model sit side by side in one table: "compile" measures it after ``model.compile()``
# (torch.compile, default inductor backend), "bf16" / "32" override the run's precision.
# E.g. dual_channel, dual_channel:bf16, dual_channel:compile:bf16.
SPEC_OPTIONS = ("compile", *PRECISIONS)


@dataclass
class ModelBenchSettings:
    """What every model is measured with: batch, input (H, W), device, precision ("32" or
    "bf16" autocast), threads (None: torch's default), and the step and time budgets."""

    batch: int = 8
    size: tuple[int, int] = (256, 256)
    device: str = "cpu"
    precision: str = "32"
    channels_last: bool = True
    threads: int | None = None
    warmup: int = 2
    steps: int = 20
    seconds: float = 8.0
    infer_batches: list[int] = field(default_factory=lambda: [1, 8])
    infer_calls: int = 10
    infer_seconds: float = 2.0

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision {self.precision!r}; valid: {list(PRECISIONS)}")
        if self.batch < 2:
            raise ConfigError(f"batch must be >= 2 (BatchNorm in training), got {self.batch}")


def model_config_names() -> list[str]:
    """The names of configs/model/*.yaml."""
    return sorted(p.stem for p in (CONFIG_DIR / "model").glob("*.yaml"))


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec: config name, compiled?, precision override (None: the run's), and
    config overrides (``model.columns.1.backbone=efficientnet_lite2``: a variant of the config)."""

    name: str
    compile: bool = False
    precision: str | None = None
    overrides: tuple[str, ...] = ()


def split_model_spec(spec: str) -> ModelSpec:
    """``"name[:compile][:bf16|:32][:key=value...]"`` -> :class:`ModelSpec`; unknown options
    raise ConfigError (a bad override key fails when the config is composed)."""
    name, *options = spec.split(":")
    overrides = tuple(o for o in options if "=" in o)
    options = [o for o in options if "=" not in o]
    bad = [o for o in options if o not in SPEC_OPTIONS]
    precisions = [o for o in options if o in PRECISIONS]
    if bad or len(precisions) > 1 or len(set(options)) < len(options):
        raise ConfigError(
            f"model spec {spec!r}: options {options} are not a subset of {list(SPEC_OPTIONS)} "
            "with at most one precision"
        )
    return ModelSpec(name, "compile" in options, precisions[0] if precisions else None, overrides)


def check_model_names(specs: list[str]) -> None:
    """Raise ValueError naming unknown model configs or spec options, and the valid ones."""
    unknown = sorted({split_model_spec(s).name for s in specs} - set(model_config_names()))
    if unknown:
        raise ConfigError(
            f"unknown model config(s) {unknown}; valid: {model_config_names()}, each "
            f"optionally with ':'-separated options from {list(SPEC_OPTIONS)}"
        )


def load_config(name: str, s: ModelBenchSettings, overrides: tuple[str, ...] = ()) -> Config:
    """The training config of ``model=<name>`` (default loss and SGD recipe) with
    ``overrides``, in the precision and memory layout of ``s``: what the engine's training step
    is built from."""
    return compose_config(
        [
            f"model={name}",
            f"model.channels_last={str(s.channels_last).lower()}",
            f"trainer.precision='{s.precision}'",
            *overrides,
        ]
    )


def build_placed(cfg: ModelConfig, device: str) -> SegmentationModel:
    """The model of ``cfg`` (its ImageNet weights as configured), every column on ``device``."""
    model = build_model(cfg)
    return model.place(resolve_devices(device, model.num_columns, key="--device"))


def count_train_flops(model: torch.nn.Module, size: tuple[int, int]) -> int:
    """FLOPs of a training step (forward + backward) per image: 3x the training-mode forward.

    Backward costs two forwards (input and weight gradients). It is not counted directly
    because FlopCounterMode ignores ``groups`` in the weight gradient of a convolution
    (torch 2.14; pytorch/pytorch#183405), overcounting depthwise layers by their width. The
    batch is 2: BatchNorm on 1x1 maps needs more than one value per channel when training.
    """
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(2, 3, *size, device=model.devices[0])
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    return 3 * counter.get_total_flops() // 2


def _proc_status_kib(key: str) -> int | None:
    status = Path("/proc/self/status")
    if not status.is_file():
        return None
    for line in status.read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def reset_peak_rss() -> int:
    """Reset this process's peak resident set (Linux: ``/proc/self/clear_refs``) and return the
    baseline, in bytes, that a later ``peak_rss()`` is compared with: the current RSS after a
    reset, else the peak so far (``ru_maxrss``), which hides peaks below it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset VmHWM to the current RSS
        return 1024 * (_proc_status_kib("VmRSS") or 0)
    except OSError:
        return peak_rss()


def peak_rss() -> int:
    """This process's peak resident set, bytes (VmHWM on Linux, else ``ru_maxrss``)."""
    hwm = _proc_status_kib("VmHWM")
    if hwm is not None:
        return 1024 * hwm
    import resource  # not on Windows

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak * (1 if sys.platform == "darwin" else 1024)


def measure_training(
    model: SegmentationModel, cfg: Config, s: ModelBenchSettings
) -> dict[str, Any]:
    """The engine's training step (``seg.engine.step``: autocast, loss, backward, optimiser and
    schedule of ``cfg``) on random (batch, 3, H, W) inputs: img/s, steps and the seconds of the
    untimed warm-up (which includes compilation for a compiled model)."""
    device = model.devices[0]
    stepper = build_stepper(model, model, cfg, total_steps=1_000_000)
    x = torch.randn(s.batch, 3, *s.size, device=device)
    target = torch.randint(0, 2, (s.batch, *s.size), device=device)
    model.train()

    def step() -> None:
        stepper.step(x, target)

    start = time.perf_counter()
    steps, elapsed = time_calls(step, device, s.warmup, s.steps, s.seconds)
    warmup_s = time.perf_counter() - start - elapsed
    return {
        "train_img_per_s": steps * s.batch / elapsed,
        "train_steps": steps,
        "warmup_s": warmup_s,
    }


def measure_inference(
    model: torch.nn.Module, batch: int, s: ModelBenchSettings
) -> dict[str, float | int]:
    """Eval-mode, no-grad forward latency in ms per image at ``batch`` (and the calls timed)."""
    device = model.devices[0]
    x = torch.randn(batch, 3, *s.size, device=device)
    dtype = autocast_dtype(resolve_precision(s.precision, device), device)
    model.eval()

    def forward() -> None:
        with torch.no_grad(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            model(x)

    calls, elapsed = time_calls(forward, device, 1, s.infer_calls, s.infer_seconds)
    return {"ms_per_img": 1000 * elapsed / (calls * batch), "calls": calls}


def measure_model(spec: str, s: ModelBenchSettings) -> dict[str, Any]:
    """One row of the model table: params, train GFLOP/img, train img/s, achieved GFLOP/s,
    inference ms/img per batch, and peak memory (bytes; see the module docstring).

    ``spec`` is a configs/model name with optional options (``SPEC_OPTIONS``): ``compile``
    measures the model after ``model.compile()``, ``bf16`` / ``32`` override ``s.precision``.
    FLOPs are counted on the eager fp32 model either way.
    """
    parsed = split_model_spec(spec)
    s = replace(s, precision=parsed.precision or s.precision)
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    cfg = load_config(parsed.name, s, parsed.overrides)
    torch.manual_seed(0)
    rss_before = reset_peak_rss()
    model = build_placed(cfg.model, s.device)
    device = model.devices[0]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    flops = count_train_flops(model.train(), s.size)
    if parsed.compile:
        model.compile()
    row: dict[str, Any] = {
        "model": spec,
        "compiled": parsed.compile,
        "precision": s.precision,
        "params": sum(p.numel() for p in model.parameters()),
        "train_gflops_per_img": flops / 1e9,
        **measure_training(model, cfg, s),
    }
    row["achieved_gflops_per_s"] = row["train_gflops_per_img"] * row["train_img_per_s"]
    row["inference"] = {str(b): measure_inference(model, b, s) for b in s.infer_batches}
    if device.type == "cuda":
        row["peak_mem_bytes"] = torch.cuda.max_memory_allocated(device)
        row["peak_mem_kind"] = "cuda max_memory_allocated"
    else:
        row["peak_mem_bytes"] = peak_rss() - rss_before
        row["peak_mem_kind"] = "peak RSS increase while measuring"
    row["threads"] = torch.get_num_threads()
    return row


def measure_model_isolated(name: str, s: ModelBenchSettings) -> dict[str, Any]:
    """``measure_model`` in a fresh spawned process, so that peak memory is this model's own."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(measure_model, name, s).result()
