"""Download the public datasets into the data folder.

    python scripts/download_data.py all
    python scripts/download_data.py vikram_human_seg ccp --root /big/disk/data
    python scripts/download_data.py ccp --url file:///tmp/fe34fb77721a9973fbae92c05f7f12b664d10110.tar.gz
    python scripts/download_data.py all --root ../shared/datasets --write-manifests  # maintainers
    python scripts/download_data.py coco_person --negatives-share 0.05   # COCO 2017, ~11 GB

The root defaults to $SEG_DATA_DIR, else the repository's data/ folder. See data/README.md.
``all`` is the GitHub-published datasets, ``coco_mini_person`` among them (123 COCO photos with
people, assembled from two repositories: seg/data/coco_mini.py); ``coco_person`` (COCO
2017's photos with people and their masks, from COCO's servers, resumable:
seg/data/coco_download.py) is fetched only when named, for its size.
Every download is checked against the SHA-256 manifests of seg/data/manifests/ before it is
moved into place; --write-manifests makes them anew from the copies at --root (copies of the
pinned commits: only a maintainer who has checked them does that).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from seg.data.download import DownloadError, FetchOptions, kept_files, resolve_data_root
from seg.data.manifest import manifest_path, write_manifest
from seg.data.registry import DATASETS, github_sources

# What each name fetches: seg/data/registry.py. ``all``: those not fetched only on request.
FETCHED = {n: d.fetcher for n, d in DATASETS.items() if d.fetcher is not None}
EVERY = [n for n, f in FETCHED.items() if not f.on_request]
ON_REQUEST = [n for n, f in FETCHED.items() if f.on_request]

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names",
        nargs="+",
        choices=[*FETCHED, "all"],
        metavar="NAME",
        help=f"datasets to fetch: {', '.join(EVERY)}, all (those), or {', '.join(ON_REQUEST)}",
    )
    parser.add_argument("--root", type=Path, help="data root (default: $SEG_DATA_DIR or data/)")
    parser.add_argument("--url", help="fetch from this URL (http(s):// or file://), one NAME only")
    parser.add_argument("--force", action="store_true", help="replace an existing dataset folder")
    parser.add_argument("--timeout", type=float, default=60.0, help="network timeout, seconds")
    parser.add_argument("--keep-archive", action="store_true", help="keep root/.downloads/*.tar.gz")
    parser.add_argument(
        "--negatives-share",
        type=float,
        default=0.05,
        help="coco_person: share of COCO's photos without people kept beside those with people",
    )
    parser.add_argument(
        "--write-manifests",
        action="store_true",
        help="write the manifests from the copies at --root",
    )
    args = parser.parse_args(argv)
    args.names = EVERY if "all" in args.names else list(dict.fromkeys(args.names))
    if args.url and len(args.names) != 1:
        parser.error(f"--url needs exactly one NAME, got {args.names}")
    archives = github_sources()
    if args.url and args.names[0] not in archives:
        parser.error(f"--url replaces one archive; {args.names[0]} is fetched from several")
    if args.write_manifests and set(args.names) - set(archives):
        parser.error(f"--write-manifests writes those of {', '.join(archives)}")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    args = parse_args(argv)
    root = args.root.expanduser().absolute() if args.root else resolve_data_root(None, base=REPO)
    if args.write_manifests:
        for name in args.names:
            path = manifest_path(name)
            source = github_sources()[name]
            n = write_manifest(root / name, kept_files(source, root / name), path)
            print(f"{path}: {n} files of {root / name}")
        return 0
    for name in args.names:
        try:
            options = FetchOptions(
                args.url, args.force, args.timeout, args.keep_archive, args.negatives_share
            )
            folder = FETCHED[name].fetch(root, options)
        except DownloadError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(f"interrupted: run the same command to continue {name}", file=sys.stderr)
            return 130
        print(f"{name}: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
