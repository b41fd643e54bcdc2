"""Paper-style tables: layout, percentages, null handling, file output."""

from __future__ import annotations

import numpy as np
import pandas as pd

from xbench.score.outputs import flat_scores
from xbench.score.tables import grounding_table, pointing_table, recognition_table, to_markdown, write_tables


def _metrics(pg):
    summary = {"pointing_game": pg, "dice_fixed": 0.1, "iou_fixed": 0.05, "dice_best": 0.2, "iou_best": 0.12,
               "auroc": 0.8, "auprc": None, "f1": 0.5, "accuracy": 0.7, "hamming_accuracy": 0.75}
    cls = {"Nodule/Mass": {"pointing_game": pg}, "Cardiomegaly": {"pointing_game": None}}
    return {"overall": dict(summary),
            "datasets": {"vindr_cxr": {"summary": dict(summary), "classes": cls},
                         "covid_rural": {"summary": dict(summary), "classes": {"COVID-19": {"pointing_game": pg}}}}}


def test_grounding_table_follows_the_paper_order_in_percent():
    df = grounding_table({"A": _metrics(0.5), "B": _metrics(0.25)})
    assert list(df.columns.get_level_values(0)[::3]) == ["COVID-19", "VinDR-CXR"]
    assert df.loc["B", ("VinDR-CXR", "Point")] == 25.0
    assert df.loc["A", ("COVID-19", "Dice")] == 20.0  # best-threshold Dice by default


def test_pointing_table_mean_first_and_nulls():
    df = pointing_table({"A": _metrics(0.5)}, "vindr_cxr")
    assert list(df.columns) == ["Mean", "Nodule/Mass", "Cardiomegaly"]
    assert np.isnan(df.loc["A", "Cardiomegaly"])
    assert "–" in to_markdown(df)


def test_recognition_table_has_dataset_rows_and_mean():
    df = recognition_table({"A": _metrics(0.5)})
    assert ("A", "Mean") in df.index and df.loc[("A", "VinDR-CXR"), "Hamming"] == 75.0
    assert np.isnan(df.loc[("A", "VinDR-CXR"), "AUPRC"])


def test_write_tables_and_flat_scores(tmp_path):
    paths = write_tables({"A": _metrics(0.5)}, tmp_path)
    assert {p.name for p in paths} >= {"table1_grounding.csv", "table1_grounding.md", "table_recognition.csv",
                                       "table_pointing_vindr_cxr.md"}
    csv = pd.read_csv(tmp_path / "table1_grounding.csv", index_col=0)
    assert csv.loc["A", "VinDR-CXR Point"] == 50.0
    flat = flat_scores(_metrics(0.5))
    assert flat["pointing_game"] == 0.5 and flat["vindr_cxr_dice_best"] == 0.2 and "auprc" not in flat
