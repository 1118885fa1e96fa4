"""COCO instances files as a training source: coco_mini_person (the shared copy, its download
assembled from two repository archives served on 127.0.0.1), data=coco, and the sampling share
of a source (data.source_shares)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from test_download import _add, server  # noqa: F401  (the fixture: files on 127.0.0.1)

from seg.config import compose_config
from seg.data import build_train_dataset, eval_source_names, list_source
from seg.data.coco import read_coco_instances, read_coco_mask
from seg.data.coco_mini import (
    ANNOTATIONS,
    CONTENT_DIGEST,
    REPOSITORIES,
    content_digest,
    download_coco_mini_person,
)
from seg.data.datasets import read_pair, shared_refs
from seg.data.download import MARKER, DownloadError
from seg.data.io import BadSampleError
from seg.data.transforms import SourceTransforms
from seg.errors import ConfigError

MINI = "coco_mini_person"
WITH_MINI = [
    "data=human_mix",
    "data.sources=[eg_portrait,ccp,vikram_human_seg,coco_mini_person]",
]


def _instances(shared: Path) -> dict:
    return json.loads((shared / MINI / ANNOTATIONS).read_text())


def test_coco_mini_person_is_training_material_with_every_person_and_crowds_ignored(
    data_env: Path,
) -> None:
    """123 photos, all in train; a photo's mask is the union of its person polygons (as
    pycocotools draws them, up to the polygon's edge pixels) with crowd regions 255; the
    validation sources leave it out; the pinned annotations are the shared copy's."""
    mask_utils = pytest.importorskip("pycocotools.mask")
    instances = _instances(data_env)
    assert content_digest(instances) == CONTENT_DIGEST
    cfg = compose_config([*WITH_MINI, f"data.root={data_env}"]).data
    listing = list_source(cfg, MINI)
    assert len(listing.refs) == 123 and len(listing.splits["train"]) == 123
    assert listing.splits["val"] == listing.splits["test"] == []
    assert MINI not in eval_source_names(cfg) and "coco128_seg" in eval_source_names(cfg)

    by_id = {im["id"]: im for im in instances["images"]}
    crowded = {a["image_id"] for a in instances["annotations"] if a["iscrowd"]}
    image_id = sorted(crowded)[0]
    image = by_id[image_id]
    ref = listing.refs[Path(image["file_name"]).stem]
    photo, mask, resized = read_pair(ref)
    assert photo.shape[:2] == mask.shape == (image["height"], image["width"]) and not resized
    people = np.zeros(mask.shape, bool)
    crowd = np.zeros(mask.shape, bool)
    for ann in (a for a in instances["annotations"] if a["image_id"] == image_id):
        seg = ann["segmentation"]
        h, w = mask.shape
        rle = (
            mask_utils.frPyObjects(seg, h, w)
            if isinstance(seg, dict) and isinstance(seg["counts"], list)
            else seg
            if isinstance(seg, dict)
            else mask_utils.merge(mask_utils.frPyObjects(seg, h, w))
        )
        drawn = mask_utils.decode(rle).astype(bool)
        (crowd if ann["iscrowd"] else people)[...] |= drawn
    assert np.array_equal(mask == 255, crowd & ~(mask == 1))
    assert (mask == 1)[people].mean() > 0.97 and people[mask == 1].mean() > 0.97
    instances_of = read_coco_instances(ref.mask, ref.image, mask.shape)
    assert len(instances_of) == sum(
        1 for a in instances["annotations"] if a["image_id"] == image_id and not a["iscrowd"]
    )
    assert np.array_equal(np.any(instances_of, axis=0), mask == 1)


def test_a_coco_file_of_ones_own_splits_by_name_and_names_a_bad_photo(
    data_env: Path, tmp_path: Path
) -> None:
    """data=coco reads any instances file: val and test by hash of the names (train_only:
    none); a photo whose size differs from the file's, or one that is missing, is named."""
    shared = data_env / MINI
    images = tmp_path / "photos"
    shutil.copytree(shared / "images", images)
    instances = _instances(data_env)
    annotations = tmp_path / "instances_mine.json"
    annotations.write_text(json.dumps(instances))
    args = [f"data.root={tmp_path}", "data.coco.images=photos"]
    args.append(f"data.coco.annotations={annotations.name}")
    cfg = compose_config(["data=coco", *args]).data
    listing = list_source(cfg, "coco")
    sizes = {k: len(v) for k, v in listing.splits.items()}
    assert sizes == {"test": 25, "val": 12, "train": 86}
    assert eval_source_names(cfg) == ["coco"]
    train_only = compose_config(["data=coco", *args, "data.coco.train_only=true"]).data
    assert len(list_source(train_only, "coco").splits["train"]) == 123
    assert eval_source_names(train_only) == []

    first = instances["images"][0]
    ref = listing.refs[Path(first["file_name"]).stem]
    with pytest.raises(BadSampleError, match=rf"{first['file_name']}: is 12 x 10 pixels, but"):
        read_coco_mask(annotations, ref.image, (10, 12))
    (images / first["file_name"]).unlink()
    with pytest.raises(BadSampleError, match=rf"{first['file_name']}: listed in .*, missing"):
        list_source(cfg, "coco")
    skipping = compose_config(["data=coco", *args, "data.on_bad_sample=skip"]).data
    assert len(list_source(skipping, "coco").refs) == 122
    with pytest.raises(ConfigError, match=r"data.folder.encoding=coco: .* use data=coco"):
        list_source(
            compose_config(
                [
                    "data=folder",
                    f"data.root={tmp_path}",
                    "data.folder.images=photos",
                    "data.folder.encoding=coco",
                ]
            ).data,
            "folder",
        )


def test_a_source_share_repeats_its_photos_to_that_share_of_the_epoch(data_env: Path) -> None:
    """coco_mini_person at 15% of the photos with people: its 123 photos repeated (each before
    any repeat), the other sources once each, the same draw for the same seed; negatives are a
    share of the result. A name that is not a training source, or every source, is refused."""
    base = [*WITH_MINI, f"data.root={data_env}", "data.negatives_p=0.15"]
    cfg = compose_config([*base, "+data.source_shares={coco_mini_person: 0.15}"])
    train = build_train_dataset(cfg.data, cfg.aug, seed=3)
    counts = Counter(ref.source for ref in train.refs)
    others = counts["eg_portrait"] + counts["ccp"] + counts["vikram_human_seg"]
    assert others == 1161 + 702 + 203  # once each
    assert counts[MINI] == round(others / 0.85 * 0.15)
    assert counts["imagenet_negatives"] == round((others + counts[MINI]) * 0.15 / 0.85)
    mini = Counter(ref.id for ref in train.refs if ref.source == MINI)
    assert len(mini) == 123 and max(mini.values()) - min(mini.values()) <= 1
    again = build_train_dataset(cfg.data, cfg.aug, seed=3)
    assert [r.id for r in again.refs] == [r.id for r in train.refs]

    without = compose_config(base)
    plain = Counter(ref.source for ref in build_train_dataset(without.data, without.aug).refs)
    assert plain[MINI] == 123
    wrong = compose_config([*base, "+data.source_shares={coco128_seg: 0.1}"]).data
    with pytest.raises(ConfigError, match=r"source_shares names \['coco128_seg'\], which are not"):
        shared_refs(wrong, [])
    with pytest.raises(ConfigError, match=r"data.source_shares.coco_mini_person=1.5 is invalid"):
        compose_config([*base, "+data.source_shares={coco_mini_person: 1.5}"])


def test_a_train_scale_resizes_that_sources_photos_alone(data_env: Path) -> None:
    """data.train_scales={coco_mini_person: 1.6667}: COCO's photos are resized to long side
    800 before the crop, the other sources' to aug.train_size (480), in the real training
    dataset; its pipelines are seeded apart and reproducible; a name that is no training source,
    or a scale out of range, is refused."""
    base = [
        *WITH_MINI,
        f"data.root={data_env}",
        "data.negatives_p=0",
        "aug.train_size=480",
        "aug.crop_size=[900,900]",  # larger than any resized photo: the pad shows its size
        "aug.affine_p=0",
        "aug.mask_fill=255",
    ]
    cfg = compose_config([*base, "+data.train_scales={coco_mini_person: 1.6667}"])
    train = build_train_dataset(cfg.data, cfg.aug, seed=0)
    first = {}
    for index, ref in enumerate(train.refs):
        first.setdefault(ref.source, index)
    long_sides = {}
    for source, index in first.items():
        content = (train[index]["mask"] != 255).numpy()
        rows, cols = content.any(axis=1), content.any(axis=0)
        long_sides[source] = max(int(rows.sum()), int(cols.sum()))
    assert long_sides == {"eg_portrait": 480, "ccp": 480, "vikram_human_seg": 480, MINI: 800}

    plain = compose_config(base)
    assert not isinstance(build_train_dataset(plain.data, plain.aug).transform, SourceTransforms)
    transforms = train.transform
    assert isinstance(transforms, SourceTransforms) and list(transforms.by_source) == [MINI]
    image = np.random.default_rng(0).integers(0, 255, (300, 400, 3), dtype=np.uint8)
    mask = np.zeros((300, 400), np.uint8)
    affine = compose_config([*base, "aug.affine_p=1", "+data.train_scales={coco_mini_person: 1}"])
    pipelines = build_train_dataset(affine.data, affine.aug, seed=5).transform
    default, mini = (
        pipelines.for_source(n)(image=image, mask=mask)["image"] for n in ("ccp", MINI)
    )
    assert not np.array_equal(default.numpy(), mini.numpy())  # same scale, other streams
    again = build_train_dataset(affine.data, affine.aug, seed=5).transform
    assert np.array_equal(again.for_source(MINI)(image=image, mask=mask)["image"].numpy(), mini)

    wrong = compose_config([*base, "+data.train_scales={coco128_seg: 2}"])
    with pytest.raises(ConfigError, match=r"train_scales names \['coco128_seg'\], which are not"):
        build_train_dataset(wrong.data, wrong.aug)
    with pytest.raises(ConfigError, match=r"data.train_scales.coco_mini_person=0.0 is invalid"):
        compose_config([*base, "+data.train_scales={coco_mini_person: 0}"])


def test_the_coco_recipe_gives_coco_30_percent_and_negatives_25_percent(data_env: Path) -> None:
    """+exp=dual_channel_pretrained_cpu_coco (README, "Which recipe"): the pretrained CPU
    recipe with coco_mini_person at 30% of each epoch's photos with people, photos without
    people at 25% of all its samples, 10 epochs."""
    cfg = compose_config(["+exp=dual_channel_pretrained_cpu_coco", f"data.root={data_env}"])
    recipe = compose_config(["+exp=dual_channel_pretrained_cpu", f"data.root={data_env}"])
    assert (cfg.model, cfg.optim, cfg.loss) == (recipe.model, recipe.optim, recipe.loss)
    assert cfg.trainer.epochs == 10 and cfg.aug == recipe.aug
    counts = Counter(ref.source for ref in build_train_dataset(cfg.data, cfg.aug).refs)
    positives = sum(n for source, n in counts.items() if source != "imagenet_negatives")
    assert counts[MINI] / positives == pytest.approx(0.3, abs=1e-3)
    assert counts["imagenet_negatives"] / counts.total() == pytest.approx(0.25, abs=1e-3)


def _repository_archive(top: str, files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel, data in files.items():
            _add(tar, f"{top}/{rel}", data)
    return buf.getvalue()


def _as_published(instances: dict, images: list[dict], extra: list[dict]) -> bytes:
    """An instances file as COCO publishes one: every category's annotations, more fields per
    photo, photos without people."""
    ids = {im["id"] for im in images}
    anns = [a for a in instances["annotations"] if a["image_id"] in ids]
    cars = [
        {
            "id": 9_000_000 + im["id"],
            "image_id": im["id"],
            "category_id": 3,
            "iscrowd": 0,
            "segmentation": [[0, 0, 5, 0, 5, 5]],
            "area": 12.5,
            "bbox": [0, 0, 5, 5],
        }
        for im in images
    ]
    published = [
        {
            "license": im["license"],
            "file_name": im["file_name"],
            "coco_url": "http://x",
            "height": im["height"],
            "width": im["width"],
            "date_captured": "2013",
            "id": im["id"],
        }
        for im in images
    ]
    body = {
        "info": {"year": 2017},
        "licenses": instances["licenses"],
        "images": published + extra,
        "annotations": anns + cars,
        "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}],
    }
    return json.dumps(body).encode()


def test_coco_mini_person_is_assembled_from_its_two_repositories(server, data_env, tmp_path):  # noqa: F811
    """Each repository's archive (served here, made of the shared copy's photos split between
    them, one photo in both, with COCO's other categories and a photo without people) gives
    its photos and person annotations; the assembled file says what the shared one says
    (content digest), the photos are its bytes. A dropped connection is resumed; changed
    annotations are refused, leaving nothing."""
    shared = data_env / MINI
    instances = _instances(data_env)
    halves = (instances["images"][::2], instances["images"][1::2] + instances["images"][:1])
    nobody = [{"id": 1, "file_name": "000000000001.jpg", "height": 4, "width": 4, "license": 1}]
    for repository, images in zip(REPOSITORIES, halves, strict=True):
        files: dict[str, bytes] = {"README.md": b"a COCO subset"}
        prefix = f"{repository.folder}/" if repository.folder else ""
        for split in ("train2017", "val2017"):
            mine = [im for im in images if im["coco_split"] == split]
            files[f"{prefix}annotations/instances_{split}.json"] = _as_published(
                instances, mine, nobody
            )
            for im in mine:
                files[f"{prefix}{split}/{im['file_name']}"] = (
                    shared / "images" / im["file_name"]
                ).read_bytes()
            files[f"{prefix}{split}/000000000001.jpg"] = b"a photo without people"
        top = f"{repository.repo.split('/')[1]}-{repository.commit}"
        server.files[f"/{repository.repo}.tar.gz"] = _repository_archive(top, files)
    urls = {r.repo: server.url(f"/{r.repo}.tar.gz") for r in REPOSITORIES}
    root = tmp_path / "data"
    server.drop.add(f"/{REPOSITORIES[1].repo}.tar.gz")
    with pytest.raises(DownloadError, match="Run the same command again to resume"):
        download_coco_mini_person(root, urls)
    assert not (root / MINI).exists() and not list(root.glob(f".{MINI}.*"))
    server.drop.clear()
    out = download_coco_mini_person(root, urls)
    assert any(path == f"/{REPOSITORIES[1].repo}.tar.gz" for path, _ in server.ranges)
    made = json.loads((out / ANNOTATIONS).read_text())
    assert content_digest(made) == CONTENT_DIGEST
    assert len(made["images"]) == 123 and len(made["annotations"]) == 514
    photos = sorted(p.name for p in (out / "images").iterdir())
    assert photos == sorted(p.name for p in (shared / "images").iterdir())
    assert all(
        (out / "images" / n).read_bytes() == (shared / "images" / n).read_bytes() for n in photos
    )
    assert (out / MARKER).is_file() and not list((root / ".downloads").glob("*.tar.gz"))

    changed = dict(instances)
    changed["annotations"] = [dict(a) for a in instances["annotations"]]
    changed["annotations"][0]["iscrowd"] = 1 - changed["annotations"][0]["iscrowd"]
    relabelled = {}
    for repository, images in zip(REPOSITORIES, halves, strict=True):
        prefix = f"{repository.folder}/" if repository.folder else ""
        files = {}
        for split in ("train2017", "val2017"):
            mine = [im for im in images if im["coco_split"] == split]
            files[f"{prefix}annotations/instances_{split}.json"] = _as_published(changed, mine, [])
            for im in mine:
                files[f"{prefix}{split}/{im['file_name']}"] = (
                    shared / "images" / im["file_name"]
                ).read_bytes()
        top = f"{repository.repo.split('/')[1]}-{repository.commit}"
        server.files[f"/x/{repository.repo}.tar.gz"] = _repository_archive(top, files)
        relabelled[repository.repo] = server.url(f"/x/{repository.repo}.tar.gz")
    other = tmp_path / "other"
    with pytest.raises(DownloadError, match=r"are not the pinned ones .*nothing was moved"):
        download_coco_mini_person(other, relabelled)
    assert not (other / MINI).exists() and not list(other.glob(f".{MINI}.*"))


def test_check_data_scans_coco_mini_person(data_env: Path) -> None:
    from seg.data.check import scan_source

    cfg = compose_config(["data=coco_mini_person", f"data.root={data_env}"]).data
    report = scan_source(cfg, MINI, workers=0)
    assert report.pairs == 123 and report.splits == {"train": 123, "val": 0, "test": 0}
    assert not report.problems and not report.empty_masks and len(report.person) == 123
