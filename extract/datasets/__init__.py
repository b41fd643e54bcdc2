"""Dataset readers: one per dataset key of the contract, behind a lazy registry.

``DATASETS.get(key)`` returns the reader class. Each reader module declares its entry itself
(``REGISTER = {"<key>": "<ReaderClass>"}`` at its top level); the registry finds them by listing this
package and reading that literal from the source, so adding a reader is adding its module (no central
list), and listing the datasets imports neither the readers nor pydicom or pycocotools. Installed
packages add readers through the ``xbench.datasets`` entry point group (docs/explanation/architecture.md).
"""
from __future__ import annotations

from xbench.schemas.registry import ENTRY_POINT_GROUPS, Registry
from xbench.extract.datasets.base import Box, CaseRecord, DatasetReader, Mask, Polygon, ReaderError, ReaderOptionError, ReadProblem

DATASETS: Registry[type[DatasetReader]] = Registry(
    "dataset", check=DatasetReader, as_class=True, entry_point_group=ENTRY_POINT_GROUPS["dataset"])
DATASETS.discover(__name__, __path__, declared="REGISTER")

__all__ = ["DATASETS", "Box", "CaseRecord", "DatasetReader", "Mask", "Polygon", "ReaderError", "ReaderOptionError", "ReadProblem"]
