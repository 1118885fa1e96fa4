"""The clips with ground truth in every frame (seg/data/clips.py, scripts/make_clips.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from seg.data.clips import KINDS, composite, plan, sprite
from seg.errors import DataError

REPO = Path(__file__).resolve().parents[1]
# scripts/make_clips.py --sets val --kinds swing cut --clips-per-kind 1 --frames 6 (seed 0)
SMALL = ["--sets", "val", "--kinds", "swing", "cut", "--clips-per-kind", "1", "--frames", "6"]
SMALL_SHA256 = {
    "swing_00": "0845121d1ac13729975c52bbff46df95d2b1baaffc43789cdfc20d3db3d1f5d8",
    "cut_00": "506a987b91b2b7f540ab2ddc795561c082cc8394dd60b6429e58adbdcd794460",
}


def test_a_small_clip_set_is_the_same_pixels_in_a_fresh_process(
    shared_datasets: Path, tmp_path: Path
) -> None:
    """The committed digests were written on an AVX2 machine: the drawing and the pixel work
    are integer and seeded, so every machine writes the same frames and masks."""
    env = {**os.environ, "SEG_DATA_DIR": str(shared_datasets), "PYTHONHASHSEED": "random"}
    out = tmp_path / "clips"
    cmd = [sys.executable, str(REPO / "scripts" / "make_clips.py"), "--out", str(out), *SMALL]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    index = json.loads((out / "clips.json").read_text())
    records = {r["name"]: r for r in index["sets"]["val"]}
    assert {name: r["sha256"] for name, r in records.items()} == SMALL_SHA256
    cut = records["cut_00"]
    assert cut["cuts"] == [3] and len(cut["people"]) == 2 and cut["size_hw"] == [360, 480]
    for name in records:
        folder = out / "val" / name
        masks = sorted((folder / "masks").glob("*.png"))
        frames = sorted((folder / "frames").glob("*.jpg"))
        assert len(masks) == len(frames) == 6
        for path in masks:
            mask = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
            assert mask.shape == (360, 480) and set(np.unique(mask)) <= {0, 255}
            assert 0.01 < (mask > 0).mean() < 0.9  # a person in every frame, not the frame


def test_the_blend_is_integer_and_exact_at_both_ends() -> None:
    bg = np.full((2, 2, 3), 200, np.uint8)
    fg = np.full((2, 2, 3), 10, np.uint8)
    alpha = np.array([[0, 255], [128, 64]], np.uint8)
    out = composite(bg, fg, alpha)
    assert out[0, 0].tolist() == [200] * 3 and out[0, 1].tolist() == [10] * 3
    assert out[1, 0, 0] == (200 * 127 + 10 * 128 + 127) // 255
    assert out.dtype == np.uint8


def test_a_person_photo_with_an_empty_mask_is_named() -> None:
    with pytest.raises(DataError, match="ccp/0007: its mask has no person"):
        sprite(np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4), np.uint8), "ccp/0007")


def test_plans_are_seeded_and_use_every_person_once_while_they_last() -> None:
    people = [f"p/{i}" for i in range(100)]
    bgs = [f"b{i}" for i in range(10)]
    specs = plan("val", people, bgs, seed=0, clips_per_kind=2, frames=30)
    assert [s.kind for s in specs] == [k for k in KINDS for _ in range(2)]
    used = [p for s in specs for p in s.people]
    assert len(used) == len(set(used))
    assert plan("val", people, bgs, seed=0, clips_per_kind=2, frames=30) == specs
    assert plan("test", people, bgs, seed=0, clips_per_kind=2, frames=30) != specs
    assert all(s.background is None for s in specs if s.kind in ("shake", "slow_zoom"))
