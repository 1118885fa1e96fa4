"""The training engine: distributed setup, losses, optimisers, checkpoints and the loop.

Nothing is imported here, so that ``seg.config`` can import ``seg.engine.config`` (no torch)
and composing a config stays fast. Entry point: ``seg.engine.train.train(cfg) -> dict``.
"""
