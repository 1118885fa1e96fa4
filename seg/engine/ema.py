"""An exponential moving average of a model's weights and BatchNorm statistics
(``trainer.ema_decay``), the "model EMA" of torchvision's classification reference, timm's
``ModelEma`` and mmengine's ``EMAHook``.

After each optimiser step every floating-point tensor of the state dict moves towards the
model's: ``ema += (1 - d) * (model - ema)`` with ``d = min(decay, (1 + n) / (10 + n))`` at the
n-th update (TensorFlow's ``ExponentialMovingAverage(num_updates=n)``): the average follows the
fast-changing weights of the first steps instead of dragging the random initialisation along.
Integer buffers (BatchNorm's ``num_batches_tracked``) are copied. The average lives in a second
model of the same build, placed on the same devices, never trained and never DDP-wrapped: DDP
keeps the replicas' weights equal, so every rank's average is the same (BatchNorm statistics
are each rank's own until ``validate`` broadcasts rank 0's, as for the model).
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import Tensor, nn

from seg.errors import ConfigError


class ModelEma:
    """``ema.update(model)`` after each optimiser step; ``ema.module`` is the averaged model
    (eval mode, no gradients) with ``model``'s structure, keys and devices."""

    def __init__(self, module: nn.Module, decay: float, updates: int = 0) -> None:
        if not 0 < decay < 1:
            raise ConfigError(f"EMA decay {decay!r}: expected a number in (0, 1)")
        self.module = module.eval().requires_grad_(False)
        self.decay = decay
        self.updates = updates  # updates so far: a resumed run continues the warm-up from here

    def current_decay(self) -> float:
        """The decay of the next update (the warm-up's, until it reaches ``decay``)."""
        n = self.updates + 1
        return min(self.decay, (1 + n) / (10 + n))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Move the average towards ``model`` (same structure; DDP unwrapped)."""
        weight = 1 - self.current_decay()
        current = model.state_dict()
        groups: dict[tuple[torch.device, torch.dtype], tuple[list[Tensor], list[Tensor]]]
        groups = defaultdict(lambda: ([], []))
        for key, mine in self.module.state_dict().items():
            theirs = current[key].detach()
            if mine.is_floating_point():
                # One fused lerp per device and dtype (a multi-column model spans devices).
                ema, new = groups[(mine.device, mine.dtype)]
                ema.append(mine)
                new.append(theirs.to(mine.dtype))
            else:
                mine.copy_(theirs)
        for ema, new in groups.values():
            torch._foreach_lerp_(ema, new, weight)
        self.updates += 1
