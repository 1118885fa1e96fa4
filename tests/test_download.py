"""Dataset download: real files served from 127.0.0.1 as a GitHub-style archive; no network."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import cv2
import pytest

import seg.data.download as download_module
from seg.config import compose_config
from seg.data import list_source
from seg.data.coco_download import download_coco_person
from seg.data.download import (
    MARKER,
    DatasetNotFoundError,
    DownloadError,
    download_dataset,
    kept_files,
    resolve_data_root,
)
from seg.data.manifest import manifest_path, manifest_problems, read_manifest, sha256_file
from seg.data.registry import DATASETS, dataset, dataset_folder, github_sources

REPO = Path(__file__).resolve().parents[1]
SOURCES = github_sources()  # the datasets fetched as one GitHub archive
NAME = "vikram_human_seg"
STEMS = ("1", "2", "3")
WANTED = ["README.md"] + [f"Training_Images/{s}.jpg" for s in STEMS]
WANTED += [f"Ground_Truth/{s}.png" for s in STEMS]
# The real source, expecting only the few pairs the test archives hold (and their real digests).
SMALL = dataclasses.replace(
    SOURCES[NAME],
    counts={"Training_Images": 3, "Ground_Truth": 3},
    digests={k: v for k, v in read_manifest(manifest_path(NAME)).items() if k in WANTED},
)
# Files of the archive that must not be extracted.
UNWANTED = {
    ".DS_Store": b"x",
    "Training_Images/.DS_Store": b"x",
    "Training_Images/notes.txt": b"not an image",
    "Training_Images/sub/4.jpg": b"nested",
    "Other/5.jpg": b"elsewhere",
}


class _Server:
    """Serves ``files`` by path, from byte N on for ``Range: bytes=N-``; counts requests (and
    their ranges); paths in ``drop`` close after half the bytes."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.drop: set[str] = set()
        self.requests: list[str] = []
        self.ranges: list[tuple[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404)
                    return
                wanted = self.headers.get("Range")
                if wanted:
                    server.ranges.append((self.path, wanted))
                    data = data[int(wanted.removeprefix("bytes=").rstrip("-")) :]
                self.send_response(206 if wanted else 200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                cut = len(data) // 2 if self.path in server.drop else len(data)
                self.wfile.write(data[:cut])
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


@pytest.fixture
def vikram(shared_datasets: Path) -> Path:
    return shared_datasets / NAME


def _add(
    tar: tarfile.TarFile,
    name: str,
    data: bytes = b"",
    kind: bytes = tarfile.REGTYPE,
    link: str = "",
) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data)
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def make_archive(
    vikram: Path, raw: dict[str, bytes] | None = None, swap: dict[str, bytes] | None = None
) -> bytes:
    """A .tar.gz shaped like GitHub's: pax header with the commit, top folder ``{repo}-{commit}``.

    Holds README.md and the STEMS pairs of the real dataset (those named in ``swap`` with its
    bytes instead), the UNWANTED files, and ``raw`` entries under their exact names.
    """
    top = SMALL.archive_top
    buf = io.BytesIO()
    with tarfile.open(
        fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT, pax_headers={"comment": SMALL.commit}
    ) as tar:
        for folder in ("", "/Training_Images", "/Ground_Truth", "/Other"):
            _add(tar, top + folder, kind=tarfile.DIRTYPE)
        for rel in WANTED:
            if rel in (swap or {}):
                _add(tar, f"{top}/{rel}", swap[rel])
            else:
                tar.add(vikram / rel, arcname=f"{top}/{rel}")
        for rel, data in UNWANTED.items():
            _add(tar, f"{top}/{rel}", data)
        for name, data in (raw or {}).items():
            _add(tar, name, data)
    return buf.getvalue()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def assert_nothing_left(root: Path) -> None:
    """No dataset folder, no partial folder, no partial or cached archive."""
    assert not (root / NAME).exists()
    assert not list(root.glob(f".{NAME}.*")), list(root.glob(f".{NAME}.*"))
    assert not list(root.glob(".downloads/*.tar.gz*")), list(root.glob(".downloads/*"))


def test_download_extracts_only_the_published_files(server, vikram, tmp_path):
    server.files["/a.tar.gz"] = make_archive(vikram)
    root, url = tmp_path / "data", server.url("/a.tar.gz")
    out = download_dataset(SMALL, root, url=url)
    assert out == root / NAME
    files = _files(out)
    assert sorted(files) == sorted([*WANTED, MARKER])
    for rel in WANTED:
        assert files[rel] == (vikram / rel).read_bytes(), rel
    marker = json.loads(files[MARKER])
    assert marker["repo"] == SMALL.repo and marker["commit"] == SMALL.commit
    assert marker["url"] == url and marker["counts"] == {"Training_Images": 3, "Ground_Truth": 3}
    assert marker["files"] == len(WANTED)
    # Nothing else left in the root; the archive is not kept by default.
    assert {p.name for p in root.iterdir()} == {NAME, ".downloads"}
    assert not list(root.glob(".downloads/*.tar.gz*"))
    # A second call finds the folder and does not fetch again.
    assert download_dataset(SMALL, root, url=url) == out
    assert server.requests == ["/a.tar.gz"]


def test_force_replaces_from_the_cached_archive(server, vikram, tmp_path):
    server.files["/a.tar.gz"] = make_archive(vikram)
    root, url = tmp_path / "data", server.url("/a.tar.gz")
    out = download_dataset(SMALL, root, url=url, keep_archive=True)
    assert (root / ".downloads" / f"{NAME}-{SMALL.commit}.tar.gz").is_file()
    (out / "stray.txt").write_text("from an older copy")
    download_dataset(SMALL, root, url=url, force=True)
    assert sorted(_files(out)) == sorted([*WANTED, MARKER])
    assert server.requests == ["/a.tar.gz"]  # the complete cached archive was reused
    assert {p.name for p in root.iterdir()} == {NAME, ".downloads"}  # old copy removed


def test_local_archive_through_file_url(vikram, tmp_path):
    archive = tmp_path / "archive.tar.gz"
    archive.write_bytes(make_archive(vikram))
    out = download_dataset(SMALL, tmp_path / "data", url=archive.as_uri())
    assert sorted(_files(out)) == sorted([*WANTED, MARKER])
    assert archive.is_file()  # the user's own file is never removed


def test_truncated_archive_leaves_nothing(server, vikram, tmp_path):
    data = make_archive(vikram)
    server.files["/t.tar.gz"] = data[: len(data) // 2]
    root = tmp_path / "data"
    with pytest.raises(DownloadError, match="truncated or corrupt") as err:
        download_dataset(SMALL, root, url=server.url("/t.tar.gz"))
    assert server.url("/t.tar.gz") in str(err.value)
    assert_nothing_left(root)


def assert_only_the_part_left(root: Path) -> None:
    """No dataset folder, no partial folder; the fetched part kept to be continued."""
    assert not (root / NAME).exists()
    assert not list(root.glob(f".{NAME}.*")), list(root.glob(f".{NAME}.*"))
    assert [p.name for p in root.glob(".downloads/*.tar.gz*")] == [
        f"{NAME}-{SMALL.commit}.tar.gz.part"
    ]


def test_a_dropped_connection_is_continued_from_its_last_byte(server, vikram, tmp_path):
    server.files["/d.tar.gz"] = make_archive(vikram)
    server.drop.add("/d.tar.gz")
    root, url = tmp_path / "data", server.url("/d.tar.gz")
    with pytest.raises(DownloadError, match="could not download"):
        download_dataset(SMALL, root, url=url)
    assert_only_the_part_left(root)
    server.drop.clear()
    out = download_dataset(SMALL, root, url=url)
    assert sorted(_files(out)) == sorted([*WANTED, MARKER])
    half = len(server.files["/d.tar.gz"]) // 2
    assert server.ranges == [("/d.tar.gz", f"bytes={half}-")]
    assert not list(root.glob(".downloads/*.tar.gz*"))


class _InterruptingBar:
    """Stands in for tqdm: the user presses Ctrl-C after the first chunk."""

    def __init__(self, **kwargs: object) -> None:
        pass

    def __enter__(self) -> _InterruptingBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, n: int) -> None:
        raise KeyboardInterrupt


def test_ctrl_c_while_fetching_keeps_the_part_to_continue(server, vikram, tmp_path, monkeypatch):
    server.files["/a.tar.gz"] = make_archive(vikram)
    monkeypatch.setattr(download_module, "tqdm", _InterruptingBar)
    root, url = tmp_path / "data", server.url("/a.tar.gz")
    with pytest.raises(KeyboardInterrupt):
        download_dataset(SMALL, root, url=url)
    assert_only_the_part_left(root)
    monkeypatch.undo()
    assert sorted(_files(download_dataset(SMALL, root, url=url))) == sorted([*WANTED, MARKER])
    assert len(server.ranges) == 1  # continued, not fetched again


def test_ctrl_c_while_extracting_keeps_only_the_complete_archive(
    server, vikram, tmp_path, monkeypatch
):
    server.files["/a.tar.gz"] = make_archive(vikram)
    root, url = tmp_path / "data", server.url("/a.tar.gz")
    copy = download_module.shutil.copyfileobj
    calls = []

    def interrupted_copy(*args: object) -> None:
        calls.append(1)
        copy(*args)
        if len(calls) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(download_module.shutil, "copyfileobj", interrupted_copy)
    with pytest.raises(KeyboardInterrupt):
        download_dataset(SMALL, root, url=url)
    monkeypatch.undo()
    assert not (root / NAME).exists() and not list(root.glob(f".{NAME}.*"))
    assert (root / ".downloads" / f"{NAME}-{SMALL.commit}.tar.gz").is_file()
    # The next call finishes from the complete archive without fetching it again.
    assert sorted(_files(download_dataset(SMALL, root, url=url))) == sorted([*WANTED, MARKER])
    assert server.requests == ["/a.tar.gz"]


def test_count_mismatch_names_folder_and_counts(server, vikram, tmp_path):
    server.files["/a.tar.gz"] = make_archive(vikram)
    expect_four = dataclasses.replace(SMALL, counts={"Training_Images": 4, "Ground_Truth": 3})
    root = tmp_path / "data"
    with pytest.raises(DownloadError, match=r"Training_Images/ has 3 files, expected 4") as err:
        download_dataset(expect_four, root, url=server.url("/a.tar.gz"))
    assert "Ground_Truth" not in str(err.value)  # only the folder that is wrong
    assert_nothing_left(root)


def test_unreachable_url_explains_manual_download(tmp_path):
    root = tmp_path / "data"
    source = SOURCES[NAME]
    with pytest.raises(DownloadError) as err:
        download_dataset(source, root, url=f"http://127.0.0.1:{_closed_port()}/x.tar.gz", timeout=5)
    message = str(err.value)
    for needed in (source.url, source.repo, source.commit, str(root / NAME), "SEG_DATA_DIR"):
        assert needed in message, needed
    assert "Training_Images/ (290 files)" in message
    assert_nothing_left(root)


@pytest.mark.parametrize(
    "content", [b"", b"<!DOCTYPE html><html>rate limited</html>"], ids=["empty", "html"]
)
def test_right_names_and_counts_with_wrong_content_are_refused(server, vikram, tmp_path, content):
    """An archive whose files are all there by name and count, one of them empty or an HTML
    page, is refused naming the file and both digests; an existing copy is kept as it was."""
    root = tmp_path / "data"
    server.files["/good.tar.gz"] = make_archive(vikram)
    server.files["/bad.tar.gz"] = make_archive(vikram, swap={"Ground_Truth/2.png": content})
    download_dataset(SMALL, root, url=server.url("/good.tar.gz"))
    before = _files(root / NAME)
    expected = SMALL.digests["Ground_Truth/2.png"]
    actual = hashlib.sha256(content).hexdigest()
    with pytest.raises(DownloadError, match="differ from its manifest") as err:
        download_dataset(SMALL, root, url=server.url("/bad.tar.gz"), force=True)
    assert f"Ground_Truth/2.png: expected sha256 {expected}, found {actual}" in str(err.value)
    assert _files(root / NAME) == before
    assert not list(root.glob(f".{NAME}.*")) and not list(root.glob(".downloads/*.tar.gz*"))


def test_shipped_manifests_describe_the_shared_copy(shared_datasets):
    """The manifests list every file a download keeps, with the digests of the shared copy
    (copies of the pinned commits), and name a changed or missing file."""
    for source in SOURCES.values():
        folder = shared_datasets / source.name
        digests = source.expected_digests()
        assert sorted(digests) == kept_files(source, folder), source.name
        assert manifest_problems(folder, digests) == [], source.name
    digests = dict(SMALL.digests)
    digests["Ground_Truth/1.png"] = "0" * 64
    digests["Ground_Truth/none.png"] = digests["README.md"]
    problems = manifest_problems(shared_datasets / NAME, digests)
    found = sha256_file(shared_datasets / NAME / "Ground_Truth" / "1.png")
    assert problems[:2] == [
        f"Ground_Truth/1.png: expected sha256 {'0' * 64}, found {found}",
        "Ground_Truth/none.png is missing",
    ]
    # This small manifest names a few pairs: the folder's other pairs are named (5), then counted.
    folder = shared_datasets / NAME
    others = sorted(
        p.relative_to(folder).as_posix()
        for sub in ("Ground_Truth", "Training_Images")
        for p in (folder / sub).iterdir()
        if p.relative_to(folder).as_posix() not in digests
    )
    assert problems[2:] == [
        *(f"{rel} is not in the manifest" for rel in others[:5]),
        f"... and {len(others) - 5} more like it",
    ]


def test_check_data_verify_reports_a_changed_file(shared_datasets, tmp_path):
    copy = tmp_path / NAME
    shutil.copytree(shared_datasets / NAME, copy)
    script = [sys.executable, str(REPO / "scripts" / "check_data.py"), NAME, "--verify"]
    env = {**os.environ, "SEG_DATA_DIR": str(tmp_path)}
    ok = subprocess.run(script, env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "all 581 files match" in ok.stdout, ok.stderr
    (copy / "Training_Images" / "7.jpg").write_bytes(b"")
    shutil.copy(copy / "Training_Images" / "8.jpg", copy / "Training_Images" / "extra.jpg")
    shutil.copy(copy / "Ground_Truth" / "8.png", copy / "Ground_Truth" / "extra.png")
    bad = subprocess.run(script, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "Training_Images/7.jpg: expected sha256" in bad.stdout
    assert "Training_Images/extra.jpg is not in the manifest" in bad.stdout  # an added pair
    assert "Ground_Truth/extra.png is not in the manifest" in bad.stdout


def test_existing_folder_is_untouched_when_a_download_fails(server, vikram, tmp_path):
    data = make_archive(vikram)
    server.files["/t.tar.gz"] = data[: len(data) // 2]
    root = tmp_path / "data"
    (root / NAME / "Training_Images").mkdir(parents=True)
    (root / NAME / "Training_Images" / "mine.jpg").write_bytes(b"user data")
    before = _files(root / NAME)
    with pytest.raises(DownloadError, match="exists but is incomplete"):
        download_dataset(SMALL, root, url=server.url("/t.tar.gz"))
    assert server.requests == []
    with pytest.raises(DownloadError, match="truncated or corrupt"):
        download_dataset(SMALL, root, url=server.url("/t.tar.gz"), force=True)
    assert _files(root / NAME) == before
    assert not list(root.glob(f".{NAME}.*"))


@pytest.mark.parametrize(
    "raw",
    [
        {f"{SMALL.archive_top}/../evil.jpg": b"escape"},
        {"/tmp/seg_download_evil.jpg": b"absolute"},
        {f"{SMALL.archive_top}/Training_Images/../../evil.jpg": b"escape"},
    ],
    ids=["dotdot", "absolute", "nested-dotdot"],
)
def test_path_traversal_is_rejected(server, vikram, tmp_path, raw):
    server.files["/p.tar.gz"] = make_archive(vikram, raw=raw)
    root = tmp_path / "data"
    with pytest.raises(DownloadError, match="unsafe path"):
        download_dataset(SMALL, root, url=server.url("/p.tar.gz"))
    assert not (tmp_path / "evil.jpg").exists()
    assert_nothing_left(root)


def test_link_members_are_rejected(vikram, tmp_path):
    top = SMALL.archive_top
    buf = io.BytesIO(make_archive(vikram))
    archive = tmp_path / "links.tar"  # plain tar: append a symlink the patterns select
    with tarfile.open(fileobj=buf) as src, tarfile.open(archive, "w") as tar:
        for member in src:
            tar.addfile(member, src.extractfile(member) if member.isfile() else None)
        _add(tar, f"{top}/Training_Images/9.jpg", kind=tarfile.SYMTYPE, link="/etc/passwd")
    root = tmp_path / "data"
    with pytest.raises(DownloadError, match="not a regular file"):
        download_dataset(SMALL, root, url=archive.as_uri())
    assert_nothing_left(root)


def test_shared_copy_is_present(shared_datasets, monkeypatch):
    monkeypatch.setenv("SEG_DATA_DIR", str(shared_datasets))
    root = resolve_data_root(None)  # data.root not given: the environment's
    assert root == shared_datasets.absolute()
    for name, d in DATASETS.items():
        if d.fetcher is None or d.fetcher.on_request:  # your own data; coco_person
            continue
        assert not d.fetcher.problems(root / name), name
        assert dataset_folder(name, root, download=False) == root / name


def test_subset_is_not_present(vikram_subset):
    assert SOURCES[NAME].problems(vikram_subset.parent / NAME)
    assert SOURCES["ccp"].problems(vikram_subset.parent / "ccp") == ["no such folder"]


def test_a_missing_dataset_without_download_says_what_to_do(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        dataset_folder("ccp", tmp_path, download=False)
    message = str(err.value)
    assert f"python scripts/download_data.py ccp --root {tmp_path}" in message
    assert SOURCES["ccp"].url in message and "SEG_DATA_DIR" in message
    assert "photos/0001.jpg .. 1004.jpg" in message


def test_resolve_data_root(monkeypatch, tmp_path):
    monkeypatch.delenv("SEG_DATA_DIR", raising=False)
    assert resolve_data_root("data", base=tmp_path) == tmp_path / "data"
    assert resolve_data_root(tmp_path / "x") == tmp_path / "x"
    assert resolve_data_root(None, base=tmp_path) == tmp_path / "data"
    monkeypatch.setenv("SEG_DATA_DIR", str(tmp_path / "elsewhere"))
    assert resolve_data_root(None, base=tmp_path) == tmp_path / "elsewhere"
    assert resolve_data_root("data", base=tmp_path) == tmp_path / "data"  # a given root wins


def test_unknown_names_list_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown dataset 'nope'; valid: \['eg_portrait', 'ccp'"):
        dataset("nope")
    assert dataset_folder("folder", tmp_path, download=False) == tmp_path  # your own data


def test_source_table_matches_the_shared_copy(shared_datasets):
    """Every kept folder of the shared copy holds exactly the counts, and the patterns select
    all of its files (so a download reproduces that layout)."""
    for source in SOURCES.values():
        folder = shared_datasets / source.name
        kept = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
        if source.into:  # files beside into/ are the copy's own notes (README, exclusions)
            kept = [rel for rel in kept if rel.startswith(source.into + "/")]
        assert all(source.wants(rel) for rel in kept), [r for r in kept if not source.wants(r)]
        for rel, count in source.counts.items():
            assert len(os.listdir(folder / rel)) == count, (source.name, rel)
    assert not SOURCES["ccp"].wants("photos/1005.jpg")
    assert not SOURCES["ccp"].wants("annotations/image-level/1005.mat")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SEG_DATA_DIR"}
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "download_data.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_failure_is_a_readable_message(server, vikram, tmp_path):
    data = make_archive(vikram)
    server.files["/t.tar.gz"] = data[: len(data) // 2]
    result = _cli(NAME, "--root", str(tmp_path), "--url", server.url("/t.tar.gz"), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "truncated or corrupt" in result.stderr
    assert "Traceback" not in result.stderr
    assert_nothing_left(tmp_path)


def test_cli_all_finds_an_existing_copy(shared_datasets, tmp_path):
    result = _cli("all", "--root", str(shared_datasets), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in SOURCES:
        assert f"{name}: {shared_datasets / name}" in result.stdout


def _repo_archive(source, files: dict[str, bytes]) -> bytes:
    """A GitHub-style archive of ``source``'s repository holding ``files`` (repository paths)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel, data in files.items():
            _add(tar, f"{source.archive_top}/{rel}", data)
    return buf.getvalue()


def test_a_dataset_from_a_repository_folder_and_a_curated_subset(server, shared_datasets, tmp_path):
    """coco128_seg comes from the coco128-seg/ folder of its repository, into the dataset's
    top; imagenet_negatives takes only the photos its manifest names, into images/ (the
    repository's other photos show people)."""
    coco = shared_datasets / "coco128_seg"
    stems = ("000000000009", "000000000025")
    wanted = [f"images/train2017/{s}.jpg" for s in stems] + [
        f"labels/train2017/{s}.txt" for s in stems
    ]
    small = dataclasses.replace(
        SOURCES["coco128_seg"],
        counts={"images/train2017": 2, "labels/train2017": 2},
        digests={
            k: v for k, v in read_manifest(manifest_path("coco128_seg")).items() if k in wanted
        },
    )
    repo = {f"coco128-seg/{rel}": (coco / rel).read_bytes() for rel in wanted}
    repo["README.md"] = b"the repository's own readme: not the dataset's"
    repo["coco128/images/train2017/000000000009.jpg"] = b"another folder"
    server.files["/coco.tar.gz"] = _repo_archive(small, repo)
    out = download_dataset(small, tmp_path / "data", url=server.url("/coco.tar.gz"))
    assert sorted(_files(out)) == sorted([*wanted, MARKER])
    assert all(_files(out)[rel] == (coco / rel).read_bytes() for rel in wanted)

    negatives = shared_datasets / "imagenet_negatives" / "images"
    kept = sorted(p.name for p in negatives.iterdir())[:2]
    source = dataclasses.replace(
        SOURCES["imagenet_negatives"],
        counts={"images": 2},
        digests={f"images/{n}": sha256_file(negatives / n) for n in kept},
    )
    repo = {name: (negatives / name).read_bytes() for name in kept}
    repo["n09999999_a_person.JPEG"] = b"a photo that shows a person: not in the manifest"
    server.files["/neg.tar.gz"] = _repo_archive(source, repo)
    out = download_dataset(source, tmp_path / "data", url=server.url("/neg.tar.gz"))
    assert sorted(_files(out)) == sorted([*(f"images/{n}" for n in kept), MARKER])


def test_coco_person_is_fetched_photo_by_photo_and_resumes(server, shared_datasets, tmp_path):
    """COCO's annotation archive (here: a small one made of coco128 photos, served from
    127.0.0.1) continues from its last byte after a dropped connection; the masks are written;
    only the photos with people and the chosen share of the others are fetched, each once."""
    coco = shared_datasets / "coco128_seg" / "images" / "train2017"
    stems = ["000000000061", "000000000034", "000000000049", "000000000009"]
    images, anns = [], []
    for i, stem in enumerate(stems, 1):
        h, w = cv2.imread(str(coco / f"{stem}.jpg")).shape[:2]
        images.append({"id": i, "file_name": f"{stem}.jpg", "height": h, "width": w})
    anns.append(
        {
            "image_id": 1,
            "category_id": 1,
            "iscrowd": 0,
            "segmentation": [[10, 10, 200, 10, 200, 300, 10, 300]],
        }
    )
    anns.append(
        {
            "image_id": 2,
            "category_id": 24,
            "iscrowd": 0,  # a zebra
            "segmentation": [[10, 10, 100, 10, 100, 100]],
        }
    )
    anns.append(
        {
            "image_id": 3,
            "category_id": 1,
            "iscrowd": 1,  # a crowd only: no person
            "segmentation": {
                "size": [images[2]["height"], images[2]["width"]],
                "counts": [0, images[2]["height"] * images[2]["width"]],
            },
        }
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for split in ("train2017", "val2017"):
            body = {
                "images": images if split == "train2017" else images[:1],
                "annotations": anns if split == "train2017" else anns[:1],
            }
            zf.writestr(f"annotations/instances_{split}.json", json.dumps(body))
            for stem in stems:
                server.files[f"/{split}/{stem}.jpg"] = (coco / f"{stem}.jpg").read_bytes()
    archive = "/annotations/annotations_trainval2017.zip"
    server.files[archive] = buf.getvalue()
    server.drop.add(archive)
    root = tmp_path / "data"
    with pytest.raises(DownloadError, match="run the same command again to resume"):
        download_coco_person(root, negatives_share=0.0, base_url=server.url(""))
    assert not (root / "coco_person" / MARKER).exists()
    server.drop.clear()
    out = download_coco_person(root, negatives_share=0.0, base_url=server.url(""))
    assert server.ranges and server.ranges[0][0] == archive  # continued, not fetched again
    assert sorted(p.name for p in (out / "images" / "train2017").iterdir()) == [f"{stems[0]}.jpg"]
    masks = sorted(p.name for p in (out / "masks" / "train2017").iterdir())
    assert masks == [f"{stems[0]}.png"]
    marker = json.loads((out / MARKER).read_text())
    assert marker["splits"]["train2017"]["with_people"] == 1
    # All the others kept: the photos without people (the zebra, the crowd) too; none twice.
    server.requests.clear()
    (out / MARKER).unlink()
    again = download_coco_person(root, negatives_share=1.0, base_url=server.url(""))
    fetched = sorted(r for r in server.requests if r.endswith(".jpg"))
    assert fetched == sorted(f"/train2017/{s}.jpg" for s in stems[1:])
    crowd = cv2.imread(str(again / "masks" / "train2017" / f"{stems[2]}.png"), cv2.IMREAD_UNCHANGED)
    assert (crowd == 255).all()
    # data=coco_person reads it: train2017 trains, val2017 is halved into val and test.
    listing = list_source(
        compose_config(["data=coco_person", f"data.root={root}"]).data, "coco_person"
    )
    assert listing.splits["train"] == sorted(stems)
    assert sorted(listing.splits["val"] + listing.splits["test"]) == [stems[0]]
    with pytest.raises(DatasetNotFoundError, match=r"download_data\.py coco_person"):
        list_source(
            compose_config(["data=coco_person", f"data.root={tmp_path}"]).data, "coco_person"
        )
