"""The fine-tuning study of docs/training.md: fine-tune a base model on 50, 100 and all of a
held-out source's training photos, beside the base alone and a run from ImageNet.

    # 1. the base: the recipe with vikram_human_seg held out (~55 min on 2 cores)
    SEG_DATA_DIR=../shared/datasets python scripts/train.py +exp=dual_channel_pretrained_cpu \\
        "data.train_sources=[eg_portrait,ccp]" trainer.epochs=8 \\
        trainer.run_dir=runs/ft_base_loo_vikram
    # 2. the held-out photos as data=folder folders, each row trained and tested (~45 min)
    SEG_DATA_DIR=../shared/datasets python scripts/finetune_study.py run
    # 3. the table, printed or written into docs/training.md
    python scripts/finetune_study.py table [--write]

Rows already done (their test metrics written) are skipped, so ``run`` continues where it
stopped. Run it on an idle machine: the table quotes each run's training minutes.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path

from seg.cli import LOG_FORMAT, user_errors
from seg.data.download import resolve_data_root
from seg.study import EVAL, ROWS, Row, build_folders, row_figures, study_table, with_study_table

log = logging.getLogger("finetune_study")
RECIPE = "+exp=dual_channel_pretrained_cpu"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["folders", "run", "table"])
    parser.add_argument("--base", type=Path, default=Path("runs/ft_base_loo_vikram"))
    parser.add_argument("--source", default="vikram_human_seg", help="the held-out source")
    parser.add_argument("--root", type=Path, default=Path("runs/ft_study"))
    parser.add_argument("--write", action="store_true", help="table: into --doc")
    parser.add_argument("--doc", type=Path, default=Path("docs/training.md"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    with user_errors("finetune_study"):
        if args.action == "table":
            return table(args)
        folders = build_folders(
            args.base,
            args.source,
            resolve_data_root(None),
            args.root / "data",
            sorted({r.photos for r in ROWS}),
        )
        log.info("folders: %s", ", ".join(str(f) for f in folders.values()))
        if args.action == "run":
            for row in ROWS:
                if not run_row(row, args.base, args.root, folders[row.photos]):
                    return 1
    return 0


def run_dir(row: Row, base: Path, root: Path) -> Path:
    return base if row.start == "base" and not row.epochs else root / row.name


def run_row(row: Row, base: Path, root: Path, folder: Path) -> bool:
    """Train (unless it is the base alone) and test one row, unless its test is written;
    False when a step failed (its own log says why)."""
    out = run_dir(row, base, root)
    if (out / EVAL).is_file():
        log.info("%s: done (%s)", row.name, out / EVAL)
        return True
    log.info("%s: %s", row.name, out)
    if row.epochs:
        init = [f"trainer.init_from={base}"] if row.start == "base" else []
        trained = _call(
            "train.py",
            RECIPE,
            "data=folder",
            f"data.root={folder}",
            *init,
            f"trainer.epochs={row.epochs}",
            f"trainer.run_dir={out}",
            "trainer.resume=auto",
            "logging.progress_bar=false",
        )
        if not trained:
            return False
    # backend=torch: the checkpoint as trained, without an ONNX export per row
    data = [] if row.epochs else ["data=folder", f"data.root={folder}"]
    return _call(
        "evaluate.py", f"checkpoint={out}", *data, "split=test", "backend=torch", "progress=false"
    )


def _call(script: str, *overrides: str) -> bool:
    command = [sys.executable, str(Path(__file__).parent / script), *overrides]
    log.info("%s", " ".join(command))
    code = subprocess.run(command).returncode
    if code:
        log.error("%s exited with %d", script, code)
    return code == 0


def table(args: argparse.Namespace) -> int:
    figures = []
    held_out = len(list((args.root / "data" / "all" / "images" / "train").iterdir()))
    for row in ROWS:
        photos = (row.photos or held_out) if row.epochs else 0  # the base saw none of them
        figures.append(row_figures(row, run_dir(row, args.base, args.root), photos))
    text = study_table(figures, args.source)
    if not args.write:
        print(text)
        return 0
    args.doc.write_text(with_study_table(args.doc.read_text(), text, str(args.doc)))
    log.info("rewrote the study table of %s", args.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
