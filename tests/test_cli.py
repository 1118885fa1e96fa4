"""The scripts' shared entry point: a user error (``seg.errors.UserError``) is one logged
line and exit code 2; any other exception is a bug and keeps its traceback."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from seg.checkpoint import CheckpointError
from seg.cli import run_script
from seg.data.io import BadSampleError
from seg.errors import ConfigError, MissingFileError
from seg.inference.graph import ExportMismatchError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "error",
    [
        ExportMismatchError("the int8 model of best.pt agrees on 0.9 ...; use precision=fp32"),
        CheckpointError("best.pt is not a checkpoint"),
        MissingFileError("photo.jpg: input does not exist"),
        ConfigError("aug.scale must be ..."),
        BadSampleError("photo.jpg", "not an image"),
    ],
)
def test_a_user_error_is_one_line_and_exit_code_2(error, caplog):
    def work(argv):
        raise error

    with caplog.at_level(logging.ERROR):
        assert run_script("evaluate", "doc", [], work) == 2
    assert [r.getMessage() for r in caplog.records] == [str(error)]


@pytest.mark.parametrize("bug", [KeyError("a bug"), ValueError("operands could not be broadcast")])
def test_a_bug_is_not_hidden_as_a_user_error(bug):
    """A plain ValueError (numpy's, torch's, an internal check's) is a bug, not the user's."""

    def work(argv):
        raise bug

    with pytest.raises(type(bug)):
        run_script("evaluate", "doc", [], work)


class _Unreadable(Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == 1:
            raise BadSampleError(f"photos/{i}.jpg", "cannot decode the image")
        return torch.zeros(1)


def test_a_bad_sample_in_a_loader_worker_reaches_the_main_process_as_itself():
    """torch re-raises a worker's exception as ``type(message)`` with the worker's traceback
    in the message: the user sees the original one-line message, as without workers."""
    loader = DataLoader(_Unreadable(), batch_size=1, num_workers=1)
    with pytest.raises(BadSampleError) as info:
        list(loader)
    assert str(info.value) == "photos/1.jpg: cannot decode the image"


def _train(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/train.py", *overrides],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # Hydra logs to stdout, tracebacks go to stderr
        text=True,
        timeout=120,
    )


def test_train_py_config_error_is_one_line_and_exit_2(tmp_path):
    result = _train("+exp=dual_channel", "trainer.batch_size=-1", f"trainer.run_dir={tmp_path}")
    assert result.returncode == 2, result.stdout
    assert "Traceback" not in result.stdout
    assert "trainer.batch_size=-1 is invalid" in result.stdout
    assert not any(tmp_path.iterdir()), "a refused config writes nothing"


def test_train_py_bug_keeps_its_traceback(tmp_path):
    """An exception that is not a user error (here a ValueError from inside training) is shown
    with its traceback and exit code 1."""
    code = (
        "import runpy, sys, seg.engine.train as t\n"
        "def broken(cfg):\n"
        "    raise ValueError('operands could not be broadcast together')\n"
        "t.train = broken\n"
        "sys.argv = ['scripts/train.py', '+exp=dual_channel', 'trainer.run_dir="
        + str(tmp_path)
        + "']\n"
        "runpy.run_path('scripts/train.py', run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1, result.stderr
    assert "ValueError: operands could not be broadcast together" in result.stderr
    assert "Traceback" in result.stderr


def _script(script: str, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, f"scripts/{script}", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("script", "overrides", "named", "forbidden"),
    [
        ("train.py", ["trainer.max_step=20"], ["trainer.max_steps"], "+trainer"),
        ("train.py", ["data=nope"], ["data=nope", "vikram_human_seg", "folder"], "search path"),
        ("train.py", ["+exp=nope"], ["dual_channel_pretrained_cpu_coco"], "search path"),
        ("evaluate.py", ["+chekpoint=x"], ["did you mean checkpoint?"], "+checkpoint"),
        ("predict.py", ["inptu=photo.jpg"], ["did you mean input?"], "+input"),
    ],
    ids=["misspelt-key", "unknown-data", "unknown-exp", "plus-misspelt-key", "predict"],
)
def test_a_command_line_mistake_is_one_line_on_stderr_and_exit_2(
    script: str, overrides: list[str], named: list[str], forbidden: str
) -> None:
    """Hydra alone: seven lines, exit 1, and for a misspelt key the advice to append it with +
    (``+chekpoint=x`` it accepts silently); an unknown group option lists its search path."""
    recipe = ["+exp=dual_channel"] if script == "train.py" else []
    result = _script(script, *recipe, *overrides)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and not result.stdout.strip(), result.stderr + result.stdout
    assert all(n in lines[0] for n in named) and forbidden not in lines[0], lines[0]


def test_override_checks_accept_what_the_schema_holds_and_name_the_closest_keys() -> None:
    from seg.config import Config
    from seg.config.compose import CONFIG_DIR
    from seg.config.overrides import check_overrides

    def check(*overrides: str) -> None:
        check_overrides(list(overrides), Config, CONFIG_DIR, "train")

    check("+exp=dual_channel", "data=folder", "data.root=x", "model.columns.1.widths=[4,8]")
    check("+data.train_scales={coco_mini_person: 1.6667}", "data.eval_scales.ccp=1.2")
    check("-m", "data=ccp,eg_portrait", "hydra.run.dir=x", "debug=default", "~trainer.run_dir")
    with pytest.raises(ConfigError, match=r"^data=nope: no such data config .*valid: ccp, coco"):
        check("-m", "data=ccp,nope")
    with pytest.raises(ConfigError, match=r"unknown config key optim.lrr; did you mean optim.lr\?"):
        check("optim.lrr=0.1")
    with pytest.raises(ConfigError, match=r"model.columns.0.widht.*did you mean .*widths"):
        check("model.columns.0.widht=[1]")
    with pytest.raises(ConfigError, match=r"unknown config key \+trainer.foo .*keys of trainer"):
        check("+trainer.foo=1")
