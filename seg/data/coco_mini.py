"""``coco_mini_person``: 123 COCO 2017 photos with people and COCO's person instances of them,
assembled from two small public COCO subsets on GitHub, each at a pinned commit.

Both repositories publish COCO's layout (``annotations/instances_{train,val}2017.json`` and
``{train,val}2017/<id>.jpg``). From their archives the photos that the manifest names are kept
(``images/<id>.jpg``, each checked against its SHA-256), and ``annotations/instances_person.json``
is made from their instance files: those photos (a photo in both repositories is taken from the
first), each with the COCO split it came from (``coco_split``), their person annotations as
COCO wrote them, and the person category. The annotation file is checked by the digest of its
content (:func:`content_digest`: the photos and every annotation, in any order), so that a
repository that changed its labels is refused, not trained on. As every download, the work
happens in hidden siblings renamed into place only once complete and verified. Layout::

    coco_mini_person/images/<12-digit id>.jpg
    coco_mini_person/annotations/instances_person.json
    coco_mini_person/.seg_download.json     (written last)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import json
import logging
import shutil
import tarfile
import tempfile
import urllib.error
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from seg.data.coco import COCO_PERSON, load_coco_instances
from seg.data.download import (
    MARKER,
    DownloadError,
    FetchOptions,
    archive_relative,
    fetch,
    swap_in,
)
from seg.data.manifest import manifest_path, manifest_problems, read_manifest
from seg.errors import ConfigError, DataError
from seg.locks import file_lock

log = logging.getLogger(__name__)

NAME = "coco_mini_person"
IMAGES = "images"
ANNOTATIONS = "annotations/instances_person.json"
COCO_SPLITS = ("train2017", "val2017")
DESCRIPTION = (
    "COCO 2017 photos with at least one person, person annotations only, from two small "
    "public COCO subsets"
)
# content_digest of the annotation file of the photos at the pinned commits (the shared copy's).
CONTENT_DIGEST = "21d72c82cdceceb25470a00b5789f3e16ee8339b4dca139fd0fb8c9d0ea93b91"


@dataclass(frozen=True)
class Repository:
    """One public COCO subset: ``folder`` holds COCO's layout inside the repository."""

    repo: str  # "owner/name"
    commit: str
    folder: str = ""

    @property
    def url(self) -> str:
        return f"https://github.com/{self.repo}/archive/{self.commit}.tar.gz"


REPOSITORIES = (
    Repository("Obmutescence/COCO-MINI", "644f29e7c1d2eefd9c4412d39bc5b0ee6fd0afd4"),
    Repository(
        "lizhogn/tiny_coco_dataset", "68523ddd6c27f9ba5d2f0caf7f6fe95cc2c99311", "tiny_coco"
    ),
)


def content_digest(instances: Mapping) -> str:
    """SHA-256 of what an annotation file says, whatever its order and spacing: each photo
    (id, file name, size, COCO split) and each annotation (all its fields), sorted by id."""
    digest = hashlib.sha256()
    for image in sorted(instances["images"], key=lambda im: int(im["id"])):
        fields = [image["id"], image["file_name"], image["width"], image["height"]]
        digest.update(json.dumps([*fields, image.get("coco_split")]).encode() + b"\n")
    for ann in sorted(instances["annotations"], key=lambda a: int(a["id"])):
        digest.update(json.dumps(ann, sort_keys=True).encode() + b"\n")
    return digest.hexdigest()


def photo_names(digests: Mapping[str, str] | None = None) -> set[str]:
    """The file names of the photos the manifest names (``images/<name>``)."""
    digests = read_manifest(manifest_path(NAME)) if digests is None else digests
    return {PurePosixPath(rel).name for rel in digests if rel.startswith(f"{IMAGES}/")}


def _extract(repository: Repository, archive: Path, dest: Path, wanted: set[str]) -> dict:
    """The wanted photos of one repository's archive into ``dest/images`` (those not there
    yet), and its instance files as ``{coco split: dict}``."""
    instances: dict[str, dict] = {}
    top = None
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            top, path = archive_relative(member.name, top)
            if repository.folder:
                if not path.startswith(repository.folder + "/"):
                    continue
                path = path[len(repository.folder) + 1 :]
            parts = path.split("/")
            photo = len(parts) == 2 and parts[0] in COCO_SPLITS and parts[1] in wanted
            split = next((s for s in COCO_SPLITS if path == f"annotations/instances_{s}.json"), "")
            if not (photo or split):
                continue
            if not member.isfile():  # a link could point anywhere
                raise DownloadError(f"{member.name} in {archive.name} is not a regular file")
            with tar.extractfile(member) as src:
                if split:
                    instances[split] = json.load(src)
                elif not (dest / IMAGES / parts[1]).exists():
                    with open(dest / IMAGES / parts[1], "wb") as out:
                        shutil.copyfileobj(src, out)
        while tar.fileobj.read(1 << 20):  # to the end: gzip checks its length and CRC
            pass
    return instances


def person_instances(sources: list[dict[str, dict]], names: set[str]) -> dict:
    """The annotation file of the photos ``names`` from the instance files of each repository
    (``[{coco split: instances dict}]``, first repository first): each photo once, the first
    repository's entry, with its ``coco_split``; its person annotations as COCO wrote them."""
    info = {"description": DESCRIPTION}
    images: list[dict] = []
    annotations: list[dict] = []
    licenses: list = []
    seen: set[str] = set()
    for split in COCO_SPLITS:
        for instances in sources:
            data = instances.get(split)
            if data is None:
                continue
            licenses = licenses or list(data.get("licenses", []))
            anns: dict[int, list[dict]] = {}
            for ann in data["annotations"]:
                if ann.get("category_id") == COCO_PERSON:
                    anns.setdefault(int(ann["image_id"]), []).append(ann)
            for image in data["images"]:
                name = image["file_name"]
                if name not in names or name in seen:
                    continue
                seen.add(name)
                keys = ("id", "file_name", "width", "height", "license")
                images.append({**{k: image[k] for k in keys if k in image}, "coco_split": split})
                annotations += anns.get(int(image["id"]), [])
    person = {"id": COCO_PERSON, "name": "person", "supercategory": "person"}
    return {
        "info": info,
        "licenses": licenses,
        "images": images,
        "annotations": annotations,
        "categories": [person],
    }


def download_coco_mini_person(
    root: Path,
    urls: Mapping[str, str] | None = None,
    timeout: float = 60,
    expected_digest: str | None = None,
    force: bool = False,
) -> Path:
    """Fetch ``coco_mini_person`` into ``root`` (module docstring) and return its folder; a
    complete one is returned as it is (``force``: replaced once the new one is whole).
    ``urls``: ``{owner/name: archive URL}`` replacing GitHub's archives (a mirror, a
    ``file://`` copy). Raises DownloadError naming what failed; nothing half-done is left in
    ``root/coco_mini_person``."""
    root = Path(root).expanduser().absolute()
    target = root / NAME
    if not force and ((target / MARKER).is_file() or (target / ANNOTATIONS).is_file()):
        return target
    digests = read_manifest(manifest_path(NAME))
    names = photo_names(digests)
    cache = root / ".downloads"
    cache.mkdir(parents=True, exist_ok=True)
    with file_lock(cache / f"{NAME}.lock"):
        if not force and (target / ANNOTATIONS).is_file():  # another process finished it
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{NAME}.partial-", dir=root))
        try:
            (tmp / IMAGES).mkdir()
            sources = []
            for repository in REPOSITORIES:
                url = (urls or {}).get(repository.repo, repository.url)
                archive = cache / f"{repository.repo.replace('/', '-')}-{repository.commit}.tar.gz"
                log.info("%s: photos and annotations of %s", NAME, url)
                try:
                    fetch(url, archive, timeout)
                    sources.append(_extract(repository, archive, tmp, names))
                except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
                    raise DownloadError(
                        f"could not download {NAME!r} from {url}: {err}. Run the same command "
                        f"again to resume, or see data/README.md for a copy by hand"
                    ) from err
                except (tarfile.TarError, EOFError, ValueError) as err:
                    archive.unlink(missing_ok=True)  # damaged: fetched whole next time
                    raise DownloadError(f"{url}: truncated or corrupt archive ({err})") from err
            instances = person_instances(sources, names)
            _check(tmp, instances, digests, expected_digest or CONTENT_DIGEST)
            (tmp / ANNOTATIONS).parent.mkdir(parents=True)
            (tmp / ANNOTATIONS).write_text(json.dumps(instances))
            marker = {
                "name": NAME,
                "repositories": [f"{r.repo}@{r.commit}" for r in REPOSITORIES],
                "photos": len(instances["images"]),
                "annotations": len(instances["annotations"]),
                "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            }
            (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
            swap_in(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for repository in REPOSITORIES:
            (cache / f"{repository.repo.replace('/', '-')}-{repository.commit}.tar.gz").unlink(
                missing_ok=True
            )
    log.info("%s is ready in %s", NAME, target)
    return target


def _check(folder: Path, instances: dict, digests: Mapping[str, str], expected: str) -> None:
    """The photos against the manifest, the annotations against their content digest."""
    problems = manifest_problems(folder, digests)
    if problems:
        raise DownloadError(
            f"{NAME}: the photos differ from {manifest_path(NAME)}; nothing was moved into "
            "place: " + "; ".join(problems)
        )
    found = content_digest(instances)
    if found != expected:
        raise DownloadError(
            f"{NAME}: the person annotations assembled from {[r.repo for r in REPOSITORIES]} "
            f"({len(instances['images'])} photos, {len(instances['annotations'])} annotations) "
            f"are not the pinned ones (content digest {found[:12]}..., expected "
            f"{expected[:12]}...); nothing was moved into place"
        )


def check_annotations(folder: Path, expected: str | None = None) -> list[str]:
    """Problems of an existing copy's annotation file (for ``check_data.py --verify``)."""
    path = folder / ANNOTATIONS
    try:
        found = content_digest(load_coco_instances(path))
    except DataError as err:
        return [str(err)]
    if found != (expected or CONTENT_DIGEST):
        return [f"{ANNOTATIONS}: its content differs from the pinned annotations"]
    return []


class CocoMiniPerson:
    """How ``coco_mini_person`` is fetched and verified (``seg.data.registry``)."""

    name = NAME
    on_request = False

    def problems(self, folder: Path) -> list[str]:
        wanted = [folder / IMAGES, folder / ANNOTATIONS]
        return [f"{p.relative_to(folder)} is missing" for p in wanted if not p.exists()]

    def fetch(self, root: Path, options: FetchOptions | None = None) -> Path:
        o = options or FetchOptions()
        if o.url:
            raise ConfigError(f"--url replaces one archive; {NAME} is assembled from two")
        return download_coco_mini_person(root, timeout=o.timeout, force=o.force)

    def verify(self, folder: Path) -> list[str]:
        digests = read_manifest(manifest_path(NAME))
        return manifest_problems(folder, digests) + check_annotations(folder)

    def instructions(self, root: Path) -> str:
        repos = ", ".join(f"{r.url}" for r in REPOSITORIES)
        return (
            f"To get {NAME!r}: run python scripts/download_data.py {NAME} --root {root} (it "
            f"fetches {repos}), or set SEG_DATA_DIR (or data.root) to a folder holding a copy"
        )
