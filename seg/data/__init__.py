"""Datasets, transforms and loaders for human segmentation."""

from seg.data.batching import PadCollate, pad_batch, pixel_batches, run_by_size, split_bad
from seg.data.datasets import (
    SegDataset,
    build_dataset,
    build_eval_datasets,
    build_train_dataset,
    eval_sizes,
    eval_source_names,
    list_source,
    own_eval_sizes,
    save_splits,
    source_names,
    train_source_names,
)
from seg.data.io import IGNORE_INDEX, BadSampleError
from seg.data.loader import build_loader

__all__ = [
    "IGNORE_INDEX",
    "BadSampleError",
    "PadCollate",
    "SegDataset",
    "build_dataset",
    "build_eval_datasets",
    "build_loader",
    "build_train_dataset",
    "eval_sizes",
    "eval_source_names",
    "list_source",
    "own_eval_sizes",
    "pad_batch",
    "pixel_batches",
    "run_by_size",
    "save_splits",
    "source_names",
    "split_bad",
    "train_source_names",
]
