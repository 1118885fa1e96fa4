"""Person masks, overlays, cut-outs and background blur/replacement for images and videos.

    python scripts/predict.py input=photo.jpg                    # the shipped person model
    python scripts/predict.py checkpoint=runs/x/checkpoints/best.pt input=photo.jpg
    python scripts/predict.py checkpoint=best.pt input=photos/ out=preds outputs=[mask,cutout]
    python scripts/predict.py checkpoint=best.pt input=clip.mp4 outputs=[blur] batch_size=16
    python scripts/predict.py checkpoint=best.pt input=me.jpg outputs=[replace] \\
        background=beach.jpg alpha=soft tta=[flip] device=cuda:1

Options are Hydra-style key=value overrides of ``seg.config.PredictConfig`` (an
unknown key or a bad value fails at start, naming it):
  checkpoint  a checkpoint written by training, a run folder, or a shipped model's name
              (default: person, the model the package ships: seg/zoo/person.md)
  input       an image, a folder (its images and videos, not recursive) or a video (required)
  out         output folder (default outputs/predict); files are <name>_<kind>.<ext>
  outputs     any of [mask, overlay, cutout, blur, replace] (default [mask, overlay]):
              <name>_mask.png (0/255), _overlay.jpg, _cutout.png (RGBA), _blur.jpg, _bg.jpg;
              a video gives one <name>_<kind>.mp4 per kind (mp4v; no cutout: mp4 has no alpha)
  alpha       hard (the mask) or soft (person probability) for cutout, blur and replace
  background  replace: an image file or a colour (green, white, '#RRGGBB', 'R,G,B')
  device      auto (cuda, else mps, else cpu) | cpu | cuda[:N] | mps; column_devices=[cuda:0,
              cuda:1] splits a multi-column model over GPUs
  backend     auto (onnxruntime on a CPU, else torch) | torch | onnxruntime: ONNX Runtime runs
              the checkpoint's export, made once and cached beside it (<stem>.<key>.onnx);
              threads=N caps the CPU threads of either (docs/evaluation.md, "Backends")
  precision   fp32 | int8: ONNX Runtime on a quantised export, calibrated on the training
              photos or on calibration=<folder of photos> | bf16 | fp16: eager PyTorch under
              autocast (fp16 on GPUs only) (docs/evaluation.md, "Backends")
  tta         [] or [flip]: average with the mirrored input (tta=flip, as before, still works);
              with scales, slide.window, slide.stride and refine.*, the predictor's options as
              evaluate.py's (docs/evaluation.md)
  batch_size, blur_sigma, overlay_colour, overlay_opacity, jpeg_quality, on_bad_input (error |
  skip), progress
Prediction runs at each image's own resolution (see seg/inference/predictor.py). Outputs are
written to temporary files and renamed when complete. Exits 2 on bad input, naming the file.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from seg.cli import run_script
from seg.config import compose_predict_config
from seg.inference import run_predict
from seg.inference.backend import load_for
from seg.inference.media import find_inputs

log = logging.getLogger("predict")


def main(argv: list[str]) -> int:
    return run_script("predict", __doc__, argv, _predict)


def _predict(argv: list[str]) -> int:
    cfg = compose_predict_config(argv)
    find_inputs(Path(cfg.input))  # a missing input fails before the model is loaded or exported
    model, train_cfg = load_for(cfg)
    summary = run_predict(cfg, model, train_cfg)
    log.info(
        "%d image(s), %d video frame(s) on %s (%s) -> %d file(s) in %s%s",
        summary["images"],
        summary["frames"],
        summary["device"],
        summary["backend"],
        len(summary["written"]),
        cfg.out,
        f"; skipped {summary['skipped']}" if summary["skipped"] else "",
    )
    stages = summary.get("video_seconds")
    if stages:  # end-to-end video throughput and where its time goes
        total = sum(stages.values())
        shares = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in stages.items())
        fps = summary["frames"] / total
        log.info(
            "video: %d frames in %.1f s, %.1f frames/s (%s)", summary["frames"], total, fps, shares
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
