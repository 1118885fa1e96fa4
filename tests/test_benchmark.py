"""The benchmark (seg/benchmark, scripts/benchmark.py) at tiny sizes: every section returns sane
numbers in the documented structure, the tables show them, and bad options fail with the valid
choices. No timing is asserted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from training_utils import load_script

from seg.benchmark import suite
from seg.benchmark.limits import conv_gflops, gemm_gflops
from seg.benchmark.loading import data_wait_share, loader_throughput, transform_steps
from seg.benchmark.models import (
    ModelBenchSettings,
    ModelSpec,
    measure_model,
    measure_model_isolated,
    model_config_names,
    split_model_spec,
)
from seg.benchmark.scaling import first_gpu, gpus_from, measure_scaling
from seg.benchmark.suite import BenchmarkOptions, run_benchmark
from seg.benchmark.tables import format_report
from seg.benchmark.timing import time_calls
from seg.config import compose_config
from seg.devices import native_bf16
from seg.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def tiny(**changes: object) -> ModelBenchSettings:
    """Batch 2 at 32x32, one timed step, one inference call per batch size."""
    base = dict(batch=2, size=(32, 32), warmup=0, steps=1, seconds=0.01)
    base.update(infer_batches=[1, 2], infer_calls=1, infer_seconds=0.01, threads=None)
    return ModelBenchSettings(**{**base, **changes})


def test_time_calls_counts_within_its_budget() -> None:
    calls = []
    timed, elapsed = time_calls(lambda: calls.append(1), CPU, 2, 3, 10.0)
    assert timed == 3 and len(calls) == 5 and elapsed > 0
    timed, _ = time_calls(lambda: None, CPU, 0, 10, 0.0)  # no budget: still one call
    assert timed == 1


def test_limits_return_positive_gflops() -> None:
    gemm = gemm_gflops(CPU, n=64, seconds=0.01)
    conv = conv_gflops(CPU, channels=8, size=(16, 16), batch=2, seconds=0.01)
    for row in (gemm, conv):
        assert row["gflops_per_s"] > 0 and row["calls"] >= 1
    assert "64x64x64" in gemm["name"] and "channels_last" in conv["name"]


def test_measure_model_row() -> None:
    row = measure_model("single_column", tiny())
    assert row["model"] == "single_column" and row["params"] > 0
    assert row["train_gflops_per_img"] > 0 and row["train_img_per_s"] > 0
    assert row["train_steps"] == 1
    assert row["achieved_gflops_per_s"] == pytest.approx(
        row["train_gflops_per_img"] * row["train_img_per_s"]
    )
    assert set(row["inference"]) == {"1", "2"}
    assert all(r["ms_per_img"] > 0 and r["calls"] == 1 for r in row["inference"].values())
    assert row["peak_mem_bytes"] >= 0 and "RSS" in row["peak_mem_kind"]


def test_bad_settings_and_options_name_the_valid_choices() -> None:
    with pytest.raises(ValueError, match=r"precision 'fp8'; valid: \['32', 'bf16'\]"):
        tiny(precision="fp8")
    with pytest.raises(ValueError, match="batch must be >= 2"):
        tiny(batch=1)
    with pytest.raises(ValueError, match=r"unknown section\(s\) \['speed'\]; valid"):
        BenchmarkOptions(sections=["speed"])
    with pytest.raises(ValueError, match=r"unknown model config\(s\) \['nope'\]; valid: .*unet"):
        BenchmarkOptions(models=["nope"])
    with pytest.raises(ValueError, match=r"unknown model config\(s\) \['nope'\]"):
        BenchmarkOptions(models=["unet:compile", "nope:compile"])
    with pytest.raises(ValueError, match=r"data_model='unet:compile' is not a configs/model name"):
        BenchmarkOptions(models=["unet:compile"], data_model="unet:compile")


def test_model_specs_name_a_config_compilation_and_precision() -> None:
    assert split_model_spec("dual_channel") == ModelSpec("dual_channel", False, None)
    assert split_model_spec("dual_channel:compile") == ModelSpec("dual_channel", True, None)
    assert split_model_spec("unet:bf16:compile") == ModelSpec("unet", True, "bf16")
    variant = "dual_channel:model.columns.0.widths=[8,8,8,8,8]:32"
    assert split_model_spec(variant) == ModelSpec(
        "dual_channel", False, "32", ("model.columns.0.widths=[8,8,8,8,8]",)
    )
    assert BenchmarkOptions(models=["unet", "unet:compile"]).models == ["unet", "unet:compile"]
    for bad in ("unet:fp8", "unet:bf16:32", "unet:compile:compile"):
        with pytest.raises(ValueError, match=rf"model spec '{bad}': options .* at most one"):
            split_model_spec(bad)


def test_spec_precision_and_overrides_make_the_row() -> None:
    row = measure_model("single_column:bf16", tiny())
    assert row["precision"] == "bf16" and row["model"] == "single_column:bf16"
    plain = measure_model("single_column", tiny())
    assert plain["precision"] == "32"
    wider = measure_model("single_column:model.columns.0.widths=[16,32,64,128,256]", tiny())
    assert wider["params"] > plain["params"]


def test_run_benchmark_limits_and_models_tables() -> None:
    opts = BenchmarkOptions(
        settings=tiny(), sections=["limits", "models"], models=["unet"], isolate=False
    )
    opts.limit_seconds = 0.01
    result = run_benchmark(opts)
    json.dumps(result)  # the --json output
    assert set(result["limits"]) == {"gemm", "conv3x3"}
    (row,) = result["models"]
    conv = result["limits"]["conv3x3"]["gflops_per_s"]
    assert row["conv_limit_fraction"] == pytest.approx(row["achieved_gflops_per_s"] / conv)
    assert "data" not in result and "scaling" not in result
    text = format_report(result)
    for expected in ("machine limits", "conv3x3 64->64", "ms/img@1", "ms/img@2", "unet"):
        assert expected in text
    assert f"torch {torch.__version__}" in text


def test_each_row_is_compared_with_the_limit_of_its_precision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def small_limits(device: torch.device, dtype: torch.dtype, seconds: float) -> dict:
        """The real kernels at sizes that take milliseconds, also in bf16 on a CPU without
        native bf16 (where the full sizes take a minute)."""
        gemm = gemm_gflops(device, n=64, dtype=dtype, seconds=seconds)
        conv = conv_gflops(device, channels=8, size=(16, 16), batch=2, dtype=dtype, seconds=seconds)
        return {"gemm": gemm, "conv3x3": conv}

    monkeypatch.setattr(suite, "measure_limits", small_limits)
    opts = BenchmarkOptions(
        settings=tiny(), sections=["limits", "models"], models=["unet", "unet:bf16"], isolate=False
    )
    opts.limit_seconds = 0.01
    result = run_benchmark(opts)
    assert set(result["limits"]) == {"gemm", "conv3x3", "gemm:bf16", "conv3x3:bf16"}
    assert "bfloat16" in result["limits"]["conv3x3:bf16"]["name"]
    fp32, bf16 = result["models"]
    for row, key in ((fp32, "conv3x3"), (bf16, "conv3x3:bf16")):
        conv = result["limits"][key]["gflops_per_s"]
        assert row["conv_limit_fraction"] == pytest.approx(row["achieved_gflops_per_s"] / conv)
    assert "unet:bf16" in format_report(result)


def test_data_section_is_skipped_without_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEG_DATA_DIR", raising=False)
    opts = BenchmarkOptions(settings=tiny(), sections=["data"], data_root=str(tmp_path))
    result = run_benchmark(opts)
    assert "not found" in result["data"]["skipped"]
    assert "data pipeline: skipped" in format_report(result)


def test_data_pipeline_on_real_files(data_env: Path) -> None:
    cfg = compose_config(["data=vikram_human_seg", "data.download=false", "aug.crop_size=[64,48]"])
    row = loader_throughput(cfg.data, cfg.aug, batch=2, num_workers=0, max_batches=1)
    assert row["samples_per_s"] > 0 and row["batches"] == 1 and row["dataset_size"] > 2
    assert row["samples_per_s_per_worker"] == row["samples_per_s"]
    loop = data_wait_share(
        "single_column", cfg.data, cfg.aug, 0, tiny(steps=2, seconds=60), warmup=1
    )
    assert loop["steps"] == 2 and loop["train_img_per_s"] > 0
    assert 0 <= loop["data_wait_fraction"] <= 1


@pytest.mark.parametrize(
    "extra", [[], ["+data.train_scales={vikram_human_seg: 1.5}"]], ids=["", "train_scales"]
)
def test_transform_breakdown_times_each_step_and_the_pasted_peoples_reading(
    data_env: Path, extra: list[str]
) -> None:
    """The same rows whether the dataset has one pipeline or one per source."""
    cfg = compose_config(
        [
            "data=vikram_human_seg",
            "data.download=false",
            "aug.crop_size=[64,48]",
            "aug.paste_p=1",
            *extra,
        ]
    )
    steps = transform_steps(cfg.data, cfg.aug, samples=3)
    names = [r["step"] for r in steps["rows"]]
    assert names[:3] == [
        "read photo + mask",
        "PastePeople: reading pasted people",
        "PastePeople: the rest",
    ]
    assert names[-2:] == ["Normalize", "ToTensorV2"] and "RandomCrop" in names
    reading = steps["rows"][1]["ms_per_sample"]
    assert reading > 0  # paste_p=1: every sample read at least one more photo
    assert steps["samples"] == 3
    assert sum(r["ms_per_sample"] for r in steps["rows"]) == pytest.approx(steps["ms_per_sample"])
    assert sum(r["share"] for r in steps["rows"]) == pytest.approx(1.0)


def test_data_section_compares_loading_with_consumption(data_env: Path) -> None:
    opts = BenchmarkOptions(
        settings=tiny(seconds=60),
        sections=["data"],
        data_workers=[0],
        data_model="single_column",
        data_config=["data=vikram_human_seg"],
        data_samples=2,
    )
    opts.data_seconds, opts.data_steps = 60.0, 1
    data = run_benchmark(opts)["data"]
    # Without the model table the consumer is the real loop itself, at the training crop.
    assert data["consumer_img_per_s"] == data["training_loop"]["train_img_per_s"]
    assert data["consumer_size"] == data["crop_size"] == [256, 192]
    (row,) = data["loaders"]
    assert row["data_bound"] == (row["samples_per_s"] < data["consumer_img_per_s"])
    assert row["workers_needed"] == pytest.approx(data["consumer_img_per_s"] / row["samples_per_s"])
    assert data["training_loop"]["steps"] == 1
    assert data["config"] == ["data=vikram_human_seg"] and data["steps"]["samples"] == 2
    report = format_report({**_empty_result(), "data": data})
    assert "workers needed" in report and "data=vikram_human_seg: train split" in report
    assert "one sample, step by step" in report and "read photo + mask" in report
    with pytest.raises(ConfigError, match="data_samples must be >= 1"):
        BenchmarkOptions(data_samples=0)


def _empty_result() -> dict:
    machine = {"cpu": "x", "cores": 2, "torch": "t", "threads": 2}
    return {"machine": machine, "options": {"settings": vars(tiny())}, "wall_s": 1.0}


def test_bf16_autocast_path_runs_on_cpu() -> None:
    row = measure_model("single_column", tiny(precision="bf16", infer_batches=[2]))
    assert row["train_img_per_s"] > 0 and row["inference"]["2"]["ms_per_img"] > 0


def test_script_writes_json(tmp_path: Path) -> None:
    script = load_script("benchmark")
    out = tmp_path / "bench.json"
    args = ["--sections", "models", "--models", "single_column", "--no-isolate", "--batch", "2"]
    args += ["--size", "32", "32", "--steps", "1", "--warmup", "0", "--seconds", "0.01"]
    script.main([*args, "--json", str(out)])
    saved = json.loads(out.read_text())
    assert [r["model"] for r in saved["models"]] == ["single_column"]
    assert saved["options"]["settings"]["size"] == [32, 32]
    with pytest.raises(ConfigError, match="unknown model config"):
        script.main(["--models", "nope"])


def test_every_model_config_is_benchmarked_by_default() -> None:
    names = model_config_names()
    assert {"dual_channel", "single_column", "unet", "fcn_resnet50"} <= set(names)


def test_scaling_gpus_start_at_the_devices_index() -> None:
    """``--device cuda:K`` sweeps GPUs K.. (it was ignored: every sweep started at cuda:0)."""
    assert first_gpu("cpu") is None
    assert first_gpu("cuda") == 0 and first_gpu("cuda:3") == 3
    assert gpus_from("cuda", 8) == 8 and gpus_from("cuda:3", 8) == 5
    with pytest.raises(ValueError, match=r"--device cuda:2: only 2 GPU\(s\) visible"):
        gpus_from("cuda:2", 2)
    with pytest.raises(ValueError, match="cpu or cuda"):
        first_gpu("mps")


@pytest.mark.slow
def test_isolated_measurement_and_cpu_scaling() -> None:
    row = measure_model_isolated("single_column", tiny())
    assert row["train_img_per_s"] > 0 and row["peak_mem_bytes"] > 0
    scaling = measure_scaling("single_column", tiny(steps=2, warmup=1))
    assert [r["processes"] for r in scaling["rows"]] == [1, 2]
    assert [r["backend"] for r in scaling["rows"]] == ["gloo", "gloo"]
    assert scaling["rows"][0]["ratio_to_1"] == 1.0 and scaling["rows"][1]["img_per_s"] > 0
    assert "scaling (single_column" in format_report({**_empty_result(), "scaling": scaling})


@pytest.mark.slow
def test_compiled_row_beside_the_eager_one() -> None:
    """torch.compile (inductor, C++ on the CPU) really runs: same FLOPs, a warm-up that holds
    the compilation, a timed step."""
    eager = measure_model("single_column", tiny())
    compiled = measure_model("single_column:compile", tiny(warmup=1))
    assert compiled["model"] == "single_column:compile" and compiled["compiled"]
    assert not eager["compiled"]
    assert compiled["train_gflops_per_img"] == eager["train_gflops_per_img"]
    assert compiled["train_img_per_s"] > 0 and compiled["warmup_s"] > 0
    assert "single_column:compile" in format_report({**_empty_result(), "models": [compiled]})


def test_inference_backends_rows_cover_every_path_one_session_at_a_time(monkeypatch, exported_tiny):
    """Each path (eager, folded, bf16 where native, ONNX Runtime fp32 and int8, and
    predict.py's whole per-image work per backend) at each batch size, with positive times;
    torch's thread count is restored after the ONNX Runtime rows. A second ONNX Runtime
    session that has run slows the first, and predict.py holds only one: while each ONNX
    Runtime path runs, its session is the only one alive. The model is the session's tiny
    dual-column net, and its export a copy of the session's export of that net (the same
    graph; the export itself is test_export.py's)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import gc
    import weakref

    from seg.benchmark import inference
    from seg.inference.runtime import OnnxRuntimeModel

    made = weakref.WeakSet()  # every ONNX Runtime model made, while it is alive
    init = OnnxRuntimeModel.__init__

    def tracked_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.add(self)

    monkeypatch.setattr(OnnxRuntimeModel, "__init__", tracked_init)

    def live_sessions() -> int:
        gc.collect()
        return len(made)

    seen = {}
    real_paths = inference._paths

    def watched_paths(*args):
        for path in real_paths(*args):
            seen[path.name] = live_sessions()
            yield path

    monkeypatch.setattr(inference, "_paths", watched_paths)
    (export,) = exported_tiny.parent.glob("*.onnx")
    monkeypatch.setattr(
        inference, "export_onnx", lambda model, path, *a: Path(shutil.copyfile(export, path))
    )
    threads = torch.get_num_threads()
    small = "dual_channel" + "".join(  # tiny_config's net
        f":model.columns.{i}.blocks=[1,1,1,1,1]:model.columns.{i}.widths=[4,8,8,8,8]"
        for i in (0, 1)
    )
    rows = inference.measure_backends([small], tiny())
    assert torch.get_num_threads() == threads
    paths = list(dict.fromkeys(r["path"] for r in rows))
    expected = {"torch fp32, as trained", "torch fp32, BN folded", "onnxruntime fp32"}
    expected |= {"onnxruntime int8", "predict.py, torch", "predict.py, onnxruntime"}
    expected |= {"predict.py, ort int8"}
    if native_bf16(torch.device("cpu")):
        expected |= {"torch bf16, BN folded", "predict.py, torch bf16"}
    assert expected <= set(paths) and len(rows) == 2 * len(paths)
    for r in rows:
        assert r["calls"] >= 3 and 0 < r["median_ms_per_img"] <= r["p90_ms_per_img"], r
    for r in rows:  # predict.py's rows carry their stages, each timed, and only those
        stages = r.get("stages_ms_per_img")
        assert (stages is not None) == r["path"].startswith("predict.py"), r
        assert stages is None or all(stages[k] > 0 for k in inference.PREDICTOR_STAGES), r
    table = inference.format_backends(rows, (32, 32))
    assert all(p in table for p in paths)
    assert "predict.py's stages" in table and "full size" in table

    assert seen["torch fp32, as trained"] == 0
    for name in ("onnxruntime fp32", "predict.py, onnxruntime", "onnxruntime int8"):
        assert seen[name] == 1, seen
    assert seen["predict.py, ort int8"] == 1 and live_sessions() == 0
