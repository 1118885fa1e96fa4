"""The model tester, run over every configs/model/*.yaml, plus placement, configs and summary."""

from __future__ import annotations

import dataclasses
import io
import logging
import urllib.error
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from seg.config import ColumnConfig, ModelConfig, compose_dict
from seg.devices import auto_device_indices, resolve_devices
from seg.errors import ConfigError, UserError
from seg.models import (
    MODELS,
    MultiColumnSegNet,
    build_model,
    summarize_model,
)
from seg.models.deploy import deploy_model, fold_batchnorm

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
MODEL_CONFIGS = sorted(p.stem for p in (CONFIGS / "model").glob("*.yaml"))
CPU = torch.device("cpu")


def model_config(name: str, overrides: tuple[str, ...] = ()):
    """configs/model/<name>.yaml as a typed ModelConfig."""
    return OmegaConf.to_object(compose_dict("train", [f"model={name}", *overrides])).model


def two_columns(**kwargs) -> MultiColumnSegNet:
    columns = [
        ColumnConfig("detail", 1.0, [8, 16, 16], [1, 1, 1]),
        ColumnConfig("context", 0.5, [8, 24, 32], [1, 2, 1]),
    ]
    return MultiColumnSegNet(columns, **kwargs)


def test_every_model_name_has_a_builder_and_a_config():
    composed = {compose_dict("train", [f"model={n}"]).model.name for n in MODEL_CONFIGS}
    assert composed == set(MODELS)  # every family has a config, every config a family


# --- The model tester, over every model config -------------------------------------------


@pytest.mark.parametrize("name", MODEL_CONFIGS)
def test_forward_backward_every_parameter_gets_a_gradient(name):
    cfg = model_config(name)
    model = build_model(cfg).train()
    x = torch.randn(2, 3, 37, 45)  # sizes not divisible by 32
    out = model(x)
    assert out["out"].shape == (2, 2, 37, 45)
    assert len(out["aux"]) == (len(model.devices) if cfg.aux_heads else 0)
    for aux in out["aux"]:
        assert aux.shape == (2, 2, 37, 45)
    loss = out["out"].square().mean() + sum(a.square().mean() for a in out["aux"])
    loss.backward()
    trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
    missing = [n for n, p in trained.items() if p.grad is None]
    assert not missing, f"{name}: parameters without gradient (DDP would fail): {missing[:5]}"
    assert all(torch.isfinite(p.grad).all() for p in trained.values())
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert all(p.grad is None for n, p in model.named_parameters() if n in frozen)


@pytest.mark.parametrize("name", MODEL_CONFIGS)
def test_eval_output_shape_and_no_aux(name):
    model = build_model(model_config(name)).eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 50, 70))
    assert out["out"].shape == (1, 2, 50, 70)
    assert out["aux"] == []


@pytest.mark.parametrize("name", MODEL_CONFIGS)
def test_same_seed_same_output(name):
    x = torch.randn(1, 3, 40, 52)

    def run(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        model = build_model(model_config(name)).eval()
        with torch.no_grad():
            return model(x)["out"]

    first = run(0)
    assert torch.equal(first, run(0))
    assert not torch.allclose(first, run(1))


@pytest.mark.parametrize("name", MODEL_CONFIGS)
def test_state_dict_round_trip(name):
    """Weights saved and loaded into a model built afresh (another seed, no ImageNet file)
    give the same output: every parameter and buffer is in the state dict."""
    x = torch.randn(1, 3, 40, 52)
    torch.manual_seed(0)
    model = build_model(model_config(name)).eval()
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    torch.manual_seed(1)
    again = build_model(model_config(name), pretrained=False).eval()
    with torch.no_grad():
        assert not torch.equal(model(x)["out"], again(x)["out"])
        buffer.seek(0)
        again.load_state_dict(torch.load(buffer, weights_only=True))
        assert torch.equal(model(x)["out"], again(x)["out"])


@pytest.mark.parametrize("name", MODEL_CONFIGS)
def test_deploy_model_folds_every_batchnorm_and_keeps_the_logits(name):
    """Batch norm folded into the convolutions (random statistics, so folding is not a no-op)
    and auxiliary heads dropped: the same logits, no BatchNorm and no aux parameter left."""
    torch.manual_seed(0)
    model = build_model(model_config(name, ("model.aux_heads=true",) if _has_aux(name) else ()))
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.uniform_(-0.2, 0.2)
    model.eval()
    batchnorms = sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    folded, count = fold_batchnorm(model)
    assert count == batchnorms > 0
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    deployed = deploy_model(model)
    assert not any("aux" in k for k in deployed.state_dict())
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()) == batchnorms
    x = torch.randn(2, 3, 72, 104)
    with torch.no_grad():
        expected, got = model(x)["out"], deployed(x)["out"]
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5 * float(expected.abs().max()))


def _has_aux(name: str) -> bool:
    return name.startswith(("deeplabv3", "fcn")) or model_config(name).name == "multicolumn"


@pytest.mark.parametrize("name", MODEL_CONFIGS)
def test_channels_last_weights(name):
    model = build_model(model_config(name))
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size[0] > 1]
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    model = build_model(model_config(name, ("model.channels_last=false",)))
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size[0] > 1]
    assert all(c.weight.is_contiguous() for c in convs)


@pytest.mark.parametrize("name", MODEL_CONFIGS)
def test_summary_parts_add_up(name, caplog):
    model = build_model(model_config(name))
    with caplog.at_level(logging.INFO, logger="seg.models.summary"):
        summary = summarize_model(model, (1, 3, 64, 64))
    parts = summary["parts"]
    assert summary["params"] == sum(p.numel() for p in model.parameters())
    assert summary["params"] == sum(p["params"] for p in parts.values())
    assert summary["flops"] > 0
    assert summary["flops"] == sum(p["flops"] for p in parts.values())
    assert "total" in caplog.text and next(iter(parts)) in caplog.text


# --- Configs ------------------------------------------------------------------------------


def test_default_model_is_dual_channel():
    cfg = compose_dict("train", []).model
    assert cfg.name == "multicolumn"
    assert [c.name for c in cfg.columns] == ["detail", "context"]
    assert cfg == compose_dict("train", ["+exp=dual_channel"]).model


def test_an_unknown_model_name_lists_the_valid_ones_when_built():
    """Model families are the entries of MODELS (no enum in the schema): a bad name composes,
    and the builder, the first thing a run makes, names it and the valid ones."""
    cfg = compose_dict("train", ["model.name=unetz"])
    with pytest.raises(ConfigError, match=r"unknown model.name 'unetz'; valid names: .*lraspp"):
        build_model(ModelConfig(name=cfg.model.name))


# --- Multi-column structure and validation --------------------------------------------------


def test_concat_exchange_widens_the_next_stage():
    cfg = model_config("dual_channel")
    model = build_model(cfg)
    widths = [c.widths for c in cfg.columns]
    for stage in cfg.exchange_stages:
        for j, column in enumerate(model.columns):
            first_conv = column.stages[stage + 1][0][0]
            expected = sum(w[stage] for w in widths)
            assert first_conv.in_channels == expected, (j, stage)


def test_coarse_column_first_with_exchange_and_aux_heads():
    columns = [  # the coarse column first: the decoder still works at the finest resolution
        ColumnConfig("coarse", 0.25, [8, 16, 24], [1, 1, 2]),
        ColumnConfig("fine", 1.0, [8, 16, 16], [1, 1, 1]),
    ]
    model = MultiColumnSegNet(columns, exchange_stages=[0, 1], aux_heads=True)
    model.place([CPU, CPU])
    assert model.size_divisor == 32  # 2**3 stages / (1/4)
    out = model.train()(torch.randn(2, 3, 33, 20))
    assert out["out"].shape == (2, 2, 33, 20) and len(out["aux"]) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"exchange_stages": [2]}, "valid stages are 0..1"),
        ({"exchange_stages": [-1]}, "valid stages are 0..1"),
    ],
)
def test_bad_exchange_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        two_columns(**kwargs)


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (ColumnConfig("c", 0.3, [8, 16, 16], [1, 1, 1]), "input_scale 0.3"),
        (ColumnConfig("c", 1.0, [8, 16, 16], [1, 1]), "same length"),
        (ColumnConfig("c", 1.0, [8, 16], [1, 1]), "same number of stages"),
    ],
)
def test_bad_column_rejected(column, message):
    with pytest.raises(ValueError, match=message):
        MultiColumnSegNet([ColumnConfig("a", 1.0, [8, 16, 16], [1, 1, 1]), column])


def test_exchange_with_one_column_rejected():
    cfg = model_config("single_column", ("model.exchange_stages=[1]",))
    with pytest.raises(ValueError, match="need at least two columns"):
        build_model(cfg)


def test_unsupported_options_rejected():
    with pytest.raises(ValueError, match="no column of this multicolumn model has a backbone"):
        build_model(model_config("dual_channel", ("model.pretrained=true",)))
    with pytest.raises(ValueError, match="UNet baseline has no pretrained weights"):
        build_model(model_config("unet", ("model.pretrained=true",)))
    with pytest.raises(ValueError, match="has no auxiliary head"):
        build_model(model_config("lraspp_mobilenet_v3_large", ("model.aux_heads=true",)))


# --- Devices --------------------------------------------------------------------------------


def test_columns_live_on_their_devices():
    # "meta" stands in for a second device on a CPU-only machine.
    model = two_columns(aux_heads=True).place([CPU, torch.device("meta")])
    assert {p.device.type for p in model.columns[0].parameters()} == {"cpu"}
    assert {p.device.type for p in model.columns[1].parameters()} == {"meta"}
    assert {p.device.type for p in model.aux_heads[1].parameters()} == {"meta"}
    assert {p.device.type for p in model.decoder.parameters()} == {"cpu"}
    assert model.devices == [CPU, torch.device("meta")]


def test_a_model_is_built_on_the_cpu_and_placed_by_its_caller():
    model = build_model(model_config("dual_channel"))
    assert model.devices == [CPU, CPU]
    for column in model.columns:
        assert {p.device for p in column.parameters()} == {CPU}
    assert model.place(resolve_devices("cpu", model.num_columns)) is model
    assert model.place(resolve_devices(["cpu", "cpu"], 2)).devices == [CPU, CPU]


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (["cpu", "cpu", "cpu"], "3 entries .* 2 column"),
        (["cpu", "cuda:99"], "cuda:99.? requested but"),
        (["cpu", "gpu0"], "'gpu0' is not a device"),
        (["auto", "cpu"], "'auto' must be the only entry"),
    ],
)
def test_bad_device_lists_rejected(devices, message):
    model = build_model(model_config("dual_channel"))
    with pytest.raises(ValueError, match=message):
        model.place(resolve_devices(devices, model.num_columns))


def test_unavailable_cuda_device_message():
    with pytest.raises(ValueError, match="cuda:3 requested but only 1 CUDA device"):
        resolve_devices(["cuda:0", "cuda:3"], 2, device_count=1)
    with pytest.raises(ValueError, match="no CUDA device is visible"):
        resolve_devices(["cuda:0"], 1, device_count=0)


def test_gpu_indices_with_several_replicas_per_node():
    """Replicas that each see all of the node's GPUs would take the same ones with explicit
    indices (NCCL: "Duplicate GPU detected"); with per-task binding each sees only its own."""
    with pytest.raises(ValueError, match=r"column_devices=.*4 replicas on this node.*use auto"):
        resolve_devices(
            ["cuda:0", "cuda:1"],
            2,
            key="column_devices",
            device_count=8,
            local_rank=1,
            local_world_size=4,
        )
    bound = resolve_devices(["cuda:0", "cuda:1"], 2, device_count=2, local_world_size=4)
    assert bound == [torch.device("cuda", 0), torch.device("cuda", 1)]
    own = resolve_devices("cuda", 2, device_count=8, local_rank=3, local_world_size=4)
    assert own == [torch.device("cuda", 3)] * 2  # a bare cuda: this replica's GPU


def test_auto_devices():
    assert resolve_devices(["auto"], 2, device_count=0) == [CPU, CPU]
    assert resolve_devices(["auto"], 2, device_count=1) == [torch.device("cuda", 0)] * 2
    assert resolve_devices(["auto"], 2, device_count=3) == [
        torch.device("cuda", 0),
        torch.device("cuda", 1),
    ]
    # A bare "cuda" is this replica's GPU.
    assert resolve_devices(["cuda"], 1, device_count=2, local_rank=1, local_world_size=2) == [
        torch.device("cuda", 1)
    ]


@pytest.mark.parametrize(
    ("gpus", "replicas", "columns", "expected"),
    [
        (8, 4, 2, [[0, 1], [2, 3], [4, 5], [6, 7]]),  # 4 replicas x 2 columns
        (8, 8, 2, [[r, r] for r in range(8)]),  # 8 replicas of the whole net
        (8, 2, 3, [[0, 1, 2], [3, 4, 5]]),
        (2, 2, 3, [[0, 0, 0], [1, 1, 1]]),
        (0, 2, 2, [None, None]),
    ],
)
def test_auto_mapping_under_torchrun(gpus, replicas, columns, expected):
    got = [auto_device_indices(columns, gpus, r, replicas) for r in range(replicas)]
    assert got == expected


def test_auto_reads_torchrun_environment(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert resolve_devices(["auto"], 2, device_count=8) == [
        torch.device("cuda", 6),
        torch.device("cuda", 7),
    ]


def test_auto_more_replicas_than_gpus_rejected():
    with pytest.raises(ValueError, match="16 processes per node but only 8 CUDA"):
        auto_device_indices(1, 8, 0, 16)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_columns_on_gpus_output_on_first_device():
    count = torch.cuda.device_count()
    devices = resolve_devices(["cuda:0", "cuda:1" if count > 1 else "cuda:0"], 2)
    model = build_model(model_config("dual_channel")).place(devices).train()
    out = model(torch.randn(2, 3, 67, 93))
    assert out["out"].device == torch.device("cuda", 0)
    assert {p.device for p in model.columns[1].parameters()} == {devices[1]}
    out["out"].mean().backward()


# --- Pretrained weights without network -------------------------------------------------------


def test_pretrained_without_network_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # an empty cache: the weights must download
    calls = []

    def no_network(url, *args, **kwargs):
        calls.append(url)
        raise urllib.error.URLError("no network in tests")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    cfg = dataclasses.replace(ModelConfig(name="lraspp_mobilenet_v3_large"), pretrained=True)
    with pytest.raises(UserError, match=r"could not download .*model\.pretrained=false") as info:
        build_model(cfg)
    assert calls and calls[0] in str(info.value)
    assert str(tmp_path) in str(info.value)
