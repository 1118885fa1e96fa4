"""Write the val and test clips with ground truth in every frame (seg/data/clips.py).

    SEG_DATA_DIR=../shared/datasets python scripts/make_clips.py              # data/clips
    python scripts/make_clips.py --out /tmp/clips --sets val --kinds swing --clips-per-kind 1

The same seed writes the same pixels on any machine (each clip.json holds their SHA-256).
Exits 2 on bad input (a missing dataset, an unknown kind).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from seg.cli import LOG_FORMAT, user_errors
from seg.data.clips import KINDS, SETS, make_clip_sets
from seg.data.download import resolve_data_root

log = logging.getLogger("make_clips")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("data/clips"))
    parser.add_argument("--root", type=Path, default=None, help="datasets ($SEG_DATA_DIR)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--clips-per-kind", type=int, default=3)
    parser.add_argument("--frames", type=int, default=30)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    with user_errors("make_clips"):
        index = make_clip_sets(
            resolve_data_root(args.root), args.out, args.seed, args.clips_per_kind,
            args.frames, args.sets, args.kinds,
        )  # fmt: skip
        for set_name, records in index["sets"].items():
            frames = sum(r["frames"] for r in records)
            log.info("%s: %d clips, %d frames in %s", set_name, len(records), frames,
                     args.out / set_name)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
