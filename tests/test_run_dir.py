"""One run per folder: a second run is refused (or replaces the first only when asked), two
runs at once are stopped by the folder's lock, resume finds the newest readable checkpoint and
refuses a changed model or optimiser, and a run folder names its checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from training_utils import tiny_overrides

from seg.checkpoint import (
    CheckpointError,
    checkpoint_file,
    load_checkpoint,
    load_model_from_checkpoint,
)
from seg.config import compose_config
from seg.engine import train as train_mod
from seg.engine.run_dir import RunDirError
from seg.engine.train import train


def _train(data_root: Path, run: Path, *extra: str) -> dict:
    return train(compose_config([*tiny_overrides(data_root, run), *extra]))


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}


def test_a_new_run_into_a_run_folder_is_refused_and_overwrite_replaces_it(
    data_root: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    _train(data_root, run, "trainer.max_steps=2", "trainer.ckpt_every_steps=1")
    before = _snapshot(run)
    assert {"checkpoints/step_00000001.pt", "checkpoints/step_00000002.pt"} <= set(before)
    with pytest.raises(RunDirError, match=r"already holds a run .*trainer\.resume=auto"):
        _train(data_root, run, "trainer.max_steps=1")
    assert _snapshot(run) == before  # nothing written, nothing deleted

    (run / "eval").mkdir()  # what is not the run's own stays
    (run / "eval" / "metrics.json").write_text("{}")
    result = _train(data_root, run, "trainer.max_steps=1", "trainer.overwrite=true")
    assert result["step"] == 1
    names = {p.name for p in (run / "checkpoints").iterdir()}
    assert "step_00000002.pt" not in names and "step_00000001.pt" in names  # no orphans
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == 1
    assert (run / "eval" / "metrics.json").read_text() == "{}"


def test_a_second_process_cannot_train_into_a_folder_in_use(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also when both starts saw no folder and made it (two starts racing): the one that lost
    the lock never removes the folder of the one that holds it."""
    run = tmp_path / "run"
    run.mkdir()
    real = train_mod.decide_run_dir
    monkeypatch.setattr(train_mod, "decide_run_dir", lambda requested: (real(requested)[0], True))
    holder = subprocess.Popen(  # another process holds the run folder, as a running run does
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from seg.locks import file_lock\n"
            "with file_lock(Path(sys.argv[1]) / '.lock'):\n"
            "    print('held', flush=True); time.sleep(60)",
            str(run),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirError, match=rf"in use by PID {holder.pid} on "):
            _train(data_root, run, "trainer.max_steps=1")
        assert not (run / "checkpoints").exists()
        assert (run / ".lock").is_file(), "the holder's folder was removed"
    finally:
        holder.kill()
        holder.wait()  # exited: the kernel has closed its files, so its lock is gone
    assert _train(data_root, run, "trainer.max_steps=1")["step"] == 1  # its lock died with it


def test_resume_auto_without_last_pt_takes_the_newest_readable_step_file(
    data_root: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    common = ["trainer.ckpt_every_steps=1", "trainer.epochs=5"]
    _train(data_root, run, "trainer.max_steps=3", *common)
    ckpts = run / "checkpoints"
    (ckpts / "last.pt").unlink()
    (ckpts / "step_00000003.pt").write_bytes(b"truncated")
    result = _train(data_root, run, "trainer.max_steps=4", "trainer.resume=auto", *common)
    assert result["step"] == 4
    lines = (run / "metrics.jsonl").read_text().splitlines()
    # The history before the resumed step is kept: steps 1 and 2 (step 3's point, from the
    # unreadable checkpoint's stretch, is made again by the resumed run).
    steps = [json.loads(line)["step"] for line in lines if '"train/loss"' in line]
    assert steps == [1, 2, 3, 4], steps
    assert load_checkpoint(ckpts / "last.pt")["step"] == 4

    for path in ckpts.glob("*.pt"):
        path.write_bytes(b"damaged")
    with pytest.raises(CheckpointError, match=r"no checkpoint .* can be read \(last\.pt, step_"):
        _train(data_root, run, "trainer.max_steps=5", "trainer.resume=auto", *common)


def test_resume_refuses_another_optimiser_or_model_before_loading_any_state(
    data_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    _train(data_root, run, "trainer.max_steps=1", "trainer.epochs=3")
    before = _snapshot(run)
    with pytest.raises(CheckpointError, match=r"used optim\.name=sgd, this run uses adamw"):
        _train(data_root, run, "trainer.max_steps=2", "trainer.resume=auto", "optim=adamw")
    with pytest.raises(CheckpointError, match=r"model\.decoder_channels=32, this run uses 16"):
        _train(
            data_root,
            run,
            "trainer.max_steps=2",
            "trainer.resume=auto",
            "model.decoder_channels=16",
        )
    with pytest.raises(CheckpointError, match=r"setting\(s\) differ: .* more model keys\)") as info:
        _train(data_root, run, "trainer.max_steps=2", "trainer.resume=auto", "model=dual_channel")
    assert len(str(info.value)) < 600, str(info.value)  # another model: a few keys named
    assert _snapshot(run) == before
    with caplog.at_level("WARNING", logger="seg.engine.checkpointer"):
        result = _train(
            data_root, run, "trainer.max_steps=2", "trainer.resume=auto", "optim.lr=0.02"
        )
    assert result["step"] == 2 and "optim.lr: 0.01 -> 0.02" in caplog.text
    # One parameter group instead of two (decayed weights; undecayed norms and biases): the
    # optimiser state cannot fit, and the error says which settings regroup the parameters.
    with pytest.raises(CheckpointError, match=r"parameter groups .*optim\.norm_weight_decay"):
        _train(
            data_root,
            run,
            "trainer.max_steps=3",
            "trainer.resume=auto",
            "optim.norm_weight_decay=null",
        )


def test_resume_refuses_a_weights_only_checkpoint(data_root: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _train(data_root, run, "trainer.max_steps=1")
    full = load_checkpoint(run / "checkpoints" / "last.pt")
    weights = tmp_path / "weights.pt"
    torch.save({"model": full["model"], "config": full["config"]}, weights)
    with pytest.raises(CheckpointError, match=r"weights\.pt: it holds model weights but not a"):
        _train(data_root, tmp_path / "run2", "trainer.max_steps=2", f"trainer.resume={weights}")


def test_a_config_error_leaves_no_run_folder(data_root: Path, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "x"
    with pytest.raises(ValueError, match=r"trainer\.best_metric='nope'"):
        _train(data_root, run, "trainer.max_steps=1", "trainer.best_metric=nope")
    assert not run.exists()


def test_an_empty_validation_split_is_an_error_before_training(
    data_root: Path, tmp_path: Path
) -> None:
    """Without validation samples every validation is NaN and best.pt is never written: the
    run refuses to start, naming the setting, and leaves no folder."""
    run = tmp_path / "runs" / "x"
    with pytest.raises(ValueError, match=r"trainer\.val_split='test' has no samples"):
        _train(data_root, run, "trainer.max_steps=1", "trainer.val_split=test")
    assert not run.exists()


def test_a_run_folder_names_its_best_checkpoint(data_root: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _train(data_root, run, "trainer.max_steps=1")
    assert checkpoint_file(run) == run / "checkpoints" / "best.pt"
    assert checkpoint_file(run / "checkpoints", "last.pt") == run / "checkpoints" / "last.pt"
    from_folder, _ = load_model_from_checkpoint(run)
    from_file, _ = load_model_from_checkpoint(run / "checkpoints" / "best.pt")
    for (key, a), b in zip(
        from_folder.state_dict().items(), from_file.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), key
    (run / "checkpoints" / "best.pt").unlink()
    with pytest.raises(CheckpointError, match=r"directory without checkpoints/best\.pt .*last\.pt"):
        load_model_from_checkpoint(run)


def test_resume_auto_starts_afresh_after_a_run_stopped_before_its_first_checkpoint(
    data_root: Path, tmp_path: Path
) -> None:
    """A run killed before its first checkpoint leaves only its logs and splits: resume=auto
    (what docs/training.md promises) starts a new run there, replacing them; a folder with a
    checkpoint is still resumed, never replaced."""
    import shutil

    run = tmp_path / "run"
    _train(data_root, run, "trainer.max_steps=1")
    shutil.rmtree(run / "checkpoints")  # as if killed before its first checkpoint
    (run / "metrics.jsonl").write_text('{"step": 7, "train/loss": 1.0}\n')
    result = _train(data_root, run, "trainer.max_steps=2", "trainer.resume=auto")
    assert result["step"] == 2 and load_checkpoint(run / "checkpoints" / "last.pt")["step"] == 2
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert 7 not in steps and steps[0] == 1  # the stopped run's log is replaced, not continued
    result = _train(data_root, run, "trainer.max_steps=3", "trainer.resume=auto")
    assert result["step"] == 3  # resumed from step 2


def test_a_changed_byte_inside_the_weights_is_caught_and_resume_moves_on(
    data_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A flipped byte in a tensor unpickles fine: the digest written with the tensors names the
    file as damaged, for evaluation and prediction, and resume=auto takes the next step file."""
    from seg.checkpoint import load_model_from_checkpoint

    run = tmp_path / "run"
    common = ["trainer.ckpt_every_steps=1", "trainer.epochs=5"]
    _train(data_root, run, "trainer.max_steps=2", *common)
    last = run / "checkpoints" / "last.pt"
    vectors = [t for t in load_checkpoint(last)["model"].values() if t.ndim == 1]
    weights = max(vectors, key=lambda t: t.numel() if t.is_floating_point() else 0)
    data = bytearray(last.read_bytes())
    at = data.find(weights.numpy().tobytes()[:64]) + 8  # inside the longest weight vector
    assert at > 8
    data[at] ^= 0x01
    last.unlink()  # a file of its own: the step files are links of last.pt
    last.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"last\.pt: its tensors differ from the digest"):
        load_model_from_checkpoint(last)
    with caplog.at_level("WARNING"):
        result = _train(data_root, run, "trainer.max_steps=3", "trainer.resume=auto", *common)
    assert result["step"] == 3 and "step_00000002.pt" in caplog.text
