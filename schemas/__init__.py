"""The XBench store contract in code (contract version 1).

Both sides import this package and nothing else from each other: ``xbench.extract`` writes images,
ground truth and submissions through it; ``xbench.score`` reads and validates them through it.
It never imports torch.

The names below are imported on first use (as in ``xbench.score``), so importing a light module of
this package (``xbench.schemas._cli``, the error classes) does not load zarr and numpy: that keeps
every command's ``--help`` instant.
"""
from __future__ import annotations

import importlib

#: public name -> the module that defines it
_WHERE = {
    "InvalidStoreError": "errors", "Problem": "errors", "StoreNotFoundError": "errors", "XBenchError": "errors",
    "GroundTruth": "ground_truth", "GroundTruthDataset": "ground_truth", "read_ground_truth": "ground_truth",
    "validate_ground_truth": "ground_truth", "write_ground_truth": "ground_truth",
    "ImagesDataset": "images", "ImagesStore": "images", "ImagesWriter": "images", "read_images": "images",
    "validate_images": "images",
    "DATASET_KEYS": "store", "SCHEMA_VERSION": "store", "open_store_group": "store", "store_sha256": "store",
    "DatasetSpec": "submission_writer", "Submission": "submission", "SubmissionDataset": "submission",
    "SubmissionWriter": "submission_writer", "align": "submission", "read_submission": "submission",
    "validate_submission": "submission",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    try:  # a submodule reached as an attribute (xbench.schemas.store) before anything imported it
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError:
        raise AttributeError(f"module 'xbench.schemas' has no attribute {name!r}") from None


def __dir__():
    return sorted(set(globals()) | set(__all__))
