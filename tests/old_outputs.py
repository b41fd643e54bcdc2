"""A results folder as the versions before the marker (xbench-output.json) left it, for the tests of
--overwrite (issue 44, class 5)."""
from __future__ import annotations


def old_version_folder(root):
    """What the versions before the marker left (issue 44, class 5): a multi-submission scoring run (a/, b/ with
    their files and pointing tables), its report (index.html, report.json listing its files and models), and the
    user's own files, some of them named like XBench's tables."""
    import json

    root.mkdir()
    for sub in ("a", "b"):
        (root / sub).mkdir()
        (root / sub / "metrics.json").write_text(json.dumps({"datasets": {"chexlocalize": {}, "vindr cxr": {}}}))
        for name in ("pairs.parquet", "pair_counts.npz", "table1_grounding.csv", "table1_grounding.md",
                     "table_pointing_chexlocalize.csv", "table_pointing_vindr cxr.md", "table_recognition.csv"):
            (root / sub / name).write_text("old")
    (root / "per_class").mkdir()
    (root / "per_class" / "chexlocalize.csv").write_text("old")
    (root / "figures").mkdir()
    for name in ("index.html", "leaderboard.csv", "leaderboard.md", "comparisons.csv"):
        (root / name).write_text("old")
    (root / "report.json").write_text(json.dumps({
        "models": [{"name": "A", "path": f"somewhere/{root.name}/a"}, {"name": "B", "path": f"{root.name}/b"},
                   {"name": "mine", "path": f"{root.name}/mine_results"}],
        "files": {"tables": ["leaderboard.csv", "per_class/chexlocalize.csv"], "figures": ["figures/x.png"],
                  "overlays": ["/etc/passwd", "../outside"]}}))
    mine = {"table_of_my_patients.csv": "mine", "tables.md": "mine", "notes.txt": "mine",
            "metrics.json.bak": "mine", "table1_grounding.csv.orig": "mine"}
    for name, text in mine.items():
        (root / name).write_text(text)
    (root / "mine_results").mkdir()  # named by report.json, but holds a file no old scorer wrote
    (root / "mine_results" / "metrics.json").write_text("{}")
    (root / "mine_results" / "my_notes.txt").write_text("mine")
    return mine

