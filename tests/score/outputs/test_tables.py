"""Paper-style tables of xbench-score: layout, percentages, null handling, file output (score/outputs/tables.py)."""

from __future__ import annotations

import csv
import io

from xbench.score.outputs.folder import flat_scores
from xbench.score.outputs.tables import grounding_table, per_class_table, recognition_table, write_tables


def _metrics(pg):
    summary = {"pointing_game": pg, "dice_fixed": 0.1, "iou_fixed": 0.05, "dice_best": 0.2, "iou_best": 0.12,
               "auroc": 0.8, "auprc": None, "f1": 0.5, "accuracy": 0.7, "hamming_accuracy": 0.75}
    cls = {"Nodule/Mass": {"pointing_game": pg}, "Cardiomegaly": {"pointing_game": None}}
    return {"overall": dict(summary),
            "datasets": {"vindr_cxr": {"summary": dict(summary), "classes": cls},
                         "covid_rural": {"summary": dict(summary), "classes": {"COVID-19": {"pointing_game": pg}}}}}


def _cells(t, row):
    return {t.headers()[j]: c.value for j, c in enumerate(t.rows[row])}


def test_grounding_table_follows_the_paper_order():
    t = grounding_table({"A": _metrics(0.5), "B": _metrics(0.25)}, layout="scorer")
    assert t.headers() == ["COVID-19 Point", "COVID-19 Dice", "COVID-19 IoU", "VinDR-CXR Point", "VinDR-CXR Dice",
                           "VinDR-CXR IoU"]
    assert list(t.rows) == ["A", "B"]  # as given, not ranked; no Overall group, no marks
    assert _cells(t, "B")["VinDR-CXR Point"] == 0.25 and _cells(t, "A")["COVID-19 Dice"] == 0.2  # best tau
    assert all(c.mark is None for cells in t.rows.values() for c in cells)
    fixed = grounding_table({"A": _metrics(0.5)}, best=False, layout="scorer")
    assert fixed.headers()[:3] == ["COVID-19 Point", "COVID-19 Dice", "COVID-19 IoU"]  # the paper's headers
    assert [c.value for c in fixed.rows["A"][:3]] == [0.5, 0.1, 0.05]
    report = grounding_table({"A": _metrics(0.5), "B": _metrics(0.75)}, best=False)
    assert report.headers()[-2:] == ["Overall Dice@0.5", "Overall IoU@0.5"] and list(report.rows) == ["B", "A"]


def test_pointing_table_mean_first_and_nulls():
    t = per_class_table({"A": _metrics(0.5)}, "vindr_cxr", layout="scorer")
    assert t.headers() == ["Mean", "Nodule/Mass", "Cardiomegaly"]
    assert [c.value for c in t.rows["A"]] == [0.5, 0.5, None]
    assert t.to_markdown(heading=False).splitlines() == [
        "| Method | Mean | Nodule/Mass | Cardiomegaly |", "|---|---:|---:|---:|", "| A | 50.00 | 50.00 | – |"]


def test_recognition_table_has_dataset_rows_and_mean():
    t = recognition_table({"A": _metrics(0.5)}, layout="scorer")
    assert list(t.rows) == [("A", "COVID-19"), ("A", "VinDR-CXR"), ("A", "Mean")]
    assert t.headers() == ["AUROC", "AUPRC", "F1", "Accuracy", "Hamming"]
    assert _cells(t, ("A", "VinDR-CXR"))["Hamming"] == 0.75 and _cells(t, ("A", "Mean"))["AUPRC"] is None


def test_write_tables_text_and_flat_scores(tmp_path):
    paths = write_tables({"A": _metrics(0.123456)}, tmp_path)
    assert {p.name for p in paths} >= {"table1_grounding.csv", "table1_grounding.md", "table_recognition.csv",
                                       "table_pointing_vindr_cxr.md"}
    rows = list(csv.reader(io.StringIO((tmp_path / "table1_grounding.csv").read_text())))
    assert rows[0][:2] == ["Method", "COVID-19 Point"] and rows[1][:4] == ["A", "12.35", "20.0", "12.0"]
    rec = (tmp_path / "table_recognition.csv").read_text().splitlines()
    assert rec[0] == "Method,Dataset,AUROC,AUPRC,F1,Accuracy,Hamming" and rec[-1] == "A,Mean,80.0,,50.0,70.0,75.0"
    md = (tmp_path / "table_recognition.md").read_text().splitlines()
    assert md[:3] == ["| Method | Dataset | AUROC | AUPRC | F1 | Accuracy | Hamming |",
                      "|---|---|---:|---:|---:|---:|---:|", "| A | COVID-19 | 80.00 | – | 50.00 | 70.00 | 75.00 |"]
    flat = flat_scores(_metrics(0.5))
    assert flat["pointing_game"] == 0.5 and flat["vindr_cxr_dice_best"] == 0.2 and "auprc" not in flat
