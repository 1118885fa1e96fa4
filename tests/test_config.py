"""Typed configs: every data/aug config composes, typos and bad values fail naming them."""

from __future__ import annotations

import re

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

from seg.config import CONFIG_DIR, BadSamplePolicy, DatasetName, MaskEncoding, compose_config


@pytest.mark.parametrize("name", sorted(p.stem for p in (CONFIG_DIR / "data").glob("*.yaml")))
def test_every_data_config_composes(name: str) -> None:
    cfg = compose_config([f"data={name}"])
    assert cfg.data.name is DatasetName(name)


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
        ("data.nmae=ccp", r"nmae"),  # a typo in a key
        ("aug.rotate=[1,2]", r"rotate"),
    ],
)
def test_bad_values_fail_at_composition_naming_them(override: str, words: str) -> None:
    with pytest.raises((ConfigCompositionException, ValidationError, ConfigKeyError)) as info:
        compose_config([override])
    text = f"{info.value} {info.value.__cause__}"
    assert re.search(words, text, re.S), text
