"""Where a model runs: a device option (``trainer.column_devices`` in training, ``device`` and
``column_devices`` in evaluation and prediction) -> one ``torch.device`` per model column, for
``model.place(devices)``. The one device resolver of the project.

Composition with data parallelism: under torchrun, replica ``r`` of ``R`` on a node with ``G``
visible GPUs and a model of ``k`` columns gets, with ``auto``, GPUs ``r*k .. r*k+k-1`` when
``R*k <= G`` (8 GPUs = 4 replicas x 2 columns), else all its columns on GPU ``r`` (8 replicas of
the whole net). The result is then a multi-device module: DDP wraps it with ``device_ids=None``.
"""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Sequence
from pathlib import Path

import torch

from seg.errors import ConfigError

log = logging.getLogger(__name__)


def auto_device_indices(
    n_columns: int, device_count: int, local_rank: int = 0, local_world_size: int = 1
) -> list[int] | None:
    """GPU index of each column of replica ``local_rank`` under ``auto``; ``None`` means CPU.

    Pure function of the counts, so the mapping is testable without GPUs.
    """
    if not 0 <= local_rank < local_world_size:
        raise ConfigError(f"local rank {local_rank} is outside 0..{local_world_size - 1}")
    if device_count == 0:
        return None
    if local_world_size * n_columns <= device_count:
        first = local_rank * n_columns
        return list(range(first, first + n_columns))
    if local_world_size <= device_count:
        return [local_rank] * n_columns
    raise ConfigError(
        f"{local_world_size} processes per node but only {device_count} CUDA device(s) are "
        "visible: start at most one process per GPU, or give the devices explicitly"
    )


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return mps is not None and mps.is_available()


def _parse_device(text: str, device_count: int, local_rank: int, key: str) -> torch.device:
    """One device name -> a device that exists on this machine."""
    try:
        device = torch.device(text)
    except (RuntimeError, TypeError) as err:
        raise ConfigError(
            f"{key}: {text!r} is not a device; expected 'cpu', 'cuda', 'cuda:N', 'mps' or 'auto'"
        ) from err
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type == "cuda":
        # A bare "cuda" means this replica's GPU, so one config serves every torchrun rank.
        index = local_rank if device.index is None else device.index
        if device_count == 0:
            raise ConfigError(f"{key}: {text!r} requested but no CUDA device is visible; use auto")
        if index >= device_count:
            raise ConfigError(
                f"{key}: cuda:{index} requested but only {device_count} CUDA "
                f"device(s) are visible (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
            )
        return torch.device("cuda", index)
    if device.type == "mps" and _mps_available():
        return device
    raise ConfigError(f"{key}: {text!r} is not available on this machine")


def resolve_devices(
    spec: str | Sequence[str],
    n_columns: int,
    *,
    key: str = "devices",
    mps: bool = False,
    device_count: int | None = None,
    local_rank: int | None = None,
    local_world_size: int | None = None,
) -> list[torch.device]:
    """A device option -> one device per column of a model of ``n_columns`` columns.

    ``spec``: ``auto`` (or ``["auto"]``): with GPUs, one per column when this node's replicas
    times columns fit the visible ones, else this replica's GPU for every column (module
    docstring); without GPUs the CPU, or Apple's MPS where ``mps`` allows it (evaluation and
    prediction do; training's precision and DDP paths are not tested on MPS). One device
    (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``["mps"]``): every column there, a bare ``cuda``
    being this replica's GPU. A list of ``n_columns`` devices: column ``j`` on the ``j``-th.
    ``device_count``, ``local_rank`` and ``local_world_size`` default to the visible GPUs and
    torchrun's ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``. Errors name ``key`` and the bad entry.
    """
    if device_count is None:
        device_count = torch.cuda.device_count()
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if local_world_size is None:
        local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    names = [spec] if isinstance(spec, str) else [str(s) for s in spec]
    if names == ["auto"]:
        indices = auto_device_indices(n_columns, device_count, local_rank, local_world_size)
        if indices is not None:
            return [torch.device("cuda", i) for i in indices]
        no_gpu = torch.device("mps") if mps and _mps_available() else torch.device("cpu")
        return [no_gpu] * n_columns
    if "auto" in names:
        raise ConfigError(f"{key}: 'auto' must be the only entry, got {names}")
    if len(names) == 1:
        names = names * n_columns
    if len(names) != n_columns:
        raise ConfigError(
            f"{key} has {len(names)} entries {names} but the model has {n_columns} "
            "column(s): give one device for all, one per column, or auto"
        )
    devices = [_parse_device(n, device_count, local_rank, key) for n in names]
    explicit = {d.index for n, d in zip(names, devices, strict=True) if n.startswith("cuda:")}
    if explicit and local_world_size > 1 and device_count >= local_world_size * len(explicit):
        # Every replica of this node sees all its GPUs (no per-task binding) and would take the
        # same ones: NCCL stops at its first collective with "Duplicate GPU detected".
        raise ConfigError(
            f"{key}={names}: with {local_world_size} replicas on this node, GPU indices put "
            "every replica on the same GPUs; use auto (replica r takes GPUs r*k..r*k+k-1 for "
            "a k-column model) or a bare 'cuda' (this replica's GPU)"
        )
    return devices


def warn_if_emulated_bf16(device: torch.device, setting: str, instead: str) -> None:
    """Warn that ``setting`` (a bf16 choice) runs emulated, several times slower than fp32, on
    ``device`` when it is a CPU without bf16 units (:func:`native_bf16`); ``instead``: what to
    use. Training's and inference's precision checks share it."""
    if device.type == "cpu" and not native_bf16(device):
        log.warning(
            "%s on a CPU without AVX512-BF16 or AMX: bfloat16 is emulated here and runs several "
            "times slower than fp32; use %s",
            setting,
            instead,
        )


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bfloat16 in hardware: a CUDA device with bf16 units, a CPU with
    AVX512-BF16 or AMX. Elsewhere bf16 is emulated: on an AVX2 CPU a bf16 convolution under
    autocast runs ~36x slower than in fp32 (a 3x3 conv of 8x64x160x120, Zen 3), and the CPU
    recipes train ~7x slower than in fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "cpu":
        return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return False


def cpuinfo_field(name: str) -> str | None:
    """The first ``name : value`` of /proc/cpuinfo (Linux), None where there is none."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return None
    for line in cpuinfo.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return None


def cpu_isa() -> str:
    """The vector extensions that set this CPU's kernels: torch's capability (``AVX2``,
    ``AVX512``), then VNNI (int8 in ONNX Runtime) and BF16 (bf16 in torch), e.g. ``AVX2`` or
    ``AVX512 VNNI BF16``: timings and int8 numerics compare only within one kind."""
    features = [torch.backends.cpu.get_cpu_capability()]
    if cpu_has_vnni():
        features.append("VNNI")
    if native_bf16(torch.device("cpu")):
        features.append("BF16")
    return " ".join(features)


def cpu_has_vnni() -> bool:
    """Whether this CPU has x86's 8-bit dot product with 32-bit sums (AVX512-VNNI or AVX-VNNI),
    which ONNX Runtime's uint8 x int8 kernels need to be exact (``seg.inference.quantize``)."""
    flags = set((cpuinfo_field("flags") or "").split())
    return bool(flags & {"avx512_vnni", "avx_vnni"}) or torch.cpu._is_vnni_supported()


def x86_cpu() -> bool:
    """Whether this machine's CPU is x86 (where the int8 kernels differ with VNNI)."""
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")
