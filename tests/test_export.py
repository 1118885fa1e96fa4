"""ONNX export: dynamic batch/height/width, ONNX Runtime vs PyTorch on real images."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from training_utils import calibrate_batchnorm

from seg.config import Config, compose_config
from seg.data.batching import pad_batch
from seg.data.io import read_image
from seg.data.transforms import build_eval_transform, eval_pad_value
from seg.models import build_model

pytest.importorskip("onnxruntime", reason="export checks need onnxruntime")
pytest.importorskip("onnxscript", reason="torch's dynamo ONNX exporter needs onnxscript")

from seg.export import (
    ExportConfig,
    ExportMismatchError,
    compare_with_onnx,
    export_onnx,
    image_batches,
    onnx_session,
    run_export,
)

REPO = Path(__file__).resolve().parents[1]
PHOTOS = (  # of the vikram_pairs folder: landscape, two portraits, square grayscale
    "Training_Images/1.jpg",
    "Training_Images/22.jpg",
    "Training_Images/3.jpg",
    "Training_Images/56.jpg",
)
# The eval size (a multiple of dual_channel's size divisor 64) and an odd, larger one.
SIZES = [[256, 192], [321, 241]]
BATCH_SIZES = [1, 3]
TOLERANCE, MIN_AGREEMENT = 1e-3, 0.999  # fp32 on CPU


def calibrated_model(cfg: Config, images: list[np.ndarray]) -> nn.Module:
    """A random model whose BatchNorm statistics come from real images, so that its logits
    have a real scale and its masks hold both classes (a fresh one predicts one class)."""
    torch.manual_seed(0)
    model = build_model(cfg.model)
    transform = build_eval_transform(cfg.aug)
    tensors = [transform(image=im)["image"] for im in images]
    batch, _ = pad_batch(tensors, image_fill=eval_pad_value(cfg.aug))  # portrait and landscape
    return calibrate_batchnorm(model, batch)


@pytest.fixture
def photos(vikram_pairs: Path) -> list[np.ndarray]:
    return [read_image(vikram_pairs / rel) for rel in PHOTOS]


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name}", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_export_script_dual_channel_matches_pytorch_on_real_images(
    vikram_pairs, photos, tmp_path, capsys
):
    import onnx

    from seg.checkpoint import save_checkpoint
    from seg.config import config_to_dict

    cfg = compose_config(["model=dual_channel"])
    model = calibrated_model(cfg, photos)
    ckpt, out, folder = tmp_path / "best.pt", tmp_path / "onnx" / "model.onnx", tmp_path / "img"
    save_checkpoint({"model": model.state_dict(), "config": config_to_dict(cfg)}, ckpt)
    folder.mkdir()
    for rel in PHOTOS:
        shutil.copy(vikram_pairs / rel, folder)
    args = [f"checkpoint={ckpt}", f"out={out}", f"images={folder}"]
    args += [f"sizes={SIZES}".replace(" ", ""), f"batch_sizes={BATCH_SIZES}".replace(" ", "")]
    assert load_script("export").main(args) == 0
    result = json.loads(capsys.readouterr().out)
    with capsys.disabled():
        print(f"\ndual_channel ONNX vs PyTorch: {result['cases']}")
    # Files in name order: 1 (landscape: a 192 x 256 canvas) alone; then 22, 3 and 56
    # (portrait, portrait, square: 321 x 241 canvases) in one batch.
    assert [c["shape"] for c in result["cases"]] == [[1, 3, 192, 256], [3, 3, 321, 241]]
    assert result["max_abs_diff"] < TOLERANCE
    assert result["mask_agreement"] >= MIN_AGREEMENT

    # Agreement means something only if the masks hold both classes.
    batch = image_batches(photos, cfg.aug, SIZES[1:], BATCH_SIZES[1:])[0]
    with torch.no_grad():
        person = (model(batch)["out"].argmax(1) == 1).float().mean().item()
    assert 0.05 < person < 0.95

    graph = onnx.load(str(out))
    dims = [d.dim_param or d.dim_value for d in graph.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 3, "height", "width"]
    meta = {p.key: p.value for p in graph.metadata_props}
    assert meta["seg.size_divisor"] == "64" and meta["seg.eval_size"] == "256,192"
    assert meta["seg.mean"] == "0.485,0.456,0.406"
    assert not list(out.parent.glob(".*")), "temporary file left behind"


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> dict:
        return {"out": self.conv(x), "aux": []}


def test_a_failed_check_never_takes_the_final_name(photos, tmp_path):
    """An export that misses the figures stays under its unverified name; the file already at
    out= (a good earlier export) is untouched. One that passes replaces it."""
    cfg = compose_config(["model=single_column"])
    model = calibrated_model(cfg, photos)
    out = tmp_path / "model.onnx"
    out.write_bytes(b"an earlier, verified export")
    strict = ExportConfig(checkpoint="unused", out=str(out), min_agreement=1.01)  # cannot pass
    with pytest.raises(ExportMismatchError, match=r"model\.unverified\.onnx: .*was not written"):
        run_export(strict, model, cfg)
    assert out.read_bytes() == b"an earlier, verified export"
    assert (tmp_path / "model.unverified.onnx").is_file()
    result = run_export(ExportConfig(checkpoint="unused", out=str(out)), model, cfg)
    assert result["path"] == str(out) and out.read_bytes()[:4] != b"an e"
    assert not (tmp_path / "model.unverified.onnx").exists()


def test_comparison_catches_a_mismatch(tmp_path):
    torch.manual_seed(0)
    model = TinyNet().eval()
    path = export_onnx(model, tmp_path / "tiny.onnx", example_hw=(32, 24))
    session = onnx_session(path)
    batches = [torch.randn(2, 3, 40, 30), torch.randn(1, 3, 17, 63)]  # sizes unlike the example
    check = compare_with_onnx(model, session, batches)
    assert check.ok(TOLERANCE, MIN_AGREEMENT), check
    with torch.no_grad():
        model.conv.bias[1] += 0.5  # the PyTorch side drifts from the exported file
    check = compare_with_onnx(model, session, batches)
    assert not check.ok(TOLERANCE, MIN_AGREEMENT)
    assert check.max_abs_diff == pytest.approx(0.5, abs=1e-4) and check.mask_agreement < 0.999
    with pytest.raises(FileNotFoundError, match=r"missing\.onnx: ONNX file does not exist"):
        onnx_session(tmp_path / "missing.onnx")


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        "unet",
        "dual_channel_pretrained",
        "single_column",
        "multi_column",
        "lraspp_mobilenet_v3_large",
        "deeplabv3_mobilenet_v3_large",
        "fcn_resnet50",
    ],
)
def test_every_model_family_exports(name, photos, tmp_path):
    cfg = compose_config([f"model={name}"])
    model = calibrated_model(cfg, photos)
    options = ExportConfig(checkpoint="unused", out=str(tmp_path / "m.onnx"), sizes=SIZES)
    options.batch_sizes = BATCH_SIZES
    result = run_export(options, model, cfg)  # random images: graph check; real ones below
    batches = image_batches(photos, cfg.aug, SIZES, BATCH_SIZES)
    check = compare_with_onnx(model, onnx_session(Path(result["path"])), batches)
    print(f"{name}: max |diff| {check.max_abs_diff:.3g}, agreement {check.mask_agreement:.6f}")
    assert check.max_abs_diff < TOLERANCE and check.mask_agreement >= MIN_AGREEMENT


def test_export_script_names_a_bad_checkpoint(tmp_path, caplog):
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"not a checkpoint")
    export = load_script("export")
    assert export.main([f"checkpoint={broken}", f"out={tmp_path / 'm.onnx'}"]) == 2
    assert "broken.pt" in caplog.text
    assert export.main([f"out={tmp_path / 'm.onnx'}"]) == 2  # checkpoint is required
    assert "checkpoint" in caplog.text
    assert not (tmp_path / "m.onnx").exists()
