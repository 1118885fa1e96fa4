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
from omegaconf import DictConfig

from seg.checkpoint import CheckpointError
from seg.config import check_retired_overrides, register_configs
from seg.data.download import DatasetNotFoundError, DownloadError
from seg.engine.launch import hydra_overrides
from seg.engine.run_dir import RunDirError
from seg.engine.train import train


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig) -> float:
    """Return the final value of the metric best.pt follows (``best_key``: person IoU by
    default, over the training sources when one is held out): what a Hydra sweeper optimises."""
    try:
        result = train(cfg)
        return result[result["best_key"]]
    except (DownloadError, DatasetNotFoundError, RunDirError, CheckpointError) as err:
        # Missing data, a busy or occupied run folder, a checkpoint that cannot be resumed:
        # the user's to fix. Say what to do, without a traceback.
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    try:
        check_retired_overrides(sys.argv[1:])
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    register_configs()
    sys.argv += hydra_overrides()  # under torchrun: one run directory for all ranks
    main()
