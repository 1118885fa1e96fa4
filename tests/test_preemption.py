"""A stop signal sent to a real training process: the current step ends, last.pt holds it, the
process exits with the signal's code and no traceback, and trainer.resume=auto continues."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from training_utils import REPO, subprocess_env, tiny_overrides

from seg.checkpoint import load_checkpoint
from seg.config import compose_config
from seg.engine.preemption import StopSignals
from seg.engine.train import train


def _logged_steps(run: Path) -> list[int]:
    path = run / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [json.loads(x)["step"] for x in lines if '"train/loss"' in x]


def _signal_while_training(
    cmd: list[str], run: Path, sig: signal.Signals, cwd: Path
) -> tuple[int, str, float]:
    """Start ``cmd`` (a training of ``run``), send ``sig`` once 3 steps are logged; its exit
    code, its output and the seconds from the signal to its exit."""
    proc = subprocess.Popen(
        cmd, env=subprocess_env(), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 180
        while len(_logged_steps(run)) < 3 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, out.decode(), time.monotonic() - sent


def test_each_stop_signal_is_recorded_and_a_second_ctrl_c_stops_at_once() -> None:
    import os

    def delivered(condition) -> None:
        """Wait for the handler: a process-directed signal reaches the main thread's Python
        handler once the thread the kernel picked has run, later on a busy machine."""
        deadline = time.monotonic() + 30
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        before = signal.getsignal(sig)
        with StopSignals() as stop:
            os.kill(os.getpid(), sig)
            delivered(lambda s=stop: s.event.is_set())
            assert stop.signum == sig and stop.stop_requested(torch.device("cpu"))
            if sig == signal.SIGINT:
                with pytest.raises(KeyboardInterrupt):
                    os.kill(os.getpid(), sig)
                    delivered(lambda: False)  # until the handler raises
        assert signal.getsignal(sig) == before  # the previous handler is back


def test_a_stop_signal_saves_the_current_step_and_exits_cleanly(
    data_root: Path, tmp_path: Path
) -> None:
    sig = signal.SIGTERM  # the others take the same path (the test above)
    run = tmp_path / "run"
    long = ["trainer.epochs=1000", "trainer.max_steps=100000", f"hydra.run.dir={tmp_path}/hydra"]
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"), *tiny_overrides(data_root, run)]
    code, text, took = _signal_while_training([*cmd, *long], run, sig, tmp_path)
    assert code == 128 + sig, text[-3000:]
    assert "Traceback" not in text
    step = load_checkpoint(run / "checkpoints" / "last.pt")["step"]
    assert f"stopped by {sig.name} after step {step}" in text
    assert _logged_steps(run)[-1] == step  # the log and the checkpoint end at the same step
    print(f"\n{sig.name}: exited {took:.2f} s after the signal, last.pt at step {step}")

    resumed = [*tiny_overrides(data_root, run), f"trainer.max_steps={step + 1}"]
    result = train(compose_config([*resumed, "trainer.epochs=1000", "trainer.resume=auto"]))
    assert result["step"] == step + 1
    assert _logged_steps(run) == list(range(1, step + 2))


@pytest.mark.slow
def test_sigterm_to_torchrun_stops_both_ranks_at_one_step(data_root: Path, tmp_path: Path) -> None:
    """torchrun forwards SIGTERM to its workers: they agree on the step to stop at (one
    all-reduce at a logging step), rank 0 writes last.pt, and no rank waits in a collective."""
    run = tmp_path / "run"
    long = ["trainer.epochs=1000", "trainer.max_steps=100000", "trainer.batch_size=1"]
    script = str(REPO / "scripts" / "train.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    full = [*cmd, script, *tiny_overrides(data_root, run), *long]
    _, text, took = _signal_while_training(full, run, signal.SIGTERM, tmp_path)
    step = load_checkpoint(run / "checkpoints" / "last.pt")["step"]
    assert f"stopped by SIGTERM after step {step}" in text, text[-4000:]
    assert _logged_steps(run)[-1] == step
    print(f"\ntorchrun: exited {took:.2f} s after SIGTERM, step {step}")
    assert load_checkpoint(run / "checkpoints" / "last.pt")["rng"][1] is not None  # both ranks
