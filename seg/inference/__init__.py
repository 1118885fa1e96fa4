"""Inference: batched prediction at the original resolution, and what it is turned into.

Entry point: ``run_predict(cfg, model, train_cfg)`` (``scripts/predict.py``); the parts are
``build_predictor`` / ``Predictor`` (images -> masks and person probabilities, or the class
maps that ``scripts/evaluate.py`` scores), the renderers in ``seg.inference.render`` and the
image/video I/O in ``seg.inference.media``.
"""

from seg.inference.prediction import OutputSpec, predict_images, predict_video, run_predict
from seg.inference.predictor import Prediction, Predictor, build_predictor

__all__ = [
    "OutputSpec",
    "Prediction",
    "Predictor",
    "build_predictor",
    "predict_images",
    "predict_video",
    "run_predict",
]
