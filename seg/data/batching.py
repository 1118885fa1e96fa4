"""Batches of eval-preset samples whose sizes differ, and a forward pass that ignores padding.

The eval preset pads each image to a canvas in its own orientation (``eval_size`` or its
transpose, see ``seg.data.transforms.oriented_canvas``), so a batch may mix (256, 192) and
(192, 256) samples. :func:`pad_batch` pads them at the bottom and right to the batch's largest
H and W: images with the eval preset's own pad value (``eval_pad_value``), masks with the
ignore index. :func:`run_by_size` then runs a model on each group of equally sized samples cut
back out of such a batch, so that no prediction depends on which images share its batch: a
convolution near the canvas edge, or a global pooling, would otherwise see its neighbours'
extra padding, and results would change with the batch size and the number of ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import default_collate

from seg.data.io import IGNORE_INDEX

PADDED = ("image", "mask")
# Raw photos a batch of evaluation or prediction may hold (64 MP: 8 phone photos, ~250 MB of
# uint8 pixels with their masks); one larger photo makes a batch of its own.
MAX_BATCH_PIXELS = 64_000_000


def pad_batch(
    images: Sequence[Tensor],
    masks: Sequence[Tensor] | None = None,
    image_fill: float | Sequence[float] = 0.0,
    mask_fill: int = IGNORE_INDEX,
) -> tuple[Tensor, Tensor | None]:
    """(C, h_i, w_i) images -> (B, C, H, W) and (h_i, w_i) masks -> (B, H, W), H and W the
    largest of the batch, each item at the top left and padded at the bottom and right.

    ``image_fill``: one value or one per channel (what the eval preset pads with after
    normalisation: ``seg.data.transforms.eval_pad_value(aug)``); ``mask_fill``: the ignore index.
    Equal sizes give ``torch.stack``'s result.
    """
    if not images:
        raise ValueError("pad_batch needs at least one image")
    if masks is not None and len(masks) != len(images):
        raise ValueError(f"{len(images)} images but {len(masks)} masks")
    height = max(int(im.shape[-2]) for im in images)
    width = max(int(im.shape[-1]) for im in images)
    first = images[0]
    if masks is None and all(im.shape == first.shape for im in images):
        return torch.stack(list(images)), None  # nothing to pad: no fill to build
    fill = torch.as_tensor(image_fill, dtype=first.dtype, device=first.device)
    batch = fill.reshape(1, -1, 1, 1).expand(len(images), first.shape[0], height, width).clone()
    for item, image in zip(batch, images, strict=True):
        item[:, : image.shape[-2], : image.shape[-1]] = image
    if masks is None:
        return batch, None
    out = masks[0].new_full((len(masks), height, width), mask_fill)
    for item, mask in zip(out, masks, strict=True):
        item[: mask.shape[-2], : mask.shape[-1]] = mask
    return batch, out


def run_by_size(
    fn: Callable[[Tensor], Tensor], batch: Tensor, sizes: Sequence[Sequence[int]] | Tensor
) -> Tensor:
    """``fn`` ((n, C, h, w) -> (n, K, h, w)) on each group of samples of one size (h, w), cut
    out of the padded ``batch`` (B, C, H, W) -> (B, K, H, W), zero beyond each sample's size.

    ``sizes``: each sample's own (h, w) (a (B, 2) tensor or pairs). One size filling the batch
    (the usual case) is a single call on ``batch`` itself.
    """
    pairs = [(int(h), int(w)) for h, w in sizes]
    if len(pairs) != batch.shape[0]:
        raise ValueError(f"{len(pairs)} sizes for a batch of {batch.shape[0]}")
    groups: dict[tuple[int, int], list[int]] = {}
    for i, size in enumerate(pairs):
        groups.setdefault(size, []).append(i)
    if list(groups) == [tuple(batch.shape[-2:])]:
        return fn(batch)
    out: Tensor | None = None
    for (h, w), indices in groups.items():
        index = torch.tensor(indices, device=batch.device)
        part = fn(batch[index, :, :h, :w])
        if out is None:
            out = part.new_zeros(batch.shape[0], part.shape[1], *batch.shape[-2:])
        out[index.to(out.device), :, :h, :w] = part
    assert out is not None  # at least one group
    return out


def pixel_batches(
    pixels: Sequence[int], batch_size: int, max_pixels: int = MAX_BATCH_PIXELS
) -> list[list[int]]:
    """Consecutive indices in batches of at most ``batch_size`` items and ``max_pixels``
    pixels in all (``pixels[i]``: item i's count); an item larger than that is a batch alone."""
    batches: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i, n in enumerate(pixels):
        if current and (len(current) == batch_size or total + n > max_pixels):
            batches.append(current)
            current, total = [], 0
        current.append(i)
        total += n
    if current:
        batches.append(current)
    return batches


def split_bad(samples: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Samples of a ``drop_bad`` ``SegDataset`` (evaluation's): (the good ones, the messages of
    the bad pairs it dropped under ``on_bad_sample=skip``)."""
    return [s for s in samples if "bad" not in s], [s["bad"] for s in samples if "bad" in s]


class PadCollate:
    """DataLoader ``collate_fn`` for eval-preset samples of different sizes: ``image`` and
    ``mask`` through :func:`pad_batch`, ``size`` (B, 2) each sample's own (h, w) (for
    :func:`run_by_size`), the other keys as the default collate makes them. Samples with
    ``bad`` (dropped bad pairs) are left out; their messages are the batch's ``bad`` list, and
    a batch of bad pairs only is ``{"bad": [...]}``."""

    def __init__(self, image_fill: float | Sequence[float] = 0.0, mask_fill: int = IGNORE_INDEX):
        if isinstance(image_fill, (int, float)):
            self.image_fill: float | tuple[float, ...] = float(image_fill)
        else:
            self.image_fill = tuple(float(v) for v in image_fill)
        self.mask_fill = int(mask_fill)

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        samples, bad = split_bad(samples)
        if not samples:
            return {"bad": bad}
        images = [s["image"] for s in samples]
        masks = [s["mask"] for s in samples] if "mask" in samples[0] else None
        rest = default_collate([{k: v for k, v in s.items() if k not in PADDED} for s in samples])
        batch, padded = pad_batch(images, masks, self.image_fill, self.mask_fill)
        sizes = torch.tensor([tuple(im.shape[-2:]) for im in images], dtype=torch.long)
        out = {**rest, "image": batch, "size": sizes, "bad": bad}
        if padded is not None:
            out["mask"] = padded
        return out


__all__ = [
    "MAX_BATCH_PIXELS",
    "PadCollate",
    "pad_batch",
    "pixel_batches",
    "run_by_size",
    "split_bad",
]
