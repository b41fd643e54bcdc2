"""The XBench store contract in code (contract version 1).

Both sides import this package and nothing else from each other: ``xbench.extract`` writes images,
ground truth and submissions through it; ``xbench.score`` reads and validates them through it.
It never imports torch.
"""
from .errors import InvalidStoreError, Problem, StoreNotFoundError, XBenchError
from .ground_truth import GroundTruth, GroundTruthDataset, read_ground_truth, validate_ground_truth, write_ground_truth
from .images import ImagesDataset, ImagesStore, ImagesWriter, read_images, validate_images
from .store import DATASET_KEYS, SCHEMA_VERSION, open_store_group, store_sha256
from .submission import (
    DatasetSpec,
    Submission,
    SubmissionDataset,
    SubmissionWriter,
    align,
    read_submission,
    validate_submission,
)

__all__ = [
    "DATASET_KEYS", "SCHEMA_VERSION", "DatasetSpec", "GroundTruth", "GroundTruthDataset", "ImagesDataset",
    "ImagesStore", "ImagesWriter", "InvalidStoreError", "Problem", "StoreNotFoundError", "Submission",
    "SubmissionDataset", "SubmissionWriter", "XBenchError", "align", "open_store_group", "read_ground_truth",
    "read_images", "read_submission", "store_sha256", "validate_ground_truth", "validate_images",
    "validate_submission", "write_ground_truth",
]
