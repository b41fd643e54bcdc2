"""Row scopes (score/sections/kinds.py, score/sections/plugins/): a third scope is one plug-in. A throw-away scope
("probe": one entry per dataset counting its images, its paired row the difference of those counts) is declared for
the duration of a test and goes through scoring (metrics.json section, schema minor, partial runs), the metric
registry's scope check, paired comparisons, pair_counts.npz (written, checked and read back), `xbench compare` from
result folders and the report's tables, none of which is edited for it."""
from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from test_phrases import make_phrase_stores
from xbench.score.metrics import registry as R
from xbench.score.scoring import score_submission
from xbench.score.sections.kinds import RowScope
from xbench.score.sections.plugins import declared, row_scope, row_scopes, scope_names

SEEN: list[dict] = []


class Probe(RowScope):
    name = "probe"
    title = "probe rows"
    unit = "images"
    section = "probes"
    minor = 9
    saves_counts = True

    def keys(self):
        return ("n_images",)

    def score(self, sub, gt, names, *, bootstrap, seed, where, region_problems, timings, cases):
        SEEN.append({"names": list(names), "bootstrap": bootstrap, "seed": seed})
        counts = {d: int(np.count_nonzero(cases[d])) if d in cases else len(gt.datasets[d].case_id) for d in names}
        section = {"overall": {"n_images": sum(counts.values())},
                   "datasets": {d: {"n_cases": n, "n_images": n} for d, n in counts.items()}}
        return section, counts

    def ground_truth_problems(self, a, b):
        return [f"{d}: image counts differ" for d in sorted(set(a) & set(b)) if a[d] != b[d]]

    def paired_rows(self, a, b, *, bootstrap, seed, level, per_group, cache, names):
        return [{"dataset": f"probes/{d}", "class": None, "metric": "n_images", "a": a[d], "b": b[d],
                 "diff": a[d] - b[d], "diff_lo": None, "diff_hi": None, "p_value": None, "n_valid": 0}
                for d in sorted(set(a) & set(b))]

    def table_rows(self, results):
        return [{"model": r.name, "dataset": d, "n_images": e["n_images"]}
                for r in results for d, e in sorted((r.metrics.get("probes") or {}).get("datasets", {}).items())]

    def markdown(self, rows):
        return "## Probes\n\n" + "".join(f"| {r['model']} | {r['dataset']} | {r['n_images']} |\n" for r in rows)

    def csv(self, rows):
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=["model", "dataset", "n_images"])
        w.writeheader()
        w.writerows(rows)
        return buf.getvalue()

    def table(self, results):
        from xbench.score.table import Cell, Table

        rows = self.table_rows(results)
        if not rows:
            return None
        t = Table(title="Probe rows", key="probes", columns=[(None, None, "n_images")], index=("Model", "Dataset"),
                  labels={"n_images": "Images"})
        t.rows.update({(r["model"], r["dataset"]): [Cell(float(r["n_images"]))] for r in rows})
        return t

    def save_counts(self, prefix, n):
        return {f"{prefix}.n_images": np.asarray(n, np.int64)}

    def counts_problems(self, z, prefix, where):
        v = z.get(f"{prefix}.n_images")
        return [] if v is not None and v.dtype.kind in "iu" and v.shape == () and int(v) >= 0 else \
            [f"{where}: {prefix}.n_images must be a count"]

    def load_counts(self, z, prefix, name):
        return int(z[f"{prefix}.n_images"])


PROBE = Probe()


def test_the_built_in_scopes_are_declared_in_order():
    assert scope_names()[:3] == ("class", "phrase", "gaze")
    cls, phrase = row_scope("class"), row_scope("phrase")
    assert (cls.unit, cls.section, phrase.unit, phrase.section) == ("cases", None, "images", "phrases")
    assert cls.keys() == R.class_keys() and phrase.keys() == R.phrase_keys()
    assert [s.name for s in row_scopes(primary=False)][:1] == ["phrase"]

    class Again(Probe):
        name = "phrase"

    with pytest.raises(ValueError, match="declared twice"):
        with declared(Again()):
            pass
    for section in ("extra", "a.b"):  # would collide with the class rows' keys in pair_counts.npz
        class Odd(Probe):
            name = "odd"

        Odd.section = section
        with pytest.raises(ValueError, match="section"):
            with declared(Odd()):
                pass
    assert "odd" not in scope_names()
    assert phrase.saves_counts and phrase.counts_key == "phrase_datasets" and not cls.saves_counts
    from xbench.score.sections.plugins.classes import count_classes
    from xbench.score.sections.plugins.phrases import score_phrases

    assert cls.score is count_classes and phrase.score is score_phrases  # every scope counted alike
    assert row_scope("phrase").section == "phrases"  # a refused declaration leaves the first one


def test_a_metric_names_only_declared_scopes_and_the_kinds_they_compute():
    scope_names()  # the plug-ins loaded: the registry knows the scopes
    with pytest.raises(ValueError, match="scopes"):
        R.Metric("x", "x", "x", "grounding", lambda v: v.hit, scopes=("probe",))
    with declared(PROBE):
        m = R.Metric("x", "x", "x", "grounding", lambda v: v.hit, scopes=("probe",))
        assert m.scopes == ("probe",)
        with pytest.raises(ValueError, match="only grounding metrics take the probe scope"):
            R.Metric("y", "y", "y", "recognition", lambda s: s.tp, scopes=("probe",))
    assert "probe" not in scope_names()


def test_a_declared_scope_is_scored_compared_and_tabled(tmp_path):
    from xbench.score.sections.paired import paired_bootstrap
    from xbench.score.outputs.folder import write_outputs
    from xbench.score.report import build_report

    gt, sub_a, *_ = make_phrase_stores(tmp_path / "a", seed=2)
    _, sub_b, *_ = make_phrase_stores(tmp_path / "b", seed=2, maps_seed=11)
    plain = score_submission(sub_a, gt, bootstrap=0)
    SEEN.clear()
    with declared(PROBE):
        ra, rb = (score_submission(s, gt, bootstrap=7, seed=3) for s in (sub_a, sub_b))
        assert SEEN == [{"names": ["ms_cxr"], "bootstrap": 7, "seed": 3}] * 2
        assert ra.metrics["probes"] == {"overall": {"n_images": 9}, "datasets": {"ms_cxr": {"n_cases": 9, "n_images": 9}}}
        assert ra.metrics["xbench"]["schema_minor"] == 9 and ra.scope_counts["probe"] == {"ms_cxr": 9}
        assert list(ra.metrics).index("probes") > list(ra.metrics).index("phrases")  # declaration order
        # the other scopes are untouched by the new one
        assert ra.metrics["phrases"]["datasets"]["ms_cxr"]["n_phrases"] == plain.metrics["phrases"]["datasets"]["ms_cxr"]["n_phrases"]
        table = paired_bootstrap(ra.counts, rb.counts, bootstrap=0, seed=3, phrases_a=ra.phrase_counts,
                                    phrases_b=rb.phrase_counts, scopes_a={"probe": ra.scope_counts["probe"]},
                                    scopes_b={"probe": rb.scope_counts["probe"]})
        datasets = [str(d) for d in table["dataset"]]
        assert datasets[-1] == "probes/ms_cxr" and table.iloc[-1]["diff"] == 0
        first_phrase = next(i for i, d in enumerate(datasets) if d.startswith("phrases"))
        assert all(not d.startswith("phrases") for d in datasets[:first_phrase])  # class rows, phrases, probes
        from xbench.score.errors import GroundTruthMismatchError

        with pytest.raises(GroundTruthMismatchError):
            paired_bootstrap(ra.counts, rb.counts, bootstrap=0, scopes_a={"probe": {"ms_cxr": 9}},
                                scopes_b={"probe": {"ms_cxr": 8}})
        dirs = []
        for name, r in (("a", ra), ("b", rb)):
            write_outputs(r, tmp_path / "out" / name)
            dirs.append(tmp_path / "out" / name)
        # pair_counts.npz holds the scope's counts after the phrase rows', and they are read back
        with np.load(dirs[0] / "pair_counts.npz") as z:
            keys = list(z.files)
            assert keys[-2:] == ["probe_datasets", "ms_cxr.probes.n_images"] and "phrase_datasets" in keys
        from xbench.score.sections.pair_counts import load_scope_counts
        from xbench.score.report import load_result

        assert load_scope_counts(dirs[0] / "pair_counts.npz")["probe"] == {"ms_cxr": 9}
        assert load_result(dirs[1]).scope_counts["probe"] == {"ms_cxr": 9}
        _compare_from_folders(dirs, tmp_path)
        build_report(tmp_path / "report", dirs, bootstrap=0, overlays=False)
        rows = list(csv.DictReader(io.StringIO((tmp_path / "report" / "probes.csv").read_text())))
        assert [(r["dataset"], r["n_images"]) for r in rows] == [("ms_cxr", "9")] * 2 and len({r["model"] for r in rows}) == 2
        assert "## Probes" in (tmp_path / "report" / "leaderboard.md").read_text()
        page = (tmp_path / "report" / "index.html").read_text()
        assert "<h2>Probe rows</h2>" in page and '<a href="probes.csv">probes.csv</a>' in page
        assert page.index("<h2>Phrase grounding</h2>") < page.index("<h2>Probe rows</h2>")  # declaration order
    assert "probes" not in score_submission(sub_a, gt, bootstrap=0).metrics  # gone with its declaration


def _compare_from_folders(dirs, tmp_path):
    """`xbench compare A B` on the two result folders (in this process, where the scope is declared): the
    scope's paired rows come from the counts read back from pair_counts.npz, after the phrase rows."""
    from click.testing import CliRunner

    from xbench.score.report.cli import compare

    out = tmp_path / "compare.csv"
    res = CliRunner().invoke(compare, [str(dirs[0]), str(dirs[1]), "--bootstrap", "0", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    scopes = [r["scope"] for r in rows]
    assert scopes[-1] == "probes/ms_cxr" and rows[-1]["metric"] == "n_images" and float(rows[-1]["diff"]) == 0
    assert any(s.startswith("phrases") for s in scopes) and scopes.index("probes/ms_cxr") > max(
        i for i, s in enumerate(scopes) if s.startswith("phrases"))


def test_a_declared_scope_in_a_hostile_pair_counts_file_is_refused_line_by_line(tmp_path):
    """A file from outside: the scope's dataset list and its arrays are checked by its ``counts_problems``
    before any of them is used, after the class rows' checks (one line each, in that order)."""
    from xbench.schemas.errors import InputError
    from xbench.score.sections.pair_counts import read_counts_file, save_pair_counts

    gt, sub, *_ = make_phrase_stores(tmp_path / "s", seed=2)
    res = score_submission(sub, gt, bootstrap=0)
    with declared(PROBE):
        save_pair_counts(tmp_path / "good.npz", res.counts, scopes={**res.scope_counts, "probe": {"ms_cxr": 9}})
        with np.load(tmp_path / "good.npz") as z:
            good = dict(z)
        counts, scopes = read_counts_file(tmp_path / "good.npz")
        assert scopes["probe"] == {"ms_cxr": 9} and set(scopes["phrase"]) == {"ms_cxr"} and set(counts) == {"ms_cxr"}

        def refused(change) -> list[str]:
            arrays = dict(good)
            change(arrays)
            np.savez(tmp_path / "bad.npz", **arrays)
            with pytest.raises(InputError) as err:
                read_counts_file(tmp_path / "bad.npz")
            return [str(p) for p in err.value.problems]

        assert "'probe_datasets' must be a list of names" in refused(
            lambda a: a.update(probe_datasets=np.arange(2)))[0]
        assert "unique" in refused(lambda a: a.update(probe_datasets=np.array(["ms_cxr", "ms_cxr"])))[0]
        bad_count = refused(lambda a: a.update({"ms_cxr.probes.n_images": np.float64(1.5)}))
        assert len(bad_count) == 1 and "ms_cxr.probes.n_images must be a count" in bad_count[0]
        missing = refused(lambda a: a.pop("ms_cxr.probes.n_images"))
        assert len(missing) == 1 and "n_images" in missing[0]

        def both(a):
            a["ms_cxr.pair_case"] = a["ms_cxr.pair_case"] + 10_000
            a["ms_cxr.probes.n_images"] = np.array([1, 2])

        lines = refused(both)  # the class rows' problems first, then each scope's in declaration order
        assert len(lines) == 2 and "does not exist" in lines[0] and "probes.n_images" in lines[1]
    # a file holding rows of a scope no longer declared is read as before: those keys are not looked at
    counts, scopes = read_counts_file(tmp_path / "good.npz")
    assert "probe" not in scopes and set(counts) == {"ms_cxr"}
