"""Config fields that are no hyperparameters, and the one flat view of a config.

A field made with :func:`incidental` says where or how a run happens (paths, devices, worker
counts, checkpoint cadence, logging), not what it computes: TensorBoard's hparams leave it out,
and a resumed run may change it without a warning. Every flat view of a config (resume checks,
hparams) is :func:`flatten_config`.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

INCIDENTAL = "incidental"  # the field metadata key


def incidental(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """``dataclasses.field`` of a setting that is no hyperparameter (``default_factory=`` as
    in ``field``)."""
    return dataclasses.field(default=default, metadata={INCIDENTAL: True}, **kwargs)


def flatten_config(cfg: Any, hparams_only: bool = True, prefix: str = "") -> dict[str, Any]:
    """A config dataclass -> ``{"optim.lr": 0.01, "aug.crop_size": [256, 192],
    "model.columns.0.widths": [...], ...}``: dotted keys, lists of configs indexed, enums as
    their values; with ``hparams_only`` the :func:`incidental` fields (and whole groups marked
    so) are left out."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        if hparams_only and f.metadata.get(INCIDENTAL):
            continue
        name, value = f"{prefix}{f.name}", getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out.update(flatten_config(value, hparams_only, f"{name}."))
        elif isinstance(value, (list, tuple)) and any(dataclasses.is_dataclass(v) for v in value):
            for i, item in enumerate(value):
                out.update(flatten_config(item, hparams_only, f"{name}.{i}."))
        elif isinstance(value, (list, tuple)):
            out[name] = [v.value if isinstance(v, Enum) else v for v in value]
        else:
            out[name] = value.value if isinstance(value, Enum) else value
    return out


__all__ = ["flatten_config", "incidental"]
