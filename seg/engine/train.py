"""The training loop as a few plain functions (in the manner of torchvision's reference recipe):

    train(cfg) -> setup -> for each epoch: train_one_epoch -> validate -> checkpoint_run

The same code runs in one process, under torchrun, and in the workers that
``trainer.devices=N`` starts (seg/engine/launch.py).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from seg import distributed as du
from seg.checkpoint import load_checkpoint
from seg.config import Config, config_to_dict, to_config
from seg.data import own_eval_sizes, save_splits
from seg.devices import resolve_devices
from seg.engine.build import Parts, seed_everything, setup
from seg.engine.checkpointer import (
    Checkpointer,
    capture_rng,
    check_resume_config,
    find_resume_checkpoint,
)
from seg.engine.init_from import InitSource, read_init_source
from seg.engine.launch import launch, needs_launch, remember_run_dir
from seg.engine.logger import LossMeter, MetricLogger, NonFiniteLossError
from seg.engine.monitor import WaitClock, flatten_hparams, memory_scalars
from seg.engine.preemption import Stopped, StopSignals
from seg.engine.run_dir import (
    claim_run_dir,
    decide_run_dir,
    lock_run_dir,
    remove_if_unused,
    write_run_files,
)
from seg.engine.state import TrainState, resume_changes
from seg.engine.validation import evaluate, scalars, validation_metrics
from seg.errors import DataError
from seg.evaluation.report import format_training_report, meets_target
from seg.fileio import write_json
from seg.metrics.keys import metric_key, parse_metric_key
from seg.models import num_columns
from seg.runs import RunLayout

log = logging.getLogger(__name__)


def train(cfg: Config | DictConfig) -> dict[str, Any]:
    """Train ``cfg`` (checked first: a bad value fails here) and return the final metrics.

    Starts ``trainer.devices`` replicas itself unless a launcher (torchrun, SLURM) already did.
    """
    cfg = to_config(cfg)
    if needs_launch(cfg.trainer.devices):
        return launch(cfg, train)
    du.export_slurm_environment()
    devices = resolve_devices(
        cfg.trainer.column_devices, num_columns(cfg.model), key="trainer.column_devices"
    )
    du.init_distributed(devices, cfg.trainer.dist_timeout_s)
    if not du.is_main_process():  # rank 0 reports progress; the others warnings and errors
        logging.getLogger().setLevel(logging.WARNING)
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        return _fit(cfg, devices)
    finally:
        torch.use_deterministic_algorithms(deterministic)
        du.destroy_distributed()


def _fit(cfg: Config, devices: list[torch.device]) -> dict[str, Any]:
    run_dir, created = decide_run_dir(cfg.trainer.run_dir)
    if du.is_main_process():
        remember_run_dir(run_dir)
    with lock_run_dir(run_dir):  # one run at a time in a folder
        try:
            ckpt_path = find_resume_checkpoint(cfg.trainer.resume, run_dir)
            resuming, auto = ckpt_path is not None, cfg.trainer.resume == "auto"
            # Read before the folder is claimed: overwrite may empty the folder it came from.
            init = init_source(cfg, resuming)
            claim_run_dir(run_dir, resuming, cfg.trainer.overwrite, auto)  # never mix runs
            with _log_to(run_dir / "train.log" if du.is_main_process() else None):
                return _run(cfg, run_dir, ckpt_path, devices, init)
        except BaseException:
            # A run that failed before writing anything leaves no empty folder; only while it
            # holds the lock: a start that lost the race for a new folder never removes the
            # folder of the run that won it.
            if created:
                remove_if_unused(run_dir)
            raise


@contextlib.contextmanager
def _log_to(path: Path | None) -> Iterator[None]:
    """The run's log in its own folder too (``trainer.run_dir`` is not Hydra's output folder,
    whose ``train.log`` Hydra writes already): a file handler on the root logger for the run."""
    root = logging.getLogger()
    have = {getattr(h, "baseFilename", None) for h in root.handlers}
    if path is None or str(path.absolute()) in have:
        yield
        return
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


def init_source(cfg: Config, resuming: bool) -> InitSource | None:
    """``trainer.init_from``'s weights for a new run; None without it, or when the run resumes
    (its own checkpoint holds its weights)."""
    if not cfg.trainer.init_from:
        return None
    if resuming:
        log.info("trainer.init_from=%s: not read, the run resumes", cfg.trainer.init_from)
        return None
    return read_init_source(cfg.trainer.init_from)


def _run(
    cfg: Config,
    run_dir: Path,
    ckpt_path: Path | None,
    devices: list[torch.device],
    init: InitSource | None = None,
) -> dict[str, Any]:
    t, main = cfg.trainer, du.is_main_process()
    seed_everything(cfg.seed, t.deterministic)
    ckpt = load_checkpoint(ckpt_path) if ckpt_path else None
    if ckpt is not None:
        check_resume_config(ckpt, cfg, ckpt_path)
    p = setup(cfg, devices, ckpt, init)
    state = TrainState.from_checkpoint(ckpt, du.world_size()) if ckpt else TrainState()
    if ckpt is not None:
        resume_changes(state, ckpt["config"].get("trainer", {}), t)
    state.choose_best_by(p.selection)
    writer = MetricLogger(
        run_dir if main else None, cfg.logging.tensorboard, state.step, cfg.logging.val_images
    )
    ckpts = Checkpointer(RunLayout(run_dir) if main else None, t.keep_last)
    if main:
        info = {
            "world_size": du.world_size(),
            "devices": [str(d) for d in p.stepper.model_without_ddp.devices],
        }
        info.update(torch=torch.__version__, restart=du.restart_count(), resumed_from=ckpt_path)
        if init is not None:
            info["init_from"] = init.card()
        write_run_files(run_dir, cfg, info)
        save_splits(cfg.data, RunLayout(run_dir).splits)
        net = p.stepper.model_without_ddp
        writer.log_model_summary(net, (1, 3, *cfg.aug.eval_size), state.step)
        writer.watch_val_images(p.val_loader.dataset if p.val_loader is not None else None)
    precision = p.stepper.precision
    log.info(
        "run %s: %d replica(s) on %s, global batch %d, %d steps/epoch, %d steps, precision %s%s",
        run_dir,
        du.world_size(),
        [str(d) for d in p.stepper.model_without_ddp.devices],
        p.global_batch,
        p.steps_per_epoch,
        p.total_steps,
        precision if precision == str(t.precision) else f"{t.precision} -> {precision}",
        f", resuming {ckpt_path} at step {state.step}" if ckpt_path else "",
    )
    if p.selection.held_out:
        log.info(
            "best.pt follows %s, and the pixel-accuracy target val/train_sources/pixel_acc: "
            "validation of the training sources only (the sources not trained on are "
            "reported, never used to choose or stop)",
            state.best_of,
        )
    with StopSignals() as stop, _closing_on_stop(writer):  # a signal: the step ends, saved
        while state.step < p.total_steps:
            p.sampler.set_epoch(state.epoch)
            p.sampler.set_start(state.batch_in_epoch * t.batch_size)
            train_one_epoch(p, state, cfg, writer, ckpts, stop)
            epoch_end = state.batch_in_epoch >= p.steps_per_epoch * t.accumulate
            if epoch_end:
                state.epoch, state.batch_in_epoch = state.epoch + 1, 0
            due = epoch_end and t.eval_every > 0 and state.epoch % t.eval_every == 0
            check_finite_weights(p.stepper.model_without_ddp, state.step)  # before validating them
            is_best = (
                validate(p, state, cfg, writer) if due or state.step >= p.total_steps else False
            )
            checkpoint_run(p, state, cfg, ckpts, is_best)
            if t.stop_at_target and state.target is not None:
                log.info(
                    "trainer.stop_at_target: the target is reached, stopping at step %d", state.step
                )
                break
    if not state.metrics:  # resumed a finished run that was never validated
        validate(p, state, cfg, writer)
    hparams = {**flatten_hparams(cfg), "world_size": du.world_size()}
    # The overall metrics, and a leave-one-out run's training-sources ones (what it chose by).
    overall = {
        k: v
        for k, v in state.metrics.items()
        if (key := parse_metric_key(k)) is not None and not key.per_source
    }
    writer.log_hparams(hparams, overall)
    writer.close()
    return _finish(p, state, cfg, run_dir)


@contextlib.contextmanager
def _closing_on_stop(writer: MetricLogger) -> Iterator[None]:
    """Close the logs (TensorBoard's event files flushed) when a stop signal ends the run."""
    try:
        yield
    except Stopped as stopped:
        log.warning("%s", stopped)
        writer.close()
        raise


def train_one_epoch(
    p: Parts,
    state: TrainState,
    cfg: Config,
    writer: MetricLogger,
    ckpts: Checkpointer,
    stop: StopSignals,
) -> None:
    """Train from pass ``state.batch_in_epoch`` of ``state.epoch`` to the epoch's end or the
    last step; logs every ``logging.log_every`` steps, saves every ``trainer.ckpt_every_steps``.
    A stop signal (``stop``) ends it after the current step, with a checkpoint of that step."""
    t, stepper = cfg.trainer, p.stepper
    passes = p.steps_per_epoch * t.accumulate
    meter = LossMeter(stepper.device)
    show = du.is_main_process() and cfg.logging.progress_bar
    bar = tqdm(
        total=p.steps_per_epoch,
        initial=state.batch_in_epoch // t.accumulate,
        desc=f"epoch {state.epoch}",
        unit="step",
        disable=None if show else True,
    )
    window = (time.perf_counter(), state.step)
    clock = WaitClock()  # time spent waiting for batches, for perf/data_wait_fraction
    stepper.model.train()
    with logging_redirect_tqdm() if show else contextlib.nullcontext():
        for batch in clock.wrap(p.train_loader):
            if state.batch_in_epoch >= passes or state.step >= p.total_steps:
                break
            state.batch_in_epoch += 1
            state.pending_skipped += int(batch["skipped"].sum())
            sync = state.batch_in_epoch % t.accumulate == 0
            meter.add(stepper.forward_backward(batch["image"], batch["mask"], sync), state.step + 1)
            if not sync:
                continue
            lr = stepper.optimizer_step()
            state.step += 1
            bar.update()
            end = state.batch_in_epoch >= passes or state.step >= p.total_steps
            save = t.ckpt_every_steps > 0 and state.step % t.ckpt_every_steps == 0 and not end
            logged = end or save or state.step % cfg.logging.log_every == 0
            if logged:
                window = _log_train(p, state, meter, writer, bar, window, lr, clock.take())
            if save:
                checkpoint_run(p, state, cfg, ckpts)
            after_step(state.step)
            # Under DDP the ranks agree at the steps that synchronise anyway (logging); alone,
            # the flag is read at every step.
            if (logged or not du.is_distributed()) and stop.stop_requested(stepper.device):
                if not save:
                    checkpoint_run(p, state, cfg, ckpts)
                bar.close()
                raise Stopped(stop.signum, state.step)
    bar.close()


def after_step(step: int) -> None:
    """Called after every optimiser step (and its checkpoint, if one was due); does nothing.
    The crash tests replace it to fail at a chosen step (tests/crash_worker.py)."""


def _log_train(
    p: Parts,
    state: TrainState,
    meter: LossMeter,
    writer: MetricLogger,
    bar: tqdm,
    window: tuple[float, int],
    lr: float,
    waited: float,
) -> tuple[float, int]:
    """Log the loss terms (mean since the last log, over ranks; a NaN raises), ``lr``, img/s,
    the fraction of the time spent waiting for data (``waited`` seconds) and peak memory."""
    means = meter.flush()  # one collective and one host sync per log step
    now = time.perf_counter()
    seconds, steps = now - window[0], state.step - window[1]
    img_s = steps * p.global_batch / max(seconds, 1e-9)
    eta = datetime.timedelta(seconds=round((p.total_steps - state.step) * seconds / max(steps, 1)))
    values = {f"train/{k}": v for k, v in means.items()}
    values.update({"lr": lr, "perf/img_per_s": img_s})
    values["perf/data_wait_fraction"] = min(1.0, waited / max(seconds, 1e-9))
    values.update(memory_scalars(p.cuda_devices))
    writer.log(state.step, values)
    bar.set_postfix(loss=f"{means['loss']:.4f}", img_s=f"{img_s:.1f}")
    terms = " ".join(f"{k} {v:.4f}" for k, v in means.items() if k != "loss")
    log.info(
        "epoch %d step %d/%d loss %.4f (%s) lr %.3g %.1f img/s eta %s",
        state.epoch,
        state.step,
        p.total_steps,
        means["loss"],
        terms,
        values["lr"],
        img_s,
        eta,
    )
    return now, state.step


def validate(p: Parts, state: TrainState, cfg: Config, writer: MetricLogger) -> bool:
    """Score the validation split (all ranks), record the target and the best; True if best."""
    t = cfg.trainer
    model = p.stepper.model_without_ddp
    du.broadcast_buffers_(model)  # every rank scores rank 0's (saved) model
    totals, val_bad = evaluate(
        model, p.val_loader, p.stepper.device, p.sources, cfg.model.num_classes, p.stepper.amp_dtype
    )
    if val_bad and not sum(int(m.confusion.sum()) for m in totals.values()):
        raise DataError(
            f"validation scored no pixel: all {val_bad} pairs of the {t.val_split} split are bad "
            "(data.on_bad_sample=skip dropped them; see the warnings above)"
        )
    # This rank's since the last validation, on the device the backend serves (NCCL: a GPU).
    train_bad = torch.tensor(state.pending_skipped, device=p.stepper.device)
    state.train_skipped += int(du.all_reduce_sum_(train_bad))
    state.pending_skipped = 0
    state.metrics = validation_metrics(totals, p.selection)
    state.metrics.update(
        {metric_key("skipped"): float(val_bad), "train/skipped": float(state.train_skipped)}
    )
    writer.log(state.step, scalars(state.metrics))
    aug = cfg.aug
    device, amp_dtype = p.stepper.device, p.stepper.amp_dtype
    writer.log_val_images(state.step, model, device, aug.mean, aug.std, amp_dtype)
    state.tick()
    acc = state.metrics[p.selection.key_of("pixel_acc")]
    if state.target is None and meets_target(acc, t.target_pixel_acc):
        passes = p.steps_per_epoch * t.accumulate
        state.target = {
            "epoch": round(state.epoch + state.batch_in_epoch / passes, 3),
            "step": state.step,
            "wall_time_s": round(state.elapsed_s, 1),
            "images_seen": state.step * p.global_batch,
        }
        log.info(
            "pixel accuracy reached the %.0f%% target: %s", 100 * t.target_pixel_acc, state.target
        )
    value = state.metrics[p.selection.key_of(t.best_metric)]
    is_best = math.isfinite(value) and (state.best is None or value > state.best)
    if is_best:
        state.best = value
    log.info(
        "validation at step %d: pixel acc %.2f%%, person IoU %.2f%%, mIoU %.2f%%",
        state.step,
        100 * state.metrics[metric_key("pixel_acc")],
        100 * state.metrics[metric_key("iou_person")],
        100 * state.metrics[metric_key("miou")],
    )
    return is_best


def check_finite_weights(model: torch.nn.Module, step: int) -> None:
    """Raise :class:`NonFiniteLossError` if a weight is NaN or infinite after ``step`` (an
    ``optim.lr`` far too large can do that while the loss that step was still finite): the
    run stops keeping its last good checkpoint. One host sync, at checkpoint time only."""
    params = list(model.parameters())
    if not params or bool(torch.stack([torch.isfinite(t).all().cpu() for t in params]).all()):
        return
    names = [n for n, t in model.named_parameters() if not torch.isfinite(t).all()]
    msg = (
        f"{len(names)} weight tensor(s) are not finite after step {step} (first: {names[0]}); "
        "training stops here and the last checkpoint (written before this step) is kept. "
        "Lower optim.lr or set trainer.grad_clip."
    )
    log.error(msg)
    raise NonFiniteLossError(msg)


def checkpoint_run(
    p: Parts, state: TrainState, cfg: Config, ckpts: Checkpointer, is_best: bool = False
) -> None:
    """Every rank contributes its random states; rank 0 writes."""
    check_finite_weights(p.stepper.model_without_ddp, state.step)  # never saved over a good one
    state.tick()
    rng = du.all_gather_object(capture_rng(p.transforms, p.cuda_devices))
    if ckpts.run is None:
        return
    ckpt = {
        "model": p.stepper.model_without_ddp.state_dict(),
        "optimizer": p.stepper.optimizer.state_dict(),
        "scheduler": p.stepper.scheduler.state_dict(),
        "scaler": p.stepper.scaler.state_dict(),
        **state.as_dict(),
        "rng": rng,
        "config": config_to_dict(cfg),
    }
    ckpts.save(ckpt, state.step, is_best)


def _finish(p: Parts, state: TrainState, cfg: Config, run_dir: Path) -> dict[str, Any]:
    t = cfg.trainer
    result = {
        **state.metrics,
        "step": state.step,
        "epoch": state.epoch,
        "run_dir": str(run_dir),
        "world_size": du.world_size(),
        "elapsed_s": round(state.elapsed_s, 1),
        "best_metric": t.best_metric,
        "best_key": p.selection.key,
        "selection": p.selection.as_dict(),
        "best": state.best,
        "target_pixel_acc": t.target_pixel_acc,
        "target_reached": state.target,
    }
    if du.is_main_process():
        write_json(RunLayout(run_dir).metrics, result)
        log.info(
            "final validation (%s split, at %s):\n%s",
            t.val_split,
            "x".join(map(str, cfg.aug.eval_size))
            + "".join(
                f", {name} at {'x'.join(map(str, size))}"
                for name, size in own_eval_sizes(cfg.data, cfg.aug.eval_size).items()
            ),
            format_training_report(result, p.sources, t.target_pixel_acc, p.selection),
        )
    return result
