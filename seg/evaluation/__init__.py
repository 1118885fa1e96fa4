"""Evaluation of a checkpoint at the images' original resolution: metrics, per-image table,
worst-cases gallery (``scripts/evaluate.py``; see docs/evaluation.md).

Entry point: ``run_evaluation(compose_eval_config(overrides))``. Kept import-light: the
submodules are imported where they are used.
"""
