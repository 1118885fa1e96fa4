"""Measurements for the training log beyond the loss: how long the step waits for data, peak
memory, and the run's hyperparameters as TensorBoard's HPARAMS tab wants them."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

HParam = float | int | str | bool


class WaitClock:
    """Host time spent waiting for a loader's next batch (no device synchronisation).

    ``for batch in clock.wrap(loader)``; :meth:`take` returns the seconds waited since the last
    call. Divided by the wall time of the same window (taken at log steps, which synchronise
    anyway) it is the fraction of the step time the loader costs.
    """

    def __init__(self) -> None:
        self.waited = 0.0

    def wrap(self, loader: Iterable) -> Iterator:
        iterator = iter(loader)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.waited += time.perf_counter() - start
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


# Config keys that are no hyperparameters: paths, launch and logging details, fault injection.
_NOT_HPARAMS = (
    "data.root",
    "data.download",
    "data.on_bad_sample",
    "data.folder.images",
    "data.folder.masks",
    "data.folder.image_extensions",
    "trainer.column_devices",
    "trainer.devices",
    "trainer.resume",
    "trainer.run_dir",
    "trainer.dist_timeout_s",
    "trainer.max_restarts",
    "trainer.num_workers",
    "trainer.keep_last",
    "trainer.ckpt_every_steps",
    "logging.",
)


def flatten_hparams(
    config: dict[str, Any], prefix: str = ""
) -> dict[str, float | int | str | bool]:
    """A resolved config (plain dicts and lists) -> ``{"optim.lr": 0.01, "aug.crop_size":
    "[256, 192]", ...}``: dotted keys, scalars kept, lists of scalars as text, lists of dicts
    indexed (``model.columns.0.widths``), None as ``"none"``; paths and launch options left out.
    """
    out: dict[str, HParam] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if name.startswith(_NOT_HPARAMS):
            continue
        if isinstance(value, dict):
            out.update(flatten_hparams(value, f"{name}."))
        elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
            out.update(flatten_hparams({str(i): v for i, v in enumerate(value)}, f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = str(list(value))
        elif value is None:
            out[name] = "none"
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
        else:
            out[name] = str(value)
    return out
