"""Training throughput of every model config, side by side in one process.

    python scripts/benchmark.py                      # all configs/model/*.yaml, batch 8, 256x256
    python scripts/benchmark.py --models dual_channel lraspp_mobilenet_v3_large --threads 2
    python scripts/benchmark.py --steps 2 --warmup 1 --size 64 64 --json bench.json

Each model runs ``warmup`` untimed steps, then timed forward + backward + SGD steps (at most
``--steps``, or fewer once ``--seconds`` are spent) on random inputs, all with the same
threads and memory format. FLOPs per image: 3x the training-mode forward, counted by
PyTorch's FlopCounterMode.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from seg.config import CONFIG_DIR, compose_config
from seg.models import build_model, num_columns
from seg.models.config import ModelConfig

logger = logging.getLogger("benchmark")


def model_config_names() -> list[str]:
    """The names of configs/model/*.yaml."""
    return sorted(p.stem for p in (CONFIG_DIR / "model").glob("*.yaml"))


def load_model_config(name: str, device: str, channels_last: bool) -> ModelConfig:
    """configs/model/<name>.yaml with every column on ``device``."""
    cfg = compose_config([f"model={name}"]).model
    cfg.devices = [device] * num_columns(cfg)
    cfg.channels_last = channels_last
    return cfg


def training_loss(out: dict[str, Any], target: torch.Tensor, aux_weight: float) -> torch.Tensor:
    """Cross-entropy on the main logits plus weighted auxiliary terms, as a trainer would."""
    loss = F.cross_entropy(out["out"], target)
    for aux in out["aux"]:
        loss = loss + aux_weight * F.cross_entropy(aux, target)
    return loss


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    target: torch.Tensor,
    aux_weight: float,
) -> None:
    """One forward + backward + SGD step on (B,3,H,W) images and (B,H,W) labels."""
    optimizer.zero_grad(set_to_none=True)
    training_loss(model(x), target, aux_weight).backward()
    optimizer.step()


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def benchmark_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Time training steps of one model config; returns one row of the table."""
    cfg = load_model_config(name, args.device, args.channels_last)
    torch.manual_seed(0)
    model = build_model(cfg).train()
    device = model.devices[0]
    flops = count_train_flops(model, tuple(args.size))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, *args.size, device=device)
    target = torch.randint(0, 2, (args.batch, *args.size), device=device)
    for _ in range(args.warmup):
        train_step(model, optimizer, x, target, cfg.aux_weight)
    _sync(device)
    steps, start = 0, time.perf_counter()
    while steps < args.steps and (steps == 0 or time.perf_counter() - start < args.seconds):
        train_step(model, optimizer, x, target, cfg.aux_weight)
        _sync(device)
        steps += 1
    elapsed = time.perf_counter() - start
    images_per_s = steps * args.batch / elapsed
    return {
        "model": name,
        "params": sum(p.numel() for p in model.parameters()),
        "train_gflops_per_image": flops / 1e9,
        "images_per_s": images_per_s,
        "achieved_gflops_per_s": flops * images_per_s / 1e9,
        "steps": steps,
    }


def format_table(rows: list[dict[str, Any]]) -> str:
    """The benchmark rows as a text table."""
    head = f"{'model':<30} {'params':>11} {'GFLOP/img':>10} {'img/s':>8} {'GFLOP/s':>8}"
    head += f" {'steps':>6}"
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['model']:<30} {r['params']:>11,} {r['train_gflops_per_image']:>10.2f} "
            f"{r['images_per_s']:>8.2f} {r['achieved_gflops_per_s']:>8.1f} {r['steps']:>6}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=None, help="configs/model names (all)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, nargs=2, default=[256, 256], metavar=("H", "W"))
    parser.add_argument("--steps", type=int, default=5, help="timed steps per model, at most")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per model")
    parser.add_argument("--seconds", type=float, default=15.0, help="time budget per model")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--device", default="cpu", help="device of every column")
    parser.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    names = args.models or model_config_names()
    unknown = sorted(set(names) - set(model_config_names()))
    if unknown:
        raise SystemExit(f"unknown model config(s) {unknown}; valid: {model_config_names()}")
    logger.info(
        "batch %d at %dx%d, %d threads, channels_last=%s, device %s",
        args.batch,
        *args.size,
        torch.get_num_threads(),
        args.channels_last,
        args.device,
    )
    rows = []
    for name in names:
        rows.append(benchmark_model(name, args))
        logger.info("%s: %.2f img/s", name, rows[-1]["images_per_s"])
    logger.info("\n%s", format_table(rows))
    if args.json is not None:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        settings["threads"] = torch.get_num_threads()
        args.json.write_text(json.dumps({"settings": settings, "rows": rows}, indent=2))
    return rows


if __name__ == "__main__":
    main()
