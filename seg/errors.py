"""The errors a user can fix, told apart from bugs.

A :class:`UserError` is something the person running a script can fix: a config value, a
missing or unusable file, a busy run folder, a damaged checkpoint, a model that cannot be
exported faithfully. The scripts print its message as one line and exit with code 2; any other
exception is a bug and keeps its traceback (exit code 1). Each kind also derives from the
built-in exception it refines (``ValueError``, ``FileNotFoundError``, ``RuntimeError``), so
code that caught those before still does.

Raise the narrowest kind: :class:`ConfigError` for a configuration value (the message names
the key, the value and what was expected), :class:`DataError` for input data that cannot be
used (the message names the file), :class:`MissingFileError` for a file or folder that is not
there. A check of an internal contract (two tensors of different shapes inside a metric) stays
a plain ``ValueError``: that is a bug, and its traceback is what a developer needs.
"""

from __future__ import annotations

# torch's DataLoader re-raises a worker's exception in the main process as
# ``type(message)``, the message holding the worker's traceback: this is its first line.
_WORKER_PREFIX = "Caught "
_WORKER_MARK = "Original Traceback"


class UserError(Exception):
    """An error the user can fix; its message says what was wrong and what was expected."""

    def __init__(self, *args: object) -> None:
        if len(args) == 1 and isinstance(args[0], str) and _from_worker(args[0]):
            args = (_worker_message(args[0]),)
        super().__init__(*args)


class ConfigError(UserError, ValueError):
    """A configuration value out of range, of the wrong kind or inconsistent with another."""

    @classmethod
    def invalid(cls, key: str, value: object, expected: str) -> ConfigError:
        """The one wording of a range check's failure: ``key=value is invalid: expected ...``."""
        return cls(f"{key}={value!r} is invalid: expected {expected}")


class DataError(UserError, ValueError):
    """Input data that cannot be used: an unreadable photo, a mask that does not fit it, an
    empty folder or split, a listing or manifest in the wrong format."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder that a config value or argument names does not exist."""


def _from_worker(message: str) -> bool:
    return message.startswith(_WORKER_PREFIX) and _WORKER_MARK in message


def _worker_message(message: str) -> str:
    """The original message of an exception re-raised from a DataLoader worker: the text after
    ``<module>.<Type>: `` on the last line of the worker's traceback."""
    last = message.rstrip().splitlines()[-1]
    head, sep, rest = last.partition(": ")
    return rest if sep and " " not in head else last


__all__ = ["ConfigError", "DataError", "MissingFileError", "UserError"]
