"""What the key=value scripts (evaluate, predict, export) share: ``--help``, logging, and user
errors (a bad option, a missing file, a broken checkpoint) as one logged line and exit code 2."""

from __future__ import annotations

import logging
from collections.abc import Callable

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from seg.checkpoint import CheckpointError
from seg.inference.onnx import ExportMismatchError

# ExportMismatchError: an ONNX or int8 model that disagrees with PyTorch, with the option to
# run instead (backend=torch, precision=fp32) in its message.
USER_ERRORS = (
    HydraException,
    OmegaConfBaseException,
    CheckpointError,
    ExportMismatchError,
    OSError,
    ValueError,
)


def run_script(
    name: str, doc: str | None, argv: list[str], work: Callable[[list[str]], int]
) -> int:
    """Print ``doc`` for -h/--help; else return ``work(argv)``, a user error giving exit 2."""
    if {"-h", "--help"} & set(argv):
        print(doc)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return work(argv)
    except USER_ERRORS as err:
        logging.getLogger(name).error("%s", err)
        return 2
