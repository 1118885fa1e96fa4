"""ONNX export: dynamic batch/height/width, ONNX Runtime vs PyTorch on real images."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from training_utils import calibrated_model, load_script

from seg.config import compose_config
from seg.data.io import read_image

pytest.importorskip("onnxruntime", reason="export checks need onnxruntime")
pytest.importorskip("onnxscript", reason="torch's dynamo ONNX exporter needs onnxscript")

from seg.export import (
    ExportCheck,
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


@pytest.fixture
def photos(vikram_pairs: Path) -> list[np.ndarray]:
    return [read_image(vikram_pairs / rel) for rel in PHOTOS]


def test_export_script_dual_channel_matches_pytorch_on_real_images(
    exported_tiny, tiny_model, photos, capsys
):
    """``exported_tiny`` is scripts/export.py's export of a dual-column net (BatchNorm
    statistics from real photos), checked on the real photos of ``PHOTOS``: its report."""
    import onnx

    result = json.loads((exported_tiny.parents[1] / "export_report.json").read_text())
    with capsys.disabled():
        print(f"\ndual_channel ONNX vs PyTorch: {result['cases']}")
    # Files in name order: 1 (landscape: a 192 x 256 canvas) alone; then 22, 3 and 56
    # (portrait, portrait, square: 321 x 241 canvases) in one batch.
    assert [c["shape"] for c in result["cases"]] == [[1, 3, 192, 256], [3, 3, 321, 241]]
    assert result["max_abs_diff"] < TOLERANCE
    assert result["mask_agreement"] >= MIN_AGREEMENT

    # Agreement means something only if the masks hold both classes.
    model, cfg = tiny_model
    batch = image_batches(photos, cfg.aug, SIZES[1:], BATCH_SIZES[1:])[0]
    with torch.no_grad():
        person = (model(batch)["out"].argmax(1) == 1).float().mean().item()
    assert 0.05 < person < 0.95

    (out,) = exported_tiny.parent.glob("*.onnx")
    graph = onnx.load(str(out))
    dims = [d.dim_param or d.dim_value for d in graph.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 3, "height", "width"]
    meta = {p.key: p.value for p in graph.metadata_props}
    assert meta["seg.size_divisor"] == "64" and meta["seg.eval_size"] == "128,96"
    assert meta["seg.mean"] == "0.485,0.456,0.406"
    assert not list(out.parent.glob(".*")), "temporary file left behind"


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> dict:
        return {"out": self.conv(x), "aux": []}


def test_a_failed_check_never_takes_the_final_name(tmp_path, monkeypatch):
    """An export that misses the figures stays under its unverified name; the file already at
    out= (a good earlier export) is untouched. One that passes replaces it."""
    import seg.export

    cfg = compose_config(["model=single_column"])  # its eval preset; the net is one convolution
    torch.manual_seed(0)
    model = TinyNet().eval()
    out = tmp_path / "model.onnx"
    out.write_bytes(b"an earlier, verified export")
    options = ExportConfig(checkpoint="unused", out=str(out))
    with monkeypatch.context() as mp:  # figures that miss the tolerances
        mp.setattr(seg.export, "compare_with_onnx", lambda *a: ExportCheck(0.5, 0.9, []))
        with pytest.raises(ExportMismatchError, match=r"model\.unverified\.onnx: .*not written"):
            run_export(options, model, cfg)
    assert out.read_bytes() == b"an earlier, verified export"
    assert (tmp_path / "model.unverified.onnx").is_file()
    result = run_export(options, model, cfg)
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
    assert export.main(["checkpoint=nope.pt", f"out={tmp_path / 'm.onnx'}"]) == 2
    assert "leave it out for the shipped model" in caplog.text  # the default: test_zoo.py
    assert not (tmp_path / "m.onnx").exists()


def test_export_script_never_overwrites_a_checkpoint(tiny_checkpoint, tmp_path, caplog):
    """out= naming the checkpoint (by any spelling) or any .pt is refused before anything is
    loaded or written; the checkpoint keeps its bytes."""
    before = tiny_checkpoint.read_bytes()
    (tmp_path / "link").symlink_to(tiny_checkpoint.parent)
    export = load_script("export")
    spellings = [
        tiny_checkpoint,
        tiny_checkpoint.parent / ".." / "checkpoints" / "best.pt",
        tmp_path / "link" / "best.pt",
        tiny_checkpoint.parent / "last.pt",  # another checkpoint of the run
    ]
    for out in spellings:
        caplog.clear()
        assert export.main([f"checkpoint={tiny_checkpoint}", f"out={out}"]) == 2
        assert "expected the name of an .onnx file" in caplog.text, out
    assert (
        tiny_checkpoint.read_bytes() == before and not (tiny_checkpoint.parent / "last.pt").exists()
    )
    renamed = tmp_path / "weights.onnx"
    renamed.write_bytes(before)  # a checkpoint under an .onnx name: still the checkpoint
    assert export.main([f"checkpoint={renamed}", f"out={renamed}"]) == 2
    assert "is the checkpoint" in caplog.text and renamed.read_bytes() == before
