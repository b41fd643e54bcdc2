"""The one resampling engine (score/resampling/engine.py, issue 36): every random draw of score/ is made there, and its
draws are the ones documented (numpy's own calls, written out here independently)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from xbench.score.resampling import engine as RS

SCORE = Path(__file__).resolve().parents[3] / "score"
DRAW = re.compile(r"default_rng\(|random\.seed\(|RandomState\(|\.integers\(|\.choice\(|\.multinomial\(|"
                  r"\.permutation\(|\.shuffle\(|np\.random\.(rand|randn|randint|normal|uniform)\(")
#: draws that are not resamples, each with its reason
NOT_RESAMPLES = {"gaze.py": "AUC-Judd's tie-breaking noise, RandomState(42) fresh per map: the measure's own "
                            "definition (pysaliency), not a resample"}


def draw_sites(root: Path = SCORE) -> dict[str, int]:
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() == "resampling/engine.py" or "__pycache__" in path.parts:
            continue
        code = [ln.split("#")[0] for ln in path.read_text().splitlines()]
        n = sum(1 for ln in code if DRAW.search(ln) and "``" not in ln)
        if n:
            found[str(path.relative_to(root))] = n
    return found


def test_every_resample_is_drawn_by_the_engine():
    assert {k: v for k, v in draw_sites().items() if Path(k).name not in NOT_RESAMPLES} == {}


def test_the_rule_sees_a_draw(tmp_path):
    (tmp_path / "track.py").write_text("import numpy as np\nidx = np.random.default_rng(0).integers(0, 5, 5)\n")
    assert draw_sites(tmp_path) == {"track.py": 1}


def test_weights_and_indices_are_the_same_resamples():
    w = np.concatenate(list(RS.resample_weights(13, 40, RS.stream(7), chunk=6)))
    idx = RS.case_indices(13, 40, 7)
    assert idx.shape == (40, 13)
    np.testing.assert_array_equal(w, np.stack([np.bincount(r, minlength=13) for r in idx]))
    np.testing.assert_array_equal(idx, np.random.default_rng(7).integers(0, 13, size=(40, 13)))
    assert RS.case_indices(0, 3, 1).shape == (3, 0)


def test_legacy_stream_is_chexlocalizes():
    rs = np.random.RandomState(3)
    want = np.stack([np.bincount(rs.choice(9, size=9, replace=True), minlength=9) for _ in range(25)])
    np.testing.assert_array_equal(RS.legacy_choice_weights(9, 25, 3), want)


def test_streams_are_positioned_as_the_serial_loop():
    n = {"a": 5, "b": 11, "c": 3}
    serial = RS.stream(2)
    want = {k: np.concatenate(list(RS.resample_weights(n[k], 30, serial))) for k in sorted(n)}
    for k, g in RS.resample_streams(n, 30, 2).items():
        np.testing.assert_array_equal(np.concatenate(list(RS.resample_weights(n[k], 30, g))), want[k])


def test_draw_indices_and_positioned_streams():
    assert not hasattr(RS, "multinomial_weights")  # one draw for every unit: the phrase rows' images too
    rng = np.random.default_rng(8)
    for n in (4, 0, 7):
        rng.integers(0, n, size=(6, n)) if n else None
    np.testing.assert_array_equal(np.concatenate(list(RS.resample_weights(3, 6, RS.positioned_stream((4, 0, 7), 6, 8)))),
                                  np.concatenate(list(RS.resample_weights(3, 6, rng))))
    assert RS.prior_units({"b": 4, "a": 2, "c": 9}, "b") == (2,)
    np.testing.assert_array_equal(RS.draw_indices(np.random.default_rng(4), 5, 3),
                                  np.random.default_rng(4).integers(0, 5, size=(3, 5)))


def test_arguments_are_checked():
    from xbench.score.errors import ScoreInputError

    with pytest.raises(ScoreInputError):
        RS.case_indices(5, -1, 0)


def test_significance_lives_here():
    assert RS.significant(0.01) and not RS.significant(0.06) and RS.ALPHA == 0.05
    assert "--bootstrap" in RS.holm_floor_note(12, 200)


def test_one_flag_declared_once_and_the_old_name_still_works(tmp_path):
    """--bootstrap everywhere (schemas/options.py's `resamples`), --n-boot still accepted by report and compare."""
    import click

    from xbench.cli import main
    from xbench.schemas.options import RESAMPLES_FLAG

    for path in (["score"], ["report"], ["compare"], ["human"], ["package", "codabench-competition"]):
        ctx = click.Context(main)
        cmd = main.get_command(ctx, path[0])
        for sub in path[1:]:
            cmd = cmd.get_command(ctx, sub)
        flags = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert RESAMPLES_FLAG in flags and "--n-boot" in flags, path
    from click.testing import CliRunner

    out = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--n-boot", "5"])
    assert "no such option" not in out.output
