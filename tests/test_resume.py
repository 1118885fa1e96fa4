"""Exact resume: k steps, a crash, a resume for k more equals 2k uninterrupted steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from training_utils import tiny_overrides

import seg.engine.train
from seg.checkpoint import (
    LATER_STATE_KEYS,
    CheckpointError,
    load_checkpoint,
    load_model_from_checkpoint,
)
from seg.config import compose_config
from seg.engine.state import TrainState
from seg.engine.train import train
from seg.evaluation.selection import Selection

# Random augmentation on (flip, shift, scale, rotate), so the pipelines' random states matter;
# 4 steps of 3 per epoch: the crash at step 2 is mid-epoch, the resumed run crosses an epoch.
COMMON = [
    "aug=default",
    "trainer.epochs=2",
    "trainer.max_steps=4",
    "trainer.ckpt_every_steps=2",
    "trainer.eval_every=1",
    "optim.warmup_steps=1",
]


def _history(run: Path) -> list[dict]:
    """metrics.jsonl without the timing entries (which differ between runs)."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if not k.startswith("perf/")} for x in lines]


class _Crash(RuntimeError):
    pass


def _crash_at(step: int):
    """A ``seg.engine.train.after_step`` that fails right after step ``step`` (and its
    checkpoint), as a crash would."""

    def after_step(done: int) -> None:
        if done == step:
            raise _Crash(f"crash after step {done}")

    return after_step


@pytest.mark.parametrize("extra", [[], ["+data.train_scales={folder: 1.5}"]], ids=["", "scales"])
def test_resume_gives_identical_parameters_and_logs(
    data_root: Path, tmp_path: Path, extra: list[str]
) -> None:
    """Crashed at step 2 and resumed to 4: the weights, BatchNorm statistics, optimiser,
    schedule, metrics and logs of a run that never stopped, bit for bit. With
    data.train_scales the per-source pipelines' random states are saved and restored too."""
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    common = [*COMMON, *extra]
    train(compose_config([*tiny_overrides(data_root, straight), *common]))

    with pytest.MonkeyPatch.context() as mp, pytest.raises(_Crash):
        mp.setattr(seg.engine.train, "after_step", _crash_at(2))
        train(compose_config([*tiny_overrides(data_root, broken), *common]))
    saved = load_checkpoint(broken / "checkpoints" / "last.pt")
    assert (saved["epoch"], saved["step"], saved["batch_in_epoch"]) == (0, 2, 2)
    resumed = train(
        compose_config([*tiny_overrides(data_root, broken), *common, "trainer.resume=auto"])
    )

    a = load_checkpoint(straight / "checkpoints" / "last.pt")
    b = load_checkpoint(broken / "checkpoints" / "last.pt")
    assert a["step"] == b["step"] == resumed["step"] == 4
    for key, value in a["model"].items():  # weights and BatchNorm statistics, bit for bit
        assert torch.equal(value, b["model"][key]), key
    for key in ("scheduler", "epoch", "batch_in_epoch", "metrics", "best"):
        # as JSON: NaN (a ratio over nothing, e.g. photos without people) equals NaN there
        assert json.dumps(a.get(key), sort_keys=True) == json.dumps(b.get(key), sort_keys=True), key
    assert _history(straight) == _history(broken)  # the interrupted run's log is continuous
    steps = [r["step"] for r in _history(broken) if "train/loss" in r]
    assert steps == [1, 2, 3, 4]


def test_resume_from_a_run_directory_continues_a_finished_run(
    data_root: Path, tmp_path: Path
) -> None:
    first = tmp_path / "first"
    train(compose_config([*tiny_overrides(data_root, first), *COMMON]))
    # A longer schedule resumed from the finished run: it goes on from step 4, in a new dir.
    longer = [*COMMON, "trainer.max_steps=5", f"trainer.resume={first}"]
    result = train(compose_config([*tiny_overrides(data_root, tmp_path / "second"), *longer]))
    assert result["step"] == 5
    steps = [r["step"] for r in _history(tmp_path / "second") if "train/loss" in r]
    assert steps == [5]


OLD_CHECKPOINT = Path(__file__).parent / "data" / "checkpoint_6d492e3.pt"  # commit 6d492e3's


def test_checkpoints_of_earlier_versions_load_for_inference_and_resume(tmp_path: Path) -> None:
    """A checkpoint written by commit 6d492e3 (a 1-step tiny run, kept in tests/data), and the
    same made older still: retired config keys (placement, fault injection) present and the
    state keys added later absent. ``upgrade_checkpoint`` is the one home of such shims."""
    model, cfg = load_model_from_checkpoint(OLD_CHECKPOINT)
    assert model(torch.zeros(1, 3, 64, 64))["out"].shape == (1, 2, 64, 64)
    ckpt = torch.load(OLD_CHECKPOINT, weights_only=True)
    ckpt["config"]["model"]["devices"] = ["cuda:0"]
    ckpt["config"]["trainer"].update(fault_at_step=-1, fault_rank=0, fault_kind="exit")
    ckpt["config"]["trainer"]["ema_decay"] = 0.0  # options retired by issue 39
    ckpt["config"]["aug"].update(rotate_wide_p=0.0, rotate_wide=180.0, gray_p=0.0)
    ckpt["config"]["model"]["decoder_stride"] = 4
    for key in LATER_STATE_KEYS:
        ckpt.pop(key, None)
    older = tmp_path / "older.pt"
    torch.save(ckpt, older)
    state = TrainState.from_checkpoint(load_checkpoint(older), world_size=1)
    chose = Selection("iou_person", ("folder",))  # its best_metric over its sources
    assert (state.step, state.train_skipped, state.best_of) == (1, 0, chose)
    assert TrainState.from_checkpoint(load_checkpoint(OLD_CHECKPOINT), 1).best_of == chose
    assert load_model_from_checkpoint(older)[1] == cfg
    ckpt["config"]["model"]["decoder_stride"] = 2  # a model this code no longer builds
    torch.save(ckpt, older)
    with pytest.raises(CheckpointError, match=r"from stride 2 \(model.decoder_stride, retired"):
        load_model_from_checkpoint(older)
