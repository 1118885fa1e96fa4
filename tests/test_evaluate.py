"""scripts/evaluate.py on a checkpoint of a real 2-step run: a user's folder (instance-id masks,
``{stem}_mask.png`` names, a corrupt file) against the same real eg_portrait test images, the
output contract, exactness of the counts, and the test-time augmentations."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from hydra.errors import ConfigCompositionException
from torch import nn
from training_utils import (
    REPO,
    calibrate_batchnorm,
    load_script,
    make_folder_subset,
    subprocess_env,
    torchrun,
)

from seg.checkpoint import load_model_from_checkpoint
from seg.config import TTA, DataConfig, compose_config, compose_eval_config
from seg.data import SegDataset, list_source, pad_batch
from seg.data.io import read_image, read_mask_array
from seg.data.listing import list_vikram
from seg.data.transforms import build_eval_transform, eval_pad_value
from seg.engine.loaders import build_val_loader
from seg.engine.validation import evaluate
from seg.errors import ConfigError
from seg.evaluation.report import CSV_COLUMNS, SUMMARY_KEYS, image_row, json_safe, write_csv
from seg.evaluation.scoring import run_evaluation
from seg.inference.predictor import build_predictor
from seg.metrics import SegMetrics, boundary_fscore
from seg.models import SegmentationModel

# One xdist worker runs this module (pyproject.toml: --dist loadgroup): its module fixtures
# are built once.
pytestmark = pytest.mark.xdist_group("evaluate")

N_IMAGES = 3
WORST = 2


@pytest.fixture(scope="module")
def checkpoint(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """last.pt of a copy of the session's real 2-step run (single-column net, 64x64, vikram
    pairs): evaluations write into the run folder."""
    run = shutil.copytree(tiny_run, tmp_path_factory.mktemp("run") / "run")
    return run / "checkpoints" / "last.pt"


def eg_test_ids(shared: Path) -> list[str]:
    cfg = DataConfig(name="eg_portrait", root=str(shared), download=False)
    return list_source(cfg, "eg_portrait").splits["test"][:N_IMAGES]


def make_user_folder(shared: Path, dst: Path, ids: list[str]) -> Path:
    """The eg_portrait images as a user's folder: ``<id>.jpg`` with ``<id>_mask.png`` holding
    instance ids (the person split into ids 1, 2 and 7 by column), plus a corrupt image."""
    (dst / "images").mkdir(parents=True)
    (dst / "masks").mkdir()
    data = shared / "eg_portrait" / "data"
    for i in ids:
        shutil.copy(data / "images_data_crop" / f"{i}.jpg", dst / "images")
        person = read_mask_array(data / "images_mask" / f"{i}_mask.mat", "mask") == 1
        cols = np.arange(person.shape[1])[None, :].repeat(person.shape[0], 0)
        instances = np.where(cols < person.shape[1] // 3, 1, np.where(cols % 2 == 0, 2, 7))
        assert cv2.imwrite(
            str(dst / "masks" / f"{i}_mask.png"), (instances * person).astype(np.uint8)
        )
    (dst / "images" / "broken.jpg").write_bytes(b"not a jpeg")
    cv2.imwrite(str(dst / "masks" / "broken_mask.png"), np.zeros((8, 8), np.uint8))
    return dst


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open() as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def check_outputs(out: Path, n: int, panel_hw: tuple[int, int]) -> tuple[dict, list[dict]]:
    """The output contract: files, CSV header and rows, JSON keys, gallery count and sizes, and
    the CSV's counts summing exactly to the JSON's confusion-derived metrics."""
    result = json.loads((out / "metrics.json").read_text())
    header, rows = read_csv(out / "per_image.csv")
    assert header == list(CSV_COLUMNS) and len(rows) == n
    assert (out / "per_image.csv").read_text().splitlines()[0] == ",".join(CSV_COLUMNS)
    for key in ("checkpoint", "data", "split", "tta", "target_pixel_acc", "pass", "overall"):
        assert key in result, key
    counts = {"images", "empty_images"}
    assert set(result["overall"]) == {*SUMMARY_KEYS, *counts} and result["overall"]["images"] == n
    for source in result["per_source"].values():
        assert set(source) == {*SUMMARY_KEYS, *counts}
    gallery = sorted((out / "worst").glob("*.png"))
    assert [p.name[:3] for p in gallery] == [f"{k:02d}_" for k in range(1, WORST + 1)]
    for path in gallery:
        assert cv2.imread(str(path)).shape == (panel_hw[0], 4 * panel_hw[1], 3), path
    tp, fp, fn = (sum(int(r[k]) for r in rows) for k in ("tp", "fp", "fn"))
    correct, pixels = (sum(int(r[k]) for r in rows) for k in ("correct", "pixels"))
    overall = result["overall"]
    assert overall["iou_person"] == (tp / (tp + fp + fn) if tp + fp + fn else None)
    assert overall["pixel_acc"] == correct / pixels
    assert pixels == sum(int(r["height"]) * int(r["width"]) for r in rows)  # no ignore pixels
    assert np.asarray(result["confusion"]["all"]).sum() == pixels
    assert result["pass"] == (overall["pixel_acc"] >= result["target_pixel_acc"])
    # Rows rank the gallery: the first PNG is the image with the lowest IoU.
    worst = min(rows, key=lambda r: (float(r["iou"]) if r["iou"] != "nan" else 1.0, r["pixel_acc"]))
    assert gallery[0].name.endswith(f"_{worst['name']}.png")
    return result, rows


def test_user_folder_equals_real_source_at_full_resolution(
    checkpoint: Path, shared_datasets: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    ids = eg_test_ids(shared_datasets)
    user = make_user_folder(shared_datasets, tmp_path / "user", ids)
    args = [
        f"checkpoint={checkpoint}",
        "data=folder",
        f"data.root={user}",
        "data.folder.mask_pattern='{stem}_mask.png'",
        "data.folder.encoding=instances",
        "data.on_bad_sample=skip",
        "split=all",
        f"out={tmp_path / 'folder_eval'}",
        f"worst={WORST}",
        "num_workers=0",
        "progress=false",
    ]
    assert load_script("evaluate").main(args) == 0
    printed = capsys.readouterr().out
    assert re.search(r"pixel accuracy \d+\.\d\d% vs target 88%: (PASS|FAIL)", printed)
    assert re.search(rf"^folder\s+{N_IMAGES}\s", printed, re.MULTILINE)
    folder, folder_rows = check_outputs(tmp_path / "folder_eval", N_IMAGES, (512, 384))
    assert len(folder["skipped"]) == 1 and "broken.jpg" in folder["skipped"][0]

    real = run_evaluation(
        compose_eval_config(
            [
                f"checkpoint={checkpoint}",
                "data=eg_portrait",
                f"data.root={shared_datasets}",
                "data.download=false",
                f"max_images={N_IMAGES}",
                f"worst={WORST}",
                "num_workers=1",  # one loader process: the ordered, multi-process path
                "progress=false",
            ]
        )
    )
    out = checkpoint.parents[1] / "eval" / "eg_portrait_test"  # the default: inside the run
    assert Path(real["out_dir"]) == out
    _, real_rows = check_outputs(out, N_IMAGES, (512, 384))
    # The user's instance masks under other names score exactly as the dataset's own masks.
    assert [r["name"] for r in real_rows] == [r["name"] for r in folder_rows] == ids
    assert real["confusion"]["all"] == folder["confusion"]["all"]
    assert [r["iou"] for r in real_rows] == [r["iou"] for r in folder_rows]

    # One row against an independent computation: predict at full size, count with numpy.
    model, train_cfg = load_model_from_checkpoint(checkpoint)
    image = read_image(shared_datasets / "eg_portrait/data/images_data_crop" / f"{ids[0]}.jpg")
    truth = read_mask_array(
        shared_datasets / "eg_portrait/data/images_mask" / f"{ids[0]}_mask.mat", "mask"
    )
    prob = build_predictor(model, train_cfg, device="cpu").probabilities([image])[0]
    assert prob.shape[1:] == image.shape[:2]  # the original resolution
    pred, valid = prob.argmax(0).numpy() == 1, truth != 255
    person = truth == 1
    tp, fp, fn = (pred & person).sum(), (pred & ~person & valid).sum(), (~pred & person).sum()
    pixels = valid.sum()
    stats = {"pixels": pixels, "correct": pixels - fp - fn, "tp": tp, "fp": fp, "fn": fn}
    stats["pixel_acc"], stats["iou"] = (pixels - fp - fn) / pixels, tp / (tp + fp + fn)
    stats["bf_2"] = boundary_fscore(pred, truth, 2)["f"]
    row = real_rows[0]
    for key in ("pixels", "correct", "tp", "fp", "fn"):
        assert int(row[key]) == stats[key], key
    for key in ("pixel_acc", "iou", "bf_2"):
        assert float(row[key]) == pytest.approx(float(stats[key]), abs=1e-6), key


class PixelModel(SegmentationModel):
    """An oracle with a known symmetry: logits from a fixed convolution of the input."""

    def __init__(self, kernel: int = 1, symmetric: bool = True) -> None:
        super().__init__(channels_last=False)
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 2, kernel, padding=kernel // 2)
        if symmetric:  # mirror-symmetric kernels make the model flip-equivariant
            with torch.no_grad():
                self.conv.weight.copy_((self.conv.weight + self.conv.weight.flip(-1)) / 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"out": self.conv(x) * 4}


@pytest.fixture
def photos(vikram_pairs: Path) -> list[np.ndarray]:
    names = ("1.jpg", "3.jpg")  # two sizes and orientations
    return [read_image(vikram_pairs / "Training_Images" / n) for n in names]


def probabilities(model: nn.Module, photos: list[np.ndarray], **kwargs) -> list[torch.Tensor]:
    cfg = compose_config(["aug.eval_size=[96,80]"])
    return build_predictor(model, cfg, "cpu", **kwargs).probabilities(photos)


def test_flip_tta_is_a_no_op_for_a_flip_equivariant_oracle(photos: list[np.ndarray]) -> None:
    model = PixelModel(kernel=3, symmetric=True)
    plain, flipped = probabilities(model, photos), probabilities(model, photos, tta=[TTA.flip])
    for a, b, photo in zip(plain, flipped, photos, strict=True):
        assert a.shape == (2, *photo.shape[:2])
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    # ... and does average with the mirror image for a model without the symmetry.
    skewed = PixelModel(kernel=3, symmetric=False)
    a, b = probabilities(skewed, photos)[0], probabilities(skewed, photos, tta=[TTA.flip])[0]
    assert (a - b).abs().max() > 1e-3


def test_sliding_windows(photos: list[np.ndarray]) -> None:
    model = PixelModel(kernel=3)
    plain = probabilities(model, photos)
    whole = probabilities(model, photos, window=[200, 200], stride=[50, 50])
    for a, b in zip(plain, whole, strict=True):
        assert torch.equal(a, b)  # a window >= the input is the plain inference
    pointwise = PixelModel(kernel=1)  # translation-equivariant: overlaps average equal logits
    plain = probabilities(pointwise, photos)
    tiles = probabilities(pointwise, photos, window=[40, 32], stride=[25, 20])
    for a, b in zip(plain, tiles, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_multi_scale_averages_the_probabilities_of_each_scale(photos: list[np.ndarray]) -> None:
    model = PixelModel(kernel=3)
    both = probabilities(model, photos, scales=[0.5, 1.25])
    small = probabilities(model, photos, scales=[0.5])
    large = probabilities(model, photos, scales=[1.25])
    for b, s, g in zip(both, small, large, strict=True):
        torch.testing.assert_close(b, (s + g) / 2, rtol=0, atol=1e-6)
        torch.testing.assert_close(b.sum(0), torch.ones_like(b[0]))


MIXED = ("1.jpg", "3.jpg", "56.jpg")  # landscape 183x276, portrait 275x183, square 300x300


def test_mixed_orientations_in_one_batch_equal_each_image_alone(
    checkpoint: Path, vikram_pairs: Path
) -> None:
    """Landscape, portrait and square photos share a batch (two canvases: 128x96 and 96x128)
    and get, with each test-time option, the probabilities each gets alone, at its own size."""
    model, cfg = load_model_from_checkpoint(checkpoint, device="cpu")
    cfg.aug.eval_size = [128, 96]
    photos = [read_image(vikram_pairs / "Training_Images" / n) for n in MIXED]
    transform = build_eval_transform(cfg.aug)
    model = calibrate_batchnorm(model, pad_batch([transform(image=p)["image"] for p in photos])[0])
    options = [
        {},
        {"tta": [TTA.flip], "scales": [0.75, 1.0]},
        {"window": [64, 48], "stride": [32, 24]},
    ]
    for kwargs in options:
        predictor = build_predictor(model, cfg, "cpu", **kwargs)
        canvases = [predictor.scales[-1].transform(image=p)["image"].shape for p in photos]
        assert [tuple(c[1:]) for c in canvases] == [(96, 128), (128, 96), (128, 96)]
        together = predictor.probabilities(photos)
        for photo, prob in zip(photos, together, strict=True):
            alone = predictor.probabilities([photo])[0]
            assert prob.shape == (2, *photo.shape[:2])
            torch.testing.assert_close(prob, alone, rtol=0, atol=1e-5)
            assert torch.equal(prob.argmax(0), alone.argmax(0)), kwargs
            assert 0 < prob.argmax(0).float().mean() < 1  # both classes: a real comparison


def test_validation_batches_mix_orientations_and_score_as_batches_of_one(
    checkpoint: Path, vikram_pairs: Path
) -> None:
    """Training's validation loader pads a mixed batch (images with the eval preset's pad
    value, masks with 255) and ``evaluate`` counts exactly what batches of one count."""
    model, cfg = load_model_from_checkpoint(checkpoint, device="cpu")
    aug = dataclasses.replace(cfg.aug, eval_size=[128, 96], mask_fill=255)
    listing = list_vikram(vikram_pairs, 0.0, 0.0)
    refs = [listing.refs[n.removesuffix(".jpg")] for n in (*MIXED, "2.jpg")]
    datasets = {"vikram_human_seg": SegDataset(refs, build_eval_transform(aug))}
    fill = eval_pad_value(aug)
    loader = build_val_loader(datasets, 3, 0, 0, 1, fill)
    batch = next(iter(loader))
    assert batch["image"].shape == (3, 3, 128, 128) and batch["mask"].shape == (3, 128, 128)
    assert batch["size"].tolist() == [[96, 128], [128, 96], [128, 96]]
    for i, (h, w) in enumerate(batch["size"].tolist()):
        sample = datasets["vikram_human_seg"][i]
        assert torch.equal(batch["image"][i, :, :h, :w], sample["image"])
        assert torch.equal(batch["mask"][i, :h, :w], sample["mask"])
        assert (batch["mask"][i, h:] == 255).all() and (batch["mask"][i, :, w:] == 255).all()
        pad = batch["image"][i, :, :, w:]
        assert torch.equal(pad, torch.tensor(fill)[:, None, None].expand_as(pad))
    model = calibrate_batchnorm(model, batch["image"])
    cpu, sources = torch.device("cpu"), ["vikram_human_seg"]
    mixed = evaluate(model, loader, cpu, sources, 2)[0]["vikram_human_seg"].confusion
    assert mixed[:, 0].sum() > 0 and mixed[:, 1].sum() > 0  # both classes predicted
    ones, bad = evaluate(model, build_val_loader(datasets, 1, 0, 0, 1, fill), cpu, sources, 2)
    assert mixed.tolist() == ones["vikram_human_seg"].confusion.tolist() and bad == 0
    labelled = sum(int((datasets["vikram_human_seg"][i]["mask"] != 255).sum()) for i in range(4))
    assert int(mixed.sum()) == labelled  # padding never counted


def test_an_image_without_person_has_nan_iou_written_nan(tmp_path: Path) -> None:
    metrics = SegMetrics()
    metrics.update(torch.zeros(1, 4, 5, dtype=torch.long), torch.zeros(1, 4, 5, dtype=torch.long))
    row = image_row("empty", "folder", (4, 5), metrics)
    assert (row["pixels"], row["correct"], row["pixel_acc"]) == (20, 20, 1.0)
    assert math.isnan(row["iou"]) and row["person_fraction"] == 0.0
    lines = write_csv(tmp_path / "per_image.csv", [row]).read_text().splitlines()
    assert lines[1] == "empty,folder,4,5,20,20,0,0,0,1.000000,nan,0.000000,1.000000,1.000000"
    assert json.loads(json.dumps(json_safe({"iou": row["iou"], "acc": 1.0}))) == {
        "iou": None,
        "acc": 1.0,
    }


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("data.root=/x", "data=NAME"),
        ("split=dev", "split='dev' is invalid"),
        ("slide.stride=[8,8]", "slide.stride"),
        ("scales=[0]", "scales"),
        ("eval_size=[64]", "eval_size"),
    ],
)
def test_bad_options_name_the_key(override: str, match: str) -> None:
    with pytest.raises(ValueError, match=re.escape(match)):
        compose_eval_config(["checkpoint=x.pt", override])


def test_typos_fail_when_composing() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key scals; did you mean scales\b"):
        compose_eval_config(["checkpoint=x.pt", "scals=[1.0]"])
    with pytest.raises(ConfigCompositionException, match=r"'flop', expected one of \[flip\]"):
        compose_eval_config(["checkpoint=x.pt", "tta=[flop]"])


@pytest.mark.slow
def test_two_processes_count_every_image_once(
    checkpoint: Path, vikram_pairs: Path, tmp_path: Path
) -> None:
    """torchrun, 2 gloo ranks: the shards' summed counts equal one process's, row for row."""
    data = make_folder_subset(vikram_pairs, tmp_path / "data")  # 9 images: shards of 5 + 4
    base = [f"checkpoint={checkpoint}", "data=folder", f"data.root={data}", "split=all"]
    base += ["num_workers=0", "progress=false", "device=cpu", "worst=3"]
    one = run_evaluation(compose_eval_config([*base, f"out={tmp_path / 'one'}"]))
    cmd = [*torchrun(), "--standalone", "--nproc_per_node=2", str(REPO / "scripts/evaluate.py")]
    out = subprocess.run(
        [*cmd, *base, f"out={tmp_path / 'two'}"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    two = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert two["world_size"] == 2 and two["confusion"] == one["confusion"]
    assert two["overall"] == one["overall"]
    assert (tmp_path / "two/per_image.csv").read_text() == (
        tmp_path / "one/per_image.csv"
    ).read_text()


def test_a_set_of_bad_pairs_only_is_an_error_not_a_pass(
    checkpoint: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Zero scored images must not print metrics (boundary F of nothing is 100%) or exit 0."""
    user = tmp_path / "user"
    (user / "images").mkdir(parents=True)
    (user / "masks").mkdir()
    for name in ("a", "b"):
        (user / "images" / f"{name}.jpg").write_bytes(b"not a jpeg")
        cv2.imwrite(str(user / "masks" / f"{name}.png"), np.zeros((8, 8), np.uint8))
    out = tmp_path / "eval"
    args = [
        f"checkpoint={checkpoint.parent.parent}",  # a run folder: its best.pt
        "data=folder",
        f"data.root={user}",
        "data.on_bad_sample=skip",
        "split=all",
        f"out={out}",
        "backend=torch",
        "num_workers=0",
        "progress=false",
    ]
    assert load_script("evaluate").main(args) == 2
    assert "no image of folder all could be scored: all 2 pairs are bad" in caplog.text
    assert not out.exists()


def test_onnxruntime_and_torch_backends_score_alike(
    tiny_checkpoint: Path, vikram_pairs: Path, tmp_path: Path
) -> None:
    """The same evaluation through both backends (flip and two scales, mixed orientations):
    every metric within 1e-4, the stated tolerance, and the confusion matrices within 1e-4 of
    the pixels (fp32 both; only logits tied within rounding can flip a pixel)."""
    # The tiny dual-column net with BatchNorm statistics of real photos (a 2-step model may
    # predict one class only), its export cached beside it.
    ckpt = tiny_checkpoint
    data = make_folder_subset(vikram_pairs, tmp_path / "data")
    base = [f"checkpoint={ckpt}", "data=folder", f"data.root={data}", "split=all", "worst=0"]
    base += ["num_workers=0", "progress=false", "device=cpu", "tta=[flip]", "scales=[0.75,1.0]"]
    results = {
        backend: run_evaluation(
            compose_eval_config([*base, f"backend={backend}", f"out={tmp_path / backend}"])
        )
        for backend in ("torch", "onnxruntime")
    }
    torch_r, ort_r = results["torch"], results["onnxruntime"]
    assert torch_r["backend"] == "torch" and ort_r["backend"] == "onnxruntime"
    assert torch_r["precision"] == ort_r["precision"] == "fp32"
    assert len(list(ckpt.parent.glob("best.*.onnx"))) == 1
    confusion = np.asarray(torch_r["confusion"]["all"])
    assert confusion[:, 1].sum() > 0 and confusion[:, 0].sum() > 0  # both classes predicted
    differ = np.abs(confusion - np.asarray(ort_r["confusion"]["all"])).sum() / 2
    assert differ <= 1e-4 * confusion.sum()
    for key in ("pixel_acc", "iou_person", "miou", "dice_person", "bf_2", "boundary_iou"):
        a, b = torch_r["overall"][key], ort_r["overall"][key]
        assert (a is None and b is None) or abs(a - b) <= 1e-4, (key, a, b)


def test_photos_whose_labels_tell_people_apart_are_scored_by_person_size(
    tiny_checkpoint: Path, data_env: Path, tmp_path: Path
) -> None:
    """coco128_seg's polygons give each person: the result splits person recall and IoU by
    COCO's sizes (every class-0 polygon of the photos scored is one person of one size), and
    the report prints the split; sources with plain masks have none."""
    from seg.data.coco import read_yolo_instances

    out = tmp_path / "eval"
    args = [f"checkpoint={tiny_checkpoint}", "data=coco128_seg", "split=val", "max_images=8"]
    args += ["worst=0", "num_workers=0", "progress=false", "device=cpu", "backend=torch"]
    result = run_evaluation(compose_eval_config([*args, f"out={out}"]))
    sizes = result["person_sizes"]["coco128_seg"]
    listing = list_source(DataConfig(name="coco128_seg", root=str(data_env)), "coco128_seg")
    people = 0
    for ref in listing.split_refs("val")[:8]:
        if ref.mask is not None:
            h, w = cv2.imread(str(ref.image)).shape[:2]
            people += sum(m.sum() > 0 for m in read_yolo_instances(ref.mask, (h, w)))
    assert (
        people > 5 and sum(sizes[f"instances_{n}"] for n in ("small", "medium", "large")) == people
    )
    for n in ("small", "medium", "large"):
        if sizes[f"instances_{n}"]:
            assert 0 <= sizes[f"iou_{n}"] <= sizes[f"recall_{n}"] <= 1
    assert "people by size" in (out / "report.txt").read_text()
    assert json.loads((out / "metrics.json").read_text())["person_sizes"]["coco128_seg"] == sizes


def test_a_source_is_evaluated_at_its_own_eval_size(
    tiny_checkpoint: Path, data_env: Path, tmp_path: Path
) -> None:
    """data=coco128_seg scores COCO's photos at data.eval_scales' 5/3 of the checkpoint's
    aug.eval_size: the same counts as that size given as eval_size=..., other counts than the
    checkpoint's own size; eval_size=... wins over data.eval_scales."""
    args = [f"checkpoint={tiny_checkpoint}", "data=coco128_seg", "split=val", "max_images=4"]
    args += ["worst=0", "num_workers=0", "progress=false", "device=cpu", "backend=torch"]

    def scored(*extra: str) -> dict:
        out = tmp_path / f"eval{len(list(tmp_path.iterdir()))}"
        return run_evaluation(compose_eval_config([*args, *extra, f"out={out}"]))

    own = scored()
    trained = own["eval_size"]  # the checkpoint's
    size = [round(v * 1.6667) for v in trained]
    assert own["eval_sizes"] == {"coco128_seg": size} and size[0] > trained[0]
    given = scored(f"eval_size=[{size[0]},{size[1]}]")
    assert given["eval_sizes"] == own["eval_sizes"] and given["confusion"] == own["confusion"]
    plain = scored(f"eval_size=[{trained[0]},{trained[1]}]")
    assert plain["eval_sizes"] == {"coco128_seg": trained}
    assert plain["confusion"] != own["confusion"]
