"""Fine-tuning: ``trainer.init_from`` (seg/engine/init_from.py) and one's own folder with the
recommended recipe and no photos without people anywhere."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from training_utils import make_folder_subset, tiny_overrides

from seg.checkpoint import load_checkpoint
from seg.config import compose_config
from seg.data.manifest import sha256_file
from seg.engine.build import build_ddp_model
from seg.engine.init_from import load_init_weights, read_init_source, with_init_source
from seg.engine.train import train
from seg.errors import ConfigError
from seg.models import build_model
from seg.zoo import DEFAULT, shipped_file

CPU = [torch.device("cpu")]


@pytest.fixture
def source(tiny_run: Path) -> Path:
    """A run folder to start from: tiny_run's 2-step run (single_column)."""
    return tiny_run


def overrides(data: Path, run: Path, source: Path, *more: str) -> list[str]:
    return [*tiny_overrides(data, run), f"trainer.init_from={source}", *more]


def test_a_run_folder_a_file_and_the_shipped_name_are_accepted(source: Path) -> None:
    by_folder = read_init_source(str(source))
    assert by_folder.path == source / "checkpoints" / "best.pt"
    by_file = read_init_source(str(source / "checkpoints" / "last.pt"))
    assert by_file.path.name == "last.pt" and by_file.sha256 == sha256_file(by_file.path)
    shipped = read_init_source(DEFAULT)
    assert shipped.path == shipped_file(DEFAULT)
    assert shipped.config["model"]["name"] and shipped.state  # the weights file's config


def test_the_weights_are_loaded_and_the_optimiser_and_schedule_start_afresh(
    source: Path, vikram_pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEG_DATA_DIR", raising=False)
    data = make_folder_subset(vikram_pairs, tmp_path / "data")
    init = read_init_source(str(source))
    cfg = compose_config(overrides(data, tmp_path / "run", source))
    model, _ = build_ddp_model(cfg, CPU, None, init)
    state = model.state_dict()
    assert state.keys() == init.state.keys()
    assert all(torch.equal(state[k], init.state[k]) for k in state)  # every tensor, exactly
    fresh = build_model(cfg.model, pretrained=False).state_dict()
    assert any(not torch.equal(fresh[k], init.state[k]) for k in fresh)  # not a random start

    result = train(compose_config(overrides(data, tmp_path / "run", source, "trainer.max_steps=1")))
    assert result["step"] == 1  # from step 0: the source ran 2 steps
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    source_ckpt = load_checkpoint(source / "checkpoints" / "best.pt")
    assert ckpt["scheduler"]["last_epoch"] == 1 != source_ckpt["scheduler"]["last_epoch"]
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    first_lr = next(r["lr"] for r in logged if "lr" in r)
    assert cfg.optim.warmup_steps == 0 and first_lr == pytest.approx(cfg.optim.lr)  # step 0's
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert info["init_from"] == {
        "init_from": str(source),
        "path": str(source / "checkpoints" / "best.pt"),
        "sha256": sha256_file(source / "checkpoints" / "best.pt"),
    }


def test_the_sources_model_comes_along_unless_the_command_sets_it(source: Path) -> None:
    recipe = ["+exp=dual_channel", f"trainer.init_from={source}"]
    cfg = with_init_source(compose_config(recipe), recipe)
    saved = load_checkpoint(source / "checkpoints" / "best.pt")["config"]
    assert getattr(cfg.model.name, "value", cfg.model.name) == saved["model"]["name"]
    assert len(cfg.model.columns) == 1  # single_column's, not dual_channel's two
    assert list(cfg.aug.mean) == saved["aug"]["mean"]
    own = [*recipe, "model.num_classes=3", "aug.mean=[0.5,0.5,0.5]"]
    cfg = with_init_source(compose_config(own), own)
    assert len(cfg.model.columns) == 1 and cfg.model.num_classes == 3
    assert list(cfg.aug.mean) == [0.5, 0.5, 0.5]
    plain = compose_config(["+exp=dual_channel"])
    assert with_init_source(plain, []) == plain  # nothing to bring without init_from


def test_weights_that_do_not_fit_name_the_model_keys_and_the_tensors(source: Path) -> None:
    init = read_init_source(str(source))
    cfg = with_init_source(compose_config([f"trainer.init_from={source}"]), [])
    cfg.model.columns[0].widths = [w * 2 for w in cfg.model.columns[0].widths]
    with pytest.raises(ConfigError) as err:
        load_init_weights(build_model(cfg.model, pretrained=False), cfg, init)
    message = str(err.value)
    assert "\n" not in message and f"trainer.init_from={source}" in message
    assert "model.columns.0.widths" in message and "columns.0.stages.0" in message
    assert "in the source" in message


def test_another_class_count_gets_a_fresh_head_and_the_log_says_so(
    source: Path, caplog: pytest.LogCaptureFixture
) -> None:
    init = read_init_source(str(source))
    cfg = with_init_source(compose_config([f"trainer.init_from={source}"]), [])
    cfg.model.num_classes = 3
    model = build_model(cfg.model, pretrained=False)
    with caplog.at_level(logging.INFO):
        fresh = load_init_weights(model, cfg, init)
    assert fresh and all(init.state[k].shape[0] == 2 for k in fresh)
    state = model.state_dict()
    assert all(state[k].shape[0] == 3 for k in fresh)
    kept = [k for k in state if k not in fresh]
    assert kept and all(torch.equal(state[k], init.state[k]) for k in kept)
    assert "a fresh head for model.num_classes=3" in caplog.text


def test_a_resumed_run_takes_its_own_weights_not_the_sources(
    source: Path, vikram_pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEG_DATA_DIR", raising=False)
    data = make_folder_subset(vikram_pairs, tmp_path / "data")
    run = tmp_path / "run"
    train(compose_config(overrides(data, run, source, "trainer.max_steps=1")))
    result = train(
        compose_config(overrides(data, run, source, "trainer.max_steps=2", "trainer.resume=auto"))
    )
    assert result["step"] == 2  # continued at step 1, not started afresh from the source


def test_the_recipe_trains_on_a_folder_with_no_negatives_anywhere(
    vikram_pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    """``+exp=dual_channel_pretrained_cpu data=folder data.root=<a folder>``, SEG_DATA_DIR
    unset and no imagenet_negatives beside the folder or in ./data: it trains, and one
    warning says how to add the photos without people."""
    monkeypatch.delenv("SEG_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "mine"
    for kind in ("images", "masks"):
        (folder / kind).mkdir(parents=True)
    for i in (1, 2, 3, 10, 11, 12):
        shutil.copy(vikram_pairs / "Training_Images" / f"{i}.jpg", folder / "images")
        shutil.copy(vikram_pairs / "Ground_Truth" / f"{i}.png", folder / "masks")
    recipe = ["+exp=dual_channel_pretrained_cpu", "data=folder", f"data.root={folder}"]
    small = ["trainer.max_steps=2", "trainer.batch_size=2", "trainer.num_workers=0"]
    small += [f"trainer.run_dir={tmp_path / 'run'}", "logging.tensorboard=false"]
    cfg = compose_config([*recipe, *small])
    assert cfg.data.negatives_p > 0  # the recipe asks for them
    with caplog.at_level(logging.WARNING):
        result = train(cfg)
    assert result["step"] == 2
    warnings = [r.getMessage() for r in caplog.records if "imagenet_negatives" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert "download_data.py imagenet_negatives" in warnings[0]
    assert "data.negatives=" in warnings[0] and "data.negatives_p=0" in warnings[0]


def test_a_folder_run_takes_the_negatives_from_where_the_datasets_are(
    shared_datasets: Path, vikram_pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from seg.data.datasets import build_train_dataset

    monkeypatch.setenv("SEG_DATA_DIR", str(shared_datasets))
    data = make_folder_subset(vikram_pairs, tmp_path / "data")
    cfg = compose_config([*tiny_overrides(data), "data.negatives_p=0.5"])
    refs = build_train_dataset(cfg.data, cfg.aug).refs
    negatives = [r for r in refs if r.source == "imagenet_negatives"]
    assert negatives and len(negatives) == len(refs) - len(negatives)  # half of each epoch
