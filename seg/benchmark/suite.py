"""Run the chosen benchmark sections and collect their results as one JSON-ready dict."""

from __future__ import annotations

import logging
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from seg.benchmark.inference import measure_backends
from seg.benchmark.limits import measure_limits
from seg.benchmark.loading import data_wait_share, loader_throughput, transform_steps
from seg.benchmark.models import (
    DTYPES,
    ModelBenchSettings,
    check_model_names,
    measure_model,
    measure_model_isolated,
    model_config_names,
    split_model_spec,
)
from seg.benchmark.scaling import cpu_cores, measure_scaling
from seg.config import compose_config
from seg.data.download import DatasetNotFoundError
from seg.devices import cpu_isa, cpuinfo_field
from seg.errors import ConfigError
from seg.inference.backend import missing_onnx_packages

log = logging.getLogger(__name__)

SECTIONS = ("limits", "models", "inference", "data", "scaling")


@dataclass
class BenchmarkOptions:
    """Everything one benchmark run needs; ``models=None`` means every configs/model/*.yaml."""

    settings: ModelBenchSettings = field(default_factory=ModelBenchSettings)
    sections: list[str] = field(default_factory=lambda: list(SECTIONS))
    models: list[str] | None = None
    isolate: bool = True  # each model in a fresh process (its own peak memory)
    limit_seconds: float = 3.0
    data_root: str | None = None  # default: $SEG_DATA_DIR, else the config's data.root
    # The training config whose data and transform are measured, as train.py's overrides
    # (e.g. ["+exp=dual_channel_pretrained_cpu_coco", "aug.paste_p=0.5"]).
    data_config: list[str] = field(default_factory=lambda: ["data=human_mix"])
    data_samples: int = 48  # samples of the per-step breakdown of the transform
    data_workers: list[int] = field(default_factory=lambda: [0, 2])
    data_seconds: float = 8.0
    data_model: str = "dual_channel"  # whose consumption the data pipeline must keep up with
    data_steps: int = 20  # timed steps of the real training loop (or data_seconds)
    scaling_model: str = "dual_channel"
    scaling_steps: int = 10

    def __post_init__(self) -> None:
        bad = sorted(set(self.sections) - set(SECTIONS))
        if bad:
            raise ConfigError(f"unknown section(s) {bad}; valid: {list(SECTIONS)}")
        check_model_names(self.models or [])
        for key in ("data_model", "scaling_model"):
            if getattr(self, key) not in model_config_names():
                raise ConfigError(
                    f"{key}={getattr(self, key)!r} is not a configs/model name (no "
                    f"':compile' here); valid: {model_config_names()}"
                )
        if self.data_samples < 1:
            raise ConfigError(f"data_samples must be >= 1, got {self.data_samples}")
        if any(w < 0 for w in self.data_workers):
            raise ConfigError(f"data_workers must be >= 0, got {self.data_workers}")


def machine_info(device: str) -> dict[str, Any]:
    """CPU model and vector extensions, cores, torch version and, on CUDA, the GPUs."""
    info = {
        "cpu": cpuinfo_field("model name") or platform.processor() or platform.machine(),
        "isa": cpu_isa(),
        "cores": cpu_cores(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def limit_key(kernel: str, precision: str, run_precision: str) -> str:
    """``result["limits"]`` key of ``kernel`` in ``precision``: plain in the run's precision,
    ``kernel:precision`` in another one."""
    return kernel if precision == run_precision else f"{kernel}:{precision}"


def row_precisions(opts: BenchmarkOptions) -> list[str]:
    """The run's precision first, then any other that a model spec asks for."""
    precisions = [opts.settings.precision]
    for spec in opts.models or []:
        precision = split_model_spec(spec).precision
        if precision is not None and precision not in precisions:
            precisions.append(precision)
    return precisions


def run_models(opts: BenchmarkOptions) -> list[dict[str, Any]]:
    """The model table's rows, in ``opts.models`` order."""
    measure = measure_model_isolated if opts.isolate else measure_model
    rows = []
    for name in opts.models or model_config_names():
        rows.append(measure(name, opts.settings))
        if opts.isolate:
            rows[-1]["peak_mem_kind"] += " (fresh process per model)"
        log.info("%s: %.2f train img/s", name, rows[-1]["train_img_per_s"])
    return rows


def run_data(opts: BenchmarkOptions, models: list[dict[str, Any]]) -> dict[str, Any]:
    """Loader samples/s per worker count, the training consumption it must match, the data
    wait share of a short real training loop, and where a sample's time goes step by step.
    Skipped (with the reason) without the data."""
    overrides = [*opts.data_config, "data.download=false"]
    overrides += [f"data.root={opts.data_root}"] if opts.data_root else []
    cfg = compose_config(overrides)
    s = opts.settings
    try:
        loaders = [
            loader_throughput(cfg.data, cfg.aug, s.batch, w, seconds=opts.data_seconds)
            for w in opts.data_workers
        ]
        steps = transform_steps(cfg.data, cfg.aug, opts.data_samples)
    except DatasetNotFoundError as err:
        return {"skipped": f"no training data: {err}".splitlines()[0]}
    loop = replace(s, steps=opts.data_steps, seconds=opts.data_seconds)
    wait = data_wait_share(opts.data_model, cfg.data, cfg.aug, max(opts.data_workers), loop)
    # The consumer: the model table's random-input rate, else this real loop's rate.
    consumed = {r["model"]: r["train_img_per_s"] for r in models}.get(opts.data_model)
    size = list(s.size) if consumed is not None else list(cfg.aug.crop_size)
    consumed = wait["train_img_per_s"] if consumed is None else consumed
    for row in loaders:
        row["data_bound"] = row["samples_per_s"] < consumed
        # Loading processes needed to feed the consumer at this per-process rate.
        row["workers_needed"] = consumed / row["samples_per_s_per_worker"]
    return {
        "config": list(opts.data_config),
        "crop_size": list(cfg.aug.crop_size),
        "batch": s.batch,
        "consumer": opts.data_model,
        "consumer_img_per_s": consumed,
        "consumer_size": size,
        "loaders": loaders,
        "training_loop": wait,
        "steps": steps,
    }


def run_benchmark(opts: BenchmarkOptions) -> dict[str, Any]:
    """Run ``opts.sections`` in order (limits, models, data, scaling); returns their results,
    the machine, the settings and the wall time."""
    s = opts.settings
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    start = time.perf_counter()
    result: dict[str, Any] = {"machine": machine_info(s.device), "options": asdict(opts)}
    device = torch.device(s.device)
    if "limits" in opts.sections:
        # In the run's precision ("gemm", "conv3x3"), and in every other precision a model row
        # asks for ("conv3x3:bf16", ...), so that each row is compared with its own ceiling.
        result["limits"] = {}
        for precision in row_precisions(opts):
            dtype = DTYPES[precision]
            for kernel, row in measure_limits(device, dtype, opts.limit_seconds).items():
                result["limits"][limit_key(kernel, precision, s.precision)] = row
        log.info(
            "limits: %s", {k: round(v["gflops_per_s"], 1) for k, v in result["limits"].items()}
        )
    if "models" in opts.sections:
        result["models"] = run_models(opts)
        for row in result["models"]:
            key = limit_key("conv3x3", row["precision"], s.precision)
            conv = result.get("limits", {}).get(key, {}).get("gflops_per_s")
            row["conv_limit_fraction"] = row["achieved_gflops_per_s"] / conv if conv else None
    if "inference" in opts.sections:
        # Every path on the CPU; the models asked for, else the default model (an export each).
        specs = [split_model_spec(m) for m in opts.models or ["dual_channel"]]
        names = [":".join([m.name, *m.overrides]) for m in specs]  # compile, precision: n/a
        missing = missing_onnx_packages()
        if s.device != "cpu" or missing:
            why = f"needs {', '.join(missing)}" if missing else "CPU backends only (--device cpu)"
            result["inference"] = {"skipped": why}
        else:
            result["inference"] = {"rows": measure_backends(list(dict.fromkeys(names)), s)}
    if "data" in opts.sections:
        result["data"] = run_data(opts, result.get("models", []))
        log.info("data: %s", result["data"].get("skipped", "done"))
    if "scaling" in opts.sections:
        scaling = replace(s, steps=opts.scaling_steps, warmup=min(s.warmup, 2))
        result["scaling"] = measure_scaling(opts.scaling_model, scaling)
    result["wall_s"] = time.perf_counter() - start
    return result
