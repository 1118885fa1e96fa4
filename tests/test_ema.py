"""The weight EMA (``trainer.ema_decay``): the update rule, what checkpoints hold, and that
averaging never changes the training it watches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from training_utils import make_folder_subset, tiny_overrides

from seg.checkpoint import load_checkpoint, load_model_from_checkpoint
from seg.config import compose_config
from seg.engine.ema import ModelEma
from seg.engine.train import train


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))


def test_each_update_moves_every_float_tensor_by_the_warmed_up_decay() -> None:
    torch.manual_seed(0)
    model, average = _net(), _net()
    average.load_state_dict(model.state_dict())
    ema = ModelEma(average, decay=0.9)
    expected = {k: v.clone() for k, v in average.state_dict().items()}
    for n in (1, 2, 3, 30, 200):  # from 90 updates on the warm-up passes the decay: capped
        ema.updates = n - 1
        model.train()(torch.randn(2, 3, 8, 8))  # BatchNorm statistics move too
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        d = min(0.9, (1 + n) / (10 + n))
        assert (d == 0.9) if n == 200 else (d < 0.9)
        assert ema.current_decay() == pytest.approx(d)
        ema.update(model)
        for key, new in model.state_dict().items():
            if new.is_floating_point():
                expected[key] = d * expected[key] + (1 - d) * new
                torch.testing.assert_close(average.state_dict()[key], expected[key], msg=key)
            else:  # num_batches_tracked: copied, not averaged
                assert torch.equal(average.state_dict()[key], new), key
    assert ema.updates == 200 and not average.training
    assert not any(p.requires_grad for p in average.parameters())


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5])
def test_a_decay_outside_0_1_is_refused(decay: float) -> None:
    with pytest.raises(ValueError, match="decay"):
        ModelEma(_net(), decay)


@pytest.mark.parametrize("value", ["1.0", "-0.1", "1.5"])
def test_a_bad_ema_decay_names_the_key(value: str) -> None:
    with pytest.raises(ValueError, match=r"trainer\.ema_decay"):
        compose_config([f"trainer.ema_decay={value}"])


def test_the_average_is_validated_and_saved_and_training_is_unchanged(
    vikram_pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run with the EMA trains exactly the weights of a run without (the average draws no
    random number and touches no weight); its checkpoints hold the average as ``model`` (what
    evaluation, prediction and export load) and the trained weights as ``train_model``."""
    monkeypatch.delenv("SEG_DATA_DIR", raising=False)
    root = make_folder_subset(vikram_pairs, tmp_path / "data")
    common = ["trainer.max_steps=3", "optim.warmup_steps=1"]
    plain = train(compose_config([*tiny_overrides(root, tmp_path / "plain"), *common]))
    ema_run = [*tiny_overrides(root, tmp_path / "ema"), *common, "trainer.ema_decay=0.5"]
    averaged = train(compose_config(ema_run))

    a = load_checkpoint(tmp_path / "plain" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "ema" / "checkpoints" / "last.pt")
    assert "train_model" not in a and b["ema_updates"] == 3
    for key, value in a["model"].items():
        assert torch.equal(value, b["train_model"][key]), key
    moved = [k for k, v in b["model"].items() if v.is_floating_point()]
    assert any(not torch.equal(b["model"][k], b["train_model"][k]) for k in moved)
    model, _ = load_model_from_checkpoint(tmp_path / "ema" / "checkpoints" / "last.pt")
    for key, value in model.state_dict().items():
        assert torch.equal(value, b["model"][key]), key
    # Validation scored the average: its metrics differ from the plain run's.
    assert averaged["confusion/all"] != plain["confusion/all"]
    assert sum(map(sum, averaged["confusion/all"])) == sum(map(sum, plain["confusion/all"]))
