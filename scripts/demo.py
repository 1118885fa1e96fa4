"""A local page to try a trained model on photos, videos and the webcam (Gradio).

    pip install -e ".[demo]"
    python scripts/demo.py                                   # the shipped person model
    python scripts/demo.py checkpoint=runs/x                 # a run folder, a .pt, or
    python scripts/demo.py checkpoint=runs                   # a folder of runs: a model picker
    python scripts/demo.py checkpoint=runs/x examples=photos/ port=8080

Options are Hydra-style key=value overrides of ``seg.config.DemoConfig``:
  checkpoint  a checkpoint, a run folder, a folder of run folders, or a shipped model's name
              (default: person, the model the package ships: seg/zoo/person.md)
  host, port  where the page listens (default 127.0.0.1:7860; port=0: a free port). host=0.0.0.0
              serves everyone who can reach this machine: there is no login (README, "Demo page")
  examples    a folder whose first max_examples photos the page offers as examples
  device, column_devices, backend, threads, precision, calibration, slide.*, refine.*: as
              predict.py's (ONNX Runtime on a CPU by default): the page predicts with its predictor
  webcam_fps  frames per second the browser sends at most (default 10)
  max_pixels  photos beyond it are refused with a message (default: predict.py's limit)
The page offers per photo: threshold, test-time flip and scales, soft edges, background colour
or photo. Prints the page's address once it listens. Ctrl-C (SIGINT), SIGTERM or SIGHUP stop
it within a few seconds, whatever is running (seg/demo.py says how), its temporary files
removed: exit 0 after Ctrl-C, 128 + the signal's number otherwise (143 for SIGTERM). Exits 2
on bad options or a damaged checkpoint, naming it.
"""

from __future__ import annotations

import logging
import os
import sys

from seg.cli import run_script

log = logging.getLogger("demo")


def main(argv: list[str]) -> int:
    return run_script("demo", __doc__, argv, _demo)


def _demo(argv: list[str]) -> int:
    from seg.config import compose_demo_config

    cfg = compose_demo_config(argv)
    from seg.demo import Models, import_gradio, serve, warm_up

    import_gradio()  # before loading any model: says how to install it where it is missing
    models = Models(cfg)
    try:
        warm_up(models, models.labels[:1])  # the first model's export, before the page opens
        stop = serve(cfg, models, ready=lambda url: print(f"demo page: {url}", flush=True))
    except KeyboardInterrupt:  # Ctrl-C while loading, or twice while stopping
        log.info("interrupted")
        _exit_now(130)
    if stop.running:  # threads inside the backend: the interpreter's exit would wait or abort
        _exit_now(stop.exit_code)
    return stop.exit_code


def _exit_now(code: int) -> None:
    """End the process now, its output flushed: no waiting for threads still predicting."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
