"""Samples from the real datasets: the sample contract, human_mix, splits written, bad samples."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from seg.config import AugConfig, BadSamplePolicy, DataConfig, compose_config
from seg.data import (
    SegDataset,
    build_dataset,
    build_eval_datasets,
    build_train_dataset,
    eval_sizes,
    own_eval_sizes,
    save_splits,
    split_bad,
    train_source_names,
)
from seg.data.io import BadSampleError
from seg.data.listing import list_vikram
from seg.data.transforms import build_eval_transform, build_train_transform


def _check_sample(sample: dict, hw: tuple[int, int] | None = None) -> None:
    image, mask = sample["image"], sample["mask"]
    assert image.dtype == torch.float32 and image.ndim == 3 and image.shape[0] == 3
    assert mask.dtype == torch.long and mask.shape == image.shape[1:]
    assert set(mask.unique().tolist()) <= {0, 1, 255}
    assert (mask == 1).any(), "every real sample shows a person"
    assert -3 < image.mean() < 3, "the image is normalised, not 0..255"
    if hw is not None:
        assert tuple(image.shape[1:]) == hw


@pytest.mark.parametrize("name", ["eg_portrait", "ccp", "vikram_human_seg"])
def test_real_samples_keep_the_contract(data_env: Path, name: str) -> None:
    cfg = compose_config([f"data={name}"])
    raw = build_dataset(cfg.data, "test")[0]  # as read: no transform, nothing normalised
    assert raw["image"].dtype == np.uint8 and raw["image"].shape[2] == 3
    assert raw["mask"].dtype == np.uint8 and raw["mask"].shape == raw["image"].shape[:2]
    assert set(np.unique(raw["mask"]).tolist()) <= {0, 1, 255}
    assert raw["source"] == name and raw["skipped"] == 0
    train = build_dataset(cfg.data, "train", build_train_transform(cfg.aug, seed=0))
    _check_sample(train[1], tuple(cfg.aug.crop_size))
    val = build_dataset(cfg.data, "val", build_eval_transform(cfg.aug))
    image = val.load_raw(2)[0]  # portrait: eval_size; landscape (vikram's): its transpose
    eval_hw = tuple(cfg.aug.eval_size)
    _check_sample(val[2], eval_hw if image.shape[0] >= image.shape[1] else eval_hw[::-1])


def test_grayscale_jpeg_becomes_rgb_and_small_mask_is_resized(data_env: Path) -> None:
    listing = list_vikram(data_env / "vikram_human_seg", 0.1, 0.2)
    ds = SegDataset([listing.refs["97"]])  # a 1-channel JPEG whose mask is stored smaller
    image, mask = ds.load_raw(0)
    assert image.shape == (599, 456, 3) and mask.shape == (599, 456)


def test_human_mix_trains_on_the_union_and_evaluates_per_source(data_env: Path) -> None:
    cfg = DataConfig()  # human_mix: three training sources and coco128_seg, validated only
    train = build_dataset(cfg, "train")
    assert len(train) == 1161 + 702 + 203
    assert {r.source for r in train.refs} == {"eg_portrait", "ccp", "vikram_human_seg"}
    assert train_source_names(cfg) == ["eg_portrait", "ccp", "vikram_human_seg"]
    for split in ("val", "test"):
        per_source = build_eval_datasets(cfg, split)
        assert {k: len(v) for k, v in per_source.items()} == {
            "eg_portrait": 264 if split == "test" else 129,
            "ccp": 201 if split == "test" else 100,
            "vikram_human_seg": 58 if split == "test" else 29,
            "coco128_seg": 128,  # every photo: it is never trained on
        }
    no_coco = dataclasses.replace(cfg, val_sources=[])
    assert list(build_eval_datasets(no_coco, "val")) == ["eg_portrait", "ccp", "vikram_human_seg"]
    for bad in (["ccp"], ["coco128_seg", "coco128_seg"]):
        with pytest.raises(ValueError, match=r"data\.val_sources=.*'coco128_seg'.*train_sources"):
            build_eval_datasets(dataclasses.replace(cfg, val_sources=bad), "val")


def test_each_source_is_scored_at_its_eval_size(data_env: Path) -> None:
    """data.eval_scales (human_mix: coco128_seg at 5/3, 800x600 for the CPU recipe's 480x360)
    gives named sources their own eval size, the others keep aug.eval_size; a dataset that is
    not a source here is passed over, a name that is no dataset and a scale out of range fail,
    naming them."""
    cfg = compose_config(["+exp=dual_channel_pretrained_cpu"])
    sizes = eval_sizes(cfg.data, cfg.aug.eval_size)
    assert sizes == {
        "eg_portrait": [480, 360],
        "ccp": [480, 360],
        "vikram_human_seg": [480, 360],
        "coco128_seg": [800, 600],
    }
    transforms = {
        name: build_eval_transform(dataclasses.replace(cfg.aug, eval_size=size))
        for name, size in sizes.items()
    }
    per_source = build_eval_datasets(cfg.data, "val", transforms)
    coco = per_source["coco128_seg"][0]["image"].shape  # a landscape COCO photo: 800 wide
    portrait = per_source["eg_portrait"][0]["image"].shape  # 600x800: 480 high
    assert (max(coco[1:]), max(portrait[1:])) == (800, 480)
    assert own_eval_sizes(cfg.data, (480, 360)) == {"coco128_seg": [800, 600]}
    no_coco = dataclasses.replace(cfg.data, val_sources=[])
    assert "coco128_seg" not in eval_sizes(no_coco, [480, 360])
    assert own_eval_sizes(no_coco, [480, 360]) == {}
    with pytest.raises(ValueError, match=r"data\.eval_scales names \['cocoo'\], which are no "):
        eval_sizes(dataclasses.replace(cfg.data, eval_scales={"cocoo": 2.0}), [480, 360])
    with pytest.raises(ValueError, match=r"data\.eval_scales\.coco128_seg=0\.0 is invalid"):
        compose_config(["+exp=dual_channel_pretrained_cpu", "data.eval_scales.coco128_seg=0"])
    with pytest.raises(ValueError, match=r"data\.eval_scales\.coco128_seg=-1\.0 is invalid"):
        DataConfig(eval_scales={"coco128_seg": -1.0})


def test_train_sources_hold_sources_out_of_training_only(data_env: Path) -> None:
    cfg = compose_config(["data=human_mix", "data.train_sources=[ccp]"]).data
    train = build_dataset(cfg, "train")
    assert len(train) == 702 and {r.source for r in train.refs} == {"ccp"}
    assert train_source_names(cfg) == ["ccp"]
    validated = sorted(build_eval_datasets(cfg, "val"))
    assert validated == ["ccp", "coco128_seg", "eg_portrait", "vikram_human_seg"]
    sources = {"eg_portrait", "ccp", "vikram_human_seg", "coco128_seg"}
    assert {r.source for r in build_dataset(cfg, "test").refs} == sources
    # The pool of pasted people is the training set: no held-out source is ever pasted.
    aug = dataclasses.replace(AugConfig(), paste_p=1.0)
    train = build_train_dataset(cfg, aug, seed=0)
    assert train.transform.transforms[0].pool.refs == train.refs
    two = dataclasses.replace(cfg, train_sources=["vikram_human_seg", "eg_portrait"])
    assert train_source_names(two) == ["eg_portrait", "vikram_human_seg"]  # data.sources order
    assert len(build_dataset(two, "train")) == 1161 + 203


@pytest.mark.parametrize(
    ("name", "train_sources"),
    [
        ("human_mix", ["cpp"]),
        ("human_mix", []),
        ("human_mix", ["ccp", "ccp"]),
        ("eg_portrait", ["ccp"]),
    ],
)
def test_bad_train_sources_name_the_key_and_the_choices(name, train_sources) -> None:
    cfg = DataConfig(name=name, sources=["eg_portrait", "ccp"], train_sources=train_sources)
    valid = "'eg_portrait', 'ccp'" if name == "human_mix" else "'eg_portrait'"
    for build in (lambda: build_dataset(cfg, "train"), lambda: build_eval_datasets(cfg, "val")):
        with pytest.raises(ValueError, match=rf"data\.train_sources=.*\[{valid}\]"):
            build()


def test_train_sources_of_a_single_dataset_may_name_it(data_env: Path) -> None:
    cfg = DataConfig(name="vikram_human_seg", train_sources=["vikram_human_seg"])
    assert len(build_dataset(cfg, "train")) == 203


def test_split_ids_are_written_and_disjoint(data_env: Path, tmp_path: Path) -> None:
    paths = save_splits(DataConfig(), tmp_path / "splits")
    assert len(paths) == 12
    ids = {p.stem: p.read_text().split() for p in paths}
    assert len(ids["eg_portrait_test"]) == 264
    assert not ids["coco128_seg_train"] and ids["coco128_seg_val"] == ids["coco128_seg_test"]
    for source in ("eg_portrait", "ccp", "vikram_human_seg"):
        parts = [set(ids[f"{source}_{s}"]) for s in ("train", "val", "test")]
        assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])


def test_data_root_wins_over_the_env_var_which_is_the_default(
    data_env: Path, tmp_path: Path
) -> None:
    """data.root on the command line beats an exported SEG_DATA_DIR (Hydra's convention)."""
    assert len(build_dataset(DataConfig(name="vikram_human_seg"), "test")) == 58
    given = compose_config(["data=vikram_human_seg", f"data.root={tmp_path / 'nowhere'}"]).data
    assert given.root == str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        build_dataset(dataclasses.replace(given, download=False), "test")


def test_missing_dataset_without_download_says_what_to_do(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SEG_DATA_DIR", raising=False)
    cfg = DataConfig(name="ccp", root=str(tmp_path), download=False)
    with pytest.raises(FileNotFoundError, match=r"download_data\.py ccp"):
        build_dataset(cfg, "train")


def test_bad_sample_error_or_skip(vikram_subset: Path, caplog: pytest.LogCaptureFixture) -> None:
    (vikram_subset / "Training_Images" / "1.jpg").write_bytes(b"\xff\xd8 truncated")
    listing = list_vikram(vikram_subset, 0.0, 0.0)
    refs = [listing.refs[i] for i in ("1", "2", "3")]
    with pytest.raises(BadSampleError, match=r"1\.jpg: corrupt or unreadable image"):
        SegDataset(refs)[0]
    skipping = SegDataset(refs, on_bad_sample=BadSamplePolicy.skip)
    with caplog.at_level(logging.WARNING):
        sample = skipping[0]
    assert sample["id"] == "2" and sample["skipped"] == 1
    assert "1.jpg" in caplog.text
    assert skipping[1]["skipped"] == 0
    # Evaluation's datasets drop a bad pair instead (no image counted twice); split_bad parts them.
    dropping = SegDataset(refs, on_bad_sample=BadSamplePolicy.skip, drop_bad=True)
    good, bad = split_bad([dropping[i] for i in range(3)])
    assert [s["id"] for s in good] == ["2", "3"] and len(bad) == 1 and "1.jpg" in bad[0]


def test_mask_with_wrong_aspect_is_rejected(vikram_subset: Path) -> None:
    import cv2

    mask_path = vikram_subset / "Ground_Truth" / "3.png"
    mask = cv2.imread(str(mask_path), cv2.IMREAD_UNCHANGED)
    cv2.imwrite(str(mask_path), mask[:, : mask.shape[1] // 2])
    ds = SegDataset([list_vikram(vikram_subset, 0.0, 0.0).refs["3"]])
    with pytest.raises(BadSampleError, match=r"3\.png: mask size .* does not match image size"):
        ds.load_raw(0)
