"""Typed configs: every data/aug config composes, typos and bad values fail naming them."""

from __future__ import annotations

import math
import re
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from seg.config import (
    CONFIG_DIR,
    BadSamplePolicy,
    Config,
    DataConfig,
    EvalConfig,
    ExportConfig,
    MaskEncoding,
    OptimConfig,
    PredictConfig,
    TrainerConfig,
    compose_config,
    config_to_dict,
    to_config,
)
from seg.errors import ConfigError


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONFIG_DIR / "data").glob("*.yaml")))
def test_every_data_config_composes_and_names_a_dataset_of_the_registry(name: str) -> None:
    from seg.data.registry import DATASETS, MIX

    cfg = compose_config([f"data={name}"])
    assert cfg.data.name == name and name in [*DATASETS, MIX]


def test_folder_options_are_typed() -> None:
    cfg = compose_config(
        ["data=folder", "data.folder.encoding=instances", "data.on_bad_sample=skip"]
    )
    assert cfg.data.folder.encoding is MaskEncoding.instances
    assert cfg.data.on_bad_sample is BadSamplePolicy.skip


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("data.on_bad_sample=maybe", r"maybe.*(error|skip)"),
        ("data.folder.encoding=rgb", r"rgb.*binary01"),
        ("data.val_fraction=lots", r"lots"),
        ("data.nmae=ccp", r"unknown config key data.nmae; did you mean data.name\?"),  # a typo
        ("aug.rotate=[1,2]", r"rotate"),
    ],
)
def test_bad_values_fail_at_composition_naming_them(override: str, words: str) -> None:
    kinds = (ConfigCompositionException, ValidationError, ConfigKeyError, ConfigError)
    with pytest.raises(kinds) as info:
        compose_config([override])
    text = f"{info.value} {info.value.__cause__}"
    assert re.search(words, text, re.S), text


# --- One source of truth per setting -------------------------------------------------------

GROUPS = ("aug", "data", "logging", "loss", "model", "optim", "trainer")


def restated_defaults(group: str, yaml: dict, schema: Any) -> list[str]:
    """Keys of a group file whose value is the schema's default (``name`` names the option and
    may stay). Lists of sub-configs (model columns) are compared as a whole."""
    found = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key != "defaults":
                    walk(value, f"{path}.{key}")
            return
        if path.endswith(".name"):
            return
        default = OmegaConf.select(schema, path)
        default = OmegaConf.to_container(default) if OmegaConf.is_config(default) else default
        default = default.value if isinstance(default, Enum) else default
        if default == node:
            found.append(path)

    walk(yaml, group)
    return found


@pytest.mark.parametrize(
    "path",
    sorted(p.relative_to(CONFIG_DIR) for g in GROUPS for p in (CONFIG_DIR / g).glob("*.yaml")),
    ids=str,
)
def test_group_files_hold_only_what_differs_from_the_schema(path: Path) -> None:
    schema = OmegaConf.structured(Config)
    yaml = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / path)) or {}
    restated = restated_defaults(path.parts[0], yaml, schema)
    assert not restated, f"{path} restates the defaults of {restated}: delete them there"


def test_a_restated_default_is_found() -> None:
    schema = OmegaConf.structured(Config)
    yaml = {"epochs": 30, "max_steps": 5, "name": "x"}
    assert restated_defaults("trainer", yaml, schema) == ["trainer.epochs"]
    model = {"name": "multicolumn", "num_classes": 2, "decoder_channels": 32, "aux_heads": 1}
    assert restated_defaults("model", model, schema) == [
        "model.num_classes",
        "model.decoder_channels",
    ]


def test_an_unknown_key_in_a_stored_config_is_an_error_naming_it() -> None:
    stored = config_to_dict(compose_config(["+exp=dual_channel"]))
    stored["trainer"]["epocs"] = 3
    with pytest.raises(ConfigKeyError, match="epocs"):
        to_config(stored)


@pytest.mark.parametrize(
    ("make", "key"),
    [
        (lambda: EvalConfig(checkpoint="x.pt", split="tran"), "split"),
        (lambda: EvalConfig(checkpoint="x.pt", scales=[0.0]), "scales"),
        (lambda: PredictConfig(checkpoint="x.pt", input="a.jpg", jpeg_quality=0), "jpeg_quality"),
        (lambda: TrainerConfig(batch_size=0), "trainer.batch_size"),
        (lambda: OptimConfig(lr=math.inf), "optim.lr"),  # inf > 0, yet no learning rate
        (lambda: OptimConfig(lr=math.nan), "optim.lr"),
        (lambda: TrainerConfig(grad_clip=math.inf), "trainer.grad_clip"),
        (lambda: DataConfig(val_fraction=1.5), "data.val_fraction"),
        (lambda: DataConfig(val_fraction=0.5, test_fraction=0.5), "data.val_fraction"),
        (lambda: DataConfig(negatives_p=1.0), "data.negatives_p"),
        (lambda: ExportConfig(checkpoint="x.pt", tolerance=-1), "tolerance"),
        (lambda: ExportConfig(checkpoint="x.pt", min_agreement=2), "min_agreement"),
    ],
)
def test_every_schema_checks_its_ranges_when_made(make, key: str) -> None:
    """One layer for range checks: the schemas' __post_init__, whether the object comes from
    Hydra or from code (a bad value, NaN and infinity included, cannot reach a run)."""
    with pytest.raises(ConfigError, match=re.escape(key)):
        make()


@pytest.mark.parametrize(
    ("override", "instead"),
    [
        ("model.devices=[cpu,cpu]", "trainer.column_devices"),
        ("+trainer.fault_at_step=3", "nothing: the crash tests"),
        ("aug.image_fill=0", "aug.mask_fill"),
        ("model.exchange_mode=sum", "nothing: exchanged features are concatenated"),
        ("trainer.ema_decay=0.999", "nothing: a weight EMA gained nothing"),
        ("aug.rotate_wide_p=0.2", "nothing: wide rotations cost"),
    ],
)
def test_a_retired_key_names_what_replaced_it(override: str, instead: str) -> None:
    with pytest.raises(ValueError, match=rf"no longer a config key: use {re.escape(instead)}"):
        compose_config(["+exp=dual_channel", override])
