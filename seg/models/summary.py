"""Parameters and FLOPs of a model, per column (part) and in total."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

logger = logging.getLogger(__name__)


def _parts(model: nn.Module) -> dict[str, list[nn.Module]]:
    if hasattr(model, "parts"):
        return model.parts()
    return {name: [child] for name, child in model.named_children()}


@torch.no_grad()
def count_flops(model: nn.Module, x: torch.Tensor) -> tuple[int, dict[str, dict[Any, int]]]:
    """FLOPs of one eval-mode forward pass on ``x``: the total, and FlopCounterMode's counts.

    PyTorch's FlopCounterMode counts matrix products and convolutions (2 FLOPs per
    multiply-add); the cheap elementwise ops are left out. The counts are keyed by module
    path, rooted at the model's class name (``MultiColumnSegNet.columns.0``).
    """
    was_training = model.training
    model.eval()
    try:
        with FlopCounterMode(display=False) as counter:
            model(x)
    finally:
        model.train(was_training)
    return counter.get_total_flops(), counter.get_flop_counts()


def _module_flops(module: nn.Module, key: str, counts: dict[str, dict[Any, int]]) -> int:
    """FLOPs of a module: its own count if its forward ran, else the sum over its children.

    A model may call a child's submodules directly (the multi-column net steps through its
    columns' stages), so the child itself never shows up in the counts.
    """
    if key in counts:
        return sum(counts[key].values())
    return sum(_module_flops(c, f"{key}.{n}", counts) for n, c in module.named_children())


def summarize_model(
    model: nn.Module, input_size: tuple[int, int, int, int] = (1, 3, 256, 256)
) -> dict[str, Any]:
    """Parameters and forward FLOPs (eval mode, at ``input_size`` (B,3,H,W)) per part and total.

    The parts are the model's columns plus the rest (decoder, heads), from ``model.parts()``.
    Returns ``{"input_size", "params", "flops", "parts": {name: {"params", "flops"}}}`` and
    logs it as a table.
    """
    device = next(model.parameters()).device
    if getattr(model, "devices", None):
        device = model.devices[0]
    x = torch.zeros(input_size, device=device)
    total_flops, counts = count_flops(model, x)
    root = type(model).__name__
    keys = {module: f"{root}.{name}" for name, module in model.named_modules()}
    parts = {}
    for part, modules in _parts(model).items():
        parts[part] = {
            "params": sum(p.numel() for m in modules for p in m.parameters()),
            "flops": sum(_module_flops(m, keys[m], counts) for m in modules),
        }
    summary = {
        "input_size": list(input_size),
        "params": sum(p.numel() for p in model.parameters()),
        "flops": total_flops,
        "parts": parts,
    }
    logger.info("%s\n%s", type(model).__name__, format_summary(summary))
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """A text table of :func:`summarize_model`'s result."""
    batch = summary["input_size"][0]
    size = "x".join(str(s) for s in summary["input_size"][2:])
    lines = [f"{'part':<24} {'params':>12} {'GFLOPs/img @' + size:>20}"]
    rows = [*summary["parts"].items(), ("total", summary)]
    for name, row in rows:
        lines.append(f"{name:<24} {row['params']:>12,} {row['flops'] / batch / 1e9:>20.3f}")
    return "\n".join(lines)
