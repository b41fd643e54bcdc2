"""One versions table (schemas/schema_versions.py): every ``*_MINOR`` constant of the source reads it (no minor
written as a number anywhere else), each named constant equals its row, and each metrics.json section's row
scope declares the table's minor."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from xbench.schemas.schema_versions import MINORS, SCHEMA, minor

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ("schemas", "extract", "score", "xbench")

#: a module-level constant whose name holds MINOR, and what it is set to
_CONSTANT = re.compile(r"^([A-Z][A-Z0-9_]*MINOR[A-Z0-9_]*)\s*(?::[^=]+)?=\s*(.+)$", re.M)
#: a number written out (not part of a name or of a dotted path)
_NUMBER = re.compile(r"(?<![\w.])\d+(?![\w.])")


def literal_minors(text: str) -> list[str]:
    """The ``*_MINOR`` constants of ``text`` set to a number written there instead of the table."""
    return [name for name, value in _CONSTANT.findall(text) if _NUMBER.search(value.split("#")[0])]


def test_the_checker_finds_a_minor_written_as_a_number():
    assert literal_minors("X_MINOR = 3\nY_MINOR = {'images': 2}\nZ_MINOR: int = 4  # why\n") == \
        ["X_MINOR", "Y_MINOR", "Z_MINOR"]
    assert literal_minors('A_MINOR = minor("metrics", "gaze")\nB_MINOR = row_scope("phrase").minor  # round 2\n') == []


def test_no_minor_is_written_outside_the_table():
    found = {}
    for folder in SOURCE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "schema_versions.py":
                continue
            names = literal_minors(path.read_text(encoding="utf-8"))
            if names:
                found[str(path.relative_to(ROOT))] = names
    assert found == {}


@pytest.mark.parametrize("module, name, key", [
    ("xbench.schemas.store", "SCHEMA_MINOR", ("images", "originals")),
    ("xbench.schemas.submission", "SCORES_ONLY_MINOR", ("submission", "scores_only")),
    ("xbench.schemas.faithfulness", "SUBMISSION_MINOR", ("submission", "scores_only")),
    ("xbench.schemas.faithfulness", "IMAGES_MINOR", ("images", "faithfulness")),
    ("xbench.schemas.perturbations", "GT_MINOR", ("ground-truth", "perturbations")),
    ("xbench.schemas.perturbations", "IMAGES_MINOR", ("images", "perturbations")),
    ("xbench.schemas.attributes", "GT_MINOR", ("ground-truth", "attributes")),
    ("xbench.schemas.probes", "PROBE_MINOR", ("ground-truth", "text_probes")),
    ("xbench.schemas.gaze", "GT_MINOR", ("ground-truth", "gaze")),
    ("xbench.score.sections.human.section", "HUMAN_METRICS_MINOR", ("metrics", "human")),
    ("xbench.score.sections.probes", "PROBES_METRICS_MINOR", ("metrics", "text_probes")),
    ("xbench.score.sections.subgroups", "SUBGROUP_METRICS_MINOR", ("metrics", "subgroups")),
    ("xbench.score.sections.gaze", "GAZE_METRICS_MINOR", ("metrics", "gaze")),
    ("xbench.score.sections.faithfulness", "METRICS_MINOR", ("metrics", "faithfulness")),
    ("xbench.score.scoring", "PARTIAL_METRICS_MINOR", ("metrics", "partial")),
    ("xbench.score.scoring", "ROBUSTNESS_METRICS_MINOR", ("metrics", "robustness")),
    ("xbench.score.scoring", "PHRASES_METRICS_MINOR", ("metrics", "phrases")),
])
def test_each_named_minor_is_its_row(module, name, key):
    assert getattr(importlib.import_module(module), name) == MINORS[key] == minor(*key)


def test_the_phrase_minors_of_each_store():
    from xbench.schemas.queries import QUERY_MINOR

    assert QUERY_MINOR == {kind: MINORS[(kind, "phrases")] for kind in ("images", "ground-truth", "submission")}


def test_each_section_declares_the_tables_minor():
    from xbench.score.sections.plugins import sections

    scopes = {s.section: s.minor for s in sections(primary=False)}
    assert scopes == {feature: m for (kind, feature), m in MINORS.items() if kind == "metrics" and feature in scopes}
    # every metrics.json row of the table is a section's, but the partial keys (a run on part of the cases)
    assert {f for k, f in MINORS if k == "metrics"} - set(scopes) == {"partial"}


def test_the_table_is_well_formed():
    from xbench.schemas.store import KINDS, SCHEMA_VERSION

    assert SCHEMA == SCHEMA_VERSION == 1
    assert {k for k, _ in MINORS} == {*KINDS, "metrics"}
    assert all(isinstance(m, int) and m >= 1 for m in MINORS.values())
    with pytest.raises(KeyError):
        minor("metrics", "no such section")
