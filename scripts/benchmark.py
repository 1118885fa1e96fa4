"""Benchmark, side by side in one run: machine limits, models, inference backends, data
pipeline, scaling.

    python scripts/benchmark.py                                # all sections, every model config
    python scripts/benchmark.py --sections limits models --models dual_channel unet
    python scripts/benchmark.py --sections models --models dual_channel dual_channel:compile \\
        dual_channel:bf16 lraspp_mobilenet_v3_large lraspp_mobilenet_v3_large:bf16
    python scripts/benchmark.py --sections inference --models dual_channel --size 256 256
    python scripts/benchmark.py --sections inference --size 256 256 --models \
        dual_channel_pretrained dual_channel_pretrained:model.columns.1.backbone=efficientnet_lite2
    python scripts/benchmark.py --device cuda --precision bf16 --size 512 512 \\
        --models dual_channel lraspp_mobilenet_v3_large --json bench.json
    python scripts/benchmark.py --sections data --data-model dual_channel_pretrained \\
        --data-config +exp=dual_channel_pretrained_cpu_coco aug.paste_p=0.5 aug.paste_behind=0.5

Sections (seg/benchmark/): ``limits`` (fp32 2048^3 matmul and a dense 3x3 conv, GFLOP/s);
``models`` (params, train GFLOP/img = 3x the forward, train img/s of forward + backward + SGD
steps on random inputs, achieved GFLOP/s and its share of the conv limit, inference ms/img at
batch 1 and 8, peak memory; each model in a fresh process); ``inference`` (on the CPU, per
model: eager PyTorch as trained, with batch norm folded, in bf16 where native, and ONNX Runtime
on its export: median and p90 ms/img at batch 1 and 8, each call timed; default model
dual_channel); ``data`` (the train split of ``--data-config``, default data=human_mix, with
the full train transform: samples/s per loader worker against the training consumption of
``--data-model``, the share of a real training loop's time spent waiting for data, and each
step's ms per sample; needs the data, see data.root / SEG_DATA_DIR); ``scaling`` (DDP img/s
with 1 and 2 gloo processes on CPU, 1..N GPUs on CUDA).
Each model runs ``--warmup`` untimed steps (fewer once half of ``--seconds`` is spent), then at
most ``--steps`` timed steps or fewer once ``--seconds`` are spent; the table says how many.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from seg.benchmark.models import PRECISIONS, ModelBenchSettings
from seg.benchmark.suite import SECTIONS, BenchmarkOptions, run_benchmark
from seg.benchmark.tables import format_report
from seg.cli import user_errors
from seg.fileio import write_text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        help="configs/model names (all), each with optional ':compile' (torch.compile), "
        "':bf16' or ':32' (precision of this row) and ':key=value' config overrides (a variant), "
        "e.g. dual_channel:bf16, "
        "dual_channel_pretrained:model.columns.1.backbone=efficientnet_lite2",
    )
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, nargs=2, default=[256, 256], metavar=("H", "W"))
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--precision", default="32", choices=list(PRECISIONS))
    parser.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model, at most")
    parser.add_argument("--seconds", type=float, default=8.0, help="time budget per model")
    parser.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each model in a fresh process (its own peak memory)",
    )
    parser.add_argument("--data-root", default=None, help="datasets (default: $SEG_DATA_DIR)")
    parser.add_argument("--data-workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument(
        "--data-config",
        nargs="+",
        default=["data=human_mix"],
        help="the training config whose data pipeline is measured, as train.py's overrides, "
        "e.g. +exp=dual_channel_pretrained_cpu_coco aug.paste_behind=0.5",
    )
    parser.add_argument("--data-samples", type=int, default=48, help="of the step breakdown")
    parser.add_argument(
        "--data-model", default="dual_channel", help="the configs/model whose training consumes"
    )
    parser.add_argument("--scaling-steps", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None, help="write all results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    settings = ModelBenchSettings(
        batch=args.batch,
        size=tuple(args.size),
        device=args.device,
        precision=args.precision,
        channels_last=args.channels_last,
        threads=args.threads,
        warmup=args.warmup,
        steps=args.steps,
        seconds=args.seconds,
    )
    opts = BenchmarkOptions(
        settings=settings,
        sections=args.sections,
        models=args.models,
        isolate=args.isolate,
        data_root=args.data_root,
        data_workers=args.data_workers,
        data_config=args.data_config,
        data_samples=args.data_samples,
        data_model=args.data_model,
        scaling_steps=args.scaling_steps,
    )
    result = run_benchmark(opts)
    print(format_report(result))
    if args.json is not None:
        write_text(args.json, json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    with user_errors("benchmark"):  # a bad option: one line, exit code 2
        main()
