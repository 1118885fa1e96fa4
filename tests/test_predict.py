"""Prediction on real photos with a tiny random model: outputs, geometry, video, errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf.errors import MissingMandatoryValue
from torch import nn
from training_utils import load_script, tiny_config

from seg.config import (
    TTA,
    AlphaMode,
    BadSamplePolicy,
    Config,
    OutputKind,
    PredictConfig,
    TemporalConfig,
    compose_predict_config,
)
from seg.data.io import BadSampleError, read_image
from seg.errors import ConfigError
from seg.fileio import atomic_path
from seg.inference import build_predictor, run_predict
from seg.inference.media import VideoWriter, find_inputs
from seg.inference.render import RenderOptions, parse_colour, render
from seg.models import SegmentationModel

REPO = Path(__file__).resolve().parents[1]
# Different sizes and orientations; 56.jpg is one of vikram's grayscale JPEGs.
IMAGES = ("Training_Images/1.jpg", "Training_Images/3.jpg")  # of the vikram_pairs folder
GRAY = "Training_Images/56.jpg"
ALL_KINDS = [k.value for k in OutputKind]
EXT = {"mask": ".png", "overlay": ".jpg", "cutout": ".png", "blur": ".jpg", "bg": ".jpg"}


@pytest.fixture
def photos(vikram_pairs: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "photos"
    folder.mkdir()
    for rel in (*IMAGES, GRAY):
        shutil.copy(vikram_pairs / rel, folder)
    return folder


@pytest.fixture
def setup(tiny_model: tuple[nn.Module, Config]) -> tuple[nn.Module, Config]:
    """The tiny random dual-column net calibrated on the same three photos, and its config."""
    return tiny_model


def predict_cfg(input_: Path, out: Path, **kwargs) -> PredictConfig:
    return PredictConfig(
        checkpoint="unused", input=str(input_), out=str(out), progress=False, **kwargs
    )


def test_folder_gives_every_output_at_the_original_size(setup, photos, tmp_path):
    model, cfg = setup
    out = tmp_path / "out"
    kinds = [OutputKind(k) for k in ALL_KINDS]
    # batch_size 2 over 3 images of 3 sizes: a mixed batch and a short last one.
    summary = run_predict(predict_cfg(photos, out, outputs=kinds, batch_size=2), model, cfg)
    assert summary["images"] == 3 and summary["frames"] == 0 and not summary["skipped"]
    assert len(summary["written"]) == 3 * len(kinds)
    predictor = build_predictor(model, cfg, device="cpu")
    both_classes = 0
    for path in sorted(photos.iterdir()):
        image = read_image(path)
        h, w = image.shape[:2]
        files = {s: out / f"{path.stem}_{s}{e}" for s, e in EXT.items()}
        for f in files.values():
            assert f.is_file(), f
            assert cv2.imread(str(f), cv2.IMREAD_UNCHANGED).shape[:2] == (h, w), f
        mask = cv2.imread(str(files["mask"]), cv2.IMREAD_UNCHANGED)
        assert set(np.unique(mask)) <= {0, 255}
        both_classes += len(np.unique(mask)) == 2
        # The file is the predictor's mask (batched with other sizes = predicted alone, up to
        # the order of a convolution's sums: a pixel on the 0.5 boundary may flip).
        expected = predictor([image])[0]
        flipped = mask != expected.mask * 255
        assert np.all(np.abs(expected.prob[flipped] - 0.5) < 1e-3), expected.prob[flipped]
        cut = cv2.cvtColor(
            cv2.imread(str(files["cutout"]), cv2.IMREAD_UNCHANGED), cv2.COLOR_BGRA2RGBA
        )
        np.testing.assert_array_equal(cut[..., 3], mask)  # hard alpha = the mask
        np.testing.assert_array_equal(cut[..., :3], image)
    assert both_classes >= 2, "the calibrated model should predict person and background"
    assert not list(out.glob(".*")), "temporary files left behind"


def test_blur_replace_and_cutout_keep_person_pixels(setup, photos):
    model, cfg = setup
    image = read_image(photos / "1.jpg")
    pred = build_predictor(model, cfg, device="cpu")([image])[0]
    assert 0 < pred.mask.mean() < 1
    opts = RenderOptions(alpha=AlphaMode.hard, blur_sigma=0.05)
    blurred = render(OutputKind.blur, image, pred, opts)
    np.testing.assert_array_equal(blurred[pred.mask], image[pred.mask])
    assert np.abs(blurred[~pred.mask].astype(int) - image[~pred.mask]).mean() > 1
    from seg.inference.render import Background

    opts.background = Background("#ff0000")
    replaced = render(OutputKind.replace, image, pred, opts)
    np.testing.assert_array_equal(replaced[pred.mask], image[pred.mask])
    assert (replaced[~pred.mask] == [255, 0, 0]).all()
    soft = render(OutputKind.cutout, image, pred, RenderOptions(alpha=AlphaMode.soft))
    np.testing.assert_array_equal(soft[..., 3], np.rint(pred.prob * 255).astype(np.uint8))
    assert ((soft[..., 3] >= 128) == pred.mask).mean() > 0.999


class RedIsPerson(SegmentationModel):
    """An oracle: person logit = normalised red channel, background 0. Pointwise, so its mask
    at the original size is known (red > mean) whatever the resizing and padding do."""

    def __init__(self) -> None:
        super().__init__(channels_last=False)

    def forward(self, x: torch.Tensor) -> dict:
        return {"out": torch.cat([torch.zeros_like(x[:, :1]), x[:, :1]], dim=1), "aux": []}


@pytest.mark.parametrize("tta", [[], [TTA.flip]])
def test_masks_line_up_with_the_original_image(vikram_pairs, tta):
    cfg = tiny_config()
    predictor = build_predictor(RedIsPerson(), cfg, device="cpu", tta=tta)
    images = [read_image(vikram_pairs / rel) for rel in IMAGES]
    for image, pred in zip(images, predictor(images), strict=True):
        expected = image[..., 0] > 255 * cfg.aug.mean[0]
        # Padding cropped, no offset: only pixels near red edges may differ (downscale blur).
        assert (pred.mask == expected).mean() > 0.95  # 0.97-0.99; 0.65-0.84 uncropped
        assert pred.mask.shape == image.shape[:2]


def make_video(path: Path, image: np.ndarray, frames: int = 6) -> None:
    h, w = 96, 128
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10, (w, h))
    for i in range(frames):
        frame = cv2.resize(np.roll(image, 5 * i, axis=1), (w, h))
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()


def count_frames(path: Path) -> tuple[int, tuple[int, int]]:
    capture = cv2.VideoCapture(str(path))
    n, size = 0, (0, 0)
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        n, size = n + 1, frame.shape[:2]
    capture.release()
    return n, size


def test_video_gives_a_video_per_kind_with_every_frame(setup, photos, tmp_path):
    model, cfg = setup
    video = tmp_path / "clip.mp4"
    make_video(video, read_image(photos / "1.jpg"))
    assert count_frames(video)[0] == 6
    kinds = [OutputKind.mask, OutputKind.blur, OutputKind.replace]
    steady = TemporalConfig(enabled=True)
    summary = run_predict(
        predict_cfg(video, tmp_path / "out", outputs=kinds, batch_size=4, temporal=steady),
        model,
        cfg,
    )
    assert summary["frames"] == 6 and summary["images"] == 0
    stages = summary["video_seconds"]  # the stage shares predict.py reports
    assert list(stages) == ["decode", "infer", "steady", "render", "encode"]
    assert min(stages.values()) > 0
    for suffix in ("mask", "blur", "bg"):
        assert count_frames(tmp_path / "out" / f"clip_{suffix}.mp4") == (6, (96, 128))
    with pytest.raises(ValueError, match="cutout"):
        run_predict(predict_cfg(video, tmp_path / "out", outputs=[OutputKind.cutout]), model, cfg)


def test_a_damaged_video_warns_with_both_frame_counts_and_skip_covers_videos(
    setup, photos, tmp_path, caplog
):
    """A video cut in half (its container still says 30 frames) is written as far as it
    decodes, with a warning naming it and both counts; under on_bad_input=skip an unreadable
    video is skipped like an unreadable image, and the other inputs are still predicted."""
    model, cfg = setup
    clips = tmp_path / "clips"
    clips.mkdir()
    full = tmp_path / "full.avi"  # MJPG in AVI: the header's frame count survives a cut
    writer = cv2.VideoWriter(str(full), cv2.VideoWriter_fourcc(*"MJPG"), 10, (128, 96))
    frame = cv2.resize(read_image(photos / "1.jpg"), (128, 96))
    for i in range(30):
        writer.write(cv2.cvtColor(np.roll(frame, 4 * i, axis=1), cv2.COLOR_RGB2BGR))
    writer.release()
    data = full.read_bytes()
    (clips / "cut.avi").write_bytes(data[: len(data) // 2])
    decodable = count_frames(clips / "cut.avi")[0]
    assert 0 < decodable < 30
    with caplog.at_level("WARNING", logger="seg.inference.prediction"):
        summary = run_predict(predict_cfg(clips, tmp_path / "a"), model, cfg)
    assert summary["frames"] == decodable
    assert f"cut.avi: the container reports 30 frames, only {decodable} could be decoded" in (
        caplog.text
    )
    assert count_frames(tmp_path / "a" / "cut_mask.mp4")[0] == decodable

    (clips / "broken.mp4").write_bytes(b"not a video" * 100)
    shutil.copy(photos / "1.jpg", clips)
    with pytest.raises(ValueError, match=r"broken\.mp4: corrupt or unreadable video"):
        run_predict(predict_cfg(clips, tmp_path / "b"), model, cfg)
    skip = predict_cfg(clips, tmp_path / "c", on_bad_input=BadSamplePolicy.skip)
    summary = run_predict(skip, model, cfg)
    assert summary["skipped"] == [str(clips / "broken.mp4")]
    assert summary["images"] == 1 and summary["frames"] == decodable


def test_out_may_not_be_the_input_folder(setup, photos):
    model, cfg = setup
    before = sorted(p.name for p in photos.iterdir())
    with pytest.raises(ValueError, match=r"is the input folder: a second run would predict"):
        run_predict(predict_cfg(photos, photos / "."), model, cfg)
    assert sorted(p.name for p in photos.iterdir()) == before


def test_bad_inputs_raise_errors_naming_the_file(setup, photos, tmp_path):
    model, cfg = setup
    corrupt = photos / "broken.jpg"
    corrupt.write_bytes(b"\xff\xd8 this is not a jpeg")
    with pytest.raises(BadSampleError, match=r"broken\.jpg: corrupt"):
        run_predict(predict_cfg(photos, tmp_path / "a"), model, cfg)
    summary = run_predict(
        predict_cfg(photos, tmp_path / "b", on_bad_input=BadSamplePolicy.skip), model, cfg
    )
    assert summary["skipped"] == [str(corrupt)] and summary["images"] == 3
    assert not (tmp_path / "b" / "broken_mask.png").exists()
    with pytest.raises(FileNotFoundError, match=r"nowhere\.jpg: input does not exist"):
        find_inputs(tmp_path / "nowhere.jpg")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"notes.txt: unsupported file type '\.txt'"):
        find_inputs(tmp_path / "notes.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: folder holds no supported file"):
        find_inputs(tmp_path / "empty")
    shutil.copy(photos / "1.jpg", photos / "1.png")
    with pytest.raises(ValueError, match="same outputs"):
        find_inputs(photos)


def test_outputs_are_never_half_written(tmp_path):
    final = tmp_path / "x_mask.png"
    final.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(final) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("interrupted")
    assert final.read_bytes() == b"old" and len(list(tmp_path.iterdir())) == 1
    writer = VideoWriter(tmp_path / "v.mp4", 10, (16, 16))
    writer.write(np.zeros((16, 16, 3), np.uint8))
    writer.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x_mask.png"]


def test_options_are_checked_by_name():
    cfg = compose_predict_config(["checkpoint=c.pt", "input=x", "outputs=[mask,cutout]"])
    assert cfg.outputs == [OutputKind.mask, OutputKind.cutout]
    with pytest.raises(ConfigError, match=r"unknown config key outptus; did you mean outputs"):
        compose_predict_config(["checkpoint=c.pt", "input=x", "outptus=[mask]"])
    with pytest.raises(ConfigCompositionException, match=r"Invalid value 'masks', expected one of"):
        compose_predict_config(["checkpoint=c.pt", "input=x", "outputs=[masks]"])
    with pytest.raises(ValueError, match="batch_size=0"):
        compose_predict_config(["checkpoint=c.pt", "input=x", "batch_size=0"])
    with pytest.raises(MissingMandatoryValue, match="input"):
        compose_predict_config(["checkpoint=c.pt"])
    assert compose_predict_config(["input=x"]).checkpoint == "person"  # the shipped model
    assert parse_colour("#00ff00") == (0, 255, 0) and parse_colour("1,2,3") == (1, 2, 3)
    assert parse_colour("beach.jpg") is None


def test_predictor_options_are_evaluations():
    """``tta`` is a list as in evaluate.py (the single value it was still works), and
    ``scales`` and ``slide.*`` are taken and checked alike."""
    base = ["checkpoint=c.pt", "input=x"]
    for given, expected in [
        ("tta=flip", [TTA.flip]),
        ("tta=[flip]", [TTA.flip]),
        ("tta=null", []),
        ("tta=[]", []),
    ]:
        assert compose_predict_config([*base, given]).tta == expected, given
    cfg = compose_predict_config([*base, "scales=[0.75,1.0]", "slide.window=[64,48]"])
    assert cfg.scales == [0.75, 1.0] and cfg.slide.window == [64, 48]
    with pytest.raises(ValueError, match="scales"):
        compose_predict_config([*base, "scales=[0]"])
    with pytest.raises(ValueError, match=r"slide\.stride"):
        compose_predict_config([*base, "slide.stride=[8,8]"])


def test_prediction_and_evaluation_share_one_predictor(setup, photos):
    """With every test-time option, prediction's masks are the class maps that evaluation
    scores, and its probabilities are evaluation's person probabilities."""
    model, cfg = setup
    images = [read_image(p) for p in sorted(photos.iterdir())]
    options = [
        {},
        {"tta": [TTA.flip], "scales": [0.75, 1.25]},
        {"window": [64, 48], "stride": [32, 24]},
    ]
    for kwargs in options:
        predictor = build_predictor(model, cfg, "cpu", **kwargs)
        labels, probs = predictor.labels(images), predictor.probabilities(images)
        for pred, label, prob in zip(predictor(images), labels, probs, strict=True):
            assert np.array_equal(pred.mask, label.numpy() == 1), kwargs
            np.testing.assert_array_equal(pred.prob, prob[1].numpy())
            assert 0 < pred.mask.mean() < 1


def test_script_end_to_end_from_a_checkpoint(tiny_checkpoint, photos, tmp_path, caplog):
    ckpt = tiny_checkpoint
    predict = load_script("predict")
    out = tmp_path / "out"
    args = [f"checkpoint={ckpt}", f"input={photos / '3.jpg'}", f"out={out}", "progress=false"]
    assert predict.main([*args, "outputs=[mask,cutout]", "tta=flip"]) == 0
    mask = cv2.imread(str(out / "3_mask.png"), cv2.IMREAD_UNCHANGED)
    assert mask.shape == read_image(photos / "3.jpg").shape[:2]
    assert (out / "3_cutout.png").is_file()
    assert predict.main([*args[:1], f"input={tmp_path / 'missing.jpg'}"]) == 2
    assert "missing.jpg: input does not exist" in caplog.text
    assert predict.main([f"checkpoint={tmp_path / 'nope.pt'}", args[1]]) == 2
    assert "nope.pt does not exist" in caplog.text


def test_script_on_a_landscape_photo_writes_a_mask_of_its_size(
    setup, tiny_checkpoint, photos, tmp_path
):
    """A landscape photo goes through the turned canvas (96 x 128 for eval_size [128, 96]) and
    its mask comes back at the photo's own size, as the predictor makes it (``tiny_checkpoint``
    holds ``setup``'s model)."""
    model, cfg = setup
    ckpt = tiny_checkpoint
    image = read_image(photos / "1.jpg")
    assert image.shape[:2] == (183, 276)
    predictor = build_predictor(model, cfg, device="cpu")
    assert predictor.scales[0].transform(image=image)["image"].shape == (3, 96, 128)
    out = tmp_path / "out"
    args = [f"checkpoint={ckpt}", f"input={photos / '1.jpg'}", f"out={out}", "outputs=[mask]"]
    assert load_script("predict").main([*args, "progress=false"]) == 0
    mask = cv2.imread(str(out / "1_mask.png"), cv2.IMREAD_UNCHANGED)
    assert mask.shape == (183, 276) and 0 < mask.mean() < 255
    expected = predictor([image])[0]
    # the script's model is the checkpoint's copy: its sums may run in another order (thread
    # count, memory format), so only a pixel on the 0.5 boundary may come out the other way
    flipped = mask != expected.mask * 255
    assert np.all(np.abs(expected.prob[flipped] - 0.5) < 1e-3), expected.prob[flipped]


def test_devices_are_chosen_automatically_or_per_column():
    from seg.devices import resolve_devices

    cpu = torch.device("cpu")
    if not torch.cuda.is_available():
        auto = resolve_devices("auto", 2, mps=True)
        assert auto[0].type in ("cpu", "mps") and auto == auto[:1] * 2
        with pytest.raises(ValueError, match="device: 'cuda:1' requested but no CUDA device"):
            resolve_devices("cuda:1", 2, key="device")
    assert resolve_devices(["cpu"], 2, key="column_devices") == [cpu, cpu]
    with pytest.raises(ValueError, match="column_devices has 3 entries"):
        resolve_devices(["cpu"] * 3, 2, key="column_devices")  # one for all, or one per column


def test_a_photo_stored_sideways_gets_a_mask_as_it_is_shown(setup, photos, tmp_path):
    """A JPEG stored 320 x 240 whose EXIF says "turned 90 degrees" is shown 240 x 320: its
    mask, overlay and cutout are written at that size, aligned with the photo as shown."""
    from PIL import Image, ImageOps

    model, cfg = setup
    stored = cv2.resize(read_image(photos / "1.jpg"), (320, 240))
    image = Image.fromarray(stored)
    exif = image.getexif()
    exif[0x0112] = 6
    folder = tmp_path / "phone"
    folder.mkdir()
    image.save(folder / "phone.jpg", exif=exif.tobytes(), quality=95)
    out = tmp_path / "out"
    kinds = [OutputKind.mask, OutputKind.cutout]
    run_predict(predict_cfg(folder, out, outputs=kinds), model, cfg)
    with Image.open(folder / "phone.jpg") as im:
        shown = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    assert shown.shape[:2] == (320, 240)
    mask = cv2.imread(str(out / "phone_mask.png"), cv2.IMREAD_UNCHANGED)
    assert mask.shape == (320, 240)
    np.testing.assert_array_equal(mask, build_predictor(model, cfg, "cpu")([shown])[0].mask * 255)
    cut = cv2.cvtColor(
        cv2.imread(str(out / "phone_cutout.png"), cv2.IMREAD_UNCHANGED), cv2.COLOR_BGRA2RGBA
    )
    np.testing.assert_array_equal(cut[..., :3], shown)
