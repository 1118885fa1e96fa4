"""Score a checkpoint on any configured dataset and split at the images' original resolution.

    python scripts/evaluate.py split=test                       # the shipped person model
    python scripts/evaluate.py checkpoint=RUN/checkpoints/best.pt data=eg_portrait split=test
    python scripts/evaluate.py checkpoint=best.pt data=human_mix split=test tta=[flip] \\
        scales=[0.75,1.0,1.25]
    python scripts/evaluate.py checkpoint=best.pt data=folder data.root=/my/data split=all \\
        "data.folder.mask_pattern='{stem}_mask.png'" data.folder.encoding=instances
    python scripts/evaluate.py checkpoint=best.pt data=folder data.root=/big split=all \\
        eval_size=[1024,768] slide.window=[256,192] slide.stride=[128,96]
    python scripts/evaluate.py clips=data/clips/test       # video: flicker, lag, after a cut
    python scripts/evaluate.py clips=talk.mp4 clip_masks=talk_masks/

Options are Hydra overrides of ``seg.config.EvalConfig`` (configs/evaluate.yaml);
``checkpoint`` defaults to ``person``, the model the package ships (seg/zoo/person.md);
``data=NAME`` is any dataset config of configs/data/ (default: the checkpoint's). Writes
``metrics.json``, ``per_image.csv``, ``report.txt`` and ``worst/`` into ``out=DIR`` (default
``<run_dir>/eval/<data>_<split>/``) and prints a table per source with the line
``pixel accuracy X% vs target 88%: PASS/FAIL``. Runs under torchrun too (images sharded over
the ranks, counts summed). ``backend=auto|torch|onnxruntime`` picks what runs the network
(auto: ONNX Runtime on a CPU, its export cached beside the checkpoint; the metrics agree with
PyTorch's to 1e-4). See docs/evaluation.md. Exits 2 on bad input, naming it.
"""

from __future__ import annotations

import logging
import sys

from seg.cli import run_script

log = logging.getLogger("evaluate")


def main(argv: list[str]) -> int:
    return run_script("evaluate", __doc__, argv, _evaluate)


def _evaluate(argv: list[str]) -> int:
    from seg.config import compose_eval_config
    from seg.evaluation.scoring import run_evaluation

    cfg = compose_eval_config(argv)
    if cfg.clips is not None:
        from seg.evaluation.clips import run_clip_evaluation

        result = run_clip_evaluation(cfg)
        print(result["table"], flush=True)
        log.info("%s in %.1f s -> %s", cfg.clips, result["timing_s"]["total"], result["out_dir"])
        return 0
    result = run_evaluation(cfg)
    timing = result["timing_s"]
    print(result["table"], flush=True)
    log.info(
        "%d image(s) in %.1f s (scoring %.1f s, %.2f img/s; gallery %.1f s) -> %s",
        result["overall"]["images"],
        timing["total"],
        timing["scoring"],
        timing["images_per_s"],
        timing["gallery"],
        result["out_dir"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
