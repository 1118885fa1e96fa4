"""SHA-256 manifests of the files each dataset keeps (torchvision's ``check_integrity``, per file).

GitHub's generated archives are not byte-stable over the years, so the files are checked, not
the archive: ``seg/data/manifests/<name>.sha256`` (``sha256sum`` format, one ``digest  path``
line per kept file) was computed from copies at the pinned commits, and every download is
verified against it before it is moved into place; ``scripts/check_data.py --verify`` checks an
existing copy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path

from seg.errors import DataError
from seg.fileio import write_text

MANIFESTS = Path(__file__).with_name("manifests")
_CHUNK = 1 << 20


def manifest_path(name: str) -> Path:
    """Where the manifest of dataset ``name`` ships."""
    return MANIFESTS / f"{name}.sha256"


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(path: Path) -> dict[str, str]:
    """``{relative posix path: hex digest}`` from a ``sha256sum``-style file."""
    digests = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            raise DataError(f"{path}:{number}: expected '<sha256>  <path>', got {line!r}")
        digests[rel] = digest
    return digests


def write_manifest(folder: Path, files: Iterable[str], path: Path) -> int:
    """Write the digests of ``files`` (paths relative to ``folder``) to ``path``; their count."""
    rels = sorted(files)
    write_text(path, "".join(f"{sha256_file(folder / rel)}  {rel}\n" for rel in rels))
    return len(rels)


def manifest_problems(folder: Path, digests: Mapping[str, str], listed: int = 5) -> list[str]:
    """What in ``folder`` differs from ``digests`` (empty: every file is there, byte for byte).

    Each problem names the file, and for a changed one the expected and the actual digest; at
    most ``listed`` of each kind, then a count of the rest. A file in a subfolder that the
    manifest does not name (an added pair would be trained on) is one too; the files at the
    top (READMEs, a curator's lists) and hidden ones (``.seg_download.json``) are not data.
    """
    missing, changed = [], []
    unlisted = []
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        rel = "/".join(parts)
        data = len(parts) > 1 and not any(part.startswith(".") for part in parts)
        if data and rel not in digests and path.is_file():
            unlisted.append(f"{rel} is not in the manifest")
    for rel, expected in sorted(digests.items()):
        path = folder / rel
        if not path.is_file():
            missing.append(f"{rel} is missing")
            continue
        actual = sha256_file(path)
        if actual != expected:
            changed.append(f"{rel}: expected sha256 {expected}, found {actual}")
    problems = []
    for kind in (changed, missing, unlisted):
        problems += kind[:listed]
        if len(kind) > listed:
            problems.append(f"... and {len(kind) - listed} more like it")
    return problems
