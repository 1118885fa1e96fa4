"""The ``folder`` dataset: a user's own images and masks, paired by a file-name rule."""

from __future__ import annotations

from pathlib import Path

from seg.config import BadSamplePolicy, FolderConfig, MaskEncoding
from seg.data.io import BadSampleError
from seg.data.listing import (
    SPLITS,
    Listing,
    MaskSpec,
    SampleRef,
    _bad_pair,
    fraction_splits,
    natural_key,
)
from seg.errors import ConfigError, DataError, MissingFileError


def list_folder(
    root: Path,
    cfg: FolderConfig,
    val_fraction: float,
    test_fraction: float,
    policy: BadSamplePolicy = BadSamplePolicy.error,
) -> Listing:
    """Pair ``root/cfg.images`` with ``root/cfg.masks`` by ``cfg.mask_pattern``.

    If ``images/train`` and ``images/val`` exist, the ``<split>/`` subfolders of both folders are
    the splits (mmsegmentation's layout); otherwise the splits are drawn from file-name hashes.
    """
    images_dir = under_root(root, cfg.images)
    masks_dir = under_root(root, cfg.masks)
    if not 0 <= cfg.alpha_threshold <= 255:
        raise ConfigError(f"data.folder.alpha_threshold={cfg.alpha_threshold} must be in 0..255")
    if MaskEncoding(cfg.encoding) is MaskEncoding.coco:
        raise ConfigError(
            "data.folder.encoding=coco: a COCO instances file describes all the photos in one "
            "file; use data=coco with data.coco.images and data.coco.annotations"
        )
    spec = MaskSpec(cfg.encoding, None, cfg.alpha_threshold, cfg.ignore_value)
    listing = Listing("folder", {}, {})
    if all((images_dir / s).is_dir() for s in ("train", "val")):
        for split in SPLITS:
            listing.splits[split] = []
            if (images_dir / split).is_dir():
                listing.splits[split] = _pair(
                    images_dir / split, masks_dir / split, cfg, spec, policy, listing, f"{split}/"
                )
        return listing
    _pair(images_dir, masks_dir, cfg, spec, policy, listing, "")
    listing.splits = fraction_splits(listing, val_fraction, test_fraction)
    return listing


def mask_name(pattern: str, image: Path) -> str:
    """The mask file name for an image: ``pattern`` may use {stem}, {name} and {suffix}."""
    try:
        return pattern.format(stem=image.stem, name=image.name, suffix=image.suffix)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"data.folder.mask_pattern={pattern!r} is invalid ({exc!r}); it may use only "
            "{stem}, {name} and {suffix}, e.g. '{stem}_mask.png'"
        ) from None


def _pair(
    images_dir: Path,
    masks_dir: Path,
    cfg: FolderConfig,
    spec: MaskSpec,
    policy: BadSamplePolicy,
    listing: Listing,
    prefix: str,
) -> list[str]:
    if not images_dir.is_dir():
        raise MissingFileError(f"images folder {images_dir} does not exist (data.folder.images)")
    if not masks_dir.is_dir():
        raise MissingFileError(f"masks folder {masks_dir} does not exist (data.folder.masks)")
    suffixes = tuple(e.lower() for e in cfg.image_extensions)
    candidates = sorted(
        (p for p in images_dir.iterdir() if p.is_file() and p.suffix.lower() in suffixes),
        key=lambda p: natural_key(p.name),
    )
    mask_names = {p.name: mask_name(cfg.mask_pattern, p) for p in candidates}
    # When masks sit beside the images, a mask file is not an image of its own.
    own_masks = set(mask_names.values()) if masks_dir.resolve() == images_dir.resolve() else set()
    ids = []
    for image in candidates:
        if image.name in own_masks:
            continue
        mask = masks_dir / mask_names[image.name]
        if not mask.is_file():
            _bad_pair(BadSampleError(image, f"missing mask: expected {mask}"), policy, listing)
            continue
        sample_id = prefix + image.stem
        if sample_id in listing.refs:
            raise DataError(
                f"two images share the name {image.stem!r} in {images_dir} "
                f"({listing.refs[sample_id].image.name} and {image.name}); names must be unique"
            )
        listing.refs[sample_id] = SampleRef(sample_id, "folder", image, mask, spec)
        ids.append(sample_id)
    if not ids and not listing.problems:
        raise MissingFileError(
            f"no images with extensions {list(suffixes)} in {images_dir} (data.folder.images)"
        )
    return ids


def under_root(root: Path, path: str) -> Path:
    """``path`` relative to the data root, or as it is where absolute."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else root / p
