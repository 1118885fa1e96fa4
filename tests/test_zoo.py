"""The shipped person model (seg/zoo/): the file, its card, the default everywhere, the one call
from Python, and the README's model table.

What the model predicts is pinned by a reference mask (``tests/data/shipped_reference.json``:
the mask ``predict.py`` wrote for a vikram_human_seg photo when the model was shipped, COCO RLE
as text) and by the card's figures on the first 16 test photos of each source. Replacing the
shipped model means regenerating both: ``python tests/test_zoo.py --write-reference`` and
``scripts/ship_model.py``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest

from seg.config import EvalConfig, ExportConfig, PredictConfig
from seg.config.demo import DemoConfig
from seg.data.manifest import sha256_file
from seg.zoo import DEFAULT, ZOO_DIR, card_file, read_card, shipped_file
from seg.zoo.table import shipped_cards, with_table, zoo_table

# One xdist worker runs this module (pyproject.toml: --dist loadgroup): its module fixtures
# are built once.
pytestmark = pytest.mark.xdist_group("zoo")

REPO = Path(__file__).resolve().parents[1]
WEIGHTS = ZOO_DIR / f"{DEFAULT}.safetensors"
REFERENCE = REPO / "tests" / "data" / "shipped_reference.json"
PHOTO = Path("vikram_human_seg") / "Training_Images" / "1.jpg"  # under the shared datasets
MIN_AGREEMENT = 0.995

# Runs a script with every connection beyond this machine refused (loopback stays: the demo
# page's server talks to itself): the shipped model needs no network.
NO_NETWORK = """
import ipaddress, runpy, socket, sys

LOCAL = {"localhost", "127.0.0.1", "::1"}
connect, getaddrinfo = socket.socket.connect, socket.getaddrinfo

def loopback(host):
    try:
        return host in LOCAL or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

def guarded_connect(self, address):
    if self.family in (socket.AF_INET, socket.AF_INET6) and not loopback(address[0]):
        raise OSError(f"network blocked by the test: {address}")
    return connect(self, address)

def guarded_getaddrinfo(host, *args, **kwargs):
    if host is not None and not loopback(host if isinstance(host, str) else host.decode()):
        raise socket.gaierror(f"network blocked by the test: {host}")
    return getaddrinfo(host, *args, **kwargs)

socket.socket.connect = guarded_connect
socket.getaddrinfo = guarded_getaddrinfo
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user cache folder of this module's own (XDG_CACHE_HOME): the shipped model's export
    is made there once, by the first test that needs it."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def cached(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    return cache_home


def script_command(script: str, *args: str, cache: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run ``scripts/<script>`` offline, with ``cache`` as
    the user's cache folder and no dataset folder (the shipped model needs neither)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "GRADIO_ANALYTICS_ENABLED": "False"}
    env.pop("SEG_DATA_DIR", None)
    return [sys.executable, "-c", NO_NETWORK, str(REPO / "scripts" / script), *args], env


def run_script(
    script: str, *args: str, cache: Path, cwd: Path, timeout: float = 600
) -> subprocess.CompletedProcess:
    cmd, env = script_command(script, *args, cache=cache)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def script_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> Callable[..., list[str]]:
    """Runs ``scripts/<name>.py``'s ``main(args)`` in this process (in ``tmp_path``, its own
    cache folder, no dataset folder), asserts its exit status 2 (a user's mistake), and returns
    its ERROR lines. That a message is one line, without a traceback, in a real process is
    test_cli.py's: here only what the messages say."""
    from training_utils import load_script

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SEG_DATA_DIR", raising=False)

    def run(name: str, *args: str) -> list[str]:
        caplog.clear()
        assert load_script(name).main([*args, f"out={tmp_path / 'out'}"]) == 2, caplog.text
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]

    return run


def tiny_photo(folder: Path) -> Path:
    photo = folder / "x.png"
    cv2.imwrite(str(photo), np.zeros((8, 8, 3), np.uint8))
    return photo


def rle_decode(ref: dict) -> np.ndarray:
    from pycocotools import mask as coco_mask

    rle = {"size": ref["size"], "counts": ref["counts"].encode()}
    return coco_mask.decode(rle).astype(bool)


def test_the_shipped_file_is_small_fp16_safetensors_with_what_rebuilding_it_needs() -> None:
    from safetensors import safe_open

    assert WEIGHTS.is_file() and WEIGHTS.stat().st_size <= 12_000_000
    with safe_open(str(WEIGHTS), framework="pt") as f:
        info = json.loads(f.metadata()["humanseg"])
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}  # noqa: SIM118
    assert "F32" not in dtypes and "F16" in dtypes  # fp16 storage, no fp32 left
    assert info["classes"] == ["background", "person"]
    config = info["config"]
    assert config["model"]["name"] and config["aug"]["eval_size"] == [480, 360]
    assert config["data"]["eval_scales"] == {"coco128_seg": pytest.approx(1.6667)}
    assert info["command"].startswith("python scripts/train.py +exp=")
    assert re.fullmatch(r"[0-9a-f]{40}", info["commit"])
    card = read_card(card_file(WEIGHTS))
    assert card["sha256"] == sha256_file(WEIGHTS)
    assert card["fp32_agreement"]["all"] >= MIN_AGREEMENT


def test_a_weights_file_holds_the_checkpoints_model_in_fp16_and_rebuilds_it(
    exported_tiny: Path, tmp_path: Path
) -> None:
    import torch

    from seg.checkpoint import load_checkpoint, load_model_from_checkpoint
    from seg.zoo import WeightsError, write_weights

    ckpt = load_checkpoint(exported_tiny)
    path = write_weights(ckpt, tmp_path / "m.safetensors", "python scripts/train.py", "0" * 40)
    model, cfg = load_model_from_checkpoint(path)  # no card beside it: a file of the user's
    assert cfg.model == load_model_from_checkpoint(exported_tiny)[1].model
    expected = {  # what a weights file stores and reads back: floats rounded to fp16
        k: v.half().float() if v.is_floating_point() else v for k, v in ckpt["model"].items()
    }
    state = model.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k].cpu(), expected[k]) for k in state)
    assert any(not torch.equal(expected[k], v) for k, v in ckpt["model"].items())  # rounded
    card_file(path).write_text(f"---\nsha256: {'0' * 64}\n---\n")  # another file's card
    with pytest.raises(WeightsError, match=r"m\.safetensors is damaged or not the file its card"):
        load_model_from_checkpoint(path)


def test_resuming_from_a_weights_file_says_it_has_no_training_state(tmp_path: Path) -> None:
    from seg.checkpoint import CheckpointError
    from seg.engine.checkpointer import find_resume_checkpoint

    with pytest.raises(CheckpointError, match=r"weights without its training state"):
        find_resume_checkpoint(DEFAULT, tmp_path / "run")


def test_a_card_is_written_from_its_figures_and_read_back(tmp_path: Path) -> None:
    from seg.ship import render_card
    from seg.zoo.table import zoo_table

    row = {"eval_size": [480, 360], "iou_person": 95.5, "pixel_acc": 97.25}
    wild = {"eval_size": [800, 600], "iou_person": None, "pixel_acc": 99.0}
    wild |= {"empty_person_share": 0.06, "empty_images": 67, "empty_over_1pct": 1}
    fields = {
        "name": "m", "file": "m.safetensors", "sha256": "ab" * 32, "size_mb": 11.3,
        "storage": "fp16 (safetensors)", "parameters": 5_647_334, "model": "multicolumn",
        "columns": ["detail", "context (efficientnet_lite2)"],
        "recipe": "+exp=dual_channel_pretrained_cpu_coco",
        "command": "python scripts/train.py +exp=dual_channel_pretrained_cpu_coco",
        "commit": "0" * 40, "torch": "2.14.1", "wall_time_min": 97.5, "machine": "a 2-core CPU",
        "contention": "", "trained_on": ["eg_portrait", "coco_mini_person (30% of the photos)"],
        "epoch": 9, "step": 4419, "eval_size": [480, 360],
        "test": {"eg_portrait": row, "coco128_seg": wild},
        "test_first16": {"eg_portrait": row},
        "fp32_agreement": {"per_source": {"eg_portrait": 0.9991}, "all": 0.9991, "pixels": 10},
        "latency_ms": {"256x256": 9.5, "eval_size": 30.25, "calls": 50, "machine": "a CPU"},
    }  # fmt: skip
    card = tmp_path / "m.md"
    card.write_text(render_card(fields))
    assert read_card(card) == fields
    text = card.read_text()
    assert "| eg_portrait | 480x360 | 95.50 | 97.25 | - |" in text
    assert "| coco128_seg | 800x600 | n/a | 99.00 | 0.06% / 1 of 67 |" in text
    assert "{" not in text.split("---", 2)[2]  # every field filled
    table = zoo_table({"m": fields}, tmp_path)
    assert (
        "| 5.65 M | 95.50 | n/a | n/a | n/a (800x600) | 0.06% | 9.50 | 30.25 (480x360) |" in table
    )


def test_every_script_and_the_python_call_default_to_the_shipped_model() -> None:
    from seg.inference.api import load_model

    assert shipped_file(DEFAULT) == WEIGHTS
    for schema in (PredictConfig, EvalConfig, ExportConfig, DemoConfig):
        assert schema.__dataclass_fields__["checkpoint"].default == DEFAULT
    assert load_model.__defaults__[0] == DEFAULT


def test_a_flipped_byte_fails_loading_in_one_line_naming_the_file(
    tmp_path: Path, script_errors
) -> None:
    from seg.checkpoint import load_model_from_checkpoint
    from seg.zoo import WeightsError

    copy = tmp_path / WEIGHTS.name
    shutil.copy(WEIGHTS, copy)
    shutil.copy(card_file(WEIGHTS), card_file(copy))
    load_model_from_checkpoint(copy)  # the copy with its card loads
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one weight
    copy.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match=re.escape(str(copy))):
        load_model_from_checkpoint(copy)
    errors = script_errors("predict", f"checkpoint={copy}", f"input={tiny_photo(tmp_path)}")
    assert len(errors) == 1 and str(copy) in errors[0] and "SHA-256" in errors[0], errors


def test_predict_with_no_checkpoint_and_no_network_writes_the_reference_mask(
    shared_datasets: Path, cache_home: Path, tmp_path: Path
) -> None:
    """As a new user after the README's install: no checkpoint=, sockets refused, a fresh
    cache (the export is made into it, nothing into the package), and none of the exporter's
    INFO lines (onnx_ir printed one per graph pass) in the user's log."""
    before = sorted(p.name for p in ZOO_DIR.iterdir())
    photo = shutil.copy(shared_datasets / PHOTO, tmp_path / "photo.jpg")
    result = run_script("predict.py", f"input={photo}", "out=out", cache=cache_home, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"the shipped model {DEFAULT}" in result.stderr  # the log names it
    assert "onnx_ir" not in result.stderr, result.stderr[-3000:]
    mask = cv2.imread(str(tmp_path / "out" / "photo_mask.png"), cv2.IMREAD_GRAYSCALE) > 127
    reference = rle_decode(json.loads(REFERENCE.read_text()))
    assert mask.shape == reference.shape
    assert (mask == reference).mean() >= MIN_AGREEMENT
    assert 0.05 < reference.mean() < 0.95  # a person, not an empty or full frame
    assert list((cache_home / "humanseg" / "onnx").glob(f"{DEFAULT}.*.onnx"))
    assert sorted(p.name for p in ZOO_DIR.iterdir()) == before


def test_the_demo_starts_with_no_checkpoint_and_no_network(
    cache_home: Path, tmp_path: Path
) -> None:
    pytest.importorskip("gradio", reason='the demo page needs gradio: pip install -e ".[dev]"')
    cmd, env = script_command("demo.py", "port=0", cache=cache_home)
    log = tmp_path / "demo.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env={**env, "TMPDIR": str(tmp_path)}, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 300
        while "demo page: http://127.0.0.1:" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        assert f"the shipped model {DEFAULT}" in log.read_text()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, log.read_text()[-3000:]


def test_int8_with_the_shipped_model_asks_for_calibration_photos(
    tmp_path: Path, script_errors
) -> None:
    errors = script_errors("predict", f"input={tiny_photo(tmp_path)}", "precision=int8")
    assert len(errors) == 1 and "calibration=" in errors[0], errors


def test_a_missing_checkpoint_says_what_to_pass_and_that_the_shipped_model_is_the_default(
    script_errors,
) -> None:
    errors = script_errors("evaluate", "checkpoint=runs/nope", "split=test")
    assert len(errors) == 1, errors
    assert "runs/nope" in errors[0] and "leave it out for the shipped model" in errors[0]


def test_an_unreadable_checkpoint_says_so_and_that_the_shipped_model_is_the_default(
    tmp_path: Path,
) -> None:
    from seg.checkpoint import CheckpointError, load_model_from_checkpoint

    broken = tmp_path / "best.pt"
    broken.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"best\.pt.*leave checkpoint= out for the shipped"):
        load_model_from_checkpoint(broken)


@pytest.mark.usefixtures("cached")
def test_evaluate_reproduces_the_cards_figures_on_the_first_16_test_photos(
    data_env: Path, tmp_path: Path
) -> None:
    from seg.config import compose_eval_config
    from seg.evaluation.scoring import run_evaluation
    from seg.ship import test_figures

    card = read_card(card_file(WEIGHTS))
    result = run_evaluation(
        compose_eval_config(["split=test", "max_images=16", f"out={tmp_path}/eval"])
    )
    figures = test_figures(result)
    assert set(figures) == set(card["test_first16"])
    for source, expected in card["test_first16"].items():
        for key in ("iou_person", "pixel_acc"):
            assert figures[source][key] == pytest.approx(expected[key], abs=0.1), (source, key)
        assert figures[source]["eval_size"] == expected["eval_size"]


@pytest.mark.usefixtures("cached")
def test_the_python_call_takes_a_path_an_array_and_a_pil_image(vikram_pairs: Path) -> None:
    from PIL import Image

    from seg import load_model
    from seg.data.io import read_image
    from seg.errors import DataError

    model = load_model()
    photo = vikram_pairs / "Training_Images" / "1.jpg"
    rgb = read_image(photo)
    results = [model(photo), model(str(photo)), model(rgb), model(Image.fromarray(rgb))]
    for r in results:
        assert r.mask.dtype == bool and r.mask.shape == rgb.shape[:2]
        assert r.prob.dtype == np.float32 and r.prob.shape == rgb.shape[:2]
        assert np.array_equal(r.mask, results[0].mask)
    assert np.allclose(results[2].prob, results[0].prob, atol=1e-6)
    assert np.array_equal(results[0].mask, results[0].prob > 0.5)
    gray = model(rgb[..., 0])
    assert gray.mask.shape == rgb.shape[:2]
    with pytest.raises(DataError, match=r"uint8 RGB array"):
        model(rgb.astype(np.float32))
    with pytest.raises(DataError, match=r"a path, a NumPy array or a PIL image"):
        model(42)


def test_the_readme_model_table_is_the_scripts() -> None:
    readme = (REPO / "README.md").read_text()
    table = zoo_table(shipped_cards(), REPO)
    assert with_table(readme, table) == readme, "run: python scripts/model_zoo.py --write"
    assert f"seg/zoo/{DEFAULT}.md" in table


def test_the_readme_links_every_docs_page() -> None:
    readme = (REPO / "README.md").read_text()
    pages = [p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md")]
    missing = [p for p in [*pages, "docs/notes/README.md"] if f"({p}" not in readme]
    assert not missing, f"README.md links none of {missing}"


def write_reference(photo: Path) -> None:
    """Write ``REFERENCE`` from the shipped model's ``predict.py`` mask of ``photo``."""
    from pycocotools import mask as coco_mask

    out = REPO / "outputs" / "shipped_reference"
    subprocess.run(
        [sys.executable, "scripts/predict.py", f"input={photo}", f"out={out}"],
        cwd=REPO,
        check=True,
    )
    mask = cv2.imread(str(out / f"{photo.stem}_mask.png"), cv2.IMREAD_GRAYSCALE) > 127
    rle = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    ref = {"photo": PHOTO.as_posix(), "size": rle["size"], "counts": rle["counts"].decode()}
    REFERENCE.write_text(json.dumps(ref) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--write-reference"]:
    from conftest import SHARED_DATASETS

    write_reference(SHARED_DATASETS / PHOTO)
