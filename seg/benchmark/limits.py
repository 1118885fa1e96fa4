"""The machine's measured limits: a large fp32 matrix product and a dense 3x3 convolution.

The convolution is the relevant ceiling for the models here (they are stacks of 3x3 convs), so
the model table quotes each model's achieved GFLOP/s as a fraction of it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from seg.benchmark.timing import time_calls


def gemm_gflops(
    device: torch.device, n: int = 2048, dtype: torch.dtype = torch.float32, seconds: float = 3.0
) -> dict[str, Any]:
    """GFLOP/s of an ``n x n @ n x n`` product (2 n^3 FLOPs per call)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    calls, elapsed = time_calls(lambda: a @ b, device, 2, 50, seconds)
    return {
        "name": f"matmul {n}x{n}x{n} {str(dtype).removeprefix('torch.')}",
        "gflops_per_s": 2 * n**3 * calls / elapsed / 1e9,
        "calls": calls,
    }


def conv_gflops(
    device: torch.device,
    channels: int = 64,
    size: tuple[int, int] = (128, 128),
    batch: int = 8,
    dtype: torch.dtype = torch.float32,
    seconds: float = 3.0,
) -> dict[str, Any]:
    """GFLOP/s of a forward dense 3x3 convolution, ``channels`` -> ``channels``, padding 1, on a
    channels_last (batch, channels, H, W) input (2 x 9 x C_in x C_out x H x W FLOPs per image)."""
    x = torch.randn(batch, channels, *size, device=device, dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(channels, channels, 3, 3, device=device, dtype=dtype)
    w = w.contiguous(memory_format=torch.channels_last)
    flops = 2 * 9 * channels * channels * size[0] * size[1] * batch
    with torch.no_grad():
        calls, elapsed = time_calls(lambda: F.conv2d(x, w, padding=1), device, 2, 50, seconds)
    return {
        "name": f"conv3x3 {channels}->{channels} {size[0]}x{size[1]} batch {batch} "
        f"{str(dtype).removeprefix('torch.')} channels_last",
        "gflops_per_s": flops * calls / elapsed / 1e9,
        "calls": calls,
    }


def measure_limits(
    device: torch.device, dtype: torch.dtype = torch.float32, seconds: float = 3.0
) -> dict[str, dict[str, Any]]:
    """Both limits: ``{"gemm": {...}, "conv3x3": {...}}``."""
    return {
        "gemm": gemm_gflops(device, dtype=dtype, seconds=seconds),
        "conv3x3": conv_gflops(device, dtype=dtype, seconds=seconds),
    }
