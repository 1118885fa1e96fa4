"""Export a trained model to ONNX (dynamic batch, height and width) and check it in ONNX Runtime.

    python scripts/export.py out=person.onnx                     # the shipped person model
    python scripts/export.py checkpoint=runs/x/checkpoints/best.pt out=model.onnx
    python scripts/export.py checkpoint=best.pt out=model.onnx images=photos/ opset=18
    python scripts/export.py checkpoint=best.pt out=model.onnx verify=false

Options are Hydra-style key=value overrides of ``seg.config.ExportConfig``: checkpoint (default:
person, the shipped model), out, opset (default: the exporter's), verify (default true), images
(an image or a folder to verify on; default: seeded random images), max_images, sizes
(verification (H, W) pairs), batch_sizes, tolerance (max |logit difference|, default 1e-3),
min_agreement (mask pixels, default 0.999). The graph: input ``image`` float32 (batch, 3,
height, width), normalised as in training (mean/std in the file's ``seg.*`` metadata), output
``logits`` (batch, K, height, width); any height and width work. Prints the verification figures
as JSON; exits 1 when they miss the tolerances, 2 on bad input.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

from seg.checkpoint import checkpoint_file, load_model_from_checkpoint
from seg.cli import run_script
from seg.config import ExportConfig, compose_options
from seg.export import ExportMismatchError, check_out, run_export

log = logging.getLogger("export")


def main(argv: list[str]) -> int:
    return run_script("export", __doc__, argv, _export)


def _export(argv: list[str]) -> int:
    cfg = compose_options(ExportConfig, "export_config", argv)
    cfg = dataclasses.replace(cfg, checkpoint=str(checkpoint_file(cfg.checkpoint)))  # a name
    check_out(Path(cfg.out), Path(cfg.checkpoint))  # before anything is loaded or written
    model, train_cfg = load_model_from_checkpoint(cfg.checkpoint, device="cpu")
    try:
        result = run_export(cfg, model, train_cfg)
    except ExportMismatchError as err:
        log.error("%s", err)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
