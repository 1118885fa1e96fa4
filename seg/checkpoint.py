"""Checkpoint files: writing one whole, finding one from a path, reading one safely, and
rebuilding the model it holds (for evaluation, prediction and export as for training).

A checkpoint is a dict of tensors, numbers, strings, lists and dicts only (the resolved config
included), so ``torch.load(weights_only=True)`` reads it and it rebuilds its model on its own:
``{"model", "optimizer", "scheduler", "scaler", "epoch", "step", "batch_in_epoch",
"rng": [per rank], "config", "metrics", "best", "target", "elapsed_s", "tensor_sha256"}`` (the
digest of its tensors, checked on every load). ``"model"`` is the weights to use (a run with the
retired weight EMA also saved ``"train_model"``, the weights it trained, which a resume takes,
and ``"ema_updates"``). What only training needs (``last`` / ``best`` /
keep-N, RNG states, resume) is ``seg.engine.checkpointer``.
"""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seg.config import Config, to_config
from seg.config.compose import RETIRED_KEYS
from seg.errors import MissingFileError, UserError
from seg.fileio import atomic_path
from seg.metrics.keys import TRAIN_SOURCES, MetricKey, parse_metric_key
from seg.models import build_model
from seg.runs import BEST, CHECKPOINTS, RunLayout
from seg.zoo import SUFFIX as WEIGHTS_SUFFIX
from seg.zoo import read_weights, shipped_file, shipped_names


class CheckpointError(UserError, RuntimeError):
    """A checkpoint file is missing, damaged or not one of this project's."""


def save_checkpoint(obj: dict[str, Any], path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename it into place, so a crash
    mid-write never leaves a truncated ``path``. A full disk, or a file-size limit reached
    (``ulimit -f``, a file system's largest file), is a :class:`CheckpointError` saying so
    (torch's writer reports only "unexpected pos": the file object it writes to remembers the
    ``OSError`` underneath)."""
    path = Path(path)
    obj = {**obj, DIGEST_KEY: tensor_digest(obj)}
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        out = _RememberedErrors(f)
        try:
            torch.save(obj, out)
            f.flush()
        except (OSError, RuntimeError) as err:
            cause = out.error if isinstance(out.error, OSError) else err
            problem = _write_problem(cause) if isinstance(cause, OSError) else None
            if problem is None:
                raise
            what, remedy = problem
            raise CheckpointError(
                f"cannot write checkpoint {path}: {what}; {path.name} is unchanged, so the "
                f"last good checkpoint is kept. {remedy}, then continue with trainer.resume=auto"
            ) from None


def _write_problem(err: OSError) -> tuple[str, str] | None:
    """(what a failed write ran into, what to do), where the user can fix it; else None."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full ({err.strerror})", "Free some space"
    if err.errno == errno.EFBIG:
        limit = _file_size_limit()
        which = f"this process's limit of {limit:,} bytes (ulimit -f)" if limit else "its limit"
        return (
            f"the file outgrew the largest file allowed ({err.strerror}): {which} or the "
            "file system's",
            "Raise the limit (ulimit -f unlimited) or train into a folder on another file system",
        )
    return None


def _file_size_limit() -> int | None:
    """The process's soft RLIMIT_FSIZE in bytes; None where unlimited or unknown."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


class _RememberedErrors:
    """A writable file that remembers the ``OSError`` of a failed write (torch.save turns it
    into a ``RuntimeError`` that does not say what happened)."""

    def __init__(self, f: Any) -> None:
        self.f, self.error = f, None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.f.flush()


def shipped_checkpoint(path: str | Path) -> Path | None:
    """The weights file of the shipped model that ``path`` names (``person``), None where it
    names none or where a file or folder of that name exists (the user's own wins)."""
    return None if Path(path).expanduser().exists() else shipped_file(str(path))


def checkpoint_file(path: str | Path, name: str = BEST) -> Path:
    """The checkpoint that ``path`` names: a shipped model's name (``person``, where no file or
    folder of that name is here) its weights file in the package; a file as it is; a run
    folder: its ``checkpoints/<name>``; a ``checkpoints/`` folder: its ``<name>``. A folder
    without it raises :class:`CheckpointError` listing the checkpoints it has."""
    shipped = shipped_checkpoint(path)
    if shipped is not None:
        return shipped
    path = Path(path).expanduser()
    if not path.is_dir():
        return path
    for candidate in (RunLayout(path).checkpoints / name, path / name):
        if candidate.is_file():
            return candidate
    found = [*path.glob("*.pt"), *path.glob("checkpoints/*.pt")]
    have = sorted(p.name for p in found if not p.name.startswith("."))  # not temporary files
    raise CheckpointError(
        f"{path} is a directory without checkpoints/{name}"
        + (f" (it has {', '.join(have)}: name one of them)" if have else " (no checkpoint in it)")
    )


def load_checkpoint(path: str | Path, mmap: bool = False) -> dict[str, Any]:
    """Read a checkpoint onto the CPU with ``weights_only=True``; errors name the file.

    ``mmap=True`` maps the tensors instead of reading them: a cheap check that the file is a
    whole, readable checkpoint (its structure is unpickled, its data not read).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(missing_checkpoint(path))
    if path.suffix == WEIGHTS_SUFFIX:  # a shipped model's kind of file: weights, no state
        return upgrade_checkpoint(read_weights(path))
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # torch's unpicklers raise many kinds on damaged bytes
        raise CheckpointError(
            f"cannot read checkpoint {path} ({_reason(err)}); the file is damaged, truncated "
            "or not a checkpoint of this project"
        ) from err
    if not isinstance(ckpt, dict) or "model" not in ckpt or "config" not in ckpt:
        raise CheckpointError(f"{path} is not a checkpoint of this project (no model/config)")
    stored = ckpt.pop(DIGEST_KEY, None)  # absent in checkpoints written before it
    if stored is not None and stored != tensor_digest(ckpt):
        raise CheckpointError(
            f"cannot read checkpoint {path}: its tensors differ from the digest written with "
            "them (a changed byte); the file is damaged"
        )
    return upgrade_checkpoint(ckpt)


def missing_checkpoint(path: str | Path) -> str:
    """What to say of a checkpoint that is not there: what ``checkpoint=`` takes, and that the
    shipped model is the default."""
    names = ", ".join(shipped_names()) or "none installed"
    return (
        f"checkpoint {path} does not exist: pass checkpoint=<a .pt file, a run folder or a "
        f"shipped model's name ({names})>, or leave it out for the shipped model"
    )


# Every checkpoint carries the SHA-256 of its tensors (their names, dtypes, shapes and bytes),
# checked on every load: a flipped byte inside a weight unpickles fine, and would run silently.
DIGEST_KEY = "tensor_sha256"


def tensor_digest(obj: Any) -> str:
    """SHA-256 over the tensors of a nested dict / list (names, dtypes, shapes and bytes, in a
    fixed order); other values are not hashed (the unpickler checks their structure)."""
    digest = hashlib.sha256()

    def visit(value: Any, name: str) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{name} {t.dtype} {tuple(value.shape)}\n".encode())
            digest.update(memoryview(t.view(torch.uint8).numpy()))
        elif isinstance(value, dict):
            for key in sorted(value, key=str):
                visit(value[key], f"{name}/{key}")
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                visit(item, f"{name}/{i}")

    visit({k: v for k, v in obj.items() if k != DIGEST_KEY}, "")
    return digest.hexdigest()


def _reason(err: Exception) -> str:
    """torch.load's error in a few words: its "Weights only load failed" text is a page of
    advice on unpickling code, which a checkpoint of this project never needs."""
    text = str(err)
    if "Weights only load failed" in text:
        return "it holds objects other than tensors and plain data, refused unread"
    first = text.strip().splitlines()[0] if text.strip() else ""
    first = first if len(first) <= 160 else first[:157] + "..."
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


# Training-state keys added later, with the value a checkpoint written before them stands for.
LATER_STATE_KEYS: dict[str, Any] = {"train_skipped": 0, "best_of": None}


def upgrade_checkpoint(ckpt: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of any earlier version of this project in today's form, in place: the one
    home of every compatibility shim. Config keys that were retired (``RETIRED_KEYS``) are
    dropped from its stored config; training-state keys added later get the value an older
    checkpoint stands for."""
    config = ckpt["config"]
    if isinstance(config, dict):
        stride = (config.get("model") or {}).get("decoder_stride", 4)
        if stride != 4:
            raise CheckpointError(
                f"this checkpoint's model joins the columns from stride {stride} "
                "(model.decoder_stride, retired on 2026-12-05): load it with a commit before "
                "that date"
            )
        for key in RETIRED_KEYS:
            group, name = key.split(".")
            if isinstance(config.get(group), dict):
                config[group].pop(name, None)
        for column in (config.get("model") or {}).get("columns") or []:
            if isinstance(column, dict):  # a CPU speed choice, now made at run time
                column.pop("fp32", None)
    if "step" in ckpt:  # a training checkpoint (not a weights-only file)
        for key, value in LATER_STATE_KEYS.items():
            ckpt.setdefault(key, value)
        ckpt["best_of"] = _selection_of(ckpt["best_of"], config)
    return ckpt


def _selection_of(best_of: Any, config: dict[str, Any]) -> dict[str, Any] | None:
    """A checkpoint's ``best_of`` as ``seg.evaluation.selection.Selection.as_dict`` gives it.
    Before that: the text ``"<prefix><metric> over <a,b>"`` (prefix ``val/`` or
    ``val/train_sources/``); before that, nothing, and the run chose on all its sources by its
    ``trainer.best_metric`` (when it had chosen yet: a ``best``)."""
    if isinstance(best_of, dict):
        return best_of
    if isinstance(best_of, str):
        key, _, sources = best_of.partition(" over ")
        parsed = parse_metric_key(key) or MetricKey(key.rsplit("/", 1)[-1])
        held_out = parsed.source == TRAIN_SOURCES
        return {
            "metric": parsed.metric,
            "sources": sorted(sources.split(",")),
            "held_out": held_out,
        }
    data, trainer = config.get("data", {}), config.get("trainer", {})
    if "best_metric" not in trainer:
        return None
    name = str(data.get("name", "human_mix"))
    sources = data.get("sources", []) if name == "human_mix" else [name]
    return {"metric": trainer["best_metric"], "sources": sorted(sources), "held_out": False}


def load_model_from_checkpoint(
    path: str | Path, device: str | torch.device = "cpu"
) -> tuple[nn.Module, Config]:
    """Rebuild the model a checkpoint was trained with, every column on ``device``, in eval mode.

    ``path``: a checkpoint file or a run folder (its ``checkpoints/best.pt``). Returns
    ``(model, cfg)``, ``cfg`` the typed config stored in the checkpoint. For evaluation,
    prediction and export; raises :class:`CheckpointError` naming the file.
    """
    path = checkpoint_file(path)
    try:
        ckpt = load_checkpoint(path)
    except CheckpointError as err:
        if not path.is_file():  # the message says what to pass already
            raise
        raise CheckpointError(f"{err}; or leave checkpoint= out for the shipped model") from err
    try:
        cfg = to_config(ckpt["config"])
    except Exception as err:
        raise CheckpointError(f"the config stored in {path} is not valid here: {err}") from err
    model = build_model(cfg.model, pretrained=False)  # the weights come from the checkpoint
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as err:
        raise CheckpointError(f"the weights in {path} do not fit its model config: {err}") from err
    return model.place([torch.device(device)] * model.num_columns).eval(), cfg


def find_runs(path: str | Path) -> dict[str, Path]:
    """``{label: checkpoint file}``: ``path`` itself (a checkpoint or a run folder), or else
    every run folder in it (a folder with ``checkpoints/best.pt``), sorted by name."""
    shipped = shipped_checkpoint(path)
    if shipped is not None:
        return {f"{path} (shipped)": shipped}
    root = Path(path).expanduser()
    if not root.exists():
        raise MissingFileError(missing_checkpoint(path))
    if root.is_file():
        run = root.parent.parent if root.parent.name == CHECKPOINTS else root.parent
        return {f"{run.name}/{root.name}": root}
    try:
        return {root.name: checkpoint_file(root)}
    except CheckpointError:
        pass
    runs = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            runs[sub.name] = checkpoint_file(sub)
        except CheckpointError:
            continue
    if not runs:
        raise CheckpointError(
            f"checkpoint={path}: neither a checkpoint nor a run folder, and no run folder (one "
            "with checkpoints/best.pt) in it"
        )
    return runs
