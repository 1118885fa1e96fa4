"""The layout of a training run's folder, in one place: what each file is called and where it
goes. Training writes it, evaluation, the demo, the analysis and the notebooks read it.

::

    <run>/config.yaml                 the resolved config
    <run>/checkpoints/last.pt         and best.pt, step_NNNNNNNN.pt
    <run>/metrics.jsonl               every logged step
    <run>/metrics.json                the final figures
    <run>/run_info.json               git commit, command, world size
    <run>/tb/                         TensorBoard's event files
    <run>/splits/<source>_<split>.txt the ids of each split
    <run>/eval/<data>_<split>/        evaluations (scripts/evaluate.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CHECKPOINTS = "checkpoints"
LAST = "last.pt"
BEST = "best.pt"


@dataclass(frozen=True)
class RunLayout:
    """The files of the run folder ``root``."""

    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def last(self) -> Path:
        return self.checkpoints / LAST

    @property
    def best(self) -> Path:
        return self.checkpoints / BEST

    def step_checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"step_{step:08d}.pt"

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def metrics_log(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.json"

    @property
    def info(self) -> Path:
        return self.root / "run_info.json"

    @property
    def splits(self) -> Path:
        return self.root / "splits"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tb"

    def evaluation(self, data: str, split: str) -> Path:
        return self.root / "eval" / f"{data}_{split}"

    @property
    def evaluations(self) -> Path:
        return self.root / "eval"

    def owned(self) -> tuple[Path, ...]:
        """What training writes here (not Hydra's .hydra/ and train.log, nor eval/): what a
        run started over (``trainer.overwrite``) removes."""
        return (
            self.checkpoints,
            self.metrics_log,
            self.metrics,
            self.config,
            self.info,
            self.splits,
            self.tensorboard,
        )

    @classmethod
    def of_checkpoint(cls, checkpoint: Path) -> RunLayout | None:
        """The run whose ``checkpoints/`` folder holds ``checkpoint`` (its config beside
        them), else None."""
        checkpoint = Path(checkpoint)
        if checkpoint.parent.name != CHECKPOINTS:
            return None
        run = cls(checkpoint.parent.parent)
        return run if run.config.is_file() else None


__all__ = ["BEST", "CHECKPOINTS", "LAST", "RunLayout"]
