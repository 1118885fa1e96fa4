"""The scripts' shared entry point: user errors are one logged line and exit code 2."""

from __future__ import annotations

import logging

import pytest

from seg.checkpoint import CheckpointError
from seg.cli import run_script
from seg.inference.onnx import ExportMismatchError


@pytest.mark.parametrize(
    "error",
    [
        ExportMismatchError("the int8 model of best.pt agrees on 0.9 ...; use precision=fp32"),
        CheckpointError("best.pt is not a checkpoint"),
        FileNotFoundError("no such file: photo.jpg"),
        ValueError("aug.scale must be ..."),
    ],
)
def test_a_user_error_is_one_line_and_exit_code_2(error, caplog):
    def work(argv):
        raise error

    with caplog.at_level(logging.ERROR):
        assert run_script("evaluate", "doc", [], work) == 2
    assert [r.getMessage() for r in caplog.records] == [str(error)]


def test_a_bug_is_not_hidden_as_a_user_error():
    def work(argv):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        run_script("evaluate", "doc", [], work)


def test_help_prints_the_doc(capsys):
    assert run_script("evaluate", "the doc", ["--help"], lambda argv: 1) == 0
    assert capsys.readouterr().out == "the doc\n"
