"""Fetch the public datasets from their GitHub repositories, atomically.

Each dataset is the archive of one repository at a pinned commit. Only the files the project
uses are extracted, into ``<root>/<name>/`` in the layout the repository publishes. The work
happens in hidden siblings (``.downloads/<name>-<commit>.tar.gz.part``,
``.<name>.partial-*``) that are renamed into place only once complete and verified, so an
interrupted or corrupt download never leaves a dataset folder that a later run would use; an
interrupted fetch continues from its last byte (:func:`fetch`, the one fetcher of every
download, COCO's included).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import gzip
import http.client
import json
import logging
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType

from tqdm import tqdm

from seg.data.manifest import manifest_path, manifest_problems, read_manifest
from seg.errors import MissingFileError, UserError
from seg.locks import file_lock

log = logging.getLogger(__name__)

ENV_DATA_DIR = "SEG_DATA_DIR"
MARKER = ".seg_download.json"
_CHUNK = 1 << 20
# What a truncated or damaged archive raises while it is read.
_CORRUPT = (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile)


class DownloadError(UserError, RuntimeError):
    """A dataset could not be fetched, unpacked or verified; nothing half-done was left."""


class DatasetNotFoundError(MissingFileError):
    """A dataset is missing and downloading is switched off."""


@dataclass(frozen=True)
class FetchOptions:
    """How ``scripts/download_data.py`` fetches: ``url`` replaces a dataset's one archive
    (any URL urllib opens, ``file://`` included); ``force`` replaces an existing folder;
    ``keep_archive`` keeps ``root/.downloads/*.tar.gz``; ``negatives_share``: coco_person's
    share of COCO's photos without people."""

    url: str | None = None
    force: bool = False
    timeout: float = 60.0
    keep_archive: bool = False
    negatives_share: float = 0.05


@dataclass(frozen=True)
class DatasetSource:
    """One dataset as published in a GitHub repository at a fixed commit.

    ``members`` are patterns of the repository paths to keep, matched one path component at a
    time (``*`` never crosses ``/``). ``counts`` maps a folder to the exact number of files it
    holds once extracted; ``required`` lists single files that must be there.
    """

    name: str
    repo: str  # "owner/name"
    commit: str
    members: tuple[str, ...]
    counts: Mapping[str, int] = field(hash=False)
    required: tuple[str, ...] = ()
    note: str = ""  # anything a person fetching it by hand must know
    folder: str = ""  # the repository folder that holds the dataset ("": the whole repository)
    into: str = ""  # the dataset's folder that its files go to ("": the dataset's top)
    only_manifest: bool = False  # keep only the files the manifest names (a curated subset)
    # {path: sha256} of every kept file; None: the manifest that ships (seg/data/manifests/).
    digests: Mapping[str, str] | None = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        # Read-only, so that the shared SOURCES entries cannot be changed by accident.
        object.__setattr__(self, "counts", MappingProxyType(dict(self.counts)))

    @property
    def url(self) -> str:
        """GitHub's archive of the repository at ``commit``."""
        return f"https://github.com/{self.repo}/archive/{self.commit}.tar.gz"

    @property
    def archive_top(self) -> str:
        """The archive's top folder, ``{repo}-{commit}``."""
        return f"{self.repo.split('/')[-1]}-{self.commit}"

    on_request = False  # fetched by ``download_data.py all`` and when missing

    def problems(self, folder: Path) -> list[str]:
        """What ``folder`` lacks of the published layout (empty: the dataset is there)."""
        return layout_problems(self, folder) if folder.is_dir() else ["no such folder"]

    def fetch(self, root: Path, options: FetchOptions | None = None) -> Path:
        """Download into ``root/<name>`` (:func:`download_dataset`)."""
        o = options or FetchOptions()
        return download_dataset(self, root, o.url, o.force, o.timeout, o.keep_archive)

    def verify(self, folder: Path) -> list[str]:
        """Every kept file of a copy against the manifest (empty: all match)."""
        return manifest_problems(folder, self.expected_digests())

    def instructions(self, root: Path) -> str:
        return manual_instructions(self, root)

    def expected_digests(self) -> Mapping[str, str]:
        """``digests``, or the shipped manifest of ``name``."""
        return self.digests if self.digests is not None else read_manifest(manifest_path(self.name))

    def dataset_path(self, repo_path: str) -> str | None:
        """Where the repository file ``repo_path`` (posix, no top folder) goes in the dataset's
        folder: below ``into``, without ``folder``; None for a file outside ``folder``."""
        if self.folder:
            if not repo_path.startswith(self.folder + "/"):
                return None
            repo_path = repo_path[len(self.folder) + 1 :]
        return f"{self.into}/{repo_path}" if self.into else repo_path

    def wants(self, relpath: str) -> bool:
        """Whether the dataset file ``relpath`` (posix, relative to the dataset's folder) is
        kept, by ``members``; with ``only_manifest``, extraction also asks the manifest."""
        parts = relpath.split("/")
        for pattern in self.members:
            pattern_parts = pattern.split("/")
            if len(parts) == len(pattern_parts) and all(
                fnmatch.fnmatchcase(p, q) for p, q in zip(parts, pattern_parts, strict=True)
            ):
                return True
        return False


def kept_files(source: DatasetSource, folder: Path) -> list[str]:
    """The files of a copy in ``folder`` that ``source`` keeps (posix paths relative to it)."""
    rels = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return sorted(rel for rel in rels if source.wants(rel))


def _count_files(folder: Path) -> int:
    return sum(1 for e in os.scandir(folder) if e.is_file() and not e.name.startswith("."))


def layout_problems(source: DatasetSource, folder: Path, exact: bool = False) -> list[str]:
    """What is missing from ``folder`` compared with the published layout (empty: complete)."""
    problems = []
    for rel, expected in source.counts.items():
        if not (folder / rel).is_dir():
            problems.append(f"{rel}/ is missing (expected {expected} files)")
            continue
        found = _count_files(folder / rel)
        if found < expected or (exact and found != expected):
            problems.append(f"{rel}/ has {found} files, expected {expected}")
    problems += [f"{rel} is missing" for rel in source.required if not (folder / rel).is_file()]
    return problems


def manual_instructions(source: DatasetSource, root: Path) -> str:
    """How to get ``source`` into ``root`` by command, by hand, or from an existing copy."""
    target = Path(root) / source.name
    parts = [f"{rel}/ ({n} files)" for rel, n in source.counts.items()] + list(source.required)
    note = f"; {source.note}" if source.note else ""
    top = f"{source.archive_top}/{source.folder}".rstrip("/")
    into = f"{target}/{source.into}".rstrip("/")
    return (
        f"To get {source.name!r}, do one of:\n"
        f"  1. run: python scripts/download_data.py {source.name} --root {root}\n"
        f"  2. by hand: download {source.url}\n"
        f"     (repository {source.repo}, commit {source.commit}), unpack it and copy\n"
        f"     {', '.join(parts)} (and README/LICENSE if present) from its folder\n"
        f"     {top}/ into {into}/, keeping the same layout{note}\n"
        f"     (or fetch the archive elsewhere and run step 1 with\n"
        f"     --url file:///path/to/{source.commit}.tar.gz);\n"
        f"  3. use an existing copy: set {ENV_DATA_DIR}=/path/to/datasets (or data.root=...),\n"
        f"     the folder that holds {source.name}/."
    )


def resolve_data_root(root: str | Path | None, base: Path | None = None) -> Path:
    """The absolute data root: ``root`` if given (``data.root``: the command line wins, as in
    Hydra's ``${oc.env:...}`` defaults), else ``$SEG_DATA_DIR``, else ``data``; relative paths
    are taken from ``base`` (default: the current directory)."""
    path = Path(root if root is not None else (os.environ.get(ENV_DATA_DIR) or "data"))
    path = path.expanduser()
    return path if path.is_absolute() else (base or Path.cwd()).absolute() / path


def fetch(url: str, dest: Path, timeout: float) -> Path:
    """Fetch ``url`` into ``dest`` through ``dest.part``, which is renamed to ``dest`` only when
    whole; an interrupted fetch (a dropped connection, Ctrl-C) leaves the part, and the next
    one continues it from its last byte (HTTP ``Range``; a server that ignores it sends the
    whole file, which then replaces the part). The one fetcher of every download."""
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        resumed = bool(have) and getattr(response, "status", None) == 206
        length = int(response.headers.get("Content-Length") or 0)
        total = length + (have if resumed else 0) or None
        with (
            open(part, "ab" if resumed else "wb") as out,
            tqdm(
                total=total,
                initial=have if resumed else 0,
                unit="B",
                unit_scale=True,
                desc=dest.name,
                disable=None,
            ) as bar,
        ):
            while chunk := response.read(_CHUNK):
                out.write(chunk)
                bar.update(len(chunk))
            received = out.tell()
    if total is not None and received != total:
        raise ConnectionError(f"truncated download: received {received} of {total} bytes")
    part.replace(dest)
    return dest


def archive_relative(name: str, top: str | None) -> tuple[str, str]:
    """Split an archive entry into (top folder, path below it), rejecting unsafe names."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or "\\" in name:
        raise DownloadError(f"unsafe path {name!r} in the archive (absolute or with '..')")
    if not path.parts:  # "." or ""
        return top or "", ""
    first, rest = path.parts[0], "/".join(path.parts[1:])
    if top is not None and first != top:
        raise DownloadError(f"entries under both {top}/ and {first}/: not one repository")
    return first, rest


def _extract(source: DatasetSource, archive: Path, dest: Path) -> int:
    """Copy the wanted regular files of ``archive`` into ``dest``; return how many."""
    copied, top = 0, None
    listed = source.expected_digests() if source.only_manifest else None
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            top, repo_path = archive_relative(member.name, top)
            rel = source.dataset_path(repo_path) if repo_path else None
            if not rel or not source.wants(rel) or (listed is not None and rel not in listed):
                continue
            if not member.isfile():  # a link could point anywhere; the data holds none
                raise DownloadError(f"{member.name} in the archive is not a regular file")
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(dest / rel, "wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)
            copied += 1
        # Read to the end so that gzip checks its length and CRC.
        while tar.fileobj.read(_CHUNK):
            pass
    if top is not None and top != source.archive_top:
        log.info("%s: archive top folder is %s/, not %s/", source.name, top, source.archive_top)
    return copied


def swap_in(new: Path, target: Path) -> None:
    """Move ``new`` to ``target``; an existing ``target`` is set aside first, removed last."""
    if not target.exists() and not target.is_symlink():
        os.replace(new, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent)) / "old"
    os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        os.replace(old, target)
        old.parent.rmdir()
        raise
    # A symlinked local copy is unlinked, never emptied.
    if old.is_symlink():
        old.unlink()
    shutil.rmtree(old.parent, ignore_errors=True)


def _unpack(source: DatasetSource, archive: Path, root: Path, url: str) -> None:
    """Extract, verify, mark and swap ``archive`` into ``root/name``; clean up on any failure."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{source.name}.partial-", dir=root))
    try:
        try:
            copied = _extract(source, archive, tmp)
        except _CORRUPT as e:
            raise DownloadError(
                f"archive {archive} (from {url}) is truncated or corrupt: {e!r}"
            ) from e
        problems = layout_problems(source, tmp, exact=True)
        if problems:
            raise DownloadError(
                f"archive from {url} does not hold the expected {source.name} files: "
                + "; ".join(problems)
            )
        problems = manifest_problems(tmp, source.expected_digests())
        if problems:  # right names and counts, wrong content (an error page, an empty file)
            raise DownloadError(
                f"archive from {url} holds {source.name} files that differ from its manifest "
                f"({manifest_path(source.name)}); nothing was moved into place: "
                + "; ".join(problems)
            )
        marker = {
            "name": source.name,
            "repo": source.repo,
            "commit": source.commit,
            "url": url,
            "counts": dict(source.counts),
            "files": copied,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        swap_in(tmp, root / source.name)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, DownloadError):  # bad content: never reuse this archive
            archive.unlink(missing_ok=True)
        raise


def download_dataset(
    source: DatasetSource,
    root: Path,
    url: str | None = None,
    force: bool = False,
    timeout: float = 60,
    keep_archive: bool = False,
) -> Path:
    """Fetch ``source`` into ``root/<name>`` and return that folder.

    A complete ``root/<name>`` is returned as is unless ``force``; an incomplete one is never
    touched without ``force``. ``url`` replaces the GitHub archive (any URL urllib opens,
    including ``file://``). A complete archive left in ``root/.downloads`` is reused; it is
    deleted after success unless ``keep_archive``; an interrupted fetch leaves its
    ``.part``, which the next call continues (:func:`fetch`). Raises DownloadError naming the
    URL and the problem; no partial dataset folder is ever left behind, and an archive whose
    content is wrong is deleted.
    """
    root = Path(root).expanduser().absolute()
    target, url = root / source.name, url or source.url
    if target.exists() and not force:
        problems = layout_problems(source, target)
        if not problems:
            return target
        raise DownloadError(
            f"{target} exists but is incomplete ({'; '.join(problems)}); it was left untouched. "
            "Move it away, or replace it with force=True (--force)."
        )
    cache = root / ".downloads"
    cache.mkdir(parents=True, exist_ok=True)
    with file_lock(cache / f"{source.name}.lock"):  # e.g. the ranks of a DDP job
        if not force and not layout_problems(source, target):  # another process finished it
            return target
        for stale in root.glob(f".{source.name}.partial-*"):  # left by a killed process
            shutil.rmtree(stale, ignore_errors=True)
        archive = cache / f"{source.name}-{source.commit}.tar.gz"
        if not archive.is_file():
            log.info("downloading %s from %s", source.name, url)
            try:
                fetch(url, archive, timeout)
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
                raise DownloadError(
                    f"could not download {source.name!r} from {url}: {e}\n"
                    + manual_instructions(source, root)
                ) from e
        _unpack(source, archive, root, url)
        if not keep_archive:
            archive.unlink(missing_ok=True)
    log.info("%s is ready in %s", source.name, target)
    return target
