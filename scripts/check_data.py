"""Scan whole datasets and print a table: pairs, image sizes, person fraction, problems.

    python scripts/check_data.py eg_portrait ccp vikram_human_seg
    python scripts/check_data.py all data.root=../shared/datasets
    python scripts/check_data.py folder data.root=/my/data \\
        data.folder.mask_pattern="{stem}_mask.png"
    python scripts/check_data.py all --verify   # every file against its SHA-256 manifest

Names are data configs (configs/data/); arguments with '=' are Hydra overrides.
Exits 1 when a problem was found.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from seg.cli import user_errors
from seg.config import compose_config
from seg.data import source_names
from seg.data.check import format_reports, scan_source
from seg.data.download import resolve_data_root
from seg.data.manifest import manifest_path, read_manifest
from seg.data.registry import DATASETS, Role
from seg.fileio import write_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("args", nargs="+", help="dataset names (or 'all') and key=value overrides")
    parser.add_argument("--workers", type=int, default=2, help="decoding processes")
    parser.add_argument("--json", type=Path, help="also write the reports as JSON here")
    parser.add_argument(
        "--verify", action="store_true", help="check every file against its SHA-256 manifest"
    )
    ns = parser.parse_intermixed_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    overrides = [a for a in ns.args if "=" in a]
    names = [a for a in ns.args if "=" not in a]
    if names == ["all"]:  # the datasets download_data.py all fetches that have masks
        names = [
            n
            for n, d in DATASETS.items()
            if d.fetcher is not None and not d.fetcher.on_request and d.role is not Role.negatives
        ]
    if ns.verify:
        return verify(names, overrides)
    reports = []
    for name in names:
        cfg = compose_config([f"data={name}", *overrides]).data
        reports.extend(scan_source(cfg, source, ns.workers) for source in source_names(cfg))
    print(format_reports(reports))
    if ns.json:
        write_text(ns.json, json.dumps([r.as_dict() for r in reports], indent=2))
    return 1 if any(r.problems for r in reports) else 0


def verify(names: list[str], overrides: list[str]) -> int:
    """Each downloadable source of ``names`` against its manifest; 1 if any file differs."""
    failed = False
    for name in names:
        cfg = compose_config([f"data={name}", *overrides]).data
        root = resolve_data_root(cfg.root)
        for source in source_names(cfg):
            fetcher = DATASETS[source].fetcher
            if fetcher is None:  # your own data: no manifest
                continue
            problems = fetcher.verify(root / source)
            failed |= bool(problems)
            manifest = manifest_path(source)
            count = len(read_manifest(manifest)) if manifest.is_file() else 0
            verdict = "; ".join(problems) or f"all {count} files match {manifest}"
            print(f"{source} ({root / source}): {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    with user_errors("check_data"):  # a missing root or a bad key: one line, exit code 2
        sys.exit(main())
