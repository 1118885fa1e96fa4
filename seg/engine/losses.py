"""The segmentation loss: named terms (cross-entropy or OHEM, Dice, auxiliary heads) and their sum.

Pixels labelled 255 (padding brought in by shift, rotation or crop; "don't care" in the masks)
count in no term. The loss of a batch whose every pixel is ignored is 0, not NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seg.config import LossConfig
from seg.data.io import IGNORE_INDEX
from seg.errors import ConfigError


class SegLoss(nn.Module):
    """``forward(outputs, target) -> {"ce", ["dice"], ["aux"], "loss"}`` (scalar tensors).

    Every term is already weighted, so ``loss`` is their sum and each can be logged as is.
    ``outputs`` is a model's ``{"out": (B,C,H,W), "aux": [(B,C,H,W), ...]}``; ``target`` is
    (B,H,W) long in {0..C-1, 255}. Logits are cast to float32 (mixed precision).
    """

    def __init__(
        self,
        num_classes: int,
        aux_weight: float = 0.4,
        class_weights: Sequence[float] | None = None,
        dice_weight: float = 0.0,
        ohem: bool = False,
        ohem_thresh: float = 0.7,
        ohem_min_kept: int = 10000,
    ) -> None:
        super().__init__()
        if class_weights is not None and len(class_weights) != num_classes:
            raise ConfigError(
                f"loss.class_weights has {len(class_weights)} entries {list(class_weights)}, "
                f"expected one per class ({num_classes})"
            )
        weights = torch.ones(num_classes) if class_weights is None else torch.tensor(class_weights)
        self.register_buffer("class_weights", weights.float(), persistent=False)
        self.num_classes = num_classes
        self.aux_weight = aux_weight
        self.dice_weight = dice_weight
        self.ohem = ohem
        self.ohem_thresh = ohem_thresh
        self.ohem_min_kept = ohem_min_kept

    def cross_entropy(self, logits: Tensor, target: Tensor) -> Tensor:
        """Class-weighted mean CE over the labelled (and, with OHEM, hard) pixels."""
        logits = logits.float()
        valid = target != IGNORE_INDEX
        safe = torch.where(valid, target, 0)
        per_pixel = F.cross_entropy(
            logits,
            safe,
            weight=self.class_weights,
            reduction="none",
        )
        # per_pixel is already w[y] * nll (F.cross_entropy's weight): mask it, and divide by
        # the kept pixels' weights, as F.cross_entropy's weighted mean does.
        keep = valid
        if self.ohem:
            keep = keep & self._hard_pixels(logits, safe, valid)
        keep = keep.float()
        # clamp: a batch with no labelled pixel contributes 0 instead of 0/0.
        return (per_pixel * keep).sum() / (self.class_weights[safe] * keep).sum().clamp(min=1e-6)

    @torch.no_grad()
    def _hard_pixels(self, logits: Tensor, target: Tensor, valid: Tensor) -> Tensor:
        """Pixels whose true class has probability < ohem_thresh, and at least the
        ohem_min_kept hardest ones (as mmsegmentation's OHEMPixelSampler); no host sync."""
        prob = logits.softmax(1).gather(1, target.unsqueeze(1)).squeeze(1)
        prob = torch.where(valid, prob, 2.0)  # ignored pixels sort last and are never kept
        k = min(self.ohem_min_kept, prob.numel())
        kth = prob.flatten().kthvalue(k).values
        return valid & ((prob < self.ohem_thresh) | (prob <= kth))

    def dice(self, logits: Tensor, target: Tensor) -> Tensor:
        """1 - soft Dice over the batch, averaged over the foreground classes (1..C-1)."""
        valid = (target != IGNORE_INDEX).unsqueeze(1)
        prob = logits.float().softmax(1) * valid
        onehot = F.one_hot(torch.where(valid.squeeze(1), target, 0), self.num_classes)
        onehot = onehot.permute(0, 3, 1, 2).float() * valid
        dims = (0, 2, 3)
        inter = (prob * onehot).sum(dims)
        denom = prob.sum(dims) + onehot.sum(dims)
        score = (2 * inter + 1.0) / (denom + 1.0)  # +1 smoothing: a class absent from both is 1
        return 1 - score[1:].mean()

    def forward(self, outputs: dict, target: Tensor) -> dict[str, Tensor]:
        terms = {"ce": self.cross_entropy(outputs["out"], target)}
        if self.dice_weight > 0:
            terms["dice"] = self.dice_weight * self.dice(outputs["out"], target)
        aux = outputs.get("aux") or []
        if aux and self.aux_weight > 0:
            terms["aux"] = self.aux_weight * sum(self.cross_entropy(a, target) for a in aux)
        terms["loss"] = sum(terms.values())
        return terms


def build_loss(cfg: LossConfig, num_classes: int, aux_weight: float) -> SegLoss:
    """The loss of ``loss:`` with the model's class count and auxiliary-head weight."""
    if aux_weight < 0:
        raise ConfigError(f"model.aux_weight={aux_weight} is invalid: expected a number >= 0")
    return SegLoss(
        num_classes,
        aux_weight=aux_weight,
        class_weights=cfg.class_weights,
        dice_weight=cfg.dice_weight,
        ohem=cfg.ohem,
        ohem_thresh=cfg.ohem_thresh,
        ohem_min_kept=cfg.ohem_min_kept,
    )
