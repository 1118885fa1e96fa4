"""Person compositing: Simple Copy-Paste (Ghiasi et al., CVPR 2021) for person segmentation.

People cut out of other training photos by their masks are pasted onto the training photo at
random scales, places and sides, and its mask becomes the union: a model sees people at sizes,
against backgrounds and next to other people that no single source of the data shows. The
paper found that plain random placement, without any modelling of context, works as well as
careful placement.

``PastePeople`` is an albumentations transform, so the pipeline's generators (which
``seed_transform`` and ``seed_worker`` reseed) drive all of its draws; it runs first, on the
full-resolution photo, so that the usual shift/scale/rotate/flip/crop apply to the composite.
Its pool is the training dataset itself: ``SegDataset.load_raw(i)`` gives a raw photo and mask.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol

import albumentations as A
import cv2
import numpy as np

from seg.config import PERSON, BadSamplePolicy
from seg.data.io import BadSampleError
from seg.errors import ConfigError

log = logging.getLogger(__name__)

DRAWS_PER_PERSON = 4  # sources tried per wanted person (bad or empty ones are passed over)


class RawPool(Protocol):
    """Where pasted people come from: ``SegDataset`` is one."""

    on_bad_sample: BadSamplePolicy

    def __len__(self) -> int: ...

    def load_raw(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """uint8 RGB (H, W, 3) and uint8 mask (H, W) in {0, 1, 255} (255 = ignore)."""
        ...


@dataclass(frozen=True)
class Paste:
    """One person, clipped to the target: where its top-left corner goes, its colours, alpha."""

    top: int
    left: int
    rgb: np.ndarray  # float32 (h, w, 3)
    alpha: np.ndarray  # float32 (h, w) in [0, 1]; the person's label where alpha >= 0.5
    behind: bool = False  # under the target photo's own people rather than over them


class PastePeople(A.DualTransform):
    """Paste 1..``max_people`` people from ``pool`` onto the image; the mask becomes the union.

    Each person is the mask == 1 part of a random pool sample (ignore pixels are not pasted),
    cropped to its bounding box, flipped half the time, resized (aspect ratio kept) so that its
    box height is a fraction of the image height drawn log-uniformly from ``scale`` (small, far
    away figures as often as large ones), and centred at a uniform random point of the image
    (what falls outside is clipped); one cut by the bottom of its photo (an upper body) is
    moved down to keep that cut on the image's bottom edge. Edges are softened by a Gaussian of
    sigma ``feather`` pixels (0: hard): image = alpha * person + (1 - alpha) * image; mask = 1
    where alpha >= 0.5, else unchanged (ignore stays ignore except under a pasted person).
    With probability ``behind`` a person goes behind the target photo's own people (its
    mask == 1 pixels stay on top, as a crowd behind a portrait's subject; the label is the
    same union); otherwise in front of them. Sources without person pixels are passed over,
    as are bad ones when ``pool.on_bad_sample`` is ``skip``; with ``error`` their
    ``BadSampleError`` (naming the file) propagates. Image: uint8 (H, W, 3), (H, W, 1) or
    (H, W); mask: (H, W).
    """

    def __init__(
        self,
        pool: RawPool,
        max_people: int = 2,
        scale: tuple[float, float] = (0.1, 1.0),
        feather: float = 1.5,
        behind: float = 0.0,
        p: float = 0.5,
    ) -> None:
        super().__init__(p=p)
        if len(pool) == 0:
            raise ConfigError("PastePeople needs a non-empty pool of samples to paste from")
        if max_people < 1:
            raise ConfigError(f"max_people must be >= 1, got {max_people!r}")
        if not 0 < scale[0] <= scale[1]:
            raise ConfigError(f"scale must be (lo, hi) with 0 < lo <= hi, got {scale!r}")
        if feather < 0:
            raise ConfigError(f"feather must be >= 0, got {feather!r}")
        if not 0 <= behind <= 1:
            raise ConfigError(f"behind must be a probability in [0, 1], got {behind!r}")
        self.pool = pool
        self.max_people = int(max_people)
        self.scale = (float(scale[0]), float(scale[1]))
        self.feather = float(feather)
        self.behind = float(behind)

    def get_params_dependent_on_data(
        self, params: dict[str, Any], data: dict[str, Any]
    ) -> dict[str, Any]:
        height, width = params["shape"][:2]
        wanted = self.py_random.randint(1, self.max_people)
        pastes: list[Paste] = []
        for _ in range(DRAWS_PER_PERSON * wanted):
            person = self._draw_person()
            if person is not None:
                paste = self._place(*person, height, width)
                if paste is not None:
                    pastes.append(paste)
            if len(pastes) == wanted:
                break
        front = None  # the target's own people, which a paste behind them leaves on top
        if any(paste.behind for paste in pastes):
            front = np.asarray(data["mask"]) == PERSON
        return {"pastes": pastes, "front": front}

    def apply(
        self, img: np.ndarray, pastes: list[Paste], front: np.ndarray | None, **params: Any
    ) -> np.ndarray:
        if img.dtype != np.uint8:
            raise TypeError(f"PastePeople expects a uint8 image, got {img.dtype}")
        out = img.copy()
        for paste in pastes:
            h, w = paste.alpha.shape
            where = (slice(paste.top, paste.top + h), slice(paste.left, paste.left + w))
            region = out[where]
            src = paste.rgb
            if region.ndim == 2 or region.shape[2] == 1:
                src = cv2.cvtColor(src, cv2.COLOR_RGB2GRAY).reshape(region.shape)
            alpha = paste.alpha
            if paste.behind and front is not None:
                alpha = np.where(front[where], 0.0, alpha).astype(np.float32)
            alpha = alpha.reshape(*alpha.shape, *([1] * (region.ndim - 2)))
            blended = alpha * src + (1.0 - alpha) * region.astype(np.float32)
            region[...] = np.clip(np.rint(blended), 0, 255).astype(np.uint8)
        return out

    def apply_to_mask(self, mask: np.ndarray, pastes: list[Paste], **params: Any) -> np.ndarray:
        out = mask.copy()
        for paste in pastes:
            h, w = paste.alpha.shape
            out[paste.top : paste.top + h, paste.left : paste.left + w][paste.alpha >= 0.5] = PERSON
        return out

    def _draw_person(self) -> tuple[np.ndarray, np.ndarray, bool] | None:
        """A random pool sample's person: RGB uint8 and a bool mask, cropped to its box, and
        whether the bottom of the photo cuts it (an upper body)."""
        index = int(self.random_generator.integers(len(self.pool)))
        try:
            image, mask = self.pool.load_raw(index)
        except BadSampleError as err:
            if BadSamplePolicy(self.pool.on_bad_sample) is BadSamplePolicy.error:
                raise
            log.warning("copy-paste: skipping bad source sample %s", err)
            return None
        person = mask == PERSON
        rows, cols = np.flatnonzero(person.any(axis=1)), np.flatnonzero(person.any(axis=0))
        if rows.size == 0:
            return None
        box = (slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1))
        crop = image[box]
        if crop.ndim == 2 or crop.shape[2] == 1:
            crop = cv2.cvtColor(crop, cv2.COLOR_GRAY2RGB)
        return crop, person[box], bool(rows[-1] == mask.shape[0] - 1)

    def _place(
        self, rgb: np.ndarray, person: np.ndarray, cut: bool, height: int, width: int
    ) -> Paste | None:
        """Flip, resize and position a cropped person on a (height, width) image, then clip."""
        lo, hi = self.scale
        fraction = math.exp(self.py_random.uniform(math.log(lo), math.log(hi)))
        flip = self.py_random.random() < 0.5
        centre_y, centre_x = self.py_random.uniform(0, height), self.py_random.uniform(0, width)
        box_h, box_w = person.shape
        new_h = max(1, round(fraction * height))
        new_w = max(1, round(box_w * new_h / box_h))
        if new_w > 2 * width:  # a flat sliver of mask, not a person: not worth resizing
            return None
        if flip:
            rgb, person = rgb[:, ::-1], person[:, ::-1]
        # Only the person's box is resized; AREA averages when shrinking, LINEAR when enlarging.
        interp = cv2.INTER_AREA if new_h < box_h else cv2.INTER_LINEAR
        size = (new_w, new_h)
        rgb = cv2.resize(np.ascontiguousarray(rgb), size, interpolation=interp)
        cover = cv2.resize(person.astype(np.float32), size, interpolation=interp)
        alpha = (cover >= 0.5).astype(np.float32)
        top, left = round(centre_y - new_h / 2), round(centre_x - new_w / 2)
        if cut:  # keep the cut on the bottom edge rather than a straight edge in mid-air
            top = height - new_h
        if self.feather > 0:
            # A margin lets the soft edge spread outside the person's box; below a cut the
            # person goes on past the frame, so the margin repeats its last row: no fade there.
            margin = math.ceil(3 * self.feather)
            below = cv2.BORDER_REPLICATE if cut else cv2.BORDER_CONSTANT
            alpha = cv2.copyMakeBorder(alpha, 0, margin, 0, 0, below, value=0)
            alpha = cv2.copyMakeBorder(
                alpha, margin, 0, margin, margin, cv2.BORDER_CONSTANT, value=0
            )
            alpha = cv2.GaussianBlur(alpha, (0, 0), self.feather, borderType=cv2.BORDER_CONSTANT)
            rgb = cv2.copyMakeBorder(rgb, *[margin] * 4, cv2.BORDER_REPLICATE)
            top, left = top - margin, left - margin
        # Clip to the image: keep rows [y0, y1) and columns [x0, x1) of the patch.
        y0, x0 = max(0, -top), max(0, -left)
        y1, x1 = min(alpha.shape[0], height - top), min(alpha.shape[1], width - left)
        if y1 <= y0 or x1 <= x0:
            return None
        return Paste(
            top=top + y0,
            left=left + x0,
            rgb=rgb[y0:y1, x0:x1].astype(np.float32),
            alpha=alpha[y0:y1, x0:x1],
            # No draw when off, so runs without it keep their random sequence.
            behind=self.behind > 0 and self.py_random.random() < self.behind,
        )


__all__ = ["Paste", "PastePeople", "RawPool"]
