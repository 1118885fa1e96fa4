"""Which device each column lives on: ``model.devices`` -> a list of ``torch.device``.

Composition with data parallelism: under torchrun, replica ``r`` of ``R`` on a node with ``G``
visible GPUs and a model of ``k`` columns gets, with ``auto``, GPUs ``r*k .. r*k+k-1`` when
``R*k <= G`` (8 GPUs = 4 replicas x 2 columns), else all its columns on GPU ``r`` (8 replicas of
the whole net). The result is then a multi-device module: DDP wraps it with ``device_ids=None``.
"""

from __future__ import annotations

import os

import torch


def auto_device_indices(
    n_columns: int, device_count: int, local_rank: int = 0, local_world_size: int = 1
) -> list[int] | None:
    """GPU index of each column of replica ``local_rank`` under ``auto``; ``None`` means CPU.

    Pure function of the counts, so the mapping is testable without GPUs.
    """
    if not 0 <= local_rank < local_world_size:
        raise ValueError(f"local rank {local_rank} is outside 0..{local_world_size - 1}")
    if device_count == 0:
        return None
    if local_world_size * n_columns <= device_count:
        first = local_rank * n_columns
        return list(range(first, first + n_columns))
    if local_world_size <= device_count:
        return [local_rank] * n_columns
    raise ValueError(
        f"{local_world_size} processes per node but only {device_count} CUDA device(s) are "
        "visible: start at most one process per GPU, or set model.devices explicitly"
    )


def _parse_device(text: str, device_count: int, local_rank: int) -> torch.device:
    """One entry of ``model.devices`` -> a device that exists on this machine."""
    try:
        device = torch.device(text)
    except (RuntimeError, TypeError) as err:
        raise ValueError(
            f"model.devices: {text!r} is not a device; expected 'cpu', 'cuda', 'cuda:N', "
            "'mps' or ['auto']"
        ) from err
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type == "cuda":
        # A bare "cuda" means this replica's GPU, so one config serves every torchrun rank.
        index = local_rank if device.index is None else device.index
        if device_count == 0:
            raise ValueError(f"model.devices: {text!r} requested but no CUDA device is visible")
        if index >= device_count:
            raise ValueError(
                f"model.devices: cuda:{index} requested but only {device_count} CUDA "
                f"device(s) are visible (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
            )
        return torch.device("cuda", index)
    if device.type == "mps" and torch.backends.mps.is_available():
        return device
    raise ValueError(f"model.devices: {text!r} is not available on this machine")


def resolve_devices(
    spec: list[str],
    n_columns: int,
    device_count: int | None = None,
    local_rank: int | None = None,
    local_world_size: int | None = None,
) -> list[torch.device]:
    """``model.devices`` (e.g. ``["auto"]``, ``["cuda:0", "cuda:1"]``) -> one device per column.

    ``device_count``, ``local_rank`` and ``local_world_size`` default to the visible GPUs and
    torchrun's ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``. Raises ``ValueError`` for a list of the
    wrong length or a device that is not available.
    """
    if device_count is None:
        device_count = torch.cuda.device_count()
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if local_world_size is None:
        local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    spec = [str(s) for s in spec]
    if spec == ["auto"]:
        indices = auto_device_indices(n_columns, device_count, local_rank, local_world_size)
        if indices is None:
            return [torch.device("cpu")] * n_columns
        return [torch.device("cuda", i) for i in indices]
    if "auto" in spec:
        raise ValueError(f"model.devices: 'auto' must be the only entry, got {spec}")
    if len(spec) != n_columns:
        raise ValueError(
            f"model.devices has {len(spec)} entries {spec} but the model has {n_columns} "
            f"column(s): give one device per column, or ['auto']"
        )
    return [_parse_device(s, device_count, local_rank) for s in spec]
