"""Timing helpers shared by the benchmark sections."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA kernels run asynchronously); no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(
    fn: Callable[[], object],
    device: torch.device,
    warmup: int,
    max_calls: int,
    seconds: float,
) -> tuple[int, float]:
    """Call ``fn`` ``warmup`` times untimed, then at most ``max_calls`` times (at least once,
    fewer once ``seconds`` are spent); returns (timed calls, their seconds).

    Warmup stops early once it has taken ``seconds / 2``: a model whose single step takes
    longer than the budget (fcn_resnet50 on two cores) gets one warmup and one timed step.
    """
    start = time.perf_counter()
    for _ in range(warmup):
        fn()
        sync(device)
        if time.perf_counter() - start > seconds / 2:
            break
    calls, start = 0, time.perf_counter()
    while calls < max_calls and (calls == 0 or time.perf_counter() - start < seconds):
        fn()
        sync(device)
        calls += 1
    return calls, time.perf_counter() - start
