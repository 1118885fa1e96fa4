"""The temporal mode (seg/inference/temporal.py) on made-up frames with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from seg.errors import ConfigError, MissingFileError
from seg.evaluation.clips import PER_FRAME, find_clips, score_clips
from seg.inference.predictor import Prediction
from seg.inference.temporal import TemporalFilter, TemporalOptions

H, W = 120, 160


def background(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (H // 8, W // 8, 3), dtype=np.uint8)
    return cv2.resize(small, (W, H), interpolation=cv2.INTER_CUBIC)


def scene(x: int, y: int = 40, side: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A frame with a textured square at (x, y) over a textured background, and its mask."""
    frame = background(seed)
    patch = background(seed + 100)[:side, :side]
    frame[y : y + side, x : x + side] = patch // 2 + 128
    mask = np.zeros((H, W), bool)
    mask[y : y + side, x : x + side] = True
    return frame, mask


def per_frame(mask: np.ndarray, noise: np.ndarray | None = None) -> Prediction:
    """What a model might say: 0.9 inside, 0.1 outside, soft at the edge, plus noise."""
    prob = cv2.GaussianBlur(np.where(mask, 0.9, 0.1).astype(np.float32), (5, 5), 0)
    if noise is not None:
        prob = np.clip(prob + noise, 0, 1).astype(np.float32)
    return Prediction(mask=prob > 0.5, prob=prob)


def iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / (a | b).sum())


@pytest.mark.parametrize("options", [TemporalOptions(), TemporalOptions(blend=0.7, hysteresis=0.2)])
def test_a_still_clip_is_left_as_it_is(options: TemporalOptions) -> None:
    frame, mask = scene(60)
    pred = per_frame(mask)
    steady = TemporalFilter(options)
    for _ in range(5):
        out = steady(frame, pred)
        assert np.array_equal(out.mask, pred.mask)
        assert np.allclose(out.prob, pred.prob, atol=1e-5)


def test_a_square_moving_8_px_a_frame_is_not_left_behind() -> None:
    steady = TemporalFilter()
    for i in range(10):
        frame, mask = scene(8 + 8 * i)
        out = steady(frame, per_frame(mask))
        if i >= 1:  # from the second frame on, within 1 point of per-frame prediction (1.0)
            assert iou(out.mask, mask) >= 0.99, (i, iou(out.mask, mask))


def test_flicker_near_one_half_is_steadied() -> None:
    """Pixels whose probability wobbles about 0.5 from frame to frame flip label every frame
    on their own; with the temporal mode they keep it."""
    frame, mask = scene(60)
    rng = np.random.default_rng(0)
    base = per_frame(mask).prob
    steady = TemporalFilter()
    flips = {"per-frame": 0, "temporal": 0}
    previous: dict[str, np.ndarray] = {}
    for i in range(8):
        wobble = np.where(np.abs(base - 0.5) < 0.3, 0.12 * (-1) ** i, 0) + rng.normal(
            0, 0.02, base.shape
        )
        pred = per_frame(mask, wobble.astype(np.float32))
        for name, out in (("per-frame", pred), ("temporal", steady(frame, pred))):
            if name in previous:
                flips[name] += int((previous[name] != out.mask).sum())
            previous[name] = out.mask
    assert flips["per-frame"] > 100
    assert flips["temporal"] <= flips["per-frame"] // 10


def test_a_cut_resets_the_state() -> None:
    steady = TemporalFilter()
    frame, mask = scene(20, seed=0)
    for _ in range(3):
        steady(frame, per_frame(mask))
    other, other_mask = scene(100, y=70, seed=7)  # another scene: nothing of the first carries
    pred = per_frame(other_mask)
    out = steady(other, pred)
    assert steady.cuts == 1
    assert np.array_equal(out.mask, pred.mask) and np.array_equal(out.prob, pred.prob)
    steady.reset()
    assert np.array_equal(steady(frame, per_frame(mask)).prob, per_frame(mask).prob)


def bright(images: list[np.ndarray]) -> list[Prediction]:
    """A stand-in network for the scoring's bookkeeping: the square is the bright part."""
    out = []
    for image in images:
        prob = (image.min(axis=2) >= 128).astype(np.float32) * 0.8 + 0.1
        out.append(Prediction(mask=prob > 0.5, prob=prob))
    return out


def write_clip(folder: Path, xs: list[int], cuts: list[int] | None = None) -> Path:
    (folder / "frames").mkdir(parents=True)
    (folder / "masks").mkdir()
    for i, x in enumerate(xs):
        frame, mask = scene(x, seed=0 if not cuts or i < cuts[0] else 5)
        frame = np.where(mask[..., None], frame // 4 + 192, frame // 3).astype(np.uint8)
        cv2.imwrite(str(folder / "frames" / f"{i:05d}.png"), frame[..., ::-1])
        cv2.imwrite(str(folder / "masks" / f"{i:05d}.png"), mask.astype(np.uint8) * 255)
    if cuts is not None:
        (folder / "clip.json").write_text(json.dumps({"kind": "cut", "cuts": cuts}))
    return folder


def test_clips_are_scored_per_mode_and_summed_per_kind(tmp_path: Path) -> None:
    write_clip(tmp_path / "set" / "walk_00", [10, 18, 26, 34])
    write_clip(tmp_path / "set" / "cut_00", [10, 10, 60, 60], cuts=[2])
    clips = find_clips(tmp_path / "set")
    assert [(c.name, c.kind, c.cuts) for c in clips] == [
        ("cut_00", "cut", (2,)),
        ("walk_00", "video", None),
    ]
    totals = score_clips(bright, clips, {PER_FRAME: None, "temporal": TemporalOptions()})
    for mode in (PER_FRAME, "temporal"):
        everything = totals[mode]["all"].summary()
        assert everything["frames"] == 8 and everything["iou"] == pytest.approx(1.0)
        assert everything["flicker"] == 0.0
        assert totals[mode]["cut"].summary()["cut_frames"] == 2  # frames 2 and 3 of 4
        assert totals[mode]["video"].summary()["fast_frames"] == 3


def test_a_clip_folder_without_its_mask_is_named(tmp_path: Path) -> None:
    clip = write_clip(tmp_path / "c", [10, 18])
    (clip / "masks" / "00001.png").unlink()
    with pytest.raises(MissingFileError, match=r"masks/00001\.png"):
        score_clips(bright, find_clips(clip), {PER_FRAME: None})
    with pytest.raises(MissingFileError, match=r"clips=.*nope does not exist"):
        find_clips(tmp_path / "nope")


def test_two_webcam_sessions_do_not_share_state() -> None:
    """The demo keeps one WebcamSession per browser session (gr.State): two visitors' frames,
    interleaved, come out as each visitor's alone; a change of model starts afresh."""
    from seg.demo.page import WebcamSession

    def frames(seed: int, start: int) -> list[tuple[np.ndarray, Prediction]]:
        out = []
        for i in range(5):
            frame, mask = scene(start + 8 * i, seed=seed)
            rng = np.random.default_rng(seed + i)
            out.append((frame, per_frame(mask, rng.normal(0, 0.15, mask.shape).astype(np.float32))))
        return out

    one, two = frames(0, 10), frames(3, 80)
    alone = [WebcamSession(TemporalOptions()) for _ in range(2)]
    expected = [
        [s.frame("m", f, p).mask for f, p in clip]
        for s, clip in zip(alone, (one, two), strict=True)
    ]
    a, b = WebcamSession(TemporalOptions()), WebcamSession(TemporalOptions())
    got: list[list[np.ndarray]] = [[], []]
    for (fa, pa), (fb, pb) in zip(one, two, strict=True):
        got[0].append(a.frame("m", fa, pa).mask)
        got[1].append(b.frame("m", fb, pb).mask)
    for g, e in zip(got, expected, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(g, e, strict=True))
    assert not np.array_equal(expected[0][-1], one[-1][1].mask)  # the mode did something
    frame, pred = one[0]
    assert np.array_equal(a.frame("another model", frame, pred).mask, pred.mask)
    assert WebcamSession(None).frame("m", frame, pred) is pred  # the mode off


def test_evaluate_scores_a_clip_set_and_a_video_with_its_masks(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """``evaluate.py clips=``: per-frame and temporal figures per kind, written with the
    checkpoint's digest; a video with a mask folder is a clip too."""
    from seg.config import compose_eval_config
    from seg.data.manifest import sha256_file
    from seg.evaluation.clips import run_clip_evaluation
    from seg.inference.media import VideoWriter

    write_clip(tmp_path / "set" / "walk_00", [10, 18, 26])
    write_clip(tmp_path / "set" / "cut_00", [10, 10, 60], cuts=[2])
    base = [f"checkpoint={tiny_checkpoint}", "backend=torch", "device=cpu"]
    result = run_clip_evaluation(
        compose_eval_config([*base, f"clips={tmp_path / 'set'}", f"out={tmp_path / 'out'}"])
    )
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert saved["sha256"] == sha256_file(tiny_checkpoint)
    assert set(saved["modes"]) == {PER_FRAME, "temporal"}
    assert set(saved["modes"][PER_FRAME]) == {"cut", "video", "all"}
    assert saved["modes"]["temporal"]["all"]["frames"] == 6
    assert "cut" in result["table"] and (tmp_path / "out" / "report.txt").is_file()
    video = tmp_path / "v.mp4"
    writer = VideoWriter(video, 10, (H, W))
    for path in sorted((tmp_path / "set" / "walk_00" / "frames").glob("*.png")):
        writer.write(cv2.imread(str(path))[..., ::-1])
    writer.commit()
    masks = tmp_path / "set" / "walk_00" / "masks"
    args = [*base, f"clips={video}", f"clip_masks={masks}", f"out={tmp_path / 'v'}"]
    from_video = run_clip_evaluation(compose_eval_config(args))
    assert from_video["modes"][PER_FRAME]["video"]["frames"] == 3
    with pytest.raises(ConfigError, match="clip_masks"):
        compose_eval_config([*base, f"clip_masks={masks}"])
