"""``scripts/train.py`` with a crash: the worker of rank ``CRASH_RANK`` exits at once
(``os._exit(1)``, as a killed or crashed process does: no exception, no clean-up) right after
optimiser step ``CRASH_STEP``, on the first attempt only. The crash-recovery tests start it
under torchrun in place of train.py; the production loop knows nothing of it (it only calls
``seg.engine.train.after_step``, which this replaces)."""

from __future__ import annotations

import logging
import os
import runpy
import sys
from pathlib import Path

import seg.engine.train
from seg import distributed as du

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train.py"


def _crash_after(step: int) -> None:
    chosen = int(os.environ["CRASH_STEP"]), int(os.environ.get("CRASH_RANK", "0"))
    if (step, du.rank()) == chosen and du.restart_count() == 0:
        logging.getLogger("crash_worker").error("injected fault at step %d on rank %d", *chosen)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(1)


if __name__ == "__main__":
    seg.engine.train.after_step = _crash_after
    sys.argv[0] = str(SCRIPT)
    runpy.run_path(str(SCRIPT), run_name="__main__")
