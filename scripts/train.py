"""Train a segmentation model; the work is ``seg.engine.train.train(cfg)``.

    python scripts/train.py +exp=dual_channel                       # one process
    python scripts/train.py +exp=dual_channel trainer.max_steps=20  # a short run
    python scripts/train.py +exp=dual_channel trainer.devices=auto  # one replica per GPU
    torchrun --nproc_per_node=2 scripts/train.py +exp=dual_channel  # torchrun starts them

See docs/training.md for multi-node runs, SLURM, resume and crash recovery.
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from seg.cli import user_errors
from seg.config import Config, check_retired_overrides, register_configs
from seg.config.compose import CONFIG_DIR
from seg.config.overrides import check_overrides

# seg.engine (torch and the rest) is imported where it is used: a mistake on the command line is
# answered in a second, before it loads.


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig) -> float:
    """Return the final value of the metric best.pt follows (``best_key``: person IoU by
    default, over the training sources when one is held out): what a Hydra sweeper optimises."""
    # A config value out of range, missing data, a busy run folder, a checkpoint that cannot
    # be resumed: one line saying what to do, exit code 2. A bug keeps its traceback.
    from seg.engine.init_from import with_init_source
    from seg.engine.preemption import Stopped
    from seg.engine.train import train

    with user_errors("train"):
        # trainer.init_from brings the source's model config along, but for the keys that the
        # command sets (Hydra's task overrides).
        cfg = with_init_source(cfg, HydraConfig.get().overrides.task)
        try:
            result = train(cfg)
        except Stopped as stopped:  # SIGTERM, SIGINT or SIGUSR1: last.pt holds the last step
            raise SystemExit(128 + stopped.signum) from None  # as the signal's own exit code
    return result[result["best_key"]]


if __name__ == "__main__":
    with user_errors("train"):
        check_retired_overrides(sys.argv[1:])
        check_overrides(sys.argv[1:], Config, CONFIG_DIR, "train")  # one line, not Hydra's
    from seg.engine.launch import hydra_overrides

    register_configs()
    sys.argv += hydra_overrides()  # under torchrun: one run directory for all ranks
    main()
