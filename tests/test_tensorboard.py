"""TensorBoard monitoring of a real 2-step run: the event files' tags and values (read with
TensorBoard's own EventAccumulator), a real ``tensorboard`` server answering over HTTP, and the
logger's helpers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from training_utils import make_folder_subset, tiny_overrides

from seg.checkpoint import load_model_from_checkpoint
from seg.config import compose_config
from seg.engine.logger import MetricLogger
from seg.engine.monitor import WaitClock, flatten_hparams
from seg.engine.train import train

# One xdist worker runs this module (pyproject.toml: --dist loadgroup): its module fixtures
# are built once.
pytestmark = pytest.mark.xdist_group("tensorboard")

VAL_IMAGES = 2


@pytest.fixture(scope="module")
def run(vikram_pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tb")
    data = make_folder_subset(vikram_pairs, root / "data")
    overrides = [*tiny_overrides(data, root / "run"), "trainer.max_steps=2"]
    overrides += ["logging.tensorboard=true", f"logging.val_images={VAL_IMAGES}"]
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("SEG_DATA_DIR", raising=False)
        train(compose_config(overrides))
    return root / "run"


@pytest.fixture(scope="module")
def events(run: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run / "tb"), size_guidance={"images": 0, "scalars": 0})
    return acc.Reload()


def jsonl(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_scalars_grouped_by_slashes(run: Path, events: EventAccumulator) -> None:
    tags = set(events.Tags()["scalars"])
    expected = {"train/loss", "train/ce", "lr", "perf/img_per_s", "perf/data_wait_fraction"}
    expected |= {"perf/max_rss_gb", "val/pixel_acc", "val/iou_person", "val/folder/iou_person"}
    assert expected <= tags, expected - tags
    assert "perf/cuda_max_mem_gb" not in tags  # a CPU run
    logged = {r["step"]: r for r in jsonl(run) if "train/loss" in r}
    loss = events.Scalars("train/loss")
    assert [e.step for e in loss] == sorted(logged) == [1, 2]
    for e in loss:
        assert e.value == pytest.approx(logged[e.step]["train/loss"], rel=1e-6)
    for e in events.Scalars("perf/data_wait_fraction"):
        assert 0 <= e.value <= 1
    for e in events.Scalars("perf/max_rss_gb"):
        assert 0.05 < e.value < 1000  # a Python process with torch loaded: tens of MiB at least
    (val,) = events.Scalars("val/iou_person")
    assert val.step == 2 and 0 <= val.value <= 1


def test_validation_images_model_summary_and_hparams(run: Path, events: EventAccumulator) -> None:
    cfg = OmegaConf.load(run / "config.yaml")
    eval_h, eval_w = cfg.aug.eval_size
    images = sorted(t for t in events.Tags()["images"] if t.startswith("val_images/"))
    assert images == [f"val_images/{i}" for i in range(VAL_IMAGES)]
    for tag in images:
        (image,) = events.Images(tag)  # one validation, at the last step
        assert (image.step, image.height, image.width) == (2, eval_h, 3 * eval_w)

    (text,) = events.Tensors("model/summary/text_summary")
    summary = text.tensor_proto.string_val[0].decode()
    model, _ = load_model_from_checkpoint(run / "checkpoints" / "last.pt")
    params = sum(p.numel() for p in model.parameters())
    assert "total" in summary and f"{params:,}" in summary

    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    assert hparams["optim.lr"].number_value == cfg.optim.lr
    assert hparams["trainer.max_steps"].number_value == 2
    assert hparams["model.name"].string_value == cfg.model.name
    assert "trainer.run_dir" not in hparams and "data.root" not in hparams
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
    metrics = {m.name.tag for m in experiment.experiment.metric_infos}
    assert {"val/pixel_acc", "val/iou_person", "val/miou"} <= metrics
    assert not any(m.count("/") > 1 for m in metrics)  # overall metrics only


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None


@pytest.mark.slow
def test_a_real_tensorboard_serves_the_scalars(run: Path, tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(run / "tb")]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--load_fast", "false"]
    log = (tmp_path / "tensorboard.log").open("w")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=.&tag=train%2Floss"
    try:
        series = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and server.poll() is None:
            series = get_json(url)
            if isinstance(series, list) and len(series) == 2:
                break
            time.sleep(0.5)
        log.flush()
        assert isinstance(series, list), (tmp_path / "tensorboard.log").read_text()[-3000:]
        logged = [r for r in jsonl(run) if "train/loss" in r]
        assert [step for _, step, _ in series] == [r["step"] for r in logged]
        for (_, _, value), r in zip(series, logged, strict=True):
            assert value == pytest.approx(r["train/loss"], rel=1e-6)
        tags = get_json(f"http://127.0.0.1:{port}/data/plugin/scalars/tags")
        assert {"train/loss", "perf/data_wait_fraction"} <= set(tags["."])
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=15)
        log.close()


def test_resume_rewrites_metrics_jsonl_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "train/loss": 1.0 / s}) for s in (1, 2, 3, 4)]
    path.write_text("".join(f"{line}\n" for line in lines))

    def crash(src, dst):  # the process dies at the rename
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        MetricLogger(tmp_path, tensorboard=False, resume_step=2)
    assert path.read_text().splitlines() == lines  # untouched, never half-written
    monkeypatch.undo()
    MetricLogger(tmp_path, tensorboard=False, resume_step=2)
    assert path.read_text().splitlines() == lines[:2]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]  # no temporary file left


def test_resume_drops_a_last_line_cut_short_and_names_a_bad_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run killed mid-write leaves a partial last line: resume drops it with a warning. A bad
    line elsewhere is not guessed at: the error names the file and the line."""
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "train/loss": 1.0 / s}) for s in (1, 2, 3)]
    path.write_text("".join(f"{line}\n" for line in lines) + '{"step": 4, "train/lo')
    with caplog.at_level("WARNING", logger="seg.engine.logger"):
        MetricLogger(tmp_path, tensorboard=False, resume_step=3)
    assert path.read_text().splitlines() == lines
    assert "metrics.jsonl: dropping its last line, cut short" in caplog.text
    path.write_text(f"{lines[0]}\nnot json\n{lines[1]}\n")
    with pytest.raises(ValueError, match=r"metrics\.jsonl, line 2: not a metrics entry"):
        MetricLogger(tmp_path, tensorboard=False, resume_step=3)
    assert path.read_text() == f"{lines[0]}\nnot json\n{lines[1]}\n"  # left as it was


def test_wait_clock_counts_only_the_loader() -> None:
    """The loader's 3 x 0.02 s counted, the 3 x 0.1 s of "training" between batches not: on a
    clock the test moves, so that a busy machine's scheduling cannot change the sum."""
    now = [0.0]

    def slow_loader():
        for i in range(3):
            now[0] += 0.02
            yield i

    clock = WaitClock(clock=lambda: now[0])
    seen = []
    for batch in clock.wrap(slow_loader()):
        now[0] += 0.1  # "training": not waiting
        seen.append(batch)
    assert seen == [0, 1, 2] and clock.take() == pytest.approx(0.06)
    assert clock.take() == 0.0  # taken: counting starts again


def test_hparams_are_the_config_without_its_incidental_settings() -> None:
    """One mark (``seg.config.incidental``) keeps paths, devices and logging out of the hparams
    and out of a resume's warnings; lists become text, None "none"."""
    cfg = compose_config(["+exp=dual_channel", "trainer.run_dir=/x", "data.root=/data"])
    hparams = flatten_hparams(cfg)
    assert hparams["optim.lr"] == cfg.optim.lr
    assert hparams["aug.crop_size"] == str(list(cfg.aug.crop_size))
    assert hparams["model.columns.0.widths"] == str(list(cfg.model.columns[0].widths))
    assert hparams["trainer.precision"] == cfg.trainer.precision
    incidental = {"trainer.run_dir", "trainer.devices", "trainer.num_workers", "data.root"}
    assert not incidental & set(hparams)
    assert not [k for k in hparams if k.startswith("logging.")]
    assert all(isinstance(v, (bool, int, float, str)) for v in hparams.values())


def test_validation_images_of_both_orientations(vikram_pairs: Path, tmp_path: Path) -> None:
    """Watched samples on portrait and landscape canvases: panels at each sample's own size."""
    import torch
    from torch import nn

    from seg.config import AugConfig
    from seg.data import SegDataset
    from seg.data.listing import list_vikram
    from seg.data.transforms import build_eval_transform

    listing = list_vikram(vikram_pairs, 0.0, 0.0)
    aug = AugConfig(eval_size=[64, 48])
    refs = [listing.refs[i] for i in ("1", "3")]  # landscape, portrait
    dataset = SegDataset(refs, build_eval_transform(aug))
    logger = MetricLogger(tmp_path, tensorboard=True, val_images=2)
    logger.watch_val_images(dataset)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 2, 3, padding=1)

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"out": self.conv(x)}

    logger.log_val_images(1, Net(), torch.device("cpu"), aug.mean, aug.std)
    logger.close()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"images": 0}).Reload()
    sizes = [(e.height, e.width) for i in (0, 1) for e in events.Images(f"val_images/{i}")]
    assert sizes == [(48, 3 * 64), (64, 3 * 48)]
