"""Map complexity (Gini sparseness, entropy; score/metrics/complexity.py): brute force, opt-in, and Quantus.

The brute-force oracle resizes with the reference resize of score_reference.py, normalises with NumPy and
applies the definitions cell by cell (sorted sums for Gini, a plain loop for entropy); the scorer's values
come from the counting pass. The opt-in tests check that a run without ``--metrics complexity`` writes
exactly what it wrote before (digests of every output file) and that the metrics are absent from the
registry outside the run.
"""
from __future__ import annotations

import hashlib
import json
import math
import warnings

import numpy as np
import pytest

from score_reference import resize
from score_stores import make_gt, make_submission, run_score_cli
from xbench.score.metrics import registry as R
from xbench.score.metrics.complexity import entropy_of_maps, gini_of_maps
from xbench.score.scoring import score_submission


def _normalised(raw, grid):
    m = resize(np.asarray(raw, np.float64), grid)
    mn, mx = m.min(), m.max()
    return np.zeros_like(m) if mx == mn else (m - mn) / (mx - mn)


def brute_gini(raw, grid):
    v = sorted(_normalised(raw, grid).ravel().tolist())
    n, s = len(v), math.fsum(v)
    if s == 0:
        return 0.0
    return math.fsum((2 * (i + 1) - n - 1) * x for i, x in enumerate(v)) / (n * s)


def brute_entropy(raw, grid):
    v = _normalised(raw, grid).ravel().tolist()
    s = math.fsum(v)
    if s == 0:
        return math.log(len(v))
    return -math.fsum((x / s) * math.log(x / s) for x in v if x > 0)


@pytest.mark.parametrize("shape,grid", [((7, 5), (12, 16)), ((20, 24), (10, 12)), ((3, 3), (3, 3))])
def test_gini_and_entropy_equal_brute_force(shape, grid):
    rng = np.random.default_rng(5)
    maps = rng.standard_normal((6, *shape)).astype(np.float32)
    maps[1] = 2.0  # constant: no mass, an even spread
    maps[2] = 0.0
    maps[2, 1, 1] = 9.0  # one hot cell (raw): peaked after the resize
    maps[3] = np.round(maps[3])  # ties
    g, e = gini_of_maps(maps, grid), entropy_of_maps(maps, grid)
    for k in range(len(maps)):
        assert g[k] == pytest.approx(brute_gini(maps[k], grid), rel=1e-12, abs=1e-15)
        assert e[k] == pytest.approx(brute_entropy(maps[k], grid), rel=1e-12, abs=1e-15)
    assert g[1] == 0.0 and e[1] == pytest.approx(math.log(grid[0] * grid[1]))


def test_extremes():
    one = np.zeros((1, 4, 4), np.float32)
    one[0, 2, 3] = 1.0  # on the grid itself: a single hot cell stays one cell
    assert gini_of_maps(one, (4, 4))[0] == pytest.approx(15 / 16)
    assert entropy_of_maps(one, (4, 4))[0] == 0.0
    half = np.zeros((1, 4, 4), np.float32)
    half[0, :2] = 1.0  # half the cells share the mass evenly
    assert gini_of_maps(half, (4, 4))[0] == pytest.approx(0.5)
    assert entropy_of_maps(half, (4, 4))[0] == pytest.approx(math.log(8))


def test_complexity_is_opt_in_and_registered_once():
    assert "gini" not in R.REGISTRY and "entropy" not in R.REGISTRY
    with R.opt_in("complexity", "complexity") as added:
        assert [m.key for m in added] == ["gini", "entropy"]
        assert list(R.REGISTRY)[-2:] == ["gini", "entropy"]
        assert "gini" in R.phrase_keys() and "gini" in R.summary_keys()
    assert "gini" not in R.REGISTRY
    with pytest.raises(R.UnknownNameError):
        R.opt_in_metrics("complexit")


def test_scored_class_and_phrase_values_equal_brute_force(tmp_path):
    gt = make_gt(tmp_path / "gt.zarr")
    sub = make_submission(tmp_path / "sub.zarr", gt)
    with R.opt_in("complexity"):
        res = score_submission(tmp_path / "sub.zarr", tmp_path / "gt.zarr", bootstrap=20)
    assert res.metrics["xbench"]["schema_minor"] == 1  # opt-in keys raise no minor
    for name, g in gt.items():
        s = sub[name]
        for c, cls in enumerate(g.classes):
            pairs = g.region_index[g.region_index[:, 1] == c]
            entry = res.metrics["datasets"][name]["classes"][cls]
            if not len(pairs):
                assert entry["gini"] is None
                continue
            raws = [s.saliency[s.case_ids.index(g.case_ids[i]), s.classes.index(cls)] for i, _ in pairs]
            assert entry["gini"] == pytest.approx(np.mean([brute_gini(r, g.grid) for r in raws]), rel=1e-12)
            assert entry["entropy"] == pytest.approx(np.mean([brute_entropy(r, g.grid) for r in raws]), rel=1e-12)
            lo, hi = entry["ci95"]["gini"]
            assert lo <= entry["gini"] <= hi or lo == hi
    assert "gini" in res.metrics["overall"] and "gini" in res.counts["phantom"].extra
    json.dumps(res.metrics, allow_nan=False)


def test_phrase_rows_get_complexity_too(tmp_path):
    from test_phrases import make_phrase_stores

    gt, sub, q, qmask, qmaps = make_phrase_stores(tmp_path)
    with R.opt_in("complexity"):
        res = score_submission(sub, gt, bootstrap=0)
    pooled = res.metrics["phrases"]["datasets"]["ms_cxr"]["all_phrases"]
    grid = qmask.shape[1:]
    assert pooled["gini"] == pytest.approx(np.mean([brute_gini(m, grid) for m in qmaps]), rel=1e-12)
    assert pooled["entropy"] == pytest.approx(np.mean([brute_entropy(m, grid) for m in qmaps]), rel=1e-12)


def _digests(folder):
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "xbench-output.json"}


def test_cli_opt_in_adds_columns_and_default_run_is_unchanged(tmp_path, capsys):
    gt = make_gt(tmp_path / "gt.zarr")
    make_submission(tmp_path / "sub.zarr", gt)
    base = ["--gt", tmp_path / "gt.zarr", "--bootstrap", "10", "--quiet"]
    assert run_score_cli([tmp_path / "sub.zarr", *base, "--out", tmp_path / "a"], capsys)[0] == 0
    code, _, err = run_score_cli([tmp_path / "sub.zarr", *base, "--out", tmp_path / "b", "--metrics", "complexity"],
                                 capsys)
    assert code == 0, err
    assert run_score_cli([tmp_path / "sub.zarr", *base, "--out", tmp_path / "c"], capsys)[0] == 0
    a, c = _digests(tmp_path / "a"), _digests(tmp_path / "c")
    assert a == c  # the opt-in run left nothing registered behind
    ma = json.loads((tmp_path / "a" / "metrics.json").read_text())
    mb = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert "gini" not in ma["overall"] and "gini" in mb["overall"] and "entropy" in mb["overall"]
    # every default key keeps its value
    for k, v in ma["overall"].items():
        assert mb["overall"][k] == v
    code, _, err = run_score_cli([tmp_path / "sub.zarr", *base, "--out", tmp_path / "d", "--metrics", "nope"], capsys)
    assert code == 2 and "nope" in err


def test_equals_quantus_where_installed():
    quantus = pytest.importorskip("quantus")
    rng = np.random.default_rng(2)
    grid = (9, 11)
    maps = rng.standard_normal((5, 9, 11)).astype(np.float32)  # on the grid: the resize is the identity
    norm = np.stack([_normalised(m, grid) for m in maps])  # Quantus' max-normalisation and |.| then change nothing
    x = np.zeros((len(maps), 1, *grid))

    def run(cls):
        m = cls(disable_warnings=True, display_progressbar=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.array(m(model=None, x_batch=x, y_batch=np.zeros(len(maps), int), a_batch=norm[:, None].copy(),
                              channel_first=True), dtype=np.float64)

    # Quantus adds 1e-7 to every cell (Gini) and 1e-12 inside the log (entropy)
    np.testing.assert_allclose(gini_of_maps(maps, grid), run(quantus.Sparseness), rtol=1e-5)
    np.testing.assert_allclose(entropy_of_maps(maps, grid), run(quantus.Complexity), rtol=1e-9)


def test_metrics_option_takes_the_registry_opt_in_groups_and_help_imports_no_registry(monkeypatch):
    """--metrics checks against ``R.OPT_IN`` itself (one list of names): a group added there is taken by the
    option's click type and check, read when a value is checked, and --help stays free of the registry."""
    import dataclasses
    import subprocess
    import sys

    import click

    from xbench.score.options import ScoreOptions, metric_groups

    assert metric_groups() == tuple(R.OPT_IN) == ("complexity",)
    check = next(f.metadata["opt"].check for f in dataclasses.fields(ScoreOptions) if f.name == "metric_groups")
    click_type = check.click_type()  # built before the group exists: the list is read when a value comes
    monkeypatch.setitem(R.OPT_IN, "throwaway", "xbench.score.metrics.complexity:METRICS")
    assert check.problem("throwaway") is None and "throwaway" in check.problem("nope")
    assert click_type.convert("throwaway", None, None) == "throwaway"
    with pytest.raises(click.BadParameter, match="throwaway"):
        click_type.convert("nope", None, None)
    code = ("import sys\n"
            "from xbench.score.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('xbench.score.metrics.registry', 'numpy') if m in sys.modules), file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "--metrics GROUP" in out.stdout and out.stderr.strip() == "[]"


def test_a_later_report_and_compare_show_the_opt_in_metrics_the_results_hold(tmp_path):
    """Results scored with --metrics complexity: `xbench report` and `xbench compare` (run later, with nothing
    registered) list Gini and entropy beside the default metrics, with the values of metrics.json; results
    without them get the default columns only."""
    import csv
    import io

    from click.testing import CliRunner

    from test_phrases import make_phrase_stores
    from xbench.score.outputs.folder import write_outputs
    from xbench.score.report import build_report
    from xbench.score.report.cli import compare

    gt, sub_a, *_ = make_phrase_stores(tmp_path / "a", seed=2)
    _, sub_b, *_ = make_phrase_stores(tmp_path / "b", seed=2, maps_seed=11)
    dirs = [tmp_path / "out" / n for n in ("a", "b")]
    with R.opt_in("complexity"):  # as xbench-score --metrics complexity does
        for sub, d in zip((sub_a, sub_b), dirs):
            write_outputs(score_submission(sub, gt, bootstrap=5, seed=1), d)
    plain = tmp_path / "out" / "plain"
    write_outputs(score_submission(sub_a, gt, bootstrap=5, seed=1), plain)
    assert "gini" not in R.REGISTRY
    metrics = {d: json.loads((d / "metrics.json").read_text()) for d in dirs}

    build_report(tmp_path / "report", dirs, bootstrap=0, overlays=False)
    assert "gini" not in R.REGISTRY  # registered for the report only
    rows = list(csv.DictReader(io.StringIO((tmp_path / "report" / "grounding_more.csv").read_text())))
    assert len(rows) == 2 and all(f"ms_cxr/{k}" in rows[0] for k in ("gini", "entropy")), list(rows[0])
    for r in rows:  # labels "m (similarity) [a]": one model name, told apart by the folder
        summary = metrics[next(d for d in dirs if r["model"].endswith(f"[{d.name}]"))]["datasets"]["ms_cxr"]["summary"]
        for k in ("gini", "entropy"):
            assert float(r[f"ms_cxr/{k}"]) == pytest.approx(summary[k], rel=1e-9)
    md = (tmp_path / "report" / "leaderboard.md").read_text()
    assert "Gini" in md and "Entropy" in md

    build_report(tmp_path / "report_plain", [plain], bootstrap=0, overlays=False)
    plain_rows = list(csv.DictReader(io.StringIO((tmp_path / "report_plain" / "grounding_more.csv").read_text())))
    assert "ms_cxr/gini" not in plain_rows[0] and "Gini" not in (tmp_path / "report_plain" / "leaderboard.md").read_text()

    out = tmp_path / "compare.csv"
    res = CliRunner().invoke(compare, [str(dirs[0]), str(dirs[1]), "--bootstrap", "0", "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    got = {(r["scope"], r["metric"]): r for r in csv.DictReader(io.StringIO(out.read_text()))}
    for key in ("gini", "entropy"):
        row = got[("overall", key)]
        assert float(row["value_a"]) == pytest.approx(metrics[dirs[0]]["overall"][key], rel=1e-9)
        assert float(row["value_b"]) == pytest.approx(metrics[dirs[1]]["overall"][key], rel=1e-9)
        assert ("phrases", key) in got  # the phrase scope's opt-in metrics too
    assert "gini" not in R.REGISTRY
    # a metrics.json from outside: an opt-in metric's value is checked like a registered one's
    from xbench.score.report._load import metrics_problems

    bad = metrics_problems({"datasets": {}, "overall": {"gini": "sparse", "not_a_metric": "x"}}, "m.json")
    assert bad == ["m.json: overall.gini must be a number or null, not str"]
