"""Real multi-process runs on the CPU (gloo): 2 replicas versus 1 process, crash recovery under
torchrun, and the launcher glue (run directory of every rank, SLURM environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from training_utils import (
    REPO,
    parameters,
    subprocess_env,
    tiny_overrides,
    torchrun,
)

from seg import distributed as du
from seg.checkpoint import load_model_from_checkpoint
from seg.config import compose_config, compose_dict
from seg.data import build_eval_datasets
from seg.data.transforms import build_eval_transform
from seg.engine import launch
from seg.engine.loaders import build_val_loader
from seg.engine.train import train
from seg.engine.validation import evaluate

SCRIPT = str(REPO / "scripts" / "train.py")
CRASH_WORKER = str(REPO / "tests" / "crash_worker.py")  # train.py, rank 1 dying after a step
# One image per forward pass on both sides: BatchNorm normalises per pass, and SyncBatchNorm
# needs GPUs, so "the same global batch" is 2 replicas x 1 against 1 process x 1 x accumulate 2.
# No random augmentation: the replicas' augmentation streams differ by design.
SAME_WORK = ["aug=none", "trainer.max_steps=2", "trainer.eval_batch_size=1", "trainer.batch_size=1"]
# Float sums in another order (gradient all-reduce versus accumulation): a stated tolerance.
RTOL, ATOL = 1e-4, 1e-6
TORCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _run(
    cmd: list[str], cwd: Path, timeout: int = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``cmd`` in the training subprocesses' environment, plus ``env``."""
    env = subprocess_env() | (env or {})
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-4000:]}\n{out.stderr[-6000:]}"
    return out


def _losses(run: Path) -> list[float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r["train/loss"] for r in map(json.loads, lines) if "train/loss" in r]


@pytest.fixture
def one_thread():
    """Run in-process work with one thread, as the worker processes do (OMP_NUM_THREADS=1):
    another thread count sums in another order, and BatchNorm over a single 64x64 image (2x2
    values per channel at the deepest stage) amplifies those last-bit differences."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_two_gloo_processes_match_one_process(data_root: Path, tmp_path: Path, one_thread) -> None:
    """Two gloo replicas of half the batch each against one process accumulating two halves:
    the same weights and losses; validation scores rank 0's model, the checkpoint's."""
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    work = list(SAME_WORK)
    overrides = [*tiny_overrides(data_root, ddp), *work, f"hydra.run.dir={tmp_path}/hydra"]
    # trainer.devices=2: the script starts both replicas itself through torch's elastic API.
    _run([sys.executable, SCRIPT, *overrides, "trainer.devices=2"], cwd=tmp_path)
    result = json.loads((ddp / "metrics.json").read_text())
    assert result["world_size"] == 2 and result["step"] == 2

    reference = [*tiny_overrides(data_root, single), *work, "trainer.accumulate=2"]
    assert train(compose_config(reference))["world_size"] == 1
    a = parameters(ddp / "checkpoints" / "last.pt")
    b = parameters(single / "checkpoints" / "last.pt")
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=RTOL, atol=ATOL, msg=key)
    torch.testing.assert_close(_losses(ddp), _losses(single), rtol=RTOL, atol=ATOL)
    # Validation in shards of 2 + 1 images, summed over the ranks, counts exactly what one
    # process counts with the same weights.
    model, cfg = load_model_from_checkpoint(ddp / "checkpoints" / "last.pt")
    val = build_eval_datasets(cfg.data, "val", build_eval_transform(cfg.aug))
    cms, _ = evaluate(model, build_val_loader(val, 1, 0, 0, 1), torch.device("cpu"), ["folder"], 2)
    assert cms["folder"].confusion.tolist() == result["confusion/all"]


@pytest.mark.slow
def test_crash_recovery_under_torchrun(data_root: Path, tmp_path: Path) -> None:
    """Rank 1 dies at step 3 (after the step-2 checkpoint); torchrun restarts both workers,
    which resume from last.pt in the same run directory and finish."""
    steps = ["trainer.batch_size=1", "trainer.epochs=2", "trainer.max_steps=5"]  # 3 per epoch
    overrides = [*tiny_overrides(data_root), *steps, "trainer.ckpt_every_steps=2"]
    cmd = [*torchrun(), "--standalone", "--nproc_per_node=2", "--max-restarts=1", CRASH_WORKER]
    out = _run([*cmd, *overrides], cwd=tmp_path, env={"CRASH_STEP": "3", "CRASH_RANK": "1"})
    runs = [p.parent for p in tmp_path.glob("outputs/*/*/config.yaml")]
    assert len(runs) == 1, f"one run directory for all ranks and attempts, got {runs}"
    run = runs[0]
    result = json.loads((run / "metrics.json").read_text())
    assert result["step"] == 5 and result["world_size"] == 2
    info = json.loads((run / "run_info.json").read_text())
    assert info["restart"] == 1 and info["resumed_from"].endswith("last.pt")
    log = (run / "train.log").read_text()
    assert "injected fault" in out.stdout + out.stderr + log
    assert "at step 2" in log  # "resuming .../last.pt at step 2"
    steps = [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
    assert steps == sorted(steps), "the log reads as one run: no step twice out of order"


def test_ranks_other_than_0_make_no_hydra_directory(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test-run")
    monkeypatch.setenv("RANK", "1")
    assert "hydra.output_subdir=null" in launch.hydra_overrides([])
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    monkeypatch.setattr(launch.tempfile, "gettempdir", lambda: str(tmp_path))
    assert launch.hydra_overrides([]) == []
    launch.remember_run_dir(tmp_path / "run")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert launch.hydra_overrides([]) == [f"hydra.run.dir='{tmp_path / 'run'}'"]
    assert launch.hydra_overrides(["hydra.run.dir=x"]) == []  # a fixed directory stays


def test_devices_setting(monkeypatch) -> None:
    assert launch.replicas("3") == 3
    assert launch.needs_launch("2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")  # torchrun already started the replicas
    assert not launch.needs_launch("2")


def test_slurm_tasks_become_torch_ranks(monkeypatch) -> None:
    pytest.importorskip("submitit")  # the optional [slurm] extra
    # setenv first, so that monkeypatch removes what the export adds when the test ends
    for key in (*TORCH_ENV, "CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(key, "unset")
        monkeypatch.delenv(key)
    slurm = {
        "SUBMITIT_EXECUTOR": "slurm",
        "SLURM_JOB_ID": "4242",
        "SLURM_NTASKS": "4",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_JOB_NODELIST": "gpu[07-08]",
    }
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    du.export_slurm_environment()
    got = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    assert got == {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert os.environ["MASTER_ADDR"] == "gpu07"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # a replica may own several GPUs
    # A MASTER_PORT of the user's (submitit draws ports from the job id: two jobs on a node
    # may collide) or a MASTER_ADDR of a cluster prolog: kept / replaced, never a crash.
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("MASTER_PORT", "29533")
    monkeypatch.setenv("MASTER_ADDR", "prolog-host")
    du.export_slurm_environment()
    assert os.environ["MASTER_PORT"] == "29533" and os.environ["MASTER_ADDR"] == "gpu07"
    assert os.environ["RANK"] == "3"


def test_slurm_launcher_config_composes() -> None:
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")  # the optional [slurm] extra
    # The launcher lives in Hydra's own node, which compose_dict leaves out unless asked.
    cfg = compose_dict("train", ["hydra/launcher=slurm", "+exp=dual_channel"], hydra_node=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.tasks_per_node == launcher.gpus_per_node and launcher.max_num_timeout > 0
    assert "export SLURM_KILL_BAD_EXIT=1" in launcher.setup  # one failed task ends the step


@pytest.mark.slow
def test_submitit_tasks_train_as_one_job(data_root: Path, tmp_path: Path) -> None:
    """The SLURM path without SLURM: submitit's local executor starts 2 tasks, which join one
    process group through submitit's job environment, as SLURM tasks do."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    sweep = tmp_path / "multirun"
    launcher = ["hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2"]
    launcher += ["hydra.launcher.timeout_min=5", f"hydra.sweep.dir={sweep}"]
    steps = ["trainer.batch_size=1", "trainer.max_steps=3"]
    _run([sys.executable, SCRIPT, "-m", *launcher, *tiny_overrides(data_root), *steps], tmp_path)
    result = json.loads((sweep / "0" / "metrics.json").read_text())
    assert result["world_size"] == 2 and result["step"] == 3
