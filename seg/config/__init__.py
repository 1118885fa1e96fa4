"""Typed (structured) configs: Hydra validates every YAML file and override against these.

One schema module per config group or script, all torch-free so that composing stays fast:
``data`` (data, aug), ``model``, ``training`` (trainer, optim, loss, logging and the root
``Config``), ``evaluate``, ``predict``, ``export``; ``compose`` is the one place a config is
composed and typed. A typo (``data.nmae=...``) or a bad value (``data.on_bad_sample=maybe``)
fails when the config is composed, with a message that names the key and, for enums, the valid
choices. Only builders read these objects; modules take plain typed arguments.
"""

from seg.config.compose import (
    CONFIG_DIR,
    check_retired_overrides,
    compose,
    compose_config,
    compose_dict,
    compose_options,
    config_to_dict,
    register_configs,
    to_config,
)
from seg.config.data import (
    IGNORE_INDEX,
    PERSON,
    AugConfig,
    BadSamplePolicy,
    CocoConfig,
    DataConfig,
    FolderConfig,
    Interpolation,
    MaskEncoding,
    check_aug_config_ranges,
)
from seg.config.demo import DemoConfig, compose_demo_config
from seg.config.evaluate import EvalConfig, check_eval_config, compose_eval_config
from seg.config.export import ExportConfig
from seg.config.fields import flatten_config, incidental
from seg.config.inference import (
    TTA,
    Backend,
    InferenceOptions,
    InferencePrecision,
    PredictorOptions,
    RefineConfig,
    SlideConfig,
    TemporalConfig,
)
from seg.config.model import ColumnConfig, ModelConfig, UNetConfig
from seg.config.predict import (
    AlphaMode,
    OutputKind,
    PredictConfig,
    check_predict_config,
    compose_predict_config,
)
from seg.config.training import (
    PRECISIONS,
    TARGET_PIXEL_ACC,
    Config,
    LoggingConfig,
    LossConfig,
    OptimConfig,
    OptimizerName,
    ScheduleName,
    TrainerConfig,
)

__all__ = [
    "CONFIG_DIR",
    "IGNORE_INDEX",
    "PERSON",
    "PRECISIONS",
    "TARGET_PIXEL_ACC",
    "TTA",
    "AlphaMode",
    "AugConfig",
    "Backend",
    "BadSamplePolicy",
    "CocoConfig",
    "ColumnConfig",
    "Config",
    "DataConfig",
    "DemoConfig",
    "EvalConfig",
    "ExportConfig",
    "FolderConfig",
    "InferenceOptions",
    "InferencePrecision",
    "Interpolation",
    "LoggingConfig",
    "LossConfig",
    "MaskEncoding",
    "ModelConfig",
    "OptimConfig",
    "OptimizerName",
    "OutputKind",
    "PredictConfig",
    "PredictorOptions",
    "RefineConfig",
    "ScheduleName",
    "SlideConfig",
    "TemporalConfig",
    "TrainerConfig",
    "UNetConfig",
    "check_aug_config_ranges",
    "check_eval_config",
    "check_predict_config",
    "check_retired_overrides",
    "compose",
    "compose_config",
    "compose_demo_config",
    "compose_dict",
    "compose_eval_config",
    "compose_options",
    "compose_predict_config",
    "config_to_dict",
    "flatten_config",
    "incidental",
    "register_configs",
    "to_config",
]
