"""The one module that talks to ``torch.distributed`` (as detectron2's ``comm.py``).

Every helper works unchanged in a single process, where it is a no-op. The process group is
described by the environment that torchrun (or torch's elastic launcher API) sets: ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``. Under
SLURM through hydra-submitit-launcher, :func:`export_slurm_environment` derives it from
submitit's job environment first.
"""

from __future__ import annotations

import datetime
import logging
import os
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def is_distributed() -> bool:
    """Whether this process belongs to an initialised process group."""
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def local_rank() -> int:
    """This process's index on its node (torchrun's ``LOCAL_RANK``)."""
    return int(os.environ.get("LOCAL_RANK", 0))


def is_main_process() -> bool:
    return rank() == 0


def launched_by_elastic() -> bool:
    """Whether torchrun or ``elastic_launch`` started this process (it may have world size 1)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def restart_count() -> int:
    """How often the job was restarted: torchrun's ``--max-restarts`` or a SLURM requeue."""
    elastic = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    return max(elastic, int(os.environ.get("SLURM_RESTART_COUNT", 0)))


def export_slurm_environment() -> None:
    """Under a submitit job with several tasks (SLURM, or submitit's local executor), set
    torchrun's variables from it.

    Every task is one replica (``tasks_per_node`` = replicas per node). ``CUDA_VISIBLE_DEVICES``
    is left alone, so that a replica may own several GPUs (``trainer.column_devices``).
    """
    if "RANK" in os.environ or os.environ.get("SUBMITIT_EXECUTOR") not in ("slurm", "local"):
        return
    from submitit import JobEnvironment
    from submitit.helpers import TorchDistributedEnvironment

    if JobEnvironment().num_tasks <= 1:
        return
    # overwrite: a MASTER_ADDR/MASTER_PORT set by a cluster's prolog (or by hand against
    # submitit's port collisions) would otherwise stop every task; submitit has read a
    # user's MASTER_PORT already.
    env = TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    log.info(
        "submitit task %d of %d, master %s:%d",
        env.rank,
        env.world_size,
        env.master_addr,
        env.master_port,
    )


def init_distributed(devices: list[torch.device], timeout_s: int = 1800) -> None:
    """Join the process group of the environment when ``WORLD_SIZE`` > 1: NCCL when this
    replica's devices are GPUs, gloo on the CPU. A no-op in a single process."""
    if is_distributed() or int(os.environ.get("WORLD_SIZE", 1)) <= 1:
        return
    timeout = datetime.timedelta(seconds=timeout_s)
    kwargs: dict[str, Any] = {}
    first = devices[0]
    if first.type == "cuda":
        torch.cuda.set_device(first)  # object collectives and barriers use the current GPU
        if len(set(devices)) == 1:
            # Bind NCCL to the replica's GPU; a replica spanning GPUs stays unbound, so that
            # its buffers on every GPU can take part in collectives (multi-device DDP).
            kwargs["device_id"] = first
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun's agent keeps one store for all attempts of a job; a restarted worker could
        # read the addresses of the failed attempt's workers from it and fail to connect
        # (pytorch/pytorch#135712). Each attempt gets keys of its own.
        agent = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            is_master=False,
            timeout=timeout,
        )
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        kwargs["store"] = dist.PrefixStore(f"seg/attempt_{attempt}", agent)
        kwargs.update(rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    backend = "nccl" if first.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=timeout, **kwargs)
    log.info("rank %d of %d joined the %s process group", rank(), world_size(), backend)


def destroy_distributed() -> None:
    if is_distributed():
        dist.destroy_process_group()


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def all_reduce_sum_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place (it must live on a device the backend serves)."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_buffers_(module: torch.nn.Module, src: int = 0) -> None:
    """Give every rank ``src``'s buffers (BatchNorm running statistics) in place.

    DDP broadcasts them at each forward pass, but each rank then updates its own copy with its
    own batch, so ranks disagree at the end of an epoch; validation makes them agree first.
    """
    if is_distributed():
        for buffer in module.buffers():
            dist.broadcast(buffer, src=src)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (a picklable Python object)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def shard(size: int, rank: int, world_size: int) -> range:
    """Contiguous part of ``range(size)`` for ``rank``: every index on exactly one rank, no
    padding (detectron2's InferenceSampler), so summed counts are exact."""
    bounds = np.linspace(0, size, world_size + 1).round().astype(int)
    return range(int(bounds[rank]), int(bounds[rank + 1]))
