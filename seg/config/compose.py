"""The one place where Hydra composes a config and OmegaConf turns it into a typed object.

Scripts under ``@hydra.main`` get their config from Hydra; everything else (the scripts that
take ``key=value`` overrides through the compose API, the notebooks, the tests) calls
:func:`compose`. Errors name the bad key or value (Hydra's ``ConfigCompositionException``, with
the reason Hydra keeps in its cause brought into the message).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from seg.config.overrides import check_overrides
from seg.config.training import Config
from seg.errors import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig

T = TypeVar("T")

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
# Keys that configs no longer have, dropped from the configs stored in older checkpoints so that
# those still load (seg.checkpoint.upgrade_checkpoint): where a run placed its columns (now
# trainer.column_devices, not part of the model's description) and the crash tests' fault
# injection (now in the tests: they replace seg.engine.train.after_step).
RETIRED_KEYS = {
    "model.devices": "trainer.column_devices=[...] (where a run places the columns)",
    "trainer.fault_at_step": "nothing: the crash tests replace seg.engine.train.after_step",
    "trainer.fault_rank": "nothing: the crash tests replace seg.engine.train.after_step",
    "trainer.fault_kind": "nothing: the crash tests replace seg.engine.train.after_step",
    # Options no recipe, doc or test of a use read (issue 27): fewer keys to hold.
    "optim.nesterov": "optim.momentum (plain momentum SGD, as every recipe trained)",
    "optim.warmup_factor": "optim.warmup_steps (the warm-up starts at 0.01 * optim.lr)",
    "loss.label_smoothing": "nothing: no recipe smoothed labels (two classes, ignore 255)",
    "aug.image_fill": "aug.mask_fill (image pixels brought in by a shift or pad are black)",
    "data.mask_resize_tolerance": "nothing: a smaller mask is resized within 1% of the aspect",
    "model.exchange_mode": "nothing: exchanged features are concatenated",
    # Options whose ablation showed no gain (issue 39; docs/notes/ holds each measurement).
    "trainer.ema_decay": "nothing: a weight EMA gained nothing (docs/notes, 'weight EMA')",
    "model.decoder_stride": "nothing: the decoder joins the columns from stride 4 on",
    "aug.rotate_wide_p": "nothing: wide rotations cost coco128's photos without people",
    "aug.rotate_wide": "nothing: wide rotations cost coco128's photos without people",
    "aug.gray_p": "nothing: no recipe trained on grayscale copies",
}


def check_retired_overrides(overrides: list[str]) -> None:
    """A command-line override of a retired key -> ``ValueError`` naming what replaced it
    (Hydra alone would only say that the key is not in the schema)."""
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in RETIRED_KEYS:
            raise ConfigError(f"{key} is no longer a config key: use {RETIRED_KEYS[key]}")


def register_configs() -> None:
    """Register the training schema with Hydra's ConfigStore as ``base_config`` (the defaults
    list of ``configs/train.yaml`` starts from it)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="base_config", node=Config)


def compose_dict(
    config_name: str,
    overrides: list[str] | None = None,
    schemas: dict[str, type] | None = None,
    config_dir: Path | None = CONFIG_DIR,
    hydra_node: bool = False,
) -> DictConfig:
    """Compose ``config_name`` with Hydra ``overrides``: the ``DictConfig`` that ``@hydra.main``
    would pass (not yet typed; :func:`compose` types it). ``hydra_node``: keep Hydra's own
    ``hydra`` node too (its launcher, sweeper and run directory settings).

    ``schemas``: dataclasses to store in Hydra's ConfigStore first, by name (a YAML file names
    its schema in its defaults list; options without a YAML file store theirs as
    ``config_name``). ``config_dir=None``: no search path (the schema alone). Raises Hydra's
    errors naming unknown keys, bad types and missing mandatory values (``???``).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.errors import ConfigCompositionException

    check_retired_overrides(list(overrides or []))
    # One line for a misspelt key or an unknown group option, before Hydra's seven; the root
    # schema is the first of ``schemas`` (a script's options), else the training config.
    root = next(iter(schemas.values())) if schemas else Config
    check_overrides(list(overrides or []), root, config_dir, config_name)
    register_configs()
    for name, node in (schemas or {}).items():
        ConfigStore.instance().store(name=name, node=node)
    context = (
        initialize(version_base="1.3", config_path=None)
        if config_dir is None
        else initialize_config_dir(config_dir=str(config_dir), version_base="1.3")
    )
    with context:
        try:
            return hydra_compose(
                config_name=config_name,
                overrides=list(overrides or []),
                return_hydra_config=hydra_node,
            )
        except ConfigCompositionException as err:
            # Hydra's own message ("Error merging override ...") hides the reason in its cause.
            reason = str(err.__cause__).splitlines()[0] if err.__cause__ else ""
            raise ConfigCompositionException(f"{err} ({reason})" if reason else str(err)) from err


def compose(
    config_name: str,
    overrides: list[str] | None = None,
    schemas: dict[str, type] | None = None,
    config_dir: Path | None = CONFIG_DIR,
) -> Any:
    """:func:`compose_dict`, typed: the dataclass instance, its range checks run."""
    from omegaconf import OmegaConf

    return OmegaConf.to_object(compose_dict(config_name, overrides, schemas, config_dir))


def compose_config(overrides: list[str] | None = None, config_name: str = "train") -> Config:
    """``configs/<config_name>.yaml`` with Hydra overrides -> a typed, checked ``Config``."""
    return compose(config_name, overrides)


def compose_options(schema: type[T], name: str, overrides: list[str]) -> T:
    """Hydra-style ``key=value`` overrides on the dataclass ``schema`` alone (no YAML file) ->
    a typed instance: the options of ``scripts/predict.py`` and ``scripts/export.py``."""
    return compose(name, overrides, schemas={name: schema}, config_dir=None)


def to_config(cfg: Any) -> Config:
    """A typed, validated ``Config`` from a Hydra ``DictConfig``, a plain dict (a checkpoint's)
    or itself. Range checks run here (the dataclasses' ``__post_init__``); errors name the key.
    """
    from omegaconf import OmegaConf

    if isinstance(cfg, Config):
        return cfg
    cfg = OmegaConf.create(cfg) if isinstance(cfg, dict) else cfg
    merged = OmegaConf.merge(OmegaConf.structured(Config), cfg)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """A typed config as plain dicts, lists and scalars (enums as strings), resolved."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True, enum_to_str=True)
