"""Data-parallel scaling: one model's training throughput with 1 and N DDP processes.

On the CPU the processes share the cores (gloo; each gets ``cores // N`` threads, so the total
stays the machine's); on CUDA each process drives one GPU (nccl): ``--device cuda`` uses GPUs
0..N-1, ``cuda:K`` GPUs K..K+N-1. The per-process batch is the same at every N, so ideal scaling
multiplies img/s by N on GPUs and keeps it flat on a CPU.

The processes meet at a store the parent opens on a port the OS picks and holds until they are
done, as torchrun's agent does (no free-port probe that another program could take first).
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

from seg import distributed as du
from seg.benchmark.models import ModelBenchSettings, build_placed, load_config
from seg.benchmark.timing import sync
from seg.engine.step import build_stepper
from seg.errors import ConfigError


def cpu_cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def first_gpu(device: str) -> int | None:
    """The GPU index a ``--device`` string starts from (``cuda`` 0, ``cuda:K`` K); None for
    the CPU."""
    parsed = torch.device(device)
    if parsed.type == "cpu":
        return None
    if parsed.type != "cuda":
        raise ConfigError(f"the scaling benchmark runs on cpu or cuda[:K], not {device!r}")
    return parsed.index or 0


def gpus_from(device: str, visible: int) -> int:
    """How many GPUs a sweep from ``device``'s index can use of ``visible``."""
    start = first_gpu(device) or 0
    if start >= visible:
        raise ConfigError(f"--device {device}: only {visible} GPU(s) visible (cuda:0..)")
    return visible - start


def _worker(
    rank: int, world: int, model_name: str, s: ModelBenchSettings, port: int, out: str
) -> None:
    """One DDP replica running the engine's training step: fixed warmup and step counts (every
    rank must run the same number of collectives), timed between barriers; rank 0 writes the
    result to ``out``."""
    gpu = first_gpu(s.device)
    if s.threads is not None:
        torch.set_num_threads(s.threads)
    device = torch.device("cpu") if gpu is None else torch.device("cuda", gpu + rank)
    cuda = gpu is not None
    # The environment torchrun gives a local worker, with its agent's store (held by the
    # parent); seg.distributed joins from it.
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHELASTIC_USE_AGENT_STORE="True",
    )
    du.init_distributed([device])
    try:
        cfg = load_config(model_name, s)
        torch.manual_seed(0)
        model = build_placed(cfg.model, str(device)).train()
        # As the engine does: one process trains the bare model (DDP only with several).
        ddp = DDP(model, device_ids=[device] if cuda else None) if du.is_distributed() else model
        stepper = build_stepper(ddp, model, cfg, total_steps=1_000_000)
        x = torch.randn(s.batch, 3, *s.size, device=device)
        target = torch.randint(0, 2, (s.batch, *s.size), device=device)
        for i in range(s.warmup + s.steps):
            if i == s.warmup:
                sync(device)
                du.barrier()
                start = time.perf_counter()
            stepper.step(x, target)
        sync(device)
        du.barrier()
        elapsed = time.perf_counter() - start
        if rank == 0:
            result = {"img_per_s": world * s.batch * s.steps / elapsed, "steps": s.steps}
            Path(out).write_text(json.dumps(result))
    finally:
        du.destroy_distributed()


def ddp_throughput(model_name: str, processes: int, s: ModelBenchSettings) -> dict[str, Any]:
    """Total training img/s of ``processes`` spawned DDP replicas of ``model_name``, each with
    batch ``s.batch``; on the CPU each gets ``cpu_cores() // processes`` threads."""
    cuda = first_gpu(s.device) is not None
    threads = None if cuda else max(1, cpu_cores() // processes)
    s = replace(s, threads=threads)
    # Port 0: the OS picks a free port and the store holds it until the workers are done.
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        mp.start_processes(
            _worker,
            (processes, model_name, s, store.port, str(out)),
            processes,
            start_method="spawn",
        )
        result = json.loads(out.read_text())
    del store
    return {
        "processes": processes,
        "backend": "nccl" if cuda else "gloo",
        "threads_per_process": threads,
        **result,
    }


def measure_scaling(
    model_name: str, s: ModelBenchSettings, max_processes: int | None = None
) -> dict[str, Any]:
    """img/s with 1..N processes (CPU: 1 and 2; CUDA: 1..the visible GPUs from ``s.device``'s
    index on) and each N's ratio to 1 process. ``note`` says what was skipped."""
    cuda = first_gpu(s.device) is not None
    top = gpus_from(s.device, torch.cuda.device_count()) if cuda else 2
    top = min(top, max_processes) if max_processes else top
    rows = [ddp_throughput(model_name, n, s) for n in range(1, top + 1)]
    for row in rows:
        row["ratio_to_1"] = row["img_per_s"] / rows[0]["img_per_s"]
    note = (
        f"1..{top} GPUs from {s.device}, nccl"
        if cuda
        else f"CPU gloo, {cpu_cores()} cores split between the processes; GPU scaling (1..N "
        "GPUs) runs with --device cuda"
    )
    return {"model": model_name, "batch_per_process": s.batch, "rows": rows, "note": note}
