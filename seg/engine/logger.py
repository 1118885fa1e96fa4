"""What a run logs: loss terms averaged over ranks, TensorBoard scalars, ``metrics.jsonl``, and
the final report. Writers exist on rank 0 only, decided once when :class:`MetricLogger` is built.

Scalar names: ``train/loss`` (and ``train/<term>``), ``lr``, ``perf/img_per_s``,
``perf/data_wait_fraction``, ``perf/max_rss_gb`` (and ``perf/cuda_max_mem_gb`` on GPUs),
``val/pixel_acc``, ``val/iou_person``, ``val/miou`` and ``val/<source>/<metric>``. TensorBoard
also gets ``val_images/<i>`` (input | truth | prediction of a fixed set of validation samples,
at every validation), ``model/summary`` (text) and, at the end, the hparams of the run with its
final validation metrics.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from seg import distributed as du
from seg.data import pad_batch, run_by_size, split_bad
from seg.data.transforms import denormalize
from seg.errors import DataError, UserError
from seg.evaluation.panels import three_panels
from seg.fileio import write_text
from seg.metrics import class_map
from seg.models import format_summary, summarize_model
from seg.runs import RunLayout

log = logging.getLogger(__name__)


class NonFiniteLossError(UserError, FloatingPointError):
    """The loss became NaN or infinite; training stops before anything is checkpointed."""


class LossMeter:
    """Sums the loss terms of every forward pass on the device (no host sync per step) and
    remembers the first step whose loss was not finite.

    :meth:`flush` (at log steps and before checkpoints) makes one collective and one host sync:
    it averages the terms over passes and ranks, and raises :class:`NonFiniteLossError` on every
    rank if any rank saw a non-finite loss.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.names: list[str] = []
        self.sums: Tensor | None = None
        self.count = 0
        self.bad_step = torch.full((), -1, dtype=torch.long, device=device)
        self.bad_terms: Tensor | None = None

    def add(self, terms: dict[str, Tensor], step: int) -> None:
        if not self.names:
            self.names = list(terms)
        values = torch.stack([terms[k].detach().float().to(self.device) for k in self.names])
        if self.sums is None:
            self.sums = torch.zeros_like(values)
            self.bad_terms = torch.zeros_like(values)
        first_bad = ~torch.isfinite(values).all() & (self.bad_step < 0)
        self.bad_step = torch.where(first_bad, step, self.bad_step)
        self.bad_terms = torch.where(first_bad, values, self.bad_terms)
        self.sums += values
        self.count += 1

    def flush(self) -> dict[str, float]:
        """Mean of each term since the last flush, over passes and ranks; resets the sums."""
        if self.sums is None:
            return {}
        bad = (self.bad_step >= 0).float().reshape(1)
        packed = torch.cat([self.sums, torch.tensor([float(self.count)], device=self.device), bad])
        du.all_reduce_sum_(packed)
        values = packed.tolist()
        if values[-1] > 0:
            self._raise()
        means = {k: v / values[-2] for k, v in zip(self.names, values, strict=False)}
        self.sums.zero_()
        self.count = 0
        return means

    def _raise(self) -> None:
        step = int(self.bad_step)
        if step >= 0:
            terms = dict(zip(self.names, self.bad_terms.tolist(), strict=True))
            where = f"at step {step} on rank {du.rank()}: loss terms {terms}"
        else:
            where = "on another rank (see its log)"
        msg = (
            f"the training loss is not finite {where}; training stops here and the last "
            "checkpoint (written before this step) is kept. Lower optim.lr, set "
            "trainer.grad_clip, or use trainer.precision=32 or bf16 instead of 16."
        )
        log.error(msg)
        raise NonFiniteLossError(msg)


def _history_until(path: Path, step: int) -> list[str]:
    """The lines of ``metrics.jsonl`` up to ``step``. A last line cut short (the run was killed
    mid-write, or the disk was full) is dropped with a warning; any other unreadable line is
    an error naming the file and the line."""
    lines = path.read_text().splitlines()
    kept = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry_step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError) as err:
            if number == len(lines):
                log.warning("%s: dropping its last line, cut short (%r)", path, line[:80])
                break
            raise DataError(
                f"{path}, line {number}: not a metrics entry ({err}): {line[:80]!r}; "
                "remove the line or the file to resume"
            ) from err
        if entry_step <= step:
            kept.append(line)
    return kept


class MetricLogger:
    """TensorBoard (``run_dir/tb``) and ``run_dir/metrics.jsonl``; ``run_dir=None`` (ranks other
    than 0) makes every call a no-op. On resume from ``step``, later points of the interrupted
    run are dropped from both, so the history reads as one uninterrupted run.

    ``val_images``: how many validation samples (the first ones, the same every time) are shown
    in TensorBoard at each validation (see :meth:`watch_val_images`)."""

    def __init__(
        self,
        run_dir: Path | None,
        tensorboard: bool = True,
        resume_step: int = 0,
        val_images: int = 0,
    ) -> None:
        self.path = None if run_dir is None else RunLayout(run_dir).metrics_log
        self.tb = None
        self.val_images = val_images
        self.val_samples: list[dict[str, Any]] = []
        if self.path is None:
            return
        if resume_step > 0 and self.path.exists():
            kept = _history_until(self.path, resume_step)
            # Atomically: a crash here must not lose the history that is kept.
            write_text(self.path, "".join(f"{line}\n" for line in kept))
        elif self.path.exists():
            self.path.unlink()
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(
                str(RunLayout(run_dir).tensorboard),
                purge_step=resume_step + 1 if resume_step else None,
            )

    def log(self, step: int, scalars: dict[str, float]) -> None:
        if self.path is None:
            return
        with self.path.open("a") as out:
            out.write(json.dumps({"step": step, **scalars}) + "\n")
        if self.tb is not None:
            for key, value in scalars.items():
                self.tb.add_scalar(key, value, step)
            self.tb.flush()

    def log_model_summary(
        self, model: nn.Module, input_size: tuple[int, int, int, int], step: int = 0
    ) -> None:
        """Parameters and FLOPs per part (``seg.models.summarize_model`` at ``input_size``
        (B, 3, H, W): one forward pass) as the text ``model/summary``."""
        if self.tb is None:
            return
        table = format_summary(summarize_model(model, input_size))
        # Indented by four spaces: TensorBoard renders text as markdown, this keeps the columns.
        self.tb.add_text("model/summary", "    " + table.replace("\n", "\n    "), step)
        self.tb.flush()

    def watch_val_images(self, dataset: Any | None) -> None:
        """Keep the first ``val_images`` samples of ``dataset`` (dicts with ``image`` (3, H, W)
        and ``mask`` (H, W): eval-preset canvases, portrait or landscape) for
        :meth:`log_val_images`."""
        if self.tb is None or dataset is None or self.val_images <= 0:
            return
        samples = (dataset[i] for i in range(min(self.val_images, len(dataset))))
        self.val_samples = split_bad(list(samples))[0]

    @torch.no_grad()
    def log_val_images(
        self,
        step: int,
        model: nn.Module,
        device: torch.device,
        mean: Sequence[float],
        std: Sequence[float],
        amp_dtype: torch.dtype | None = None,
    ) -> None:
        """``val_images/<i>``: input | truth | prediction of the watched samples, (H, 3W, 3)
        at each sample's canvas size.

        ``model`` is the plain module (not DDP): only this rank runs it."""
        if self.tb is None or not self.val_samples:
            return

        images, _ = pad_batch([s["image"] for s in self.val_samples])
        sizes = [s["image"].shape[-2:] for s in self.val_samples]
        was_training = model.training
        model.eval()
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = run_by_size(lambda x: model(x)["out"], images.to(device), sizes)
        preds = class_map(logits, 1).cpu().numpy()
        model.train(was_training)
        for i, (sample, pred, (h, w)) in enumerate(
            zip(self.val_samples, preds, sizes, strict=True)
        ):
            truth = sample["mask"].numpy().astype(np.uint8)
            image = denormalize(sample["image"], mean, std)
            panels = three_panels(image, truth, pred[:h, :w] == 1)
            self.tb.add_image(f"val_images/{i}", panels, step, dataformats="HWC")
        self.tb.flush()

    def log_hparams(self, hparams: dict[str, Any], metrics: dict[str, float]) -> None:
        """The run's hyperparameters and its final metrics for TensorBoard's HPARAMS tab.

        Written into this run (not a sub-run, as ``SummaryWriter.add_hparams`` would), so the
        metric columns are the run's own scalars (e.g. ``val/pixel_acc``)."""
        if self.tb is None:
            return
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        finite = {k: v for k, v in metrics.items() if isinstance(v, float) and math.isfinite(v)}
        for summary in hparams_summary(hparams, finite):
            self.tb.file_writer.add_summary(summary)
        self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
