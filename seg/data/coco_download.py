"""``coco_person``: COCO 2017's person masks, fetched from COCO's own servers.

COCO's official annotation archive (``annotations_trainval2017.zip``, 241 MB) is fetched with
resume (an interrupted download continues from its last byte: HTTP ``Range``); its instance
files give one PNG mask per kept photo (``seg.data.coco.write_coco_person_masks``: person 1,
crowd regions 255 = ignore, else 0); then each kept photo is fetched on its own from COCO's
image server (``<base>/<split>2017/<file>``), so only the photos with people (about 64k of
train2017's 118k, 2.7k of val2017's 5k) and a chosen share of the others are downloaded, not
the 18 GB image archive. A photo already there whole is not fetched again, so a stopped
download resumes where it stopped. Every file is written under a temporary name and renamed
when complete. Layout::

    coco_person/images/{train2017,val2017}/<id>.jpg
    coco_person/masks/{train2017,val2017}/<id>.png
    coco_person/.seg_download.json     (written last: the download is complete)
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import logging
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np

from seg.data.coco import COCO_PERSON, write_coco_person_masks
from seg.data.download import MARKER, DownloadError, FetchOptions, fetch
from seg.errors import ConfigError
from seg.fileio import atomic_path
from seg.locks import file_lock

log = logging.getLogger(__name__)

NAME = "coco_person"
BASE_URL = "http://images.cocodataset.org"
ANNOTATIONS = "annotations/annotations_trainval2017.zip"
SPLITS = ("train2017", "val2017")
MEAN_PHOTO_BYTES = 160_000  # train2017: 18 GB over 118k photos
_CHUNK = 1 << 20


def chosen_images(instances: dict, negatives_share: float, seed: int = 0) -> set[int]:
    """The ids of the photos with a non-crowd person, and ``negatives_share`` of the others
    (drawn with ``seed``)."""
    people = {
        int(a["image_id"])
        for a in instances["annotations"]
        if a.get("category_id") == COCO_PERSON and not a.get("iscrowd")
    }
    others = sorted(int(im["id"]) for im in instances["images"] if int(im["id"]) not in people)
    count = round(len(others) * negatives_share)
    drawn = np.random.default_rng(seed).choice(len(others), size=count, replace=False)
    return people | {others[i] for i in drawn}


def download_coco_person(
    root: Path,
    negatives_share: float = 0.05,
    base_url: str = BASE_URL,
    timeout: float = 60,
    splits: tuple[str, ...] = SPLITS,
) -> Path:
    """Fetch ``coco_person`` into ``root`` (module docstring) and return its folder.
    ``negatives_share``: the share of the photos without people that are kept too."""
    if not 0 <= negatives_share <= 1:
        raise ConfigError(f"negatives_share={negatives_share} must be in [0, 1]")
    root = Path(root).expanduser().absolute()
    target = root / NAME
    if (target / MARKER).is_file():
        return target
    cache = root / ".downloads"
    cache.mkdir(parents=True, exist_ok=True)
    with file_lock(cache / f"{NAME}.lock"):
        url = f"{base_url}/{ANNOTATIONS}"
        archive = cache / Path(ANNOTATIONS).name
        log.info("coco_person: COCO's annotation archive (241 MB) from %s, resumable", url)
        try:
            fetch(url, archive, timeout)
            counts = {
                s: _fetch_split(archive, s, target, negatives_share, base_url, timeout)
                for s in splits
            }
        except (urllib.error.URLError, http.client.HTTPException, OSError) as err:
            raise DownloadError(
                f"could not download coco_person from {base_url}: {err}. What is there is kept: "
                "run the same command again to resume"
            ) from err
        marker = {
            "name": NAME,
            "url": base_url,
            "negatives_share": negatives_share,
            "splits": counts,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        }
        with atomic_path(target / MARKER) as tmp:
            tmp.write_text(json.dumps(marker, indent=2) + "\n")
    return target


def _fetch_split(
    archive: Path, split: str, target: Path, share: float, base_url: str, timeout: float
) -> dict[str, int]:
    """Masks, then the photos, of one split; returns the mask counts and photos fetched."""
    member = f"annotations/instances_{split}.json"
    try:
        with zipfile.ZipFile(archive) as zf:
            instances = json.loads(zf.read(member))
    except (zipfile.BadZipFile, KeyError, ValueError) as err:
        archive.unlink(missing_ok=True)  # damaged: fetched whole next time
        raise DownloadError(f"{archive}: no readable {member} ({err}); removed it") from err
    keep = chosen_images(instances, share)
    images = [im for im in instances["images"] if int(im["id"]) in keep]
    size = len(images) * MEAN_PHOTO_BYTES / 1e9
    log.info("coco_person %s: %d photos (about %.1f GB) and their masks", split, len(images), size)
    counts = write_coco_person_masks(instances, target / "masks" / split, keep)
    fetched = 0
    for image in images:
        dest = target / "images" / split / image["file_name"]
        if dest.is_file():  # renamed into place only when whole
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        with (
            atomic_path(dest) as tmp,
            urllib.request.urlopen(
                f"{base_url}/{split}/{image['file_name']}", timeout=timeout
            ) as response,
        ):
            tmp.write_bytes(response.read())
        fetched += 1
    return {**counts, "fetched": fetched}


class CocoPerson:
    """How ``coco_person`` is fetched (``seg.data.registry``): only when named, for its size."""

    name = NAME
    on_request = True

    def problems(self, folder: Path) -> list[str]:
        wanted = [folder / kind / "train2017" for kind in ("images", "masks")]
        return [f"{p.relative_to(folder)}/ is missing" for p in wanted if not p.is_dir()]

    def fetch(self, root: Path, options: FetchOptions | None = None) -> Path:
        o = options or FetchOptions()
        if o.url:
            raise ConfigError(f"--url replaces one archive; {NAME} is fetched photo by photo")
        return download_coco_person(root, o.negatives_share, timeout=o.timeout)

    def verify(self, folder: Path) -> list[str]:
        return self.problems(folder)  # no manifest: COCO's servers are the reference

    def instructions(self, root: Path) -> str:
        return (
            f"{NAME} is large (COCO 2017's ~64k photos with people, about 11 GB) and fetched "
            f"only on request: python scripts/download_data.py {NAME} --root {root} "
            "(resumable; data/README.md)"
        )
