"""The data pipeline: how fast the real training set is loaded and augmented, and how much of a
real training step waits for it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from seg.benchmark.models import ModelBenchSettings, build_placed, load_config
from seg.benchmark.timing import sync
from seg.config import AugConfig, BadSamplePolicy, DataConfig
from seg.data import build_loader, build_train_dataset
from seg.data.copy_paste import PastePeople, RawPool
from seg.data.transforms import SourceTransforms, pipelines
from seg.engine.monitor import WaitClock
from seg.engine.step import build_stepper


def _endless(loader: torch.utils.data.DataLoader) -> Iterator[dict[str, Any]]:
    while True:
        yield from loader


def loader_throughput(
    data: DataConfig,
    aug: AugConfig,
    batch: int,
    num_workers: int,
    max_batches: int = 30,
    seconds: float = 8.0,
) -> dict[str, Any]:
    """Samples/s of the training split with the full training transform at ``aug.crop_size``,
    loaded by ``num_workers`` workers (0: in the main process). The first batch (worker start)
    is not timed; per worker means per loading process."""
    dataset = build_train_dataset(data, aug, seed=0)
    loader = build_loader(dataset, batch, train=True, num_workers=num_workers, pin_memory=False)
    batches = _endless(loader)
    next(batches)
    count, start = 0, time.perf_counter()
    while count < max_batches and (count == 0 or time.perf_counter() - start < seconds):
        next(batches)
        count += 1
    elapsed = time.perf_counter() - start
    del batches, loader  # shuts the persistent workers down
    samples_per_s = count * batch / elapsed
    return {
        "num_workers": num_workers,
        "samples_per_s": samples_per_s,
        "samples_per_s_per_worker": samples_per_s / max(num_workers, 1),
        "batches": count,
        "dataset_size": len(dataset),
    }


class _TimedPool:
    """A ``RawPool`` that adds the time its ``load_raw`` calls take to ``seconds``."""

    def __init__(self, pool: RawPool) -> None:
        self.pool, self.seconds = pool, 0.0
        self.on_bad_sample: BadSamplePolicy = pool.on_bad_sample

    def __len__(self) -> int:
        return len(self.pool)

    def load_raw(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        start = time.perf_counter()
        try:
            return self.pool.load_raw(index)
        finally:
            self.seconds += time.perf_counter() - start


def transform_steps(
    data: DataConfig, aug: AugConfig, samples: int = 48, seed: int = 0
) -> dict[str, Any]:
    """Where one training sample's time goes, in the main process: reading the photo and its
    mask, then each step of the training transform in order (``PastePeople``'s reading of the
    photos it cuts people from on a row of its own), as mean ms per sample over ``samples``
    random samples of the training split (negatives included, at their share). Each step is
    called on its own, drawing with its own generator, so a step with a probability runs on
    about that share of the samples, as in training."""
    dataset = build_train_dataset(data, aug, seed=seed)
    transform = dataset.transform  # one pipeline, or one per source (data.train_scales)
    per_source = isinstance(transform, SourceTransforms)
    steps_of = {id(p): list(p.transforms) for p in pipelines(transform)}
    steps = next(iter(steps_of.values()))  # the same steps in each, at other sizes
    pools: dict[int, _TimedPool] = {}
    for pipeline_steps in steps_of.values():
        for i, step in enumerate(pipeline_steps):
            if isinstance(step, PastePeople):
                pools.setdefault(i, _TimedPool(step.pool))
                step.pool = pools[i]
    names = [type(step).__name__ for step in steps]
    seconds = np.zeros(len(steps) + 1)
    order = np.random.default_rng(seed).permutation(len(dataset))[:samples]
    for index in order:
        start = time.perf_counter()
        image, mask = dataset.load_raw(int(index))
        seconds[0] += time.perf_counter() - start
        sample = {"image": image, "mask": mask}
        source = dataset.refs[int(index)].source
        pipeline = transform.for_source(source) if per_source else transform
        for i, step in enumerate(steps_of[id(pipeline)], start=1):
            start = time.perf_counter()
            sample = step(**sample)
            seconds[i] += time.perf_counter() - start
    rows = [{"step": "read photo + mask", "ms_per_sample": float(1e3 * seconds[0] / len(order))}]
    for i, name in enumerate(names):
        ms = float(1e3 * seconds[i + 1] / len(order))
        if i in pools:
            reading = 1e3 * pools[i].seconds / len(order)
            rows.append({"step": f"{name}: reading pasted people", "ms_per_sample": reading})
            rows.append({"step": f"{name}: the rest", "ms_per_sample": ms - reading})
        else:
            rows.append({"step": name, "ms_per_sample": ms})
    total = sum(r["ms_per_sample"] for r in rows)
    for r in rows:
        r["share"] = r["ms_per_sample"] / total if total > 0 else 0.0
    return {"samples": len(order), "ms_per_sample": total, "rows": rows}


def data_wait_share(
    model_name: str,
    data: DataConfig,
    aug: AugConfig,
    num_workers: int,
    s: ModelBenchSettings,
    warmup: int = 2,
) -> dict[str, Any]:
    """A short real training loop (``model_name``, batch ``s.batch``, crops at
    ``aug.crop_size``, the engine's training step) on the training split: img/s and the share
    of its wall time spent waiting for the next batch (the engine's
    ``perf/data_wait_fraction``); ``s.precision`` as in the model table."""
    cfg = load_config(model_name, s)
    torch.manual_seed(0)
    model = build_placed(cfg.model, s.device).train()
    device = model.devices[0]
    stepper = build_stepper(model, model, cfg, total_steps=1_000_000)
    dataset = build_train_dataset(data, aug, seed=0)
    loader = build_loader(dataset, s.batch, train=True, num_workers=num_workers)
    clock = WaitClock()
    steps, start = 0, 0.0
    for i, batch in enumerate(clock.wrap(_endless(loader))):
        if i == warmup:  # worker start-up and first steps are not timed
            sync(device)
            clock.take()
            start = time.perf_counter()
        elif i > warmup:
            steps += 1
            if steps >= s.steps or time.perf_counter() - start >= s.seconds:
                break
        stepper.step(batch["image"], batch["mask"])
    sync(device)
    elapsed = time.perf_counter() - start
    del loader
    return {
        "model": model_name,
        "num_workers": num_workers,
        "train_img_per_s": steps * s.batch / elapsed,
        "data_wait_fraction": min(1.0, clock.take() / elapsed),
        "steps": steps,
    }
