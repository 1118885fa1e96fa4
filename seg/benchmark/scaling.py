"""Data-parallel scaling: one model's training throughput with 1 and N DDP processes.

On the CPU the processes share the cores (gloo; each gets ``cores // N`` threads, so the total
stays the machine's); on CUDA each process drives one GPU (nccl). The per-process batch is the
same at every N, so ideal scaling multiplies img/s by N on GPUs and keeps it flat on a CPU.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from seg.benchmark.models import ModelBenchSettings, autocast, load_model_config, training_loss
from seg.benchmark.timing import sync
from seg.models import build_model


def cpu_cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _worker(
    rank: int, world: int, model_name: str, s: ModelBenchSettings, init: str, out: str
) -> None:
    """One DDP replica: fixed warmup and step counts (every rank must run the same number of
    collectives), timed between barriers; rank 0 writes the result to ``out``."""
    cuda = s.device.startswith("cuda")
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if cuda else "gloo", init_method=init, rank=rank, world_size=world
    )
    try:
        cfg = load_model_config(model_name, str(device), s.channels_last)
        torch.manual_seed(0)
        model = DDP(build_model(cfg).train(), device_ids=[device] if cuda else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(s.batch, 3, *s.size, device=device)
        target = torch.randint(0, 2, (s.batch, *s.size), device=device)
        for i in range(s.warmup + s.steps):
            if i == s.warmup:
                sync(device)
                dist.barrier()
                start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            with autocast(device, s.precision):
                loss = training_loss(model(x), target, cfg.aux_weight)
            loss.backward()
            optimizer.step()
        sync(device)
        dist.barrier()
        elapsed = time.perf_counter() - start
        if rank == 0:
            result = {"img_per_s": world * s.batch * s.steps / elapsed, "steps": s.steps}
            Path(out).write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def ddp_throughput(model_name: str, processes: int, s: ModelBenchSettings) -> dict[str, Any]:
    """Total training img/s of ``processes`` spawned DDP replicas of ``model_name``, each with
    batch ``s.batch``; on the CPU each gets ``cpu_cores() // processes`` threads."""
    cuda = s.device.startswith("cuda")
    threads = None if cuda else max(1, cpu_cores() // processes)
    s = replace(s, threads=threads)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        init = (Path(tmp) / "rendezvous").as_uri()
        mp.start_processes(
            _worker, (processes, model_name, s, init, str(out)), processes, start_method="spawn"
        )
        result = json.loads(out.read_text())
    return {
        "processes": processes,
        "backend": "nccl" if cuda else "gloo",
        "threads_per_process": threads,
        **result,
    }


def measure_scaling(
    model_name: str, s: ModelBenchSettings, max_processes: int | None = None
) -> dict[str, Any]:
    """img/s with 1..N processes (CPU: 1 and 2; CUDA: 1..visible GPUs) and each N's ratio to 1
    process. ``note`` says what was skipped."""
    cuda = s.device.startswith("cuda")
    top = torch.cuda.device_count() if cuda else 2
    top = min(top, max_processes) if max_processes else top
    rows = [ddp_throughput(model_name, n, s) for n in range(1, top + 1)]
    for row in rows:
        row["ratio_to_1"] = row["img_per_s"] / rows[0]["img_per_s"]
    note = (
        f"1..{top} GPUs, nccl"
        if cuda
        else f"CPU gloo, {cpu_cores()} cores split between the processes; GPU scaling (1..N "
        "GPUs) runs with --device cuda"
    )
    return {"model": model_name, "batch_per_process": s.batch, "rows": rows, "note": note}
