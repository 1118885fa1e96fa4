"""The trained models the package ships: one ``.safetensors`` file each, with a model card beside
it (``<name>.md``) whose YAML front matter holds the file's SHA-256, how it was trained and its
figures.

A weights file holds the model's tensors in fp16 (no pickle: safetensors) and, as JSON in its
metadata, what rebuilding and using the model needs: the resolved training config (the model,
the eval transform and sizes: ``aug``, ``data.eval_scales``), the class names, and the command
and commit that trained it. :func:`read_weights` checks the file's SHA-256 against its card
before it reads a tensor, and returns the dict a checkpoint gives (``"model"``, ``"config"``,
...), so everything that takes a checkpoint takes a shipped model too. :func:`write_weights`
makes such a file from a training checkpoint (``scripts/ship_model.py``).

``checkpoint=person`` names the shipped model (:data:`DEFAULT`) wherever a checkpoint is asked
for; what is derived from it (its ONNX export) goes into the user's cache folder, never into the
installed package (:func:`is_shipped`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from seg.data.manifest import sha256_file
from seg.errors import UserError
from seg.fileio import atomic_path

log = logging.getLogger(__name__)

ZOO_DIR = Path(__file__).resolve().parent
DEFAULT = "person"  # the shipped model every inference script takes by default
SUFFIX = ".safetensors"
FORMAT = "humanseg-weights-1"  # the metadata's layout; bump when it changes
METADATA_KEY = "humanseg"  # safetensors metadata is str -> str: one JSON document under it
CLASSES = ["background", "person"]


class WeightsError(UserError, RuntimeError):
    """A weights file that is missing, damaged, not this project's, or not its card's."""


def shipped_names() -> list[str]:
    """The names of the shipped models: every ``<name>.safetensors`` of the zoo folder."""
    return sorted(p.stem for p in ZOO_DIR.glob(f"*{SUFFIX}"))


def shipped_file(name: str) -> Path | None:
    """The weights file of the shipped model ``name``, None when no model has that name."""
    path = ZOO_DIR / f"{name}{SUFFIX}"
    return path if path.is_file() else None


def is_shipped(path: str | Path) -> bool:
    """Whether ``path`` is a file of the installed package's zoo (read-only for our purposes:
    nothing derived from it is written beside it)."""
    return Path(path).expanduser().resolve().parent == ZOO_DIR


def card_file(weights: Path) -> Path:
    """The model card beside a weights file: ``<stem>.md``."""
    return weights.with_suffix(".md")


def read_card(path: Path) -> dict[str, Any]:
    """The YAML front matter of a model card (between the first two ``---`` lines)."""
    import yaml

    text = path.read_text(encoding="utf-8")
    head, sep, _ = text.partition("\n---\n")
    if not text.startswith("---\n") or not sep:
        raise WeightsError(f"model card {path} has no YAML front matter (--- ... ---) first")
    try:
        card = yaml.safe_load(head[len("---\n") :])
    except yaml.YAMLError as err:
        raise WeightsError(f"model card {path}: its front matter is not YAML ({err})") from err
    if not isinstance(card, dict):
        raise WeightsError(f"model card {path}: its front matter is not a mapping")
    return card


def check_sha256(path: Path) -> str:
    """Compare the file's SHA-256 with the one its card beside it gives; a shipped file must
    have a card, a file of the user's is checked where it has one. Returns the digest."""
    actual = sha256_file(path)
    card = card_file(path)
    if not card.is_file():
        if is_shipped(path):
            raise WeightsError(f"{path}: its model card {card.name} is missing beside it")
        return actual
    expected = str(read_card(card).get("sha256", ""))
    if actual != expected:
        remedy = (
            "reinstall the package (pip install -e .) or pass checkpoint=<your own checkpoint>"
            if is_shipped(path)
            else "restore the file, or write the card anew if the file changed on purpose"
        )
        raise WeightsError(
            f"{path} is damaged or not the file its card describes: SHA-256 {actual[:16]}..., "
            f"the card {card.name} says {expected[:16] or 'nothing'}...; {remedy}"
        )
    return actual


def read_weights(path: str | Path) -> dict[str, Any]:
    """A weights file as a checkpoint dict: ``{"model": fp32 state dict, "config": resolved
    training config, "metrics": validation figures, "weights": its metadata and SHA-256}``.
    Its SHA-256 is checked first (:func:`check_sha256`); errors name the file."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"weights file {path} does not exist")
    sha = check_sha256(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not a dict)
    except (SafetensorError, OSError, ValueError) as err:
        raise WeightsError(f"cannot read weights file {path} ({err}); it is damaged") from err
    try:
        info = json.loads(meta[METADATA_KEY])
        config = info["config"]
    except (KeyError, TypeError, ValueError) as err:
        raise WeightsError(
            f"{path} is not a weights file of this project (no '{METADATA_KEY}' metadata with "
            "its config)"
        ) from err
    if info.get("format") != FORMAT:
        raise WeightsError(f"{path}: format {info.get('format')!r}, this version reads {FORMAT}")
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    what = f"the shipped model {path.stem}" if is_shipped(path) else "weights"
    log.info("%s: %s (SHA-256 %s... as its card says)", what, path, sha[:12])
    return {
        "model": state,
        "config": config,
        "metrics": info.get("metrics") or {},
        "weights": {**{k: v for k, v in info.items() if k != "config"}, "sha256": sha},
    }


def write_weights(
    ckpt: dict[str, Any], path: Path, command: str, commit: str, source: str = ""
) -> Path:
    """Write a training checkpoint's model as a weights file: floating tensors in fp16, the
    others as they are, and the metadata JSON (module docstring). Atomic. Returns ``path``."""
    from safetensors.torch import save_file

    state = {
        k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in ckpt["model"].items()
    }
    info = {
        "format": FORMAT,
        "classes": CLASSES,
        "config": ckpt["config"],
        "command": command,
        "commit": commit,
        "source": source,
        "epoch": ckpt.get("epoch"),
        "step": ckpt.get("step"),
        "metrics": {  # the validation figures that chose it (numbers only)
            k: float(v)
            for k, v in (ckpt.get("metrics") or {}).items()
            if isinstance(v, float | int)
        },
    }
    with atomic_path(Path(path)) as tmp:
        save_file(state, str(tmp), metadata={METADATA_KEY: json.dumps(info, default=str)})
    return Path(path)
