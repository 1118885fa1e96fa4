"""Scan whole datasets: pair counts, image sizes, person fraction and every problem found."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import cv2
import numpy as np
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from seg.config import DataConfig
from seg.data.datasets import list_source, read_pair
from seg.data.io import BadSampleError
from seg.data.listing import SampleRef, person_fraction


@dataclass
class ScanReport:
    source: str
    pairs: int
    splits: dict[str, int]
    sizes: Counter = field(default_factory=Counter)  # (W, H) -> count
    person: list[float] = field(default_factory=list)
    resized_masks: int = 0
    grayscale: int = 0
    empty_masks: list[str] = field(default_factory=list)
    full_masks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        person = np.asarray(self.person) if self.person else np.zeros(1)
        widths = [w for w, _ in self.sizes]
        heights = [h for _, h in self.sizes]
        return {
            "source": self.source,
            "pairs": self.pairs,
            "usable_pairs": len(self.person),
            "splits": self.splits,
            "distinct_sizes": len(self.sizes),
            "width_range": [min(widths, default=0), max(widths, default=0)],
            "height_range": [min(heights, default=0), max(heights, default=0)],
            "most_common_size": list(self.sizes.most_common(1)[0][0]) if self.sizes else None,
            "person_fraction": {
                "mean": float(person.mean()),
                "min": float(person.min()),
                "max": float(person.max()),
            },
            "resized_masks": self.resized_masks,
            "one_channel_images": self.grayscale,
            "empty_masks": self.empty_masks,
            "full_masks": self.full_masks,
            "notes": self.notes,
            "problems": self.problems,
        }


class _ScanSet(Dataset):
    """One stats record per pair, so that a DataLoader can spread the decoding over workers."""

    def __init__(self, refs: list[SampleRef]) -> None:
        self.refs = refs

    def __len__(self) -> int:
        return len(self.refs)

    def __getitem__(self, index: int) -> dict:
        ref = self.refs[index]
        try:
            image, fitted, resized = read_pair(ref)
        except BadSampleError as err:
            return {"id": ref.id, "problem": str(err)}
        with Image.open(ref.image) as header:  # reads the header only
            gray = header.mode in ("1", "L", "LA", "I", "I;16")
        return {
            "id": ref.id,
            "size": (image.shape[1], image.shape[0]),
            "person": person_fraction(fitted),
            "resized": resized,
            "gray": gray,
        }


def scan_source(cfg: DataConfig, name: str, workers: int = 2) -> ScanReport:
    """Read every pair of one source (all splits) and collect statistics and problems."""
    listing = list_source(cfg, name)
    refs = list(listing.refs.values())
    report = ScanReport(
        source=name,
        pairs=len(refs),
        splits={s: len(ids) for s, ids in listing.splits.items()},
        notes=list(listing.notes),
        problems=[str(p) for p in listing.problems],
    )
    if workers > 0:
        cv2.setNumThreads(0)  # OpenCV's pool does not survive the workers' fork (see loader.py)
    loader = DataLoader(
        _ScanSet(refs),
        batch_size=None,
        num_workers=workers,
        collate_fn=lambda x: x,
    )
    for record in loader:
        if "problem" in record:
            report.problems.append(record["problem"])
            continue
        report.sizes[record["size"]] += 1
        report.person.append(record["person"])
        report.resized_masks += record["resized"]
        report.grayscale += record["gray"]
        if record["person"] == 0.0:
            report.empty_masks.append(record["id"])
        elif record["person"] == 1.0:
            report.full_masks.append(record["id"])
    return report


def format_reports(reports: list[ScanReport]) -> str:
    """A plain-text table, one row per source, then the notes and problems of each."""
    head = ("source", "pairs", "train/val/test", "W range", "H range", "person % mean [min, max]",
            "resized masks", "1-channel", "problems")  # fmt: skip
    rows = []
    for r in reports:
        d = r.as_dict()
        p = d["person_fraction"]
        rows.append((
            r.source,
            str(r.pairs),
            "/".join(str(d["splits"].get(s, 0)) for s in ("train", "val", "test")),
            "{}..{}".format(*d["width_range"]),
            "{}..{}".format(*d["height_range"]),
            f"{100 * p['mean']:.1f} [{100 * p['min']:.1f}, {100 * p['max']:.1f}]",
            str(r.resized_masks),
            str(r.grayscale),
            str(len(r.problems)),
        ))  # fmt: skip
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in [head, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in reports:
        for note in r.notes:
            lines.append(f"{r.source}: note: {note}")
        if r.empty_masks:
            lines.append(f"{r.source}: note: masks with no person pixel: {r.empty_masks[:10]}")
        if r.full_masks:
            lines.append(f"{r.source}: note: masks that are all person: {r.full_masks[:10]}")
        for problem in r.problems:
            lines.append(f"{r.source}: PROBLEM: {problem}")
    return "\n".join(lines)
