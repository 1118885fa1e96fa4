"""``setup(cfg, ckpt) -> Parts``: the one place that reads the config to build what training
needs (the training step: model wrapped in DDP once, loss, optimiser, schedule, scaler; the
loaders; what steers the run), restored from a checkpoint when resuming."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from seg import distributed as du
from seg.checkpoint import CheckpointError
from seg.config import Config
from seg.data import (
    IGNORE_INDEX,
    build_eval_datasets,
    build_train_dataset,
    eval_sizes,
    train_source_names,
)
from seg.data.transforms import build_eval_transform, eval_pad_value, pipelines
from seg.engine.checkpointer import restore_rng
from seg.engine.init_from import InitSource, load_init_weights
from seg.engine.loaders import ResumableSampler, build_train_loader, build_val_loader
from seg.engine.step import Stepper, build_stepper
from seg.engine.validation import metric_names
from seg.errors import ConfigError, DataError
from seg.evaluation.selection import Selection
from seg.models import build_model
from seg.models.build import input_normalization

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Parts:
    """Everything ``setup`` builds."""

    stepper: Stepper  # the training step: model (DDP), loss, optimiser, schedule, precision
    cuda_devices: list[torch.device]  # every GPU of this replica (their RNG states are saved)
    train_loader: DataLoader
    sampler: ResumableSampler
    val_loader: DataLoader | None
    sources: list[str]  # validation is reported per source
    selection: Selection  # what steers the run: best.pt, the target
    transforms: list[Any]  # the training pipelines of this process (their RNG states are saved)
    steps_per_epoch: int
    total_steps: int
    global_batch: int  # images per optimiser step, over all replicas


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed ``random`` and numpy per rank; torch's seed is set where the model is built."""
    random.seed(seed + du.rank())
    np.random.seed((seed + du.rank()) % 2**32)
    torch.backends.cudnn.benchmark = not deterministic
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        torch.use_deterministic_algorithms(True)


def build_ddp_model(
    cfg: Config,
    devices: list[torch.device],
    ckpt: dict[str, Any] | None,
    init: InitSource | None = None,
) -> tuple[nn.Module, nn.Module]:
    """``(model, model_without_ddp)`` with column j on ``devices[j]``: weights restored (from
    ``ckpt``, a resumed run's, or ``init``, ``trainer.init_from``'s), SyncBN and DDP with
    several replicas."""
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    # A resumed or initialised run's weights come from a file: no ImageNet file is read.
    model = build_model(cfg.model, pretrained=None if ckpt is None and init is None else False)
    if ckpt is not None:  # a weight EMA's (retired) "train_model": the weights it trained
        model.load_state_dict(ckpt.get("train_model", ckpt["model"]))
    elif init is not None:
        load_init_weights(model, cfg, init)
    model.place(devices)
    if cfg.trainer.compile:
        # In place and lazy (it traces at the first call, after any SyncBatchNorm swap below):
        # the module keeps its type and state_dict keys, so checkpoints, evaluation and DDP
        # (which wraps the compiled module, as torch.compile's DDP notes advise) see the same
        # model as without compilation.
        model.compile()
    if du.world_size() == 1:
        return model, model
    if cfg.trainer.sync_bn and devices[0].type == "cuda":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    elif cfg.trainer.sync_bn:
        log.warning(
            "trainer.sync_bn: SyncBatchNorm needs GPUs; on CPU each replica normalises "
            "with its own batch statistics"
        )
    # One GPU: device_ids=[it]. Columns on several GPUs (a multi-device module) or the CPU: None.
    single_gpu = devices[0].type == "cuda" and len(set(devices)) == 1
    ddp = DDP(model, device_ids=[devices[0]] if single_gpu else None, find_unused_parameters=False)
    return ddp, model


def check_frozen_random(cfg: Config) -> None:
    """With ``model.pretrained=false`` a backbone column starts random: frozen stages or frozen
    BN statistics would keep it so (a from-scratch ablation of a pretrained recipe that forgot
    to unfreeze). Refused, naming the keys to set."""
    if cfg.model.pretrained:
        return
    for j, column in enumerate(cfg.model.columns or []):
        if column.backbone and (column.frozen_stages > 0 or column.freeze_bn):
            raise ConfigError(
                f"model.pretrained=false leaves the {column.backbone} backbone of "
                f"model.columns[{j}] at its random initialisation, but its frozen_stages="
                f"{column.frozen_stages} and freeze_bn={column.freeze_bn} would keep it so; "
                f"from scratch, set model.columns.{j}.frozen_stages=0 "
                f"model.columns.{j}.freeze_bn=false (and optim.backbone_lr_mult=1)"
            )


def check_normalization(cfg: Config) -> None:
    """Pretrained weights see inputs normalised as in their training, or a clear error."""
    expected = input_normalization(cfg.model)
    if expected is None:
        return
    mean, std = expected
    got = (list(cfg.aug.mean), list(cfg.aug.std))
    if not np.allclose(got, (mean, std), atol=1e-3):
        rounded = [[round(v, 4) for v in mean], [round(v, 4) for v in std]]
        raise ConfigError(
            f"aug.mean={got[0]} and aug.std={got[1]} differ from the normalisation that the "
            f"pretrained weights expect; set aug.mean={rounded[0]} aug.std={rounded[1]}"
        )


def setup(
    cfg: Config,
    devices: list[torch.device],
    ckpt: dict[str, Any] | None = None,
    init: InitSource | None = None,
) -> Parts:
    """Build everything from ``cfg``, the model's columns on ``devices`` (``train`` resolved
    ``trainer.column_devices`` before starting the process group); with ``ckpt``, also restore
    the weights, the optimiser, schedule and scaler states and this rank's random states; with
    ``init`` (``trainer.init_from``), the model's weights alone."""
    t, ws, rank = cfg.trainer, du.world_size(), du.rank()
    num_classes = cfg.model.num_classes
    if t.best_metric not in metric_names(num_classes):
        raise ConfigError(
            f"trainer.best_metric={t.best_metric!r}; valid: {metric_names(num_classes)}"
        )
    check_normalization(cfg)
    if ckpt is None and init is None:  # else the weights come from a file, not from random
        check_frozen_random(cfg)
    model, model_without_ddp = build_ddp_model(cfg, devices, ckpt, init)
    train_set = build_train_dataset(cfg.data, cfg.aug)  # also the pool of aug.paste_p
    eval_aug = dataclasses.replace(cfg.aug, mask_fill=IGNORE_INDEX)  # padding is never scored
    transforms = {  # each source at its size (aug.eval_size times its data.eval_scales)
        name: build_eval_transform(dataclasses.replace(eval_aug, eval_size=size))
        for name, size in eval_sizes(cfg.data, eval_aug.eval_size).items()
    }
    val_sets = build_eval_datasets(cfg.data, t.val_split, transforms)
    selection = Selection.of_run(t.best_metric, list(val_sets), train_source_names(cfg.data))
    chosen = list(selection.sources)
    if not sum(len(val_sets[name]) for name in chosen):
        # Every validation would be NaN and best.pt never written: say so now.
        raise ConfigError(
            f"trainer.val_split={t.val_split!r} has no samples in {chosen} (the sources "
            "best.pt is chosen on): pick a split the data has, or give it one "
            "(data.val_fraction > 0 for sources without an official validation split)"
        )
    # A resumed run draws fresh augmentation streams in its workers (see docs/training.md).
    start = 0 if ckpt is None else ckpt["step"]
    streams = cfg.seed if start == 0 else cfg.seed + 1_000_003 * start
    loader, sampler = build_train_loader(
        train_set, t.batch_size, t.num_workers, cfg.seed, rank, ws, streams
    )
    steps_per_epoch = len(sampler) // t.batch_size // t.accumulate
    if steps_per_epoch == 0:
        raise DataError(
            f"the training split has {len(train_set)} samples ({len(sampler)} per replica), "
            f"fewer than one step of trainer.batch_size={t.batch_size} x "
            f"trainer.accumulate={t.accumulate}"
        )
    total = t.epochs * steps_per_epoch
    total = min(total, t.max_steps) if t.max_steps > 0 else total
    parts = Parts(
        stepper=build_stepper(model, model_without_ddp, cfg, total),
        cuda_devices=sorted({d for d in devices if d.type == "cuda"}, key=str),
        train_loader=loader,
        sampler=sampler,
        val_loader=build_val_loader(
            val_sets, t.eval_batch_size, t.num_workers, rank, ws, eval_pad_value(eval_aug)
        ),
        sources=list(val_sets),
        selection=selection,
        transforms=pipelines(train_set.transform),
        steps_per_epoch=steps_per_epoch,
        total_steps=total,
        global_batch=t.batch_size * t.accumulate * ws,
    )
    if ckpt is not None:
        restore_states(parts, ckpt)
    return parts


def restore_states(p: Parts, ckpt: dict[str, Any]) -> None:
    """Optimiser, schedule position, scaler and this rank's random states from ``ckpt``."""
    try:
        p.stepper.optimizer.load_state_dict(ckpt["optimizer"])
    except ValueError as err:  # torch: a different number or size of parameter groups
        raise CheckpointError(
            f"the checkpoint's optimiser state does not fit this run's parameter groups "
            f"({err}). Settings that regroup the parameters must match the checkpoint's: "
            "optim.norm_weight_decay (null or a value), optim.backbone_lr_mult (1 or not) "
            "and the frozen stages of pretrained columns; resume with the checkpoint's "
            "settings, or start a new run"
        ) from err
    # The schedule's shape comes from the current config (a longer max_steps re-plans the rest
    # of the decay); only its position is restored.
    p.stepper.scheduler.load_state_dict({**ckpt["scheduler"], "lr_lambdas": [None]})
    if ckpt["scaler"] and p.stepper.scaler.is_enabled():
        p.stepper.scaler.load_state_dict(ckpt["scaler"])
    if len(ckpt["rng"]) == du.world_size():
        restore_rng(ckpt["rng"][du.rank()], p.transforms, p.cuda_devices)
    else:
        log.warning(
            "the checkpoint comes from %d replica(s), this run has %d: random states are "
            "not restored",
            len(ckpt["rng"]),
            du.world_size(),
        )
