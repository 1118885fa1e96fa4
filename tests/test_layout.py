"""The package's import graph points one way: each part of ``seg`` imports only from the
layers below it (the picture in docs/architecture.md). Read from the source with
``ast``, so a late import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SEG = Path(__file__).resolve().parents[1] / "seg"

# Lowest first. A part may import its own layer's other parts only where listed in ALLOWED.
LAYERS = [
    {"seg.errors"},  # the user-error types every part raises
    {"seg.config", "seg.fileio", "seg.locks", "seg.signals", "seg.runs"},  # torch-free
    {"seg.devices", "seg.distributed", "seg.metrics", "seg.data", "seg.models"},
    {"seg.zoo"},  # the shipped models' files (seg.data.manifest's file digest)
    {"seg.checkpoint"},
    {"seg.inference"},
    {"seg.evaluation"},
    {"seg.engine"},
    {"seg.export", "seg.benchmark", "seg.analysis", "seg.cli", "seg.demo", "seg.ship", "seg.study"},
    {"seg.__init__"},  # `from seg import load_model`: seg.inference.api, imported when asked for
]
ALLOWED: set[tuple[str, str]] = set()
TORCH_FREE = {"seg.errors", "seg.config", "seg.fileio", "seg.locks", "seg.signals", "seg.runs"}


def _part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def imports(package: Path = SEG) -> dict[str, set[tuple[str, str]]]:
    """``{part: {(imported part, file), ...}}`` for every ``seg`` import between parts."""
    found: dict[str, set[tuple[str, str]]] = {}
    for path in package.rglob("*.py"):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
                if node.module == "seg":
                    names = [f"seg.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.startswith("seg.") and _part(name) != _part(module):
                    found.setdefault(_part(module), set()).add((_part(name), path.name))
    return found


def layer_of(part: str) -> int:
    for i, layer in enumerate(LAYERS):
        if part in layer:
            return i
    raise AssertionError(f"{part} is in no layer of tests/test_layout.py: add it to LAYERS")


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {f"seg.{p.stem}" for p in SEG.iterdir() if p.suffix == ".py" and p.stem != "__init__"}
    parts |= {f"seg.{p.name}" for p in SEG.iterdir() if (p / "__init__.py").is_file()}
    for part in parts:
        layer_of(part)


def upward_imports(package: Path = SEG) -> list[str]:
    return sorted(
        f"{part} ({where}) imports {target}"
        for part, targets in imports(package).items()
        for target, where in targets
        if layer_of(target) >= layer_of(part) and (part, target) not in ALLOWED
    )


def test_imports_point_down_the_layers() -> None:
    upward = upward_imports()
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_the_config_layer_imports_no_torch() -> None:
    heavy = []
    for part in TORCH_FREE:
        files = [SEG / f"{part.split('.')[1]}.py"]
        files = files if files[0].is_file() else sorted((SEG / part.split(".")[1]).rglob("*.py"))
        for path in files:
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                heavy += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("torch", "cv2")]
    assert not heavy, heavy


@pytest.mark.parametrize(
    ("where", "line"),
    [
        ("data/io.py", "from seg.engine.train import train"),
        ("models/build.py", "def f():\n    import seg.evaluation.scoring"),
        ("metrics/confusion.py", "from seg import distributed"),  # same layer
    ],
)
def test_the_check_catches_an_import_against_the_layers(
    tmp_path: Path, where: str, line: str
) -> None:
    package = tmp_path / "seg"
    (package / where).parent.mkdir(parents=True)
    (package / where).write_text(line + "\n")
    (package / "checkpoint.py").write_text("from seg.models import build_model\n")  # downward
    assert len(upward_imports(package)) == 1
