"""Shipping a trained run as the package's model (``scripts/ship_model.py``): its weights file
(``seg.zoo.write_weights``: fp16, safetensors), the check that the fp16 masks agree with the fp32
checkpoint's on the test photos, and the model card (YAML front matter that the loader, the
zoo table and the tests read, then the text a person reads).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import yaml

from seg.checkpoint import checkpoint_file, load_checkpoint, load_model_from_checkpoint
from seg.config import Config, DataConfig, EvalConfig
from seg.data.manifest import sha256_file
from seg.errors import UserError
from seg.evaluation.samples import list_items
from seg.evaluation.scoring import source_predictors
from seg.fileio import write_text
from seg.models.deploy import deploy_model
from seg.runs import RunLayout
from seg.zoo import write_weights

log = logging.getLogger(__name__)

MIN_AGREEMENT = 0.995  # of the test pixels: the fp16 file's masks against the fp32 checkpoint's


class ShipError(UserError, RuntimeError):
    """The weights file does not reproduce its checkpoint closely enough to ship."""


def run_record(checkpoint: Path) -> dict[str, Any]:
    """What the run folder of ``checkpoint`` says of how it was trained: the command (argv as
    run), commit, the epoch and step of the checkpoint, and the wall time of the whole run (its
    ``last.pt``'s, which the run wrote at its end)."""
    ckpt = load_checkpoint(checkpoint, mmap=True)
    run = RunLayout.of_checkpoint(checkpoint.absolute())
    last = run.last if run is not None and run.last.is_file() else checkpoint
    elapsed = load_checkpoint(last, mmap=True).get("elapsed_s") or ckpt.get("elapsed_s") or 0
    info: dict[str, Any] = {}
    if run is not None and run.info.is_file():
        info = json.loads(run.info.read_text())
    argv = info.get("argv") or []
    return {
        "command": " ".join(["python", *argv]) if argv else "",
        "commit": (info.get("git") or {}).get("commit", ""),
        "dirty": bool((info.get("git") or {}).get("dirty", False)),
        "torch": info.get("torch", ""),
        "wall_time_min": round(float(elapsed) / 60, 1),
        "epoch": ckpt.get("epoch"),
        "step": ckpt.get("step"),
    }


def write_shipped(checkpoint: str | Path, out: Path) -> tuple[Path, dict[str, Any]]:
    """The weights file of ``checkpoint`` (a file or a run folder: its ``best.pt``) at ``out``;
    returns it and :func:`run_record`."""
    path = checkpoint_file(checkpoint)
    record = run_record(path)
    if record["dirty"]:
        raise ShipError(f"{path} was trained from a commit with uncommitted changes: not shipped")
    write_weights(load_checkpoint(path), out, record["command"], record["commit"], path.name)
    log.info("wrote %s (%.1f MB)", out, out.stat().st_size / 1e6)
    return out, record


def mask_agreement(
    reference: str | Path, weights: Path, split: str = "test", max_images: int = 0
) -> dict[str, Any]:
    """The share of ``split``'s pixels on which the masks of ``weights`` (fp16 stored) and of
    ``reference`` (the fp32 checkpoint) agree, per source and over all, each source at its eval
    size (eager PyTorch on the CPU, no TTA: ``evaluate.py``'s predictors)."""
    ref_model, cfg = load_model_from_checkpoint(checkpoint_file(reference))
    new_model, _ = load_model_from_checkpoint(weights)
    data = dataclasses.replace(cfg.data, root=None)
    options = EvalConfig(checkpoint=str(weights), device="cpu")
    ref = source_predictors(deploy_model(ref_model), cfg, options, data)
    new = source_predictors(deploy_model(new_model), cfg, options, data)
    counts: dict[str, list[int]] = {}
    for item in list_items(data, split, max_images):
        image, _ = item.dataset.load_raw(item.position)
        a = ref[item.source].labels([image])[0]
        b = new[item.source].labels([image])[0]
        agree, total = counts.setdefault(item.source, [0, 0])
        counts[item.source] = [agree + int((a == b).sum()), total + a.numel()]
    agree, total = (sum(c[i] for c in counts.values()) for i in (0, 1))
    return {
        "per_source": {s: round(a / t, 6) for s, (a, t) in counts.items()},
        "all": round(agree / total, 6),
        "pixels": total,
    }


def check_agreement(agreement: dict[str, Any], weights: Path) -> None:
    if agreement["all"] < MIN_AGREEMENT:
        raise ShipError(
            f"{weights}: its masks agree with the fp32 checkpoint's on {agreement['all']:.4%} of "
            f"the test pixels, under the {MIN_AGREEMENT:.1%} a shipped model needs"
        )


def test_figures(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per source of an ``evaluate.py`` ``metrics.json``: the card's figures (percent, two
    decimals), the photos scored and the size they were scored at."""
    out = {}
    for source, m in metrics["per_source"].items():
        row = {
            "eval_size": list(metrics["eval_sizes"][source]),
            "iou_person": _pct(m.get("iou_person")),
            "pixel_acc": _pct(m.get("pixel_acc")),
        }
        if m.get("empty_images"):  # photos without people: the share of their pixels called person
            empty = int(m["empty_images"])
            row["empty_person_share"] = _pct(m.get("empty_person_share"))
            row["empty_images"] = empty
            row["empty_over_1pct"] = round(float(m.get("empty_over_1pct") or 0) * empty)
        out[source] = row
    return out


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _pct(value: float | None) -> float | None:
    return None if value is None else round(100 * float(value), 2)


def card_fields(
    name: str,
    weights: Path,
    record: dict[str, Any],
    cfg: Config,
    test: dict[str, Any],
    first16: dict[str, Any],
    agreement: dict[str, Any],
    latency: dict[str, Any],
    parameters: int,
    machine: str,
    contention: str = "",
) -> dict[str, Any]:
    """The card's front matter (what ``seg.zoo`` checks and ``scripts/model_zoo.py`` reads)."""
    data: DataConfig = cfg.data
    shares = dict(data.source_shares or {})
    sources = [
        f"{s} ({shares[s]:.0%} of the photos with people)" if s in shares else s
        for s in data.sources
    ]
    if data.negatives_p:
        sources.append(f"{data.negatives} ({data.negatives_p:.0%} of the samples: no people)")
    return {
        "name": name,
        "file": weights.name,
        "sha256": sha256_file(weights),
        "size_mb": round(weights.stat().st_size / 1e6, 2),
        "storage": "fp16 (safetensors)",
        "parameters": parameters,
        "model": cfg.model.name,
        "columns": [
            f"{c.name}{f' ({c.backbone})' if c.backbone else ''}" for c in cfg.model.columns
        ],
        "recipe": next((a for a in record["command"].split() if a.startswith("+exp=")), ""),
        "command": record["command"],
        "commit": record["commit"],
        "torch": record["torch"],
        "wall_time_min": record["wall_time_min"],
        "machine": machine,
        "contention": contention,
        "trained_on": sources,
        "epoch": record["epoch"],
        "step": record["step"],
        "eval_size": [int(v) for v in cfg.aug.eval_size],
        "test": test,
        "test_first16": first16,
        "fp32_agreement": agreement,
        "latency_ms": latency,
    }


def render_card(fields: dict[str, Any]) -> str:
    """The card file: the front matter, then :data:`CARD_BODY` filled from ``fields``."""
    head = yaml.safe_dump(fields, sort_keys=False, width=100, allow_unicode=True)
    latency, agreement = fields["latency_ms"], fields["fp32_agreement"]
    recipe = fields["recipe"].removeprefix("+exp=")
    extra = {
        "columns_text": " and ".join(fields["columns"]) + " columns" if fields["columns"] else "",
        "parameters_text": f"{fields['parameters'] / 1e6:.2f} M",
        "classes_text": "2 classes",
        "recipe_file": f"{recipe}.yaml",
        "contention_text": f" ({fields['contention']})" if fields.get("contention") else "",
        "trained_on_text": "\n".join(f"- {s}" for s in fields["trained_on"]),
        "test_table": figures_table(fields["test"]),
        "first16_table": figures_table(fields["test_first16"]),
        "agreement_pct": f"{100 * agreement['all']:.3f}%",
        "agreement_pixels": agreement["pixels"],
        "latency_calls": latency["calls"],
        "latency_machine": latency["machine"],
        "latency_256": f"{latency['256x256']:.1f}",
        "latency_eval": f"{latency['eval_size']:.1f}",
    }
    return f"---\n{head}---\n\n{CARD_BODY.format(**fields, **extra).strip()}\n"


def write_card(path: Path, fields: dict[str, Any]) -> Path:
    return write_text(path, render_card(fields))


def figures_table(figures: dict[str, dict[str, Any]]) -> str:
    """The card's table of test figures per source (from :func:`test_figures`)."""
    lines = [
        "| test set | scored at | person IoU | pixel accuracy | people-free photos: px called "
        "person / photos over 1% |",
        "|---|---|---|---|---|",
    ]
    for source, row in figures.items():
        size = "x".join(str(v) for v in row["eval_size"])
        empty = "-"
        if "empty_person_share" in row:
            empty = (
                f"{row['empty_person_share']:.2f}% / {row['empty_over_1pct']} of "
                f"{row['empty_images']}"
            )
        iou, acc = (_cell(row[k]) for k in ("iou_person", "pixel_acc"))
        lines.append(f"| {source} | {size} | {iou} | {acc} | {empty} |")
    return "\n".join(lines)


CARD_BODY = """
# `{name}`: the shipped person segmenter

The model that `predict.py`, `evaluate.py`, `export.py`, `demo.py` and `seg.load_model()` use
when no `checkpoint=` is given. Weights: `seg/zoo/{file}`, {size_mb} MB, {storage}, SHA-256
`{sha256}` (checked on every load: a changed byte stops loading with one line naming the file).
What is derived from it (its ONNX export) is written to the user's cache folder
(`~/.cache/humanseg/onnx`, or `$XDG_CACHE_HOME`), never into the installed package.

## Use

```bash
python scripts/predict.py input=photo.jpg         # outputs/predict/photo_mask.png, _overlay.jpg
python scripts/evaluate.py split=test             # reproduces the figures below
python scripts/demo.py                            # the local demo page
python scripts/predict.py input=photos/ precision=int8 calibration=my_photos/   # int8
```

```python
from seg import load_model

model = load_model()  # this model; load_model("runs/myrun") for one of yours
result = model("photo.jpg")  # a path, an RGB NumPy array (H, W, 3) or a PIL image
result.mask, result.prob  # bool (H, W) person; float32 (H, W) person probability
```

## The model

`{model}`: {columns_text}; {parameters_text} parameters. Input: RGB normalised with ImageNet's
mean and std, each photo resized so that its long side fits {eval_size[0]} and its short side
{eval_size[1]} (landscape or portrait), padded bottom and right; output: logits of
{classes_text} at the input's size, resized back to the photo. Classes: background, person
(every person in the frame, not only the main one).

## How it was trained

- Command: `SEG_DATA_DIR=<the datasets> {command}` at commit `{commit}` (torch {torch}); the
  recipe `{recipe}` is `configs/exp/{recipe_file}`.
- Wall time: {wall_time_min} min on {machine}, fp32 (no bf16 on that CPU){contention_text}.
- The checkpoint: `best.pt`, epoch {epoch} of 10 (step {step}), chosen by the person IoU of the
  training sources' validation splits.
- Why this recipe: of the recipes measured (docs/results.md), it has the best coco128_seg person
  IoU with in-domain figures within the run-to-run spread of the recipe without COCO, and few
  people-free pixels called person. **coco128_seg served to choose the recipe**, so its figure
  below is a validation figure as much as a test one; the three training sources' test splits
  never served to choose anything.

## Data it saw, and their terms

{trained_on_text}

The weights inherit the terms of these datasets: eg_portrait, ccp and vikram_human_seg are for
research use under their authors' terms (data/README.md), COCO's images are Flickr photos under
their own licences with annotations under CC BY 4.0, and the ImageNet photos are for
non-commercial research. **Use the weights for research.**

## Figures

`python scripts/evaluate.py split=test` (the default backend, ONNX Runtime fp32 on a CPU; each
test photo at its original resolution, scored at the size given; no TTA, no refinement):

{test_table}

The first 16 test photos of each source (`python scripts/evaluate.py split=test max_images=16`;
`tests/test_zoo.py` reproduces these within 0.1 points):

{first16_table}

The fp16 file's masks agree with the fp32 checkpoint's on {agreement_pct} of the test pixels
({agreement_pixels:,} pixels; eager PyTorch at each source's eval size).

## Speed

`predict.py`'s whole per-photo work (eval preset, ONNX Runtime fp32, logits resized to the
photo, mask and probability), batch 1, median of {latency_calls} calls on {latency_machine}, idle:
{latency_256} ms for a 256x256 photo at a 256x256 input, {latency_eval} ms for a
{eval_size[0]}x{eval_size[1]} photo at the eval size. `scripts/benchmark.py` measures every
path side by side (docs/benchmarks.md).

## Limits

- A person segmenter trained on photos: it labels every person, also small and far ones
  (coco128_seg's recall per size: docs/results.md), and objects it confuses with people.
- Video is segmented frame by frame, with no temporal smoothing.
- Figures on other cameras, scenes and populations than these datasets' are not measured here.
"""
