"""The ONNX graph of a model: its export, its metadata, and its check against PyTorch.

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
sizes of both kinds. Where a checkpoint's graph files live and when they are made:
``seg.inference.cache``; running one: ``seg.inference.runtime``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from seg.config import AugConfig, Config
from seg.data.batching import pad_batch
from seg.data.transforms import build_eval_transform, check_aug_config, eval_pad_value
from seg.errors import UserError
from seg.fileio import atomic_path

INPUT_NAME, OUTPUT_NAME = "image", "logits"
AXES = ("batch", "height", "width")  # names of the dynamic axes 0, 2 and 3 in the ONNX file
CHECK_TOLERANCE, CHECK_MIN_AGREEMENT = 1e-3, 0.999  # as scripts/export.py's defaults (fp32)


class ExportMismatchError(UserError, RuntimeError):
    """ONNX Runtime's logits or masks differ from PyTorch's beyond the tolerances."""


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


# The exporter's own libraries log each graph pass at INFO (some 150 lines for one model):
# under a script's INFO logging a user would see them all. Warnings still show.
EXPORTER_LOGGERS = ("onnx_ir", "onnxscript", "torch.onnx")


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """Hold the exporter's loggers at WARNING for the ``with`` block."""
    loggers = [logging.getLogger(name) for name in EXPORTER_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


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
    with quiet_exporter():
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
