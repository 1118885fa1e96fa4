"""Edge-aware refinement of a person probability at the photo's own resolution: the guided
filter (He, Sun, Tang, "Guided Image Filtering", TPAMI 2013).

The network sees a photo at about half its size (a long side of 400 for 800-pixel photos) and
its logits are at a quarter of that, so an outline restored by bilinear resizing is smooth
where the photo's edge is sharp: most wrong pixels lie within a few pixels of the true outline
(docs/results.md). The guided filter fits, in every window of radius ``r`` of the full-size
photo, the probability as a linear function of the photo's intensities (``q = a * I + b``),
so the output follows the photo's edges wherever the probability changes near one and stays
what it was where the photo is flat. ``eps`` is the regulariser: intensity variances (of
[0, 1] values) well below it count as flat.

Gray guide: the photo's luma, 6 box filters per image. Colour guide (``color=True``): the
three channels, a 3x3 solve per pixel, better where person and background differ in hue but
not brightness. Both are applied band by band over columns with a halo of ``2 r`` (the output
at a pixel depends on the photo within ``2 r`` of it), so large photos need no more memory
than the bands.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from seg.config import RefineConfig
from seg.data.transforms import eval_content_size

LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601, as OpenCV's RGB2GRAY
# Pixels per band: the colour filter holds ~30 float maps of a band (box sums in float64).
BAND_PIXELS = 1 << 20


def box_mean(x: Tensor, radius: int) -> Tensor:
    """Mean of (C, H, W) over (2r+1)^2 windows, the windows clipped at the borders (each
    pixel divides by the count of its own window), via cumulative sums in float64 (on the CPU
    for Apple's GPUs, which have no float64)."""
    if x.device.type == "mps":
        return box_mean(x.cpu(), radius).to(x.device)
    h, w = x.shape[-2:]
    k = 2 * radius + 1
    padded = F.pad(x.double(), (radius + 1, radius, radius + 1, radius))
    s = padded.cumsum(1).cumsum(2)
    total = s[:, k:, k:] - s[:, :-k, k:] - s[:, k:, :-k] + s[:, :-k, :-k]
    ones = torch.ones(1, h, w, dtype=torch.float64, device=x.device)
    po = F.pad(ones, (radius + 1, radius, radius + 1, radius)).cumsum(1).cumsum(2)
    count = po[:, k:, k:] - po[:, :-k, k:] - po[:, k:, :-k] + po[:, :-k, :-k]
    return (total / count).to(x.dtype)


def guided_filter(guide: Tensor, src: Tensor, radius: int, eps: float) -> Tensor:
    """Guided filter of ``src`` (H, W) float by ``guide`` (C, H, W) with C = 1 (gray) or 3
    (colour), values in [0, 1]; returns (H, W)."""
    if guide.shape[0] == 1:
        i = guide[0]
        stats = box_mean(torch.stack([i, src, i * src, i * i]), radius)
        mean_i, mean_p, corr_ip, corr_ii = stats
        a = (corr_ip - mean_i * mean_p) / (corr_ii - mean_i * mean_i + eps)
        b = mean_p - a * mean_i
        mean_a, mean_b = box_mean(torch.stack([a, b]), radius)
        return mean_a * i + mean_b
    if guide.shape[0] != 3:
        raise ValueError(f"guide must have 1 or 3 channels, got {guide.shape[0]}")
    h, w = src.shape
    pairs = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]
    planes = [*guide, src, *(guide * src), *(guide[j] * guide[k] for j, k in pairs)]
    stats = box_mean(torch.stack(planes), radius)
    mean_i, mean_p, corr_ip = stats[:3], stats[3], stats[4:7]
    cov_ip = corr_ip - mean_i * mean_p  # (3, H, W)
    sigma = torch.empty(h, w, 3, 3, dtype=src.dtype, device=src.device)
    for n, (j, k) in enumerate(pairs):
        value = stats[7 + n] - mean_i[j] * mean_i[k]
        sigma[..., j, k] = value
        sigma[..., k, j] = value
    sigma += eps * torch.eye(3, dtype=src.dtype, device=src.device)
    a = torch.linalg.solve(sigma, cov_ip.permute(1, 2, 0).unsqueeze(-1))[..., 0]  # (H, W, 3)
    a = a.permute(2, 0, 1)
    b = mean_p - (a * mean_i).sum(0)
    mean_ab = box_mean(torch.cat([a, b[None]]), radius)
    return (mean_ab[:3] * guide).sum(0) + mean_ab[3]


def image_guide(image: np.ndarray, color: bool, device: torch.device | str = "cpu") -> Tensor:
    """uint8 (H, W, 3) RGB -> float32 (C, H, W) in [0, 1]: luma (C = 1) or RGB (C = 3)."""
    rgb = torch.from_numpy(np.ascontiguousarray(image)).to(device).permute(2, 0, 1).float() / 255
    if color:
        return rgb
    weights = torch.tensor(LUMA, device=rgb.device).view(3, 1, 1)
    return (rgb * weights).sum(0, keepdim=True)


def halo_bands(width: int, step: int, halo: int) -> Iterator[tuple[int, int, int, int]]:
    """``(start, stop, lo, hi)``: output columns ``[start, stop)`` of at most ``step``, and the
    input columns ``[lo, hi)`` they need (``halo`` more each side, clipped)."""
    for start in range(0, width, max(1, step)):
        stop = min(start + step, width)
        yield start, stop, max(0, start - halo), min(width, stop + halo)


@dataclass(frozen=True)
class GuidedRefiner:
    """The guided filter applied to a photo's person probability, band by band.

    ``radius`` is in pixels of the model input and scaled to the photo (a photo shown to the
    network at 0.5x gets twice the radius), so one setting serves photos of any size: the
    blur it undoes is that of logits resized from the model's resolution.
    """

    radius: float = 4.0
    eps: float = 1e-3
    color: bool = False

    def pixels(self, image_hw: Sequence[int], eval_size: Sequence[int]) -> int:
        """The radius in pixels of a photo of ``image_hw`` fit into ``eval_size``."""
        h, w = eval_content_size(image_hw, eval_size)
        return max(1, round(self.radius * max(image_hw[0] / h, image_hw[1] / w)))

    def bands(
        self,
        image: np.ndarray,
        person: Callable[[int, int], Tensor],
        eval_size: Sequence[int],
        max_values: int = BAND_PIXELS,
    ) -> Iterator[tuple[int, int, Tensor]]:
        """``(start, stop, q)``: ``q`` the refined person probability (H, stop - start) of
        ``image`` (uint8 (H, W, 3)), from ``person(lo, hi)``, its probability in columns
        ``[lo, hi)``; bands of about ``max_values`` pixels."""
        height, width = image.shape[:2]
        r = self.pixels((height, width), eval_size)
        for start, stop, lo, hi in halo_bands(width, max(1, max_values // height), 2 * r):
            p = person(lo, hi)
            guide = image_guide(image[:, lo:hi], self.color, p.device)
            q = guided_filter(guide, p.float(), r, self.eps).clamp_(0, 1)
            yield start, stop, q[:, start - lo : stop - lo]


def build_refiner(cfg: RefineConfig) -> GuidedRefiner | None:
    """``refine.*`` options -> a :class:`GuidedRefiner`, or None when ``refine.guided`` is off."""
    return GuidedRefiner(cfg.radius, cfg.eps, cfg.color) if cfg.guided else None
