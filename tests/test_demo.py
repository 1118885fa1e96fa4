"""The demo page (scripts/demo.py) in a real server process, driven by a real headless browser.

Chromium and its driver come from the distribution's packages (.ci/run installs them where it
can); without them, or without gradio/selenium, these tests skip saying what is missing.
``SEG_DEMO_CHECKPOINT=<run>`` serves a real model instead of the tiny one and
``SEG_DEMO_SCREENSHOT=docs/demo.png`` keeps the page's screenshot (docs/demo.png is made so).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest

# One xdist worker runs this module (pyproject.toml: --dist loadgroup): its module fixtures
# are built once.
pytestmark = pytest.mark.xdist_group("demo")

REPO = Path(__file__).resolve().parents[1]
PHOTO = Path("eg_portrait/data/images_data_crop/00002.jpg")  # a real test photo (../shared)


def _browser() -> tuple[str, str]:
    pytest.importorskip("gradio", reason='the demo page needs gradio: pip install -e ".[dev]"')
    pytest.importorskip(
        "selenium", reason='the browser tests need selenium: pip install -e ".[dev]"'
    )
    binary = next(
        filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
    )
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip(
            "no Chromium or chromedriver on PATH (Debian/Ubuntu: apt-get install chromium "
            "chromium-driver; .ci/run installs them where it may)"
        )
    return binary, driver


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _start_server(checkpoint: Path | str, tmp: Path) -> tuple[subprocess.Popen, str, Path]:
    """``scripts/demo.py`` serving ``checkpoint`` on a free port of 127.0.0.1, its temporary
    files under ``tmp`` (TMPDIR), its output in ``tmp/server.log``: (process, address, log)."""
    log = tmp / "server.log"
    cmd = [sys.executable, str(REPO / "scripts" / "demo.py"), f"checkpoint={checkpoint}"]
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "TMPDIR": str(tmp)}
    with open(log, "w") as out:
        proc = subprocess.Popen([*cmd, "port=0", "threads=1"], stdout=out, stderr=out, env=env)

    def address() -> str | None:
        assert proc.poll() is None, f"the demo server exited:\n{log.read_text()}"
        lines = [x for x in log.read_text().splitlines() if x.startswith("demo page: ")]
        return lines[0].removeprefix("demo page: ").strip() if lines else None

    try:
        return proc, _wait(address, 120, "the demo server's address"), log
    except BaseException:
        proc.kill()
        raise


def _stop(proc: subprocess.Popen, sig: signal.Signals, log: Path, limit: float = 20) -> float:
    """Send ``sig`` and wait for the process to end (at most ``limit`` s: a hang, killed);
    the seconds it took."""
    started = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(
            f"the demo server did not stop within {limit:.0f} s of {sig.name}:\n"
            + log.read_text()[-3000:]
        ) from None
    return time.monotonic() - started


@pytest.fixture(scope="module")
def server(exported_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``scripts/demo.py`` serving the tiny checkpoint (or ``SEG_DEMO_CHECKPOINT``); yields the
    page's address. Stopped with Ctrl-C at the end: it exits 0, its temporary files gone."""
    _browser()
    checkpoint = os.environ.get("SEG_DEMO_CHECKPOINT") or str(exported_tiny)
    tmp = tmp_path_factory.mktemp("demo")
    proc, url, log = _start_server(checkpoint, tmp)
    try:
        yield url
    finally:
        _stop(proc, signal.SIGINT, log)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert not list(tmp.glob("seg-demo-*")), "the page's temporary folder was left behind"


@pytest.fixture(scope="module")
def browser(server: str) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = _browser()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    # A camera for the Webcam tab: Chromium's test pattern, permission granted without a prompt.
    options.add_argument("--use-fake-device-for-media-stream")
    options.add_argument("--use-fake-ui-for-media-stream")
    options.add_argument("--window-size=1400,1800")
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        driver.get(server)
        yield driver
    finally:
        driver.quit()


def _upload_and_segment(driver, photo: Path) -> None:
    from selenium.webdriver.common.by import By

    field = _wait(
        lambda: driver.find_elements(By.CSS_SELECTOR, "#photo input[type=file]"), 60, "the page"
    )[0]
    field.send_keys(str(photo))
    driver.find_element(By.ID, "segment").click()


def _mask_from_page(driver, before: str | None) -> tuple[np.ndarray, str]:
    """The mask image the page shows (a PNG the server wrote), once it differs from ``before``."""
    from selenium.webdriver.common.by import By

    def src() -> str | None:
        images = driver.find_elements(By.CSS_SELECTOR, "#mask img")
        value = images[0].get_attribute("src") if images else None
        return value if value and value != before else None

    url = _wait(src, 120, "the mask on the page")
    with urllib.request.urlopen(url, timeout=30) as response:
        data = np.frombuffer(response.read(), np.uint8)
    return cv2.imdecode(data, cv2.IMREAD_UNCHANGED), url


def test_page_mask_equals_predict_py_and_a_corrupt_file_is_a_message(
    browser, server: str, shared_datasets: Path, exported_tiny: Path, tmp_path: Path
) -> None:
    """A corrupt upload shows a message naming the file and the page keeps serving; then a real
    photo's mask on the page is predict.py's mask file for that photo, pixel for pixel."""
    from selenium.webdriver.common.by import By

    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG")
    _upload_and_segment(browser, corrupt)
    body = lambda: browser.find_element(By.TAG_NAME, "body").text  # noqa: E731
    message = _wait(lambda: "corrupt or unreadable" in body() and body(), 60, "the error")
    assert "corrupt.jpg: corrupt or unreadable image" in message
    assert "Traceback" not in message

    photo = tmp_path / "portrait.jpg"
    shutil.copy(shared_datasets / PHOTO, photo)
    browser.refresh()
    _upload_and_segment(browser, photo)
    shown, _ = _mask_from_page(browser, None)

    checkpoint = os.environ.get("SEG_DEMO_CHECKPOINT") or str(exported_tiny)
    out = tmp_path / "predicted"
    args = [f"checkpoint={checkpoint}", f"input={photo}", f"out={out}", "outputs=[mask]"]
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "predict.py"),
            *args,
            "threads=1",
            "progress=false",
        ],
        check=True,
        capture_output=True,
    )
    expected = cv2.imread(str(out / "portrait_mask.png"), cv2.IMREAD_UNCHANGED)
    assert shown.shape == expected.shape == cv2.imread(str(photo)).shape[:2]
    assert 0 < expected.mean() < 255  # both classes: the comparison means something
    np.testing.assert_array_equal(shown, expected)

    _wait(lambda: "ms" in browser.find_element(By.ID, "info").text, 30, "the timing line")
    shot = tmp_path / "demo.png"
    browser.save_screenshot(str(shot))
    assert cv2.imread(str(shot)).shape[0] > 0
    if target := os.environ.get("SEG_DEMO_SCREENSHOT"):
        shutil.copy(shot, REPO / target)


def test_webcam_frames_stream_through_the_model_and_the_page_shows_their_rate(browser) -> None:
    """Chromium's fake camera streams into the Webcam tab; frames come back segmented and the
    page shows the rate it handles them at."""
    import re

    from selenium.webdriver.common.by import By

    def button(text: str | None = None, label: str | None = None):
        from selenium.common.exceptions import StaleElementReferenceException

        try:  # the page redraws while it loads: an element found may be gone when read
            for b in browser.find_elements(By.TAG_NAME, "button"):
                if not b.is_displayed():
                    continue
                if (text and b.text.strip() == text) or (
                    label and b.get_attribute("aria-label") == label
                ):
                    return b
        except StaleElementReferenceException:
            return None
        return None

    browser.refresh()
    _wait(lambda: button("Webcam"), 60, "the Webcam tab").click()
    _wait(lambda: button("Click to Access Webcam"), 30, "the camera button").click()
    _wait(lambda: button(label="capture photo"), 30, "the record button").click()

    def rate() -> float | None:
        found = re.search(r"([\d.]+) frames/s", browser.find_element(By.ID, "fps").text)
        return float(found.group(1)) if found and float(found.group(1)) > 0 else None

    assert _wait(rate, 90, "a second streamed frame") > 0
    results = browser.find_elements(By.CSS_SELECTOR, "#webcam_result img")
    assert results and results[0].get_attribute("src")


def _clip(path: Path, photo: Path, frames: int = 4, size: tuple[int, int] = (96, 128)) -> Path:
    """A short mp4v video of ``photo`` sliding sideways (``size``: width, height)."""
    from seg.data.io import read_image

    image = cv2.resize(read_image(photo), size)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 5, size)
    for shift in range(frames):
        writer.write(cv2.cvtColor(np.roll(image, 8 * shift, axis=1), cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def test_a_video_uploaded_on_the_page_comes_back_processed(
    browser, shared_datasets: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    clip = _clip(tmp_path / "clip.mp4", shared_datasets / PHOTO)
    browser.refresh()
    tab = [
        b
        for b in _wait(
            lambda: browser.find_elements(By.CSS_SELECTOR, "button[role=tab]"), 60, "tabs"
        )
        if b.text == "Video"
    ]
    tab[0].click()
    _wait(
        lambda: browser.find_elements(By.CSS_SELECTOR, "#video_in input[type=file]"),
        30,
        "the video box",
    )[0].send_keys(str(clip))
    _wait(lambda: browser.find_elements(By.CSS_SELECTOR, "#video_in video"), 60, "the upload")
    browser.find_element(By.ID, "process_video").click()

    def result() -> str | None:
        videos = browser.find_elements(By.CSS_SELECTOR, "#video_out video")
        return videos[0].get_attribute("src") if videos else None

    url = _wait(result, 120, "the processed video")
    out = tmp_path / "out.webm"
    with urllib.request.urlopen(url, timeout=30) as response:
        out.write_bytes(response.read())
    capture = cv2.VideoCapture(str(out))
    frames = 0
    while capture.read()[0]:
        frames += 1
    assert frames == 4


def _stopped_server(
    checkpoint: Path, tmp: Path, sig: signal.Signals, video: Path | None
) -> tuple[int, float]:
    """Start a server, give it ``video`` to process (None: leave it idle), send ``sig`` once the
    video's frames are being predicted; (exit code, seconds from the signal to the exit). The
    page's temporary folder must be there while it serves and gone after."""
    from gradio_client import Client, handle_file

    proc, url, log = _start_server(checkpoint, tmp)
    try:
        (workdir,) = tmp.glob("seg-demo-*")
        job = None
        if video is not None:
            client = Client(url, verbose=False, download_files=False)
            args = ["run/best.pt", handle_file(str(video)), "overlay", 0.5, False, False, False]
            job = client.submit(*args, "green", None, api_name="/on_video")
            _wait(lambda: job.status().progress_data, 120, "the video's first frames")
        seconds = _stop(proc, sig, log)
    finally:
        if proc.poll() is None:
            proc.kill()
    if job is not None:  # cut short: no video came back
        assert not job.status().success
    assert not workdir.exists(), f"{workdir} was left behind:\n{log.read_text()[-3000:]}"
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    return proc.returncode, seconds


@pytest.fixture(scope="module")
def long_clip(vikram_pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 300-frame 640x480 clip: seconds of work for the tiny model, so a signal sent at its
    first frames finds it mid-way."""
    photo = vikram_pairs / "Training_Images" / "1.jpg"
    return _clip(tmp_path_factory.mktemp("clip") / "long.mp4", photo, 300, (640, 480))


@pytest.mark.parametrize(
    ("sig", "busy", "code"),
    [(signal.SIGTERM, False, 143), (signal.SIGINT, True, 0)],
    ids=["SIGTERM-idle", "SIGINT-mid-video"],
)
def test_the_server_stops_on_a_signal_idle_and_mid_video(
    exported_tiny: Path, long_clip: Path, tmp_path: Path, sig, busy: bool, code: int
) -> None:
    """SIGTERM while idle, Ctrl-C while a video is being processed: the server exits with its
    code (143, 0) within seconds, the video cut short, the temporary folder removed and no
    traceback (it used to hang, or abort with SIGABRT at the interpreter's exit)."""
    pytest.importorskip("gradio")
    rc, _ = _stopped_server(exported_tiny, tmp_path, sig, long_clip if busy else None)
    assert rc == code


@pytest.mark.slow
def test_the_server_stops_within_10_s_every_time(
    exported_tiny: Path, long_clip: Path, tmp_path: Path
) -> None:
    """20 tries: SIGINT and SIGTERM, idle and mid-video, 5 times each; every one within 10 s."""
    pytest.importorskip("gradio")
    times = []
    for i in range(5):
        for sig, code in ((signal.SIGINT, 0), (signal.SIGTERM, 143)):
            for video in (None, long_clip):
                tmp = tmp_path / f"{i}{sig.name}{video is not None}"
                tmp.mkdir()
                rc, seconds = _stopped_server(exported_tiny, tmp, sig, video)
                assert rc == code
                times.append((sig.name, "video" if video else "idle", round(seconds, 2)))
    print("stop times (s):", times)
    assert max(t[2] for t in times) < 10, times


# The page's functions, in-process (no server, no browser).


def _demo_cfg(checkpoint: Path, **overrides: object):
    from seg.config import compose_demo_config

    args = [f"checkpoint={checkpoint}", "backend=torch", "device=cpu"]
    return compose_demo_config([*args, *(f"{k}={v}" for k, v in overrides.items())])


def test_find_runs_takes_a_checkpoint_a_run_or_a_folder_of_runs(exported_tiny: Path, tmp_path):
    from seg.checkpoint import CheckpointError, find_runs
    from seg.errors import MissingFileError

    run = exported_tiny.parents[1]  # run/checkpoints/best.pt
    assert find_runs(exported_tiny) == {f"{run.name}/best.pt": exported_tiny}
    assert find_runs(run) == {run.name: exported_tiny}
    for name in ("b_run", "a_run"):
        shutil.copytree(run, tmp_path / "runs" / name)
    (tmp_path / "runs" / "notes").mkdir()  # not a run: left out
    runs = find_runs(tmp_path / "runs")
    assert list(runs) == ["a_run", "b_run"]
    assert runs["a_run"] == tmp_path / "runs" / "a_run" / "checkpoints" / "best.pt"
    with pytest.raises(CheckpointError, match="no run folder"):
        find_runs(tmp_path / "runs" / "notes")
    with pytest.raises(MissingFileError, match="nope"):
        find_runs(tmp_path / "nope")


def test_run_card_shows_the_recipe_and_the_validation_figures(tiny_run: Path) -> None:
    from seg.checkpoint import load_checkpoint
    from seg.evaluation.report import run_summary as run_card

    checkpoint = tiny_run / "checkpoints" / "last.pt"
    card = run_card(checkpoint)
    ckpt = load_checkpoint(checkpoint)
    assert f"epoch {ckpt['epoch']}, step {ckpt['step']}" in card
    assert "model: multicolumn [detail x1]" in card  # the single-column net
    metrics = ckpt["metrics"]
    acc, iou = 100 * metrics["val/pixel_acc"], 100 * metrics["val/iou_person"]
    assert f"| all | {acc:.2f}% | {iou:.2f}% |" in card


def test_run_card_names_the_own_sizes_of_the_runs_sources_only(
    tiny_run: Path, tmp_path: Path
) -> None:
    """data.eval_scales entries of datasets that are not sources of the run (a folder run's
    coco128_seg) are left out of the card; its sources' own sizes, and train_scales, are in."""
    import torch

    from seg.checkpoint import load_checkpoint
    from seg.evaluation.report import run_summary as run_card

    ckpt = load_checkpoint(tiny_run / "checkpoints" / "last.pt")
    size = ckpt["config"]["aug"]["eval_size"]
    ckpt["config"]["data"]["eval_scales"] = {"coco128_seg": 2.0}
    torch.save(ckpt, tmp_path / "other.pt")
    card = run_card(tmp_path / "other.pt")
    assert f"evaluated at {size[0]}x{size[1]} (long x short side)\n" in card
    assert "coco128_seg" not in card
    ckpt["config"]["data"]["eval_scales"] = {"folder": 2.0}
    ckpt["config"]["data"]["train_scales"] = {"folder": 1.5}
    torch.save(ckpt, tmp_path / "own.pt")
    card = run_card(tmp_path / "own.pt")
    assert f", folder at {2 * size[0]}x{2 * size[1]}" in card
    assert ", folder at 1.5x the training size" in card


def test_page_outputs_are_the_predictors_and_the_threshold_moves_the_mask(
    exported_tiny: Path, shared_datasets: Path
) -> None:
    from seg.config import OutputKind
    from seg.data.io import read_image
    from seg.demo import Models, PhotoOptions, segment_photo

    models = Models(_demo_cfg(exported_tiny))
    (label,) = models.labels
    image = read_image(shared_datasets / PHOTO)
    out = segment_photo(models, label, image, PhotoOptions())
    (pred,) = models.predictor(label).predictions([image])
    np.testing.assert_array_equal(out[OutputKind.mask], pred.mask.astype(np.uint8) * 255)
    assert out[OutputKind.cutout].shape == (*image.shape[:2], 4)
    for kind in (OutputKind.overlay, OutputKind.blur, OutputKind.replace):
        assert out[kind].shape == image.shape
    high = segment_photo(models, label, image, PhotoOptions(threshold=0.9))[OutputKind.mask]
    np.testing.assert_array_equal(high > 0, pred.prob > 0.9)
    assert (high > 0).sum() <= pred.mask.sum()


def test_user_mistakes_are_messages_naming_the_file(exported_tiny: Path, tmp_path: Path) -> None:
    from seg.checkpoint import CheckpointError
    from seg.data.io import BadSampleError
    from seg.demo import Models, read_photo

    photo = tmp_path / "upload.png"
    cv2.imwrite(str(photo), np.zeros((40, 50, 3), np.uint8))
    with pytest.raises(
        BadSampleError,
        match=r"my photo.png: 50 x 40 pixels \(2,000\) exceed the decode limit of 1,000",
    ):
        read_photo(photo, "my photo.png", max_pixels=1000)
    assert read_photo(photo, "my photo.png").shape == (40, 50, 3)
    damaged = tmp_path / "damaged" / "best.pt"
    damaged.parent.mkdir()
    damaged.write_bytes(exported_tiny.read_bytes()[:5000])  # cut short
    models = Models(_demo_cfg(damaged))
    with pytest.raises(CheckpointError, match=r"best\.pt"):
        models.predictor(models.labels[0])


def test_handlers_show_a_user_error_and_hide_a_bug(caplog) -> None:
    gr = pytest.importorskip("gradio")
    from seg.demo import user_errors
    from seg.errors import ConfigError

    def mistake() -> None:
        raise ConfigError("threshold=2 is invalid: expected a number in (0, 1)")

    def bug() -> None:
        raise IndexError("index 3 is out of bounds")

    with pytest.raises(gr.Error, match=r"threshold=2 is invalid"):
        user_errors(mistake)()
    with pytest.raises(gr.Error, match=r"internal error \(IndexError\)") as shown:
        user_errors(bug)()
    assert "out of bounds" not in str(shown.value)  # the page gets one line ...
    assert "IndexError: index 3 is out of bounds" in caplog.text  # ... the log the traceback
    assert user_errors(lambda x: x + 1)(1) == 2


def test_video_comes_back_as_webm_frame_for_frame(
    exported_tiny: Path, shared_datasets: Path, tmp_path: Path
) -> None:
    from seg.config import OutputKind
    from seg.demo import Models, PhotoOptions, segment_video

    clip = _clip(tmp_path / "clip.mp4", shared_datasets / PHOTO)
    models = Models(_demo_cfg(exported_tiny))
    out = segment_video(
        models, models.labels[0], clip, OutputKind.mask, tmp_path / "out", PhotoOptions()
    )
    assert out.suffix == ".webm" and out.parent == tmp_path / "out"
    capture = cv2.VideoCapture(str(out))
    frames = []
    while (frame := capture.read())[0]:
        frames.append(frame[1])
    assert len(frames) == 4 and frames[0].shape[:2] == (128, 96)


def test_a_video_stops_at_its_next_batch_once_asked_and_leaves_nothing(
    exported_tiny: Path, shared_datasets: Path, tmp_path: Path
) -> None:
    import threading

    from seg.config import OutputKind
    from seg.demo import Models, PhotoOptions, segment_video
    from seg.inference.prediction import Cancelled

    clip = _clip(tmp_path / "clip.mp4", shared_datasets / PHOTO)
    models = Models(_demo_cfg(exported_tiny))
    stop = threading.Event()
    stop.set()
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(Cancelled, match=r"clip.mp4: stopped after 0 frames"):
        segment_video(models, models.labels[0], clip, OutputKind.mask, out, PhotoOptions(), stop)
    assert not list(out.iterdir())


def test_frame_rate_counts_the_recent_frames() -> None:
    from seg.demo import FrameRate

    rate = FrameRate(window=5)
    assert rate.tick(0.0) == 0.0
    for i in range(1, 10):
        value = rate.tick(i * 0.1)
    assert value == pytest.approx(10.0)  # 4 intervals of 0.1 s in the window


def test_demo_options_are_checked() -> None:
    from seg.config import compose_demo_config
    from seg.errors import ConfigError

    with pytest.raises(ConfigError, match=r"port=70000 is invalid"):
        compose_demo_config(["checkpoint=x", "port=70000"])
    with pytest.raises(ConfigError, match=r"webcam_fps=0.0 is invalid"):
        compose_demo_config(["checkpoint=x", "webcam_fps=0"])


def test_the_page_offers_a_picker_and_a_comparison_for_several_runs(
    exported_tiny: Path, tmp_path: Path
) -> None:
    gr = pytest.importorskip("gradio")
    from seg.demo import Models, build_page

    for name in ("a_run", "b_run"):
        shutil.copytree(exported_tiny.parents[1], tmp_path / "runs" / name)
    models = Models(_demo_cfg(tmp_path / "runs"))
    page = build_page(models, models.cfg, tmp_path)
    blocks = list(page.blocks.values())
    (picker,) = [b for b in blocks if isinstance(b, gr.Dropdown) and b.label == "model"]
    assert picker.visible and [c[0] for c in picker.choices] == ["a_run", "b_run"]
    (compare,) = [b for b in blocks if isinstance(b, gr.Tab) and b.label == "Compare"]
    assert compare.visible


def test_examples_are_the_first_photos_of_a_folder(tmp_path: Path) -> None:
    from seg.demo import example_photos
    from seg.errors import MissingFileError

    for name in ("c.jpg", "a.png", "b.JPG", "notes.txt", "clip.mp4"):
        (tmp_path / name).write_bytes(b"")
    assert example_photos(str(tmp_path), 2) == [str(tmp_path / "a.png"), str(tmp_path / "b.JPG")]
    assert example_photos(str(tmp_path), 0) == [] and example_photos(None, 6) == []
    with pytest.raises(MissingFileError, match=r"examples=.*nope"):
        example_photos(str(tmp_path / "nope"), 6)
