"""The benchmark results (``seg.benchmark.suite.run_benchmark``) as plain-text tables."""

from __future__ import annotations

from typing import Any

from seg.benchmark.inference import format_backends


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_machine(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["options"]["settings"]
    lines = [
        f"machine: {m['cpu']} ({m.get('isa', '?')}), {m['cores']} cores, torch {m['torch']}, "
        f"{m['threads']} threads" + (f", GPUs {m['gpus']}" if m.get("gpus") else ""),
        f"settings: device {s['device']}, precision {s['precision']}, batch {s['batch']}, "
        f"{s['size'][0]}x{s['size'][1]}, channels_last={s['channels_last']}",
    ]
    return "\n".join(lines)


def format_limits(limits: dict[str, dict[str, Any]]) -> str:
    lines = ["machine limits", f"  {'kernel':<58} {'GFLOP/s':>9} {'calls':>6}"]
    for row in limits.values():
        lines.append(f"  {row['name']:<58} {row['gflops_per_s']:>9.1f} {row['calls']:>6}")
    return "\n".join(lines)


def format_models(rows: list[dict[str, Any]]) -> str:
    batches = list(rows[0]["inference"]) if rows else []
    width = max([29, *(len(r["model"]) for r in rows)])  # specs such as name:compile:bf16
    head = (
        f"  {'model':<{width}} {'params':>10} {'GFLOP/img':>9} {'img/s':>7} {'GFLOP/s':>8} "
        f"{'%conv':>6} {'steps':>5} {'warm-up s':>9}"
    )
    head += "".join(f" {'ms/img@' + b:>10}" for b in batches) + f" {'peak MB':>8}"
    title = "models (training: the engine's step, forward + loss + backward + SGD; inference: eval)"
    lines = [title, head]
    for r in rows:
        frac = r.get("conv_limit_fraction")
        line = (
            f"  {r['model']:<{width}} {r['params']:>10,} {r['train_gflops_per_img']:>9.2f} "
            f"{r['train_img_per_s']:>7.2f} {r['achieved_gflops_per_s']:>8.1f} "
            f"{_f(None if frac is None else 100 * frac, '.1f'):>6} {r['train_steps']:>5} "
            f"{_f(r.get('warmup_s'), '.1f'):>9}"
        )
        line += "".join(f" {r['inference'][b]['ms_per_img']:>10.1f}" for b in batches)
        lines.append(line + f" {r['peak_mem_bytes'] / 2**20:>8.0f}")
    if rows:
        lines.append(
            f"  steps: timed training steps; %conv: achieved GFLOP/s over the conv3x3 limit; "
            "warm-up s: the untimed first steps (with compilation for ':compile' rows);\n"
            f"  peak MB: {rows[0]['peak_mem_kind']}"
        )
    return "\n".join(lines)


def format_data(data: dict[str, Any]) -> str:
    if "skipped" in data:
        return f"data pipeline: skipped ({data['skipped']})"
    crop = "x".join(map(str, data["crop_size"]))
    consumer = f"{data['consumer']} {data['consumer_img_per_s']:.1f} img/s at "
    consumer += "x".join(map(str, data["consumer_size"]))
    config = " ".join(data["config"])
    lines = [
        f"data pipeline ({config}: train split, full train transform, {crop} crops, batch "
        f"{data['batch']}; training consumes: {consumer})",
        f"  {'workers':>7} {'samples/s':>10} {'per worker':>11} {'data-bound?':>12} "
        f"{'workers needed':>15}",
    ]
    for r in data["loaders"]:
        bound = "yes" if r["data_bound"] else "no"
        lines.append(
            f"  {r['num_workers']:>7} {r['samples_per_s']:>10.1f} "
            f"{r['samples_per_s_per_worker']:>11.1f} {bound:>12} "
            f"{r['workers_needed']:>15.2f}"
        )
    w = data["training_loop"]
    lines.append(
        f"  real training loop ({w['model']}, {w['num_workers']} workers, {w['steps']} steps): "
        f"{w['train_img_per_s']:.1f} img/s, {100 * w['data_wait_fraction']:.1f}% of step time "
        "waiting for data"
    )
    steps = data["steps"]
    lines.append(
        f"  one sample, step by step (main process, mean of {steps['samples']} samples: "
        f"{steps['ms_per_sample']:.1f} ms)"
    )
    lines.append(f"    {'step':<40} {'ms/sample':>10} {'share':>6}")
    for r in steps["rows"]:
        lines.append(f"    {r['step']:<40} {r['ms_per_sample']:>10.2f} {100 * r['share']:>5.1f}%")
    return "\n".join(lines)


def format_scaling(scaling: dict[str, Any]) -> str:
    lines = [
        f"scaling ({scaling['model']}, batch {scaling['batch_per_process']} per process; "
        f"{scaling['note']})",
        f"  {'processes':>9} {'backend':>7} {'threads':>7} {'img/s':>8} {'ratio':>6} {'steps':>5}",
    ]
    for r in scaling["rows"]:
        lines.append(
            f"  {r['processes']:>9} {r['backend']:>7} {_f(r['threads_per_process'], 'd'):>7} "
            f"{r['img_per_s']:>8.2f} {r['ratio_to_1']:>6.2f} {r['steps']:>5}"
        )
    return "\n".join(lines)


def format_report(result: dict[str, Any]) -> str:
    """All measured sections, machine first, as text tables."""
    parts = [format_machine(result)]
    if "limits" in result:
        parts.append(format_limits(result["limits"]))
    if "models" in result:
        parts.append(format_models(result["models"]))
    if "inference" in result:
        inference = result["inference"]
        if "skipped" in inference:
            parts.append(f"inference backends: skipped ({inference['skipped']})")
        else:
            size = result["options"]["settings"]["size"]
            parts.append(format_backends(inference["rows"], tuple(size)))
    if "data" in result:
        parts.append(format_data(result["data"]))
    if "scaling" in result:
        parts.append(format_scaling(result["scaling"]))
    parts.append(f"wall time {result['wall_s']:.0f} s")
    return "\n\n".join(parts)
