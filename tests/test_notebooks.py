"""The notebooks of notebooks/, executed with nbclient against tiny real runs made here.

Three 4-step runs (single_column, dual_channel, multi_column) on a few real images, shared by
the tests of this module; the dual-channel run is also evaluated for real (seg.evaluation, what
scripts/evaluate.py runs). Each notebook reads its run directories from an environment variable
in its first code cell (SEG_RUN_DIRS, SEG_EVAL_DIR); its outputs are checked in the executed
copy, never written back to the committed file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from training_utils import REPO, make_folder_subset, tiny_overrides

from seg.config import compose_config
from seg.engine.train import train

if TYPE_CHECKING:
    import nbformat

# nbformat, nbclient, ipykernel and pandas are imported where used: nbformat's schema validator
# alone takes seconds to import, and every pytest-xdist worker collects this module.

# One xdist worker runs this module (pyproject.toml: --dist loadgroup): its module fixtures
# are built once.
pytestmark = pytest.mark.xdist_group("notebooks")

NOTEBOOKS = REPO / "notebooks"
COLUMNS = {"single_column": 1, "dual_channel": 2, "multi_column": 3}
KERNEL = "humanseg-tests"
PARAMETERS = {  # the variable each notebook's first code cell reads from the environment
    "training_curves.ipynb": "SEG_RUN_DIRS",
    "error_analysis.ipynb": "SEG_EVAL_DIR",
    "column_ablation.ipynb": "SEG_RUN_DIRS",
}


@pytest.fixture(scope="module")
def runs(vikram_pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny real training run of each variant: 4 steps (epochs of 3), validated at 3 and 4."""
    root = tmp_path_factory.mktemp("notebook_runs")
    data = make_folder_subset(vikram_pairs, root / "data")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("SEG_DATA_DIR", raising=False)  # data.root must be the one used
        for exp, n in COLUMNS.items():
            ours = ("+exp=", "trainer.column_devices=")
            overrides = [o for o in tiny_overrides(data, root / exp) if not o.startswith(ours)]
            cpus = ",".join(["cpu"] * n)
            extra = [f"trainer.column_devices=[{cpus}]", "trainer.epochs=2", "trainer.max_steps=4"]
            extra.append("logging.tensorboard=true")  # the notebooks read the event files
            train(compose_config([f"+exp={exp}", *overrides, *extra]))
            out[exp] = root / exp
    return out


@pytest.fixture(scope="module")
def eval_dir(runs: dict[str, Path]) -> Path:
    """The dual-channel run's checkpoint evaluated on its validation split (real images)."""
    from seg.config import compose_eval_config
    from seg.evaluation.scoring import run_evaluation

    ckpt = runs["dual_channel"] / "checkpoints" / "last.pt"
    overrides = [f"checkpoint={ckpt}", "split=val", "device=cpu", "num_workers=0", "backend=torch"]
    result = run_evaluation(compose_eval_config([*overrides, "worst=2", "progress=false"]))
    return Path(result["out_dir"])


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A kernel spec that runs this interpreter (where seg is installed), found first."""
    jupyter_path = tmp_path_factory.mktemp("jupyter")
    from ipykernel.kernelspec import write_kernel_spec

    write_kernel_spec(jupyter_path / "kernels" / KERNEL)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(jupyter_path), prepend=os.pathsep)
        yield KERNEL


def execute(
    name: str, kernel: str, cwd: Path, probe: str, **params: str
) -> tuple[nbformat.NotebookNode, object]:
    """Run a copy of ``notebooks/<name>`` with ``params`` in the kernel's environment, plus a
    last cell that prints ``probe`` (an expression of the notebook's variables) as JSON;
    returns the executed copy and the probe's value."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(f"import json\nprint(json.dumps({probe}))"))
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # inline figures
    env.update(params, OMP_NUM_THREADS="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    client = NotebookClient(
        nb, kernel_name=kernel, timeout=120, resources={"metadata": {"path": str(cwd)}}
    )
    client.execute(env=env)
    printed = [o["text"] for o in nb.cells.pop().outputs if o.get("name") == "stdout"]
    return nb, json.loads(printed[-1])


def outputs(nb: nbformat.NotebookNode, kind: str) -> list[str]:
    """The outputs of one kind (a MIME type such as ``image/png``, or ``stream``), in order;
    fails on any error output."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", out
            if kind == "stream" and out["output_type"] == "stream":
                found.append(out["text"])
            elif kind in out.get("data", {}):
                found.append(out["data"][kind])
    return found


def test_training_curves(runs: dict[str, Path], kernel: str, tmp_path: Path) -> None:
    dirs = [runs["dual_channel"], runs["single_column"]]
    table = "analysis.runs_table(runs).reset_index().to_dict(orient='records')"
    steps = "[r.history['val/pixel_acc'].dropna().index.tolist() for r in runs]"
    nb, (table, val_steps) = execute(
        "training_curves.ipynb",
        kernel,
        tmp_path,
        f"[{table}, {steps}]",
        SEG_RUN_DIRS=os.pathsep.join(map(str, dirs)),
    )
    # Loss terms, lr + throughput, overall and per-source validation (+ any other scalars).
    assert len(outputs(nb, "image/png")) >= 4
    assert len(outputs(nb, "text/html")) == 2  # the runs, the per-source table
    assert [row["variant"] for row in table] == ["dual_channel", "single_column"]
    assert val_steps == [[3, 4], [3, 4]]  # read from the event files
    for row, run in zip(table, dirs, strict=True):
        final = json.loads((run / "metrics.json").read_text())
        assert row["steps"] == 4 and row["pixel_acc"] == final["val/pixel_acc"]
        assert row["img_per_s"] > 0


def test_error_analysis(eval_dir: Path, kernel: str, tmp_path: Path) -> None:
    probe = "[summary.reset_index().to_dict(orient='records'), list(failing.index)]"
    run_dir = eval_dir.parent.parent  # a run directory: its newest evaluation is taken
    nb, (summary, failing) = execute(
        "error_analysis.ipynb", kernel, tmp_path, probe, SEG_EVAL_DIR=str(run_dir)
    )
    # The gallery, IoU against person size, boundary F against IoU.
    assert len(outputs(nb, "image/png")) == 3
    tables = outputs(nb, "text/html")
    assert len(tables) == 5  # metrics.json, worst images, binned, per source, failing
    import pandas as pd

    images = pd.read_csv(eval_dir / "per_image.csv")
    worst = images.sort_values(["iou", "pixel_acc"])["name"].tolist()
    positions = [tables[1].index(f">{name}<") for name in worst]
    assert positions == sorted(positions)  # listed from the lowest IoU up
    # The per-image counts pooled in the notebook give the evaluator's own overall numbers.
    overall = json.loads((eval_dir / "metrics.json").read_text())["overall"]
    row = {r["index"]: r for r in summary}["all"]
    assert row["images"] == overall["images"] == len(images)
    assert row["pixel_acc"] == pytest.approx(overall["pixel_acc"], rel=1e-12)
    assert row["iou"] == pytest.approx(overall["iou_person"], rel=1e-12)
    assert failing == ([] if overall["pixel_acc"] >= 0.88 else ["folder"])
    assert "sources under the target" in "".join(outputs(nb, "stream"))


def test_column_ablation(runs: dict[str, Path], kernel: str, tmp_path: Path) -> None:
    dirs = os.pathsep.join(str(runs[v]) for v in COLUMNS)
    probe = "table.reset_index().to_dict(orient='records')"
    nb, table = execute("column_ablation.ipynb", kernel, tmp_path, probe, SEG_RUN_DIRS=dirs)
    assert len(outputs(nb, "image/png")) == 2  # curves side by side, cost against accuracy
    assert len(outputs(nb, "text/html")) == 2  # final metrics, per source
    assert [row["variant"] for row in table] == list(COLUMNS)
    params = [row["params_M"] for row in table]
    assert 0 < params[0] < params[1] < params[2]  # each variant adds a column
    assert all(row["gflops_per_img"] > 0 and row["steps"] == 4 for row in table)


def test_a_wrong_run_dir_is_named(kernel: str, tmp_path: Path) -> None:
    from nbclient.exceptions import CellExecutionError

    with pytest.raises(CellExecutionError, match=r"missing_run is not a training run directory"):
        execute(
            "training_curves.ipynb",
            kernel,
            tmp_path,
            "0",
            SEG_RUN_DIRS=str(tmp_path / "missing_run"),
        )


def test_every_notebook_is_executed_here() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(PARAMETERS)


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_committed_notebooks_have_no_outputs(name: str) -> None:
    import nbformat

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, (name, cell.source[:60])
    # The parameters come first and can be set from the environment.
    assert re.search(rf'os\.environ\.get\(\s*"{PARAMETERS[name]}"', code[0].source)
    assert nb.metadata["kernelspec"]["name"] == "python3"
