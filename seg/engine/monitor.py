"""Measurements for the training log beyond the loss: how long the step waits for data, peak
memory, and the run's hyperparameters as TensorBoard's HPARAMS tab wants them."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch

from seg.config import Config, flatten_config

HParam = float | int | str | bool


class WaitClock:
    """Host time spent waiting for a loader's next batch (no device synchronisation).

    ``for batch in clock.wrap(loader)``; :meth:`take` returns the seconds waited since the last
    call. Divided by the wall time of the same window (taken at log steps, which synchronise
    anyway) it is the fraction of the step time the loader costs.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.waited = 0.0
        self.clock = clock  # seconds, monotonic

    def wrap(self, loader: Iterable) -> Iterator:
        iterator = iter(loader)
        while True:
            start = self.clock()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.waited += self.clock() - start
            yield batch

    def take(self) -> float:
        waited, self.waited = self.waited, 0.0
        return waited


def memory_scalars(cuda_devices: Sequence[torch.device] = ()) -> dict[str, float]:
    """``perf/max_rss_gb``: this process's peak resident memory, GiB (not its loader workers);
    ``perf/cuda_max_mem_gb``: the largest peak of allocated tensor memory over ``cuda_devices``
    (a host-side query of the caching allocator; no synchronisation)."""
    out: dict[str, float] = {}
    try:
        import resource
    except ImportError:  # Windows
        resource = None
    if resource is not None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        out["perf/max_rss_gb"] = peak * (1 if sys.platform == "darwin" else 1024) / 2**30
    if cuda_devices:
        peak = max(torch.cuda.max_memory_allocated(d) for d in cuda_devices)
        out["perf/cuda_max_mem_gb"] = peak / 2**30
    return out


def flatten_hparams(cfg: Config) -> dict[str, HParam]:
    """A config -> ``{"optim.lr": 0.01, "aug.crop_size": "[256, 192]", ...}`` for TensorBoard's
    hparams: ``flatten_config``'s hyperparameters, lists as text, None as ``"none"``."""
    out: dict[str, HParam] = {}
    for name, value in flatten_config(cfg).items():
        if isinstance(value, list):
            out[name] = str(value)
        elif value is None:
            out[name] = "none"
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = str(value)
    return out
