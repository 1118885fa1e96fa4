"""docs/extending.md, followed step by step: a toy dataset (a lister, its DATASETS entry, its
YAML) and a toy model family (a network, its MODELS entry, its YAML) train together for two
steps, and the checkpoint rebuilds the toy model on its own."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from seg.checkpoint import load_model_from_checkpoint
from seg.config import CONFIG_DIR, BadSamplePolicy, DataConfig, MaskEncoding, ModelConfig
from seg.config.compose import compose
from seg.data.io import BadSampleError
from seg.data.listing import Listing, MaskSpec, SampleRef, _bad_pair, fraction_splits
from seg.data.registry import DATASETS, Dataset, Role
from seg.engine.train import train
from seg.models.build import MODELS
from seg.models.layers import SegmentationModel


# Step 1 of a dataset: list its pairs.
def list_toy_people(folder: Path, cfg: DataConfig, policy: BadSamplePolicy) -> Listing:
    """``photos/<id>.png`` with ``people/<id>.png`` (0 background, 255 person)."""
    listing = Listing("toy_people", {}, {})
    spec = MaskSpec(MaskEncoding.binary255)
    for photo in sorted((folder / "photos").glob("*.png")):
        mask = folder / "people" / photo.name
        if not mask.is_file():
            _bad_pair(BadSampleError(photo, f"missing mask: expected {mask}"), policy, listing)
            continue
        listing.refs[photo.stem] = SampleRef(photo.stem, listing.source, photo, mask, spec)
    listing.splits = fraction_splits(listing, cfg.val_fraction, cfg.test_fraction)
    return listing


# Step 1 of a model family: the network.
class ToyNet(SegmentationModel):
    """Two 3x3 convolutions: logits at the input's size."""

    def __init__(self, num_classes: int, channels_last: bool) -> None:
        super().__init__(channels_last)
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))
        self.num_classes = num_classes

    def forward(self, x: Tensor) -> dict[str, Tensor | list[Tensor]]:
        return {"out": self.body(self._prepare(x, self.devices[0])), "aux": []}


def build_toy_net(cfg: ModelConfig, pretrained: bool) -> SegmentationModel:
    return ToyNet(cfg.num_classes, cfg.channels_last)


def _toy_photos(root: Path, count: int = 12) -> None:
    rng = np.random.default_rng(0)
    (root / "photos").mkdir(parents=True)
    (root / "people").mkdir()
    for i in range(count):
        photo = rng.integers(0, 80, (48, 40, 3), dtype=np.uint8)
        person = np.zeros((48, 40), np.uint8)
        person[8 + i : 40, 10:30] = 255
        photo[person > 0] += 120  # a bright person on a dark background
        cv2.imwrite(str(root / "photos" / f"{i}.png"), photo)
        cv2.imwrite(str(root / "people" / f"{i}.png"), person)


def test_a_toy_dataset_and_a_toy_model_through_the_documented_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Step 2 of each: the registry entry.
    monkeypatch.setitem(DATASETS, "toy_people", Dataset("toy_people", Role.train, list_toy_people))
    monkeypatch.setitem(MODELS, "toy_net", build_toy_net)
    # Step 3/4 of each: the YAML, in a copy of configs/ (the repository's stays as it is).
    configs = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, configs)
    (configs / "data" / "toy_people.yaml").write_text("name: toy_people\nval_fraction: 0.25\n")
    (configs / "model" / "toy_net.yaml").write_text("name: toy_net\n")

    data = tmp_path / "datasets"
    _toy_photos(data)
    monkeypatch.delenv("SEG_DATA_DIR", raising=False)
    run = tmp_path / "run"
    overrides = ["data=toy_people", "model=toy_net", f"data.root={data}", "debug=default"]
    overrides += ["trainer.column_devices=[cpu]", "logging.tensorboard=false"]
    overrides += ["logging.progress_bar=false", "trainer.max_steps=2", f"trainer.run_dir={run}"]
    cfg = compose("train", overrides, config_dir=configs)
    assert cfg.data.name == "toy_people" and cfg.model.name == "toy_net"
    metrics = train(cfg)
    assert metrics["step"] == 2 and 0 <= metrics["val/toy_people/iou_person"] <= 1

    model, stored = load_model_from_checkpoint(run / "checkpoints" / "last.pt", device="cpu")
    assert isinstance(model, ToyNet) and stored.data.name == "toy_people"
    with torch.no_grad():
        assert model(torch.zeros(1, 3, 48, 40))["out"].shape == (1, 2, 48, 40)
