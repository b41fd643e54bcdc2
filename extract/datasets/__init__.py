"""Dataset readers: one per dataset key of the contract, behind a lazy registry.

``DATASETS.get(key)`` returns the reader class; modules are imported on first use, so listing the
datasets never imports pydicom or pycocotools.
"""
from __future__ import annotations

from ..registry import Registry
from .base import Box, CaseRecord, DatasetReader, Mask, Polygon, ReaderError, ReaderOptionError, ReadProblem

DATASETS: Registry[type[DatasetReader]] = Registry("dataset")
for _key, _target in {
    "rsna_pneumonia": "xbench.extract.datasets.rsna:RSNAPneumoniaReader",
    "siim_acr": "xbench.extract.datasets.siim:SIIMACRReader",
    "covid_rural": "xbench.extract.datasets.covid_rural:CovidRuralReader",
    "chestx_det10": "xbench.extract.datasets.chestx_det10:ChestXDet10Reader",
    "chexlocalize": "xbench.extract.datasets.chexlocalize:CheXlocalizeReader",
    "chestxray14": "xbench.extract.datasets.chestxray14:ChestXray14Reader",
    "vindr_cxr": "xbench.extract.datasets.vindr:VinDrCXRReader",
    "ms_cxr": "xbench.extract.datasets.ms_cxr:MSCXRReader",
    "phantom": "xbench.extract.datasets.phantom:PhantomReader",
}.items():
    DATASETS.register(_key, _target)

__all__ = ["DATASETS", "Box", "CaseRecord", "DatasetReader", "Mask", "Polygon", "ReaderError", "ReaderOptionError", "ReadProblem"]
