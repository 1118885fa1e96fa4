"""Command-line overrides checked before Hydra sees them: one line for each mistake.

Hydra answers a misspelt key with seven lines whose advice is wrong ("To append to your config
use +trainer.max_step=20" for ``trainer.max_step=20``, where the key is ``trainer.max_steps``),
accepts ``+chekpoint=x`` silently, and lists its search path for an unknown ``data=`` name.
:func:`check_overrides` reads each ``key=value`` against the typed schema (the dataclasses of
``seg/config/``) and each ``group=name`` against ``configs/<group>/``, and raises
:class:`ConfigError` naming the closest valid keys or the valid names. A ``+`` adds nothing
the schema does not hold: the only free-form entries are the dict-valued fields
(``+data.train_scales={coco_mini_person: 1.6667}``, or ``data.eval_scales.ccp=1.2``).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from seg.errors import ConfigError

ANY = "*"  # a list index or a dict key in a schema path


def schema_keys(schema: type, prefix: str = "") -> dict[str, bool]:
    """Every key path of the dataclass ``schema`` -> whether any key may follow it (a dict
    field); list items of dataclasses appear under ``*`` (``model.columns.*.widths``)."""
    keys: dict[str, bool] = {}
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.name}"
        kind = _unwrap(hints[f.name])
        origin = typing.get_origin(kind)
        keys[key] = origin is dict or kind is dict or kind is Any
        if dataclasses.is_dataclass(kind):
            keys.update(schema_keys(kind, key + "."))
        elif origin is list:
            (item,) = typing.get_args(kind) or (Any,)
            item = _unwrap(item)
            if dataclasses.is_dataclass(item):
                keys[key + "." + ANY] = False
                keys.update(schema_keys(item, f"{key}.{ANY}."))
    return keys


def _unwrap(kind: Any) -> Any:
    """``X | None`` -> ``X``."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        return args[0] if len(args) == 1 else Any
    return kind


def _known(key: str, keys: dict[str, bool]) -> bool:
    parts = key.split(".")
    for i in range(len(parts), 0, -1):  # the key itself, or below a dict-valued field
        if any(i == len(parts) or free for _, free in _matches(parts[:i], keys)):
            return True
    return False


def _matches(parts: list[str], keys: dict[str, bool]) -> Iterable[tuple[str, bool]]:
    for path, free in keys.items():
        pattern = path.split(".")
        if len(pattern) == len(parts) and all(
            p == q or (p == ANY and q.isdigit()) for p, q in zip(pattern, parts, strict=True)
        ):
            yield path, free


def group_names(config_dir: Path | None, config_name: str) -> dict[str, list[str]]:
    """The config groups that ``configs/<config_name>.yaml`` takes -> their option names: those
    of its defaults list, and the ``# @package _global_`` groups (``+exp=``, ``debug=``) where
    that list starts from the training schema (``base_config``)."""
    import yaml

    main = config_dir / f"{config_name}.yaml" if config_dir is not None else None
    if main is None or not main.is_file():
        return {}
    defaults = yaml.safe_load(main.read_text()).get("defaults") or []
    named = {next(iter(d)) for d in defaults if isinstance(d, dict)}
    groups = {}
    for d in sorted(p for p in config_dir.iterdir() if p.is_dir()):
        files = sorted(d.glob("*.yaml"))
        global_ = bool(files) and "@package _global_" in files[0].read_text()
        if d.name in named or ("base_config" in defaults and global_):
            groups[d.name] = [f.stem for f in files]
    return groups


def suggest(key: str, keys: Iterable[str]) -> str:
    """``; did you mean a or b?`` for the closest valid keys, else the keys beside it. List
    indices are compared as ``*`` and given back as typed (``model.columns.0.widths``)."""
    parts = key.split(".")
    general = ".".join(ANY if p.isdigit() else p for p in parts)

    def typed(path: str) -> str:
        path_parts = path.split(".")
        if len(path_parts) > len(parts):  # deeper than the key: its indices stay *
            return path
        pairs = zip(path_parts, parts[: len(path_parts)], strict=True)
        return ".".join(q if p == ANY else p for p, q in pairs)

    depth = [k for k in keys if k.count(".") == general.count(".")]
    parent = general.rpartition(".")[0]
    siblings = sorted(k for k in depth if k.rpartition(".")[0] == parent)
    names = {k.rpartition(".")[2]: k for k in siblings}
    # A key under the wrong group, or with its group left out (lr: optim.lr); a misspelt last
    # part (trainer.max_step); a misspelt group (trainr.max_steps).
    close = sorted(k for k in keys if k.rpartition(".")[2] == parts[-1] and ANY not in k)[:3]
    close = close or [names[n] for n in difflib.get_close_matches(parts[-1], list(names), n=2)]
    close = close or difflib.get_close_matches(general, depth, n=2, cutoff=0.85)
    if not close and siblings:
        return f"; the keys of {typed(parent) if parent else 'the config'}: {', '.join(names)}"
    return f"; did you mean {' or '.join(typed(k) for k in close)}?" if close else ""


def check_overrides(
    overrides: Sequence[str], schema: type, config_dir: Path | None = None, config_name: str = ""
) -> None:
    """Raise :class:`ConfigError` (one line) for the first override whose key ``schema`` does
    not hold, or whose config group (of ``config_dir/<config_name>.yaml``) has no such option;
    flags (``-m``, ``--cfg``) and Hydra's own ``hydra.*`` keys pass."""
    keys = schema_keys(schema)
    groups = group_names(config_dir, config_name)
    for override in overrides:
        if override.startswith("-") or ("=" not in override and not override.startswith("~")):
            continue
        raw, _, value = override.partition("=")
        key = raw.lstrip("+~")
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            continue
        if key in groups:
            for name in value.split(","):  # a sweep: data=a,b
                if name.strip() not in (*groups[key], "null"):
                    raise ConfigError(
                        f"{raw}={name.strip()}: no such {key} config (configs/{key}/); "
                        f"valid: {', '.join(groups[key])}"
                    )
            continue
        if not _known(key, keys):
            plus = " (a + adds no key that the config does not have)" if raw[0] == "+" else ""
            raise ConfigError(f"unknown config key {raw}{plus}{suggest(key, keys)}")
