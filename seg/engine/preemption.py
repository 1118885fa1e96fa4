"""Stopping on a signal: a preempted run saves where it is and exits cleanly.

Clusters stop long jobs with SIGTERM (SLURM's preemption and time limit, Kubernetes), SIGINT
is Ctrl-C, and SLURM sends a chosen signal ahead of the end when asked (``#SBATCH
--signal=USR1@90`` in a batch script; submitit's launcher keeps its own USR2 for its requeue).
While training, each of them only
records itself; the loop finishes the current step (under DDP: the next logging step, where
the ranks synchronise anyway, ``logging.log_every``), every rank agrees to stop (one
all-reduce of one number, so no rank waits in a collective another left), ``last.pt``
is written atomically, and :class:`Stopped` ends the run: ``scripts/train.py`` logs it and
exits with 128 + the signal's number, as a process killed by it would, with its checkpoint.
``trainer.resume=auto`` continues from it, bit-exact. A second SIGINT stops at once.
"""

from __future__ import annotations

import signal

import torch

from seg import distributed as du
from seg import signals


class Stopped(Exception):
    """Training stopped on a signal after writing its checkpoint at ``step``."""

    def __init__(self, signum: int, step: int) -> None:
        self.signum, self.step = signum, step
        name = signal.Signals(signum).name if signum else "a signal on another rank"
        super().__init__(
            f"stopped by {name} after step {step}; last.pt holds that step: continue with "
            "trainer.resume=auto"
        )


class StopSignals(signals.StopSignals):
    """:class:`seg.signals.StopSignals` for SIGTERM, SIGINT and SIGUSR1, asked by every rank
    together."""

    def stop_requested(self, device: torch.device) -> bool:
        """Whether any rank got a stop signal: the same answer on every rank."""
        if not du.is_distributed():
            return bool(self.signum)
        flag = torch.tensor([1.0 if self.signum else 0.0], device=device)
        return bool(du.all_reduce_sum_(flag).item() > 0)
