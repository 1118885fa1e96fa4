"""Ship a trained run as the package's model: its weights file, its card and the README's table.

    SEG_DATA_DIR=../shared/datasets python scripts/ship_model.py runs/person_v1
    SEG_DATA_DIR=../shared/datasets python scripts/ship_model.py runs/x --out-dir /tmp/try \\
        --max-images 4                    # a dry run: a few photos, nothing in the package

Writes ``<out-dir>/<name>.safetensors`` (fp16, the run's ``best.pt``), checks that its masks
agree with the fp32 checkpoint's on at least 99.5% of the test pixels, scores it as
``evaluate.py split=test`` does (all photos, and the first 16 of each source), times
``predict.py``'s per-photo work, and writes the card ``<out-dir>/<name>.md`` with those
figures. With the default ``--out-dir`` (the package's ``seg/zoo``) it also rewrites the
README's model table (``scripts/model_zoo.py``). Run it on an idle machine: the card quotes
the latency. Replace the shipped file only with a model better on the card's sets, old and new
figures in the commit message (one binary in the repository). Exits 1 when the agreement is
too low (the file is removed), 2 on bad input.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from seg.benchmark.inference import predictor_latency
from seg.benchmark.suite import machine_info
from seg.checkpoint import checkpoint_file, load_model_from_checkpoint
from seg.cli import LOG_FORMAT, user_errors
from seg.config import compose_eval_config
from seg.data.manifest import sha256_file
from seg.evaluation.scoring import run_evaluation
from seg.ship import (
    ShipError,
    card_fields,
    check_agreement,
    mask_agreement,
    test_figures,
    write_card,
    write_shipped,
)
from seg.zoo import DEFAULT, ZOO_DIR, card_file
from seg.zoo.table import shipped_cards, with_table, zoo_table

log = logging.getLogger("ship_model")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", help="a run folder (its checkpoints/best.pt) or a checkpoint")
    parser.add_argument("--name", default=DEFAULT, help="the model's name (default: person)")
    parser.add_argument("--out-dir", type=Path, default=ZOO_DIR)
    parser.add_argument("--max-images", type=int, default=0, help="per source; 0: all")
    parser.add_argument("--contention", default="", help="what shared the cores in training")
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    with user_errors("ship_model"):
        return ship(args)


def ship(args: argparse.Namespace) -> int:
    checkpoint = checkpoint_file(args.run)
    weights = args.out_dir / f"{args.name}.safetensors"
    card = card_file(weights)
    _, record = write_shipped(checkpoint, weights)
    card.write_text(f"---\nsha256: {sha256_file(weights)}\n---\n")  # loadable until the card
    try:
        agreement = mask_agreement(checkpoint, weights, "test", args.max_images)
        log.info("fp16 against fp32 masks: %s", agreement)
        check_agreement(agreement, weights)
    except ShipError as err:
        log.error("%s", err)
        weights.unlink()
        card.unlink()
        return 1
    model, cfg = load_model_from_checkpoint(weights)
    with tempfile.TemporaryDirectory() as tmp:
        figures = {}
        for key, limit in (("test", args.max_images), ("test_first16", 16)):
            overrides = [f"checkpoint={weights}", "split=test", f"out={tmp}/{key}"]
            result = run_evaluation(compose_eval_config([*overrides, f"max_images={limit}"]))
            print(result["table"], flush=True)
            figures[key] = test_figures(result)
    latency = {**predictor_latency(str(weights)), "machine": _machine()}
    fields = card_fields(
        args.name,
        weights,
        record,
        cfg,
        figures["test"],
        figures["test_first16"],
        agreement,
        latency,
        sum(p.numel() for p in model.parameters()),
        _machine(),
        args.contention,
    )
    write_card(card, fields)
    log.info("wrote %s and %s", weights, card)
    if args.out_dir.resolve() == ZOO_DIR and args.readme.is_file():
        text = with_table(args.readme.read_text(), zoo_table(shipped_cards(), args.readme.parent))
        args.readme.write_text(text)
        log.info("rewrote the model table of %s", args.readme)
    return 0


def _machine() -> str:
    info = machine_info("cpu")
    return f"a {info['cores']}-core {info['cpu']} ({info['isa']})"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
