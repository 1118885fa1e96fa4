"""Run in a fresh process by tests/test_memory.py: the peak memory of evaluation or prediction
on one large photo, in bytes per pixel of the photo.

argv: checkpoint, a ``data=folder`` root holding one ``images/*.jpg`` and its ``masks/*.png``,
``evaluate`` or ``predict``, an output folder. The job runs twice; the second run's peak
resident set above the warm process (imports, threads and allocator pools paid) is printed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from seg.benchmark.models import peak_rss, reset_peak_rss
from seg.checkpoint import load_model_from_checkpoint
from seg.config import compose_eval_config, compose_predict_config
from seg.data.io import header_pixels
from seg.evaluation.scoring import run_evaluation
from seg.inference.prediction import run_predict


def evaluate(checkpoint: str, root: Path, out: str) -> None:
    overrides = ["data=folder", f"data.root={root}", "split=all", "num_workers=0", "worst=1"]
    cfg = [f"checkpoint={checkpoint}", f"out={out}", "progress=false", *overrides]
    run_evaluation(compose_eval_config(cfg))


def predict(checkpoint: str, image: Path, out: str) -> None:
    model, train_cfg = load_model_from_checkpoint(checkpoint, device="cpu")
    options = [f"input={image}", "outputs=[mask,overlay]", "progress=false"]
    cfg = compose_predict_config([f"checkpoint={checkpoint}", f"out={out}", *options])
    run_predict(cfg, model, train_cfg)


def main() -> None:
    checkpoint, root, kind, out = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    image = next((root / "images").glob("*.jpg"))
    if kind == "evaluate":
        job = lambda: evaluate(checkpoint, root, out)  # noqa: E731
    else:
        job = lambda: predict(checkpoint, image, out)  # noqa: E731
    job()  # warm: imports, threads, allocator pools
    base = reset_peak_rss()
    job()
    print(f"{(peak_rss() - base) / header_pixels(image):.2f}")


if __name__ == "__main__":
    main()
