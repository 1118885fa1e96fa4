"""Inference: batched prediction at the original resolution, and what it is turned into.

Entry point: ``run_predict(cfg, model, train_cfg)`` (``scripts/predict.py``); the parts are
``build_predictor`` / ``Predictor`` (images -> masks and person probabilities), the renderers
in ``seg.inference.render`` and the image/video I/O in ``seg.inference.media``.
"""

from seg.inference.config import (
    TTA,
    AlphaMode,
    OutputKind,
    PredictConfig,
    check_predict_config,
    compose_options,
    compose_predict_config,
)
from seg.inference.predictor import (
    Prediction,
    Predictor,
    auto_device,
    build_predictor,
    inference_devices,
    restore_logits,
)
from seg.inference.run import OutputSpec, predict_images, predict_video, run_predict

__all__ = [
    "TTA",
    "AlphaMode",
    "OutputKind",
    "OutputSpec",
    "PredictConfig",
    "Prediction",
    "Predictor",
    "auto_device",
    "build_predictor",
    "check_predict_config",
    "compose_options",
    "compose_predict_config",
    "inference_devices",
    "predict_images",
    "predict_video",
    "restore_logits",
    "run_predict",
]
