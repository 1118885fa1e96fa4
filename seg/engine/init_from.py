"""``trainer.init_from``: a new run that starts from a trained model's weights (fine-tuning).

Unlike ``trainer.resume``, which continues a run (its optimiser, schedule, step and folder),
``init_from`` loads the model's weights only: the new run has a fresh optimiser, its schedule
from step 0 and its own folder. The source is a checkpoint file, a run folder (its
``checkpoints/best.pt``) or a shipped model's name (``person``: ``seg/zoo/``).

What the source's weights need comes with them (:func:`with_init_source`, applied where Hydra
composes the command: ``scripts/train.py``): the source's model config and input
normalisation (``aug.mean``, ``aug.std``) replace the recipe's, except for keys the command
sets itself. So ``+exp=<recipe> data=folder data.root=/my/data trainer.init_from=person`` needs
nothing else. Weights that do not fit the run's model name the model keys that differ from the
source's and the tensors (:func:`load_init_weights`); a run with another ``model.num_classes``
gets a fresh head (the tensors whose first dimension is the class count), and the log says so.
A run that resumes (``trainer.resume``) takes its weights from its own checkpoint instead.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from torch import nn

from seg.checkpoint import checkpoint_file, load_checkpoint
from seg.config import Config, config_to_dict, to_config
from seg.data.manifest import sha256_file
from seg.errors import ConfigError

log = logging.getLogger(__name__)

# What comes with the weights: the model, and the normalisation its first layer was trained on.
BROUGHT = ("model", "aug.mean", "aug.std")


@dataclass
class InitSource:
    """The weights a run starts from: where they are, their digest, the source's config."""

    value: str  # trainer.init_from as given
    path: Path
    sha256: str
    config: dict[str, Any]  # the source run's training config
    state: dict[str, torch.Tensor]  # its model's state_dict

    def card(self) -> dict[str, str]:
        """What the run's ``run_info.json`` records of it."""
        return {"init_from": self.value, "path": str(self.path), "sha256": self.sha256}


def read_init_source(value: str) -> InitSource:
    """Read the weights ``trainer.init_from`` names (errors name the file and what it takes)."""
    path = checkpoint_file(value)
    ckpt = load_checkpoint(path)
    return InitSource(value, path, sha256_file(path), ckpt["config"], ckpt["model"])


def command_keys(overrides: Sequence[str]) -> set[str]:
    """The config keys the command sets (``a.b=1``, ``+a.b=1``, ``~a.b``; ``model=x`` -> model)."""
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides}


def _set_by_command(key: str, keys: set[str]) -> bool:
    """Whether the command sets ``key`` or anything under it (``model.num_classes`` under
    ``model``)."""
    return any(k == key or k.startswith(key + ".") for k in keys)


def with_init_source(cfg: Any, overrides: Sequence[str]) -> Config:
    """``cfg`` with ``trainer.init_from``'s model config and normalisation (``BROUGHT``), where
    ``overrides`` (the command's) does not set them; ``cfg`` itself without ``init_from``."""
    cfg = to_config(cfg)
    if not cfg.trainer.init_from:
        return cfg
    keys = command_keys(overrides)
    if "model" in keys:  # model=<another group>: the command's model throughout
        return cfg
    source = read_init_source(cfg.trainer.init_from)
    mine = config_to_dict(cfg)
    merged = copy.deepcopy(mine)
    merged["model"] = copy.deepcopy(source.config["model"])
    for key in ("aug.mean", "aug.std"):
        name = key.partition(".")[2]
        if not _set_by_command(key, keys) and name in source.config.get("aug", {}):
            merged["aug"][name] = source.config["aug"][name]
    node, own = OmegaConf.create(merged), OmegaConf.create(mine)
    for key in sorted(k for k in keys if k.startswith("model.")):  # the command's model keys
        OmegaConf.update(node, key, OmegaConf.select(own, key), merge=False)
    merged = OmegaConf.to_container(node)
    changed = [k for k in BROUGHT if _select(mine, k) != _select(merged, k)]
    if changed:
        log.info(
            "trainer.init_from=%s: %s as the source's (%s)",
            cfg.trainer.init_from,
            ", ".join(changed),
            source.path,
        )
    return to_config(merged)


def _select(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _differing_keys(mine: Any, theirs: Any, prefix: str) -> list[str]:
    """The leaf keys under ``prefix`` whose values differ (``model.columns.0.widths``)."""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return [
            d
            for k in sorted(set(mine) | set(theirs))
            for d in _differing_keys(mine.get(k), theirs.get(k), f"{prefix}.{k}")
        ]
    lists = isinstance(mine, list) and isinstance(theirs, list) and len(mine) == len(theirs)
    if lists and all(isinstance(v, dict) for v in mine + theirs):
        return [
            d
            for i, (a, b) in enumerate(zip(mine, theirs, strict=True))
            for d in _differing_keys(a, b, f"{prefix}.{i}")
        ]
    return [] if mine == theirs else [prefix]


def load_init_weights(model: nn.Module, cfg: Config, source: InitSource) -> list[str]:
    """Load ``source``'s weights into ``model`` (built from ``cfg``); return the tensors left
    fresh (the head, when ``model.num_classes`` differs from the source's). Weights that do not
    fit raise :class:`ConfigError` naming the differing model keys and tensors."""
    theirs_classes = int(source.config.get("model", {}).get("num_classes", cfg.model.num_classes))
    classes = cfg.model.num_classes
    mine = model.state_dict()
    fresh, wrong = [], []
    for key, tensor in mine.items():
        got = source.state.get(key)
        if got is None or got.shape == tensor.shape:
            continue
        head = (  # the head of a model with another class count: its first dimension alone
            classes != theirs_classes
            and got.ndim == tensor.ndim >= 1
            and (got.shape[0], tensor.shape[0]) == (theirs_classes, classes)
            and got.shape[1:] == tensor.shape[1:]
        )
        if head:
            fresh.append(key)
            continue
        wrong.append(f"{key} {tuple(got.shape)} in the source, {tuple(tensor.shape)} here")
    missing = sorted(set(mine) - set(source.state))
    extra = sorted(set(source.state) - set(mine))
    if wrong or missing or extra:
        keys = _differing_keys(config_to_dict(cfg)["model"], source.config.get("model"), "model")
        keys = [k for k in keys if k != "model.num_classes"]
        problems = wrong[:3] + [f"{k} missing from the source" for k in missing[:2]]
        problems += [f"{k} not in this model" for k in extra[:2]]
        count = len(wrong) + len(missing) + len(extra)
        raise ConfigError(
            f"trainer.init_from={source.value}: the weights of {source.path} do not fit this "
            f"run's model ({count} tensors: {'; '.join(problems)}"
            + (", ..." if count > len(problems) else "")
            + ")"
            + (f"; model keys that differ from the source's: {', '.join(keys[:6])}" if keys else "")
            + "; to take the source's model, leave the model keys out of the command (from "
            "Python: seg.engine.init_from.with_init_source(cfg, overrides))"
        )
    model.load_state_dict({k: v for k, v in source.state.items() if k not in fresh}, strict=False)
    log.info(
        "initialised from %s (SHA-256 %s): the model's weights only; a fresh optimiser and "
        "schedule from step 0",
        source.path,
        source.sha256[:12],
    )
    if fresh:
        log.info(
            "a fresh head for model.num_classes=%d (the source has %d classes): %s",
            classes,
            theirs_classes,
            ", ".join(fresh),
        )
    return fresh
