"""The benchmark behind ``scripts/benchmark.py``: machine limits, model training and inference
speed, the data pipeline and multi-process scaling, side by side in one run.

Each section is a function returning plain dicts (JSON-ready); ``seg.benchmark.report`` runs
the chosen sections and formats them as text tables.
"""
