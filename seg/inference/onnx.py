"""ONNX: export, the check against PyTorch, and ONNX Runtime as an inference backend.

ONNX export with dynamic batch, height and width, checked against PyTorch in ONNX Runtime.

The graph takes ``image``: float32 (batch, 3, height, width), RGB normalised with the training
config's mean/std (the eval preset's output), and returns ``logits``: (batch, K, height,
width), the model's ``"out"`` in eval mode (no auxiliary heads). Preprocessing facts (eval
size, mean, std, size divisor) are stored in the file's metadata (``seg.*`` keys).

Exporter: torch 2.14's default, ``torch.onnx.export(..., dynamo=True)`` (``torch.export`` with
symbolic shapes, needs ``onnxscript``). The older TorchScript exporter (``dynamo=False``) cannot
export these models with dynamic height and width: the multi-column net's feature exchange
uses ``adaptive_avg_pool2d`` to a size read from another tensor, which it only converts for
constant sizes. Any height and width work in the exported graph, not only multiples of the
model's ``size_divisor``: the example input is given odd sides on purpose, so that the traced
graph contains the internal pad-to-a-multiple and crop-back path (with a multiple, tracing
would skip the zero pad and the graph would fail on other sizes). ``compare_with_onnx`` checks
sizes of both kinds.

Inference backend (``backend=onnxruntime`` of ``scripts/predict.py`` and
``scripts/evaluate.py``): :func:`cached_export` exports a checkpoint once, beside it, under a
name keyed by the checkpoint's content and the exporter (a retrained checkpoint never runs a
stale graph), checked against PyTorch on the way; :class:`OnnxRuntimeModel` runs the file with
the interface the predictors call (``model(batch)["out"]``), so batching, any input size, flip
and scale test-time augmentation, sliding windows and video all work unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import hashlib
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from seg.config import AugConfig, Config
from seg.data.batching import pad_batch
from seg.data.transforms import build_eval_transform, check_aug_config, eval_pad_value
from seg.errors import ConfigError, DataError, MissingFileError, UserError
from seg.fileio import atomic_path, temp_beside

log = logging.getLogger(__name__)

INPUT_NAME, OUTPUT_NAME = "image", "logits"
AXES = ("batch", "height", "width")  # names of the dynamic axes 0, 2 and 3 in the ONNX file


class ExportMismatchError(UserError, RuntimeError):
    """ONNX Runtime's logits or masks differ from PyTorch's beyond the tolerances."""


class UnreadableOnnxError(DataError):
    """An ONNX file that ONNX Runtime cannot parse (damaged, truncated, not ONNX)."""


class LogitsOnly(nn.Module):
    """``model(x)["out"]``: the exported graph returns a tensor, not the training dict."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        """(B, 3, H, W) -> logits (B, K, H, W)."""
        return self.model(x)["out"]


def cpu_copy(model: nn.Module) -> nn.Module:
    """An eval-mode copy of ``model`` with every part on the CPU (the caller's is untouched)."""
    model = copy.deepcopy(model).eval()
    place = getattr(model, "place", None)
    if place is not None:
        return place([torch.device("cpu")] * getattr(model, "num_columns", 1))
    return model.cpu()


def export_onnx(
    model: nn.Module,
    path: Path,
    example_hw: Sequence[int] = (256, 192),
    opset: int | None = None,
    metadata: dict[str, str] | None = None,
) -> Path:
    """Export ``model``'s logits to ``path`` (one file, atomically; < 2 GB); returns ``path``.

    ``example_hw`` is the traced input size, made odd (see the module docstring); the batch,
    height and width stay dynamic. ``opset`` None takes the exporter's default.
    """
    from torch.export import Dim

    net = LogitsOnly(cpu_copy(model)).eval()
    h, w = (int(s) | 1 for s in example_hw)  # odd: not a multiple of any size divisor
    example = torch.randn(2, 3, h, w)  # batch 2: torch.export specialises sizes 0 and 1
    auto = {0: Dim.AUTO, 2: Dim.AUTO, 3: Dim.AUTO}
    program = torch.onnx.export(
        net,
        (example,),
        None,
        dynamo=True,
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        dynamic_shapes={"x": auto},
        opset_version=opset,
        verbose=False,
    )
    shape = program.model.graph.inputs[0].shape
    program.rename_axes({shape[i]: name for i, name in zip((0, 2, 3), AXES, strict=True)})
    program.model.metadata_props.update(metadata or {})
    with atomic_path(path) as tmp:
        program.save(tmp, external_data=False)
    return path


def model_metadata(model: nn.Module, cfg: Config) -> dict[str, str]:
    """What a user of the ONNX file needs to prepare its input (``seg.*`` metadata keys)."""
    aug = check_aug_config(cfg.aug)
    name = getattr(cfg.model.name, "value", cfg.model.name)
    return {
        "seg.model": str(name),
        "seg.input": "float32 (batch, 3, height, width) RGB, (x / 255 - mean) / std",
        "seg.output": "logits (batch, classes, height, width); class 1 = person",
        "seg.mean": ",".join(f"{v:g}" for v in aug.mean),
        "seg.std": ",".join(f"{v:g}" for v in aug.std),
        "seg.eval_size": f"{aug.eval_size[0]},{aug.eval_size[1]}",
        "seg.size_divisor": str(getattr(model, "size_divisor", 1)),
    }


def onnx_session(
    path: Path, providers: list[Any] | None = None, threads: int = 0, optimize: bool = True
) -> Any:
    """An ONNX Runtime session (CPU unless ``providers`` says otherwise), with all graph
    optimisations (none with ``optimize=False``: every node runs as written, so a quantised
    graph's DequantizeLinear -> float op -> QuantizeLinear are not fused into integer kernels);
    ``threads`` > 0 caps its intra-op threads (0: ONNX Runtime's default, one per physical
    core)."""
    import onnxruntime as ort

    if not path.is_file():
        raise MissingFileError(f"{path}: ONNX file does not exist")
    options = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    options.graph_optimization_level = level.ORT_ENABLE_ALL if optimize else level.ORT_DISABLE_ALL
    if threads > 0:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1  # one graph at a time: the batch is the parallelism
    try:
        return ort.InferenceSession(
            str(path), options, providers=providers or ["CPUExecutionProvider"]
        )
    except (
        ort.capi.onnxruntime_pybind11_state.InvalidProtobuf,
        ort.capi.onnxruntime_pybind11_state.InvalidGraph,
    ) as err:
        raise UnreadableOnnxError(
            f"{path}: not a readable ONNX graph ({err}); if it is a cached export, delete it "
            "and it is exported again"
        ) from err


@dataclass
class ExportCheck:
    """PyTorch vs ONNX Runtime on the same batches."""

    max_abs_diff: float  # largest |logit difference| over all batches
    mask_agreement: float  # fraction of pixels whose argmax agrees, over all batches
    cases: list[dict[str, Any]] = field(default_factory=list)  # per batch: shape, diff, agreement

    def ok(self, tolerance: float, min_agreement: float) -> bool:
        return self.max_abs_diff <= tolerance and self.mask_agreement >= min_agreement


@torch.inference_mode()
def compare_with_onnx(model: nn.Module, session: Any, batches: Sequence[Tensor]) -> ExportCheck:
    """Run each (B, 3, H, W) batch through ``model`` (on CPU, eval) and ``session``."""
    net = LogitsOnly(cpu_copy(model)).eval()
    cases, agree, total = [], 0, 0
    for batch in batches:
        ref = net(batch.cpu()).float().numpy()
        got = session.run([OUTPUT_NAME], {INPUT_NAME: batch.cpu().numpy()})[0]
        if got.shape != ref.shape:
            raise ValueError(f"ONNX output shape {got.shape} != PyTorch's {ref.shape}")
        same = int((got.argmax(1) == ref.argmax(1)).sum())
        pixels = ref.shape[0] * ref.shape[2] * ref.shape[3]
        diff = float(np.abs(got - ref).max())
        cases.append({"shape": list(batch.shape), "max_abs_diff": diff, "agreement": same / pixels})
        agree, total = agree + same, total + pixels
    if not cases:
        raise ValueError("compare_with_onnx needs at least one batch")
    worst = max(c["max_abs_diff"] for c in cases)
    return ExportCheck(max_abs_diff=worst, mask_agreement=agree / total, cases=cases)


def image_batches(
    images: Sequence[np.ndarray],
    aug: AugConfig,
    sizes: Sequence[Sequence[int]],
    batch_sizes: Sequence[int],
) -> list[Tensor]:
    """Real images through the eval preset at each (H, W) in ``sizes``: one batch per pair.

    Batch ``i`` has ``batch_sizes[i]`` images at ``sizes[i]``, cycling through ``images``;
    portrait and landscape canvases are padded to the batch's largest H and W with the eval
    preset's pad value (``pad_batch``).
    """
    if len(sizes) != len(batch_sizes) or not images:
        raise ValueError(
            f"need images and one batch size per size, got {len(images)} images, sizes "
            f"{list(sizes)} and batch sizes {list(batch_sizes)}"
        )
    batches, k = [], 0
    for size, batch_size in zip(sizes, batch_sizes, strict=True):
        sized = dataclasses.replace(aug, eval_size=list(size))
        transform = build_eval_transform(sized)
        items = []
        for _ in range(batch_size):
            items.append(transform(image=images[k % len(images)])["image"])
            k += 1
        batches.append(pad_batch(items, image_fill=eval_pad_value(sized))[0])
    return batches


# --- ONNX Runtime as the inference backend of prediction and evaluation ---------------------

EXPORT_FORMAT = "seg-onnx-1"  # bump when the export procedure changes: old cached files go stale
CHECK_TOLERANCE, CHECK_MIN_AGREEMENT = 1e-3, 0.999  # as scripts/export.py's defaults (fp32)


# The metadata key of an export that names the checkpoint it was made from (its export_key).
EXPORT_KEY = "seg.export_key"


def stored_metadata(path: Path) -> dict[str, str] | None:
    """An ONNX file's metadata (``seg.*`` keys among them), None when the file cannot be
    parsed (read without its weights' external data)."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False)
    except Exception:  # onnx raises several kinds on damaged bytes
        return None
    return {p.key: p.value for p in graph.metadata_props}


def stored_export_key(path: Path) -> str | None:
    """The ``seg.export_key`` an ONNX file's metadata holds ("" when it has none), None when
    the file cannot be parsed."""
    metadata = stored_metadata(path)
    return None if metadata is None else metadata.get(EXPORT_KEY, "")


def export_key(checkpoint: Path, opset: int | None = None) -> str:
    """16 hex digits of the SHA-256 of the checkpoint's bytes and of what shapes the graph
    (this format, torch's version, the opset): a retrained checkpoint or a new exporter gets a
    new file, an unchanged one reuses its export."""
    digest = hashlib.sha256(f"{EXPORT_FORMAT} torch {torch.__version__} {opset}\n".encode())
    with open(checkpoint, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


# A folder we may not write to: no permission (EACCES, EPERM; not raised for root) or a
# read-only mount (EROFS, raised for root too).
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def cache_dir() -> Path:
    """Where exports go when the checkpoint's folder is read-only."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "humanseg" / "onnx"


def cached_export(
    checkpoint: Path, model: nn.Module, cfg: Config, opset: int | None = None
) -> Path:
    """The ONNX file of ``checkpoint`` (whose ``model`` and training ``cfg`` are given):
    ``<checkpoint stem>.<key>.onnx`` beside it (or in :func:`cache_dir` where that folder is
    read-only), exported, checked against PyTorch and written atomically the first time, reused
    while the key holds (:func:`export_key`). Older exports of the same checkpoint name are
    removed when a new one is written."""
    key = export_key(checkpoint, opset)
    name = f"{checkpoint.stem}.{key}.onnx"
    for folder in (checkpoint.parent, cache_dir()):
        path = folder / name
        if not path.is_file():
            continue
        stored = stored_export_key(path)
        if stored == key:
            return path
        if stored is not None:  # readable, but of another checkpoint: never run it
            log.warning(
                "%s is not the export of %s (its metadata says seg.export_key=%s, expected %s): "
                "exporting it again",
                path,
                checkpoint,
                stored or "none",
                key,
            )
            path.unlink(missing_ok=True)
        else:  # unreadable: ONNX Runtime names it and load_inference_model exports it again
            return path
    for folder in (checkpoint.parent, cache_dir()):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return _export_checked(model, cfg, folder / name, checkpoint, opset)
        except OSError as err:
            if err.errno not in _NOT_WRITABLE:
                raise
            log.warning(
                "cannot write the ONNX export beside the checkpoint (%s); using %s",
                err,
                cache_dir(),
            )
    raise PermissionError(f"no writable folder for {name}: {checkpoint.parent}, {cache_dir()}")


def _export_checked(
    model: nn.Module, cfg: Config, path: Path, checkpoint: Path, opset: int | None
) -> Path:
    eval_size = check_aug_config(cfg.aug).eval_size
    log.info("exporting %s to %s for ONNX Runtime (once per checkpoint)", checkpoint, path)
    tmp = temp_beside(path)  # its own name: torchrun's ranks may export the same file at once
    metadata = {**model_metadata(model, cfg), EXPORT_KEY: export_key(checkpoint, opset)}
    export_onnx(model, tmp, eval_size, opset, metadata)
    try:
        # A graph check on seeded random photos at the eval size and an odd larger size, as
        # scripts/export.py's default check.
        rng = np.random.default_rng(0)
        photos = [rng.integers(0, 256, (*eval_size, 3), dtype=np.uint8) for _ in range(2)]
        sizes = [list(eval_size), [round(s * 1.25) | 1 for s in eval_size]]
        batches = image_batches(photos, cfg.aug, sizes, [2, 1])
        check = compare_with_onnx(model, onnx_session(tmp), batches)
        if not check.ok(CHECK_TOLERANCE, CHECK_MIN_AGREEMENT):
            raise ExportMismatchError(
                f"the ONNX export of {checkpoint} disagrees with PyTorch: max |logit diff| "
                f"{check.max_abs_diff:.3g}, mask agreement {check.mask_agreement:.5f}; "
                "run with backend=torch"
            )
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    remove_stale(path, checkpoint, r"\.onnx")
    return path


def remove_stale(path: Path, checkpoint: Path, suffix: str) -> None:
    """Remove the files beside ``checkpoint`` made from older versions of it: names
    ``<checkpoint stem>.<16 hex key><suffix>`` (``suffix`` a regular expression) whose key is
    not ``path``'s (just written, named the same way). Nothing is removed where ``path`` is not
    beside the checkpoint: the shared cache holds every run's ``best.pt``."""
    if path.parent != checkpoint.parent:
        return
    files = re.compile(rf"{re.escape(checkpoint.stem)}\.([0-9a-f]{{16}}){suffix}")
    current = files.fullmatch(path.name)
    if current is None:
        raise ValueError(f"{path.name} is not named <{checkpoint.stem}>.<key>{suffix}")
    for old in path.parent.iterdir():
        match = files.fullmatch(old.name)
        if match and match.group(1) != current.group(1):
            old.unlink(missing_ok=True)


class OnnxRuntimeModel:
    """An exported model in ONNX Runtime with the interface the predictors call:
    ``model(batch) -> {"out": logits}`` (float32, on the CPU), ``devices``, ``place``,
    ``eval``. Inputs and outputs stay on the CPU; with a CUDA device placed, the session runs
    on ONNX Runtime's CUDA provider (``onnxruntime-gpu``)."""

    num_columns = 1
    backend = "onnxruntime"

    def __init__(self, path: Path, threads: int = 0) -> None:
        self.path = Path(path)
        self.threads = threads
        self.devices = [torch.device("cpu")]  # where the predictors put the batch
        self.session = onnx_session(self.path, threads=threads)

    def place(self, devices: Sequence[torch.device]) -> OnnxRuntimeModel:
        """One device: ``cpu`` or ``cuda[:N]`` (the CUDA provider must be installed)."""
        if len(devices) != 1:
            raise ConfigError(
                f"backend=onnxruntime runs the whole model on one device, got {list(devices)}: "
                "column_devices needs backend=torch"
            )
        device = torch.device(devices[0])
        if device.type == "cuda":
            import onnxruntime as ort

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise ConfigError(
                    f"device={device} with backend=onnxruntime needs ONNX Runtime's CUDA "
                    "provider (pip install onnxruntime-gpu); or use backend=torch"
                )
            provider = ("CUDAExecutionProvider", {"device_id": device.index or 0})
            providers = [provider, "CPUExecutionProvider"]
            self.session = onnx_session(self.path, providers, self.threads)
        elif device.type != "cpu":
            raise ConfigError(f"backend=onnxruntime runs on cpu or cuda, not {device}")
        return self

    def eval(self) -> OnnxRuntimeModel:
        return self

    def __call__(self, x: Tensor) -> dict[str, Tensor]:
        """Normalised (B, 3, H, W) of any H and W -> {"out": (B, K, H, W) float32 logits}."""
        array = x.detach().to("cpu", torch.float32).contiguous().numpy()
        return {"out": torch.from_numpy(self.session.run([OUTPUT_NAME], {INPUT_NAME: array})[0])}
