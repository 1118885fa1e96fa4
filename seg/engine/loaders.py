"""Training and validation loaders for the engine: a resumable training sampler and exact
distributed validation shards.

The training order of an epoch is a function of (seed, epoch) only, on any number of replicas
(``DistributedSampler``'s permutation), so a resumed run finds its place inside an epoch by
skipping the samples already consumed, without loading them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torch.utils.data import ConcatDataset, DataLoader, Dataset, DistributedSampler, Subset

from seg.data import IGNORE_INDEX, PadCollate, build_loader
from seg.distributed import shard


class ResumableSampler(DistributedSampler):
    """``DistributedSampler`` (shuffled, drop_last) whose epoch may start at sample ``start``.

    ``num_replicas`` and ``rank`` are explicit, so it also serves a single process, where it is a
    seeded per-epoch permutation. Call ``set_epoch`` every epoch and ``set_start`` (0 except in
    the epoch a run resumes in).
    """

    def __init__(self, dataset: Dataset, num_replicas: int, rank: int, seed: int) -> None:
        super().__init__(
            dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=True
        )
        self.start = 0

    def set_start(self, start: int) -> None:
        if not 0 <= start <= self.num_samples:
            raise ValueError(f"start {start} is outside this replica's 0..{self.num_samples}")
        self.start = start

    def __iter__(self) -> Iterator[int]:
        return iter(list(super().__iter__())[self.start :])

    def __len__(self) -> int:
        return self.num_samples - self.start


def build_train_loader(
    dataset: Dataset,
    batch_size: int,
    num_workers: int,
    seed: int,
    rank: int,
    world_size: int,
    stream_seed: int | None = None,
) -> tuple[DataLoader, ResumableSampler]:
    """``seg.data.build_loader``'s training loader with a :class:`ResumableSampler`.

    ``seed`` fixes the sample order; ``stream_seed`` (default ``seed``) the augmentation
    streams of the workers, so that a resumed run does not replay the first epoch's draws.
    """
    sampler = ResumableSampler(dataset, world_size, rank, seed)
    loader = build_loader(
        dataset,
        batch_size,
        train=True,
        num_workers=num_workers,
        seed=seed if stream_seed is None else stream_seed,
        rank=rank,
        sampler=sampler,
    )
    return loader, sampler


def build_val_loader(
    datasets: dict[str, Dataset],
    batch_size: int,
    num_workers: int,
    rank: int,
    world_size: int,
    image_fill: float | Sequence[float] = 0.0,
) -> DataLoader | None:
    """One loader over this rank's shard of all sources together (samples carry ``source``);
    None when the shard is empty (more ranks than validation samples).

    Eval-preset samples are portrait or landscape canvases: batches are padded to their largest
    H and W (``PadCollate``: images with ``image_fill``, the eval preset's ``eval_pad_value``,
    masks with the ignore index) and carry each sample's ``size`` for ``run_by_size``.
    """
    joined = ConcatDataset(list(datasets.values()))
    part = Subset(joined, shard(len(joined), rank, world_size))
    if len(part) == 0:
        return None
    collate = PadCollate(image_fill, IGNORE_INDEX)
    return build_loader(part, batch_size, train=False, num_workers=num_workers, collate_fn=collate)
