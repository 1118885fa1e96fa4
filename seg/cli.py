"""What the scripts share: ``--help``, logging, and user errors (a bad option, a missing file,
a broken checkpoint: :class:`seg.errors.UserError` and Hydra's config errors) as one logged line
and exit code 2. Anything else is a bug and keeps its traceback (exit code 1)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from seg.errors import UserError

USER_ERRORS = (HydraException, OmegaConfBaseException, UserError)
LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def run_script(
    name: str, doc: str | None, argv: list[str], work: Callable[[list[str]], int]
) -> int:
    """Print ``doc`` for -h/--help; else return ``work(argv)``, a user error giving exit 2."""
    if {"-h", "--help"} & set(argv):
        print(doc)
        return 0
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        return work(argv)
    except USER_ERRORS as err:
        logging.getLogger(name).error("%s", err)
        return 2


@contextmanager
def user_errors(name: str) -> Iterator[None]:
    """For scripts with their own entry point (train.py under Hydra, the argparse ones): a user
    error inside is logged as one line and exits with code 2; anything else propagates."""
    try:
        yield
    except USER_ERRORS as err:
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)  # no-op once configured
        logging.getLogger(name).error("%s", err)
        raise SystemExit(2) from None
