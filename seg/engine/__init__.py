"""The training engine: the loop, losses, optimisers, training's checkpoints, the run folder
and the launcher. Entry point: ``seg.engine.train.train(cfg) -> dict``."""
