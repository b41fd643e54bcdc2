"""``xbench demo``: the shipped suite ``suites/demo.yaml`` run by :func:`xbench.suite.run_suite`.

Steps (each in this process, through the same Python APIs the commands use)::

    prepare   phantom -> OUT/data/images.zarr + OUT/data/gt.zarr
    extract   random, center, dog (baselines, no torch) and clip-tiny (an untrained open_clip ViT,
              built from a config, no weights; only where torch is installed) -> OUT/submissions/<model>.zarr
    score     each submission against gt.zarr -> OUT/scores/<model>/
    report    leaderboard, figures, paired gaps -> OUT/report/index.html

The demo checks the benchmark itself: the image-based ``dog`` baseline must beat uniformly
random maps on the phantom's pointing game (the phantom's findings are brighter blobs).
The options below only change numbers of the suite; a re-run skips every step already done
with the same inputs (see xbench.suite).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas._cli import EXTRA_HINT, UserError, command
from xbench.schemas.options import MAX_PHANTOM_CASES, Flag, Int, Text, click_options, opt, parse

__all__ = ["run_demo", "demo", "DEMO_MODELS", "suites_dir"]


def suites_dir() -> Path:
    """The folder of the shipped suites: the ``xbench.suites`` package, or the checkout's ``suites/``
    (an editable install made before that package existed maps only the older ones)."""
    try:
        from importlib.resources import files

        return Path(str(files("xbench.suites")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[1] / "suites"


def _demo_suite() -> tuple[dict, Path]:
    from xbench.suite import read_suite_file

    path = suites_dir() / "demo.yaml"
    return read_suite_file(path), path


DEMO_MODELS = ("random", "center", "dog", "clip-tiny")  # the order of suites/demo.yaml (a test checks it)
#: the demo models that need no torch (their catalog entries say torch=False): `make demo`'s first run
#: resamples of the report's paired gaps (the report command's default): with 4 models the page shows 12 tests,
#: and the scorer's 200 resamples cannot pass Holm over them (12/201 >= 0.05, contract "Significant")
GAP_RESAMPLES = 1000


#: what the demo's prepare, extract and report steps import: always (the `demo` extra), and for a model on torch
_DEMO_NEEDS = ("PIL", "yaml")
_TORCH_NEEDS = ("torch", "open_clip")
DEMO_HINT = ("needs the demo extra (no torch): make demo, or pip install '.[demo]' in a checkout of XBench "
             "(pip install 'xbench-cxr[demo]' once it is released on PyPI)")


def torch_free_models() -> tuple[str, ...]:
    """The demo models whose catalog entries run without torch (the weight-free baselines)."""
    from xbench.extract.models import runs_on_torch

    return tuple(m for m in DEMO_MODELS if not runs_on_torch(m))


def default_models() -> tuple[str, ...]:
    """Every demo model when torch is installed, else the ones that need none (`make demo`'s first run)."""
    import importlib.util

    return DEMO_MODELS if importlib.util.find_spec("torch") is not None else torch_free_models()


def _require_extract_extra(models) -> None:
    import importlib.util

    free = torch_free_models()
    needs = _DEMO_NEEDS + (_TORCH_NEEDS if any(m not in free for m in models) else ())
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if set(missing) & set(_TORCH_NEEDS):
        on_torch = [m for m in models if m not in free]
        raise UserError(f"{EXTRA_HINT} ({', '.join(missing)} not installed; {', '.join(on_torch)} need(s) torch, "
                        f"the others do not: --models {','.join(free)}); nothing was written")
    if missing:
        raise UserError(f"{DEMO_HINT} ({', '.join(missing)} not installed); nothing was written")


def run_demo(out_dir, *, n_cases: int = 200, quick: bool = False, progress: bool = True,
             models=None, bootstrap: int | None = None, seed: int = 0) -> Path:
    """Run the demo suite into ``out_dir``; returns the report's index.html.

    n_cases: phantom cases (``quick`` uses 24 and 100 bootstrap resamples, for CI).
    models: which of DEMO_MODELS to run (default: :func:`default_models`). bootstrap: the scorer's resamples (default 200; 100 when quick); the
    report's paired gaps take at least GAP_RESAMPLES (0 when bootstrap is 0).
    Writes OUT/data, OUT/submissions, OUT/scores, OUT/report and OUT/demo.json (timings).
    """
    models = default_models() if models is None else tuple(models)
    unknown = [m for m in models if m not in DEMO_MODELS]
    if unknown:
        raise UserError(f"--models: unknown demo model(s) {', '.join(unknown)}; choose from {', '.join(DEMO_MODELS)}")
    _require_extract_extra(models)  # before anything is written: the demo prepares and extracts
    from xbench.suite import parse_suite, run_suite
    if quick:
        n_cases = min(n_cases, 24)
    bootstrap = (100 if quick else 200) if bootstrap is None else bootstrap
    data, path = _demo_suite()
    data["datasets"]["phantom"]["options"].update(n_cases=n_cases, seed=seed)
    data["models"] = [m for m in data["models"] if m in models]
    data["seed"] = seed
    gap_boot = max(bootstrap, GAP_RESAMPLES) if bootstrap else 0
    data["score"]["bootstrap"], data["report"]["bootstrap"] = bootstrap, gap_boot
    # the demo's settings differ from the commands' defaults: say so where the numbers are shown
    boot = f"{bootstrap} bootstrap resamples" + (f" ({gap_boot} for the paired gaps)" if gap_boot != bootstrap else "")
    data["title"] = f"XBench demo (phantom; {boot}, 256 px images, float32 maps)"
    suite = parse_suite(data, path.parent, source=str(path))
    say = (lambda msg: click.echo(msg, err=True)) if progress else None
    t0 = time.perf_counter()
    result = run_suite(suite, out=out_dir, progress=False, say=say)
    seconds = {r["step"]: r.get("seconds", 0.0) for r in result.steps}
    timings = {"prepare": seconds["prepare/phantom"], "report": seconds["report"]}
    for m in data["models"]:
        timings[f"extract_{m}"] = seconds[f"extract/{m}"]
        timings[f"score_{m}"] = seconds[f"score/{m}"]
    timings["total"] = time.perf_counter() - t0
    summary = {"n_cases": n_cases, "models": list(data["models"]), "n_boot": bootstrap, "n_boot_gaps": gap_boot,
               "timings_s": {k: round(v, 2) for k, v in timings.items()}, "report": str(result.report),
               "steps": result.steps, "leaderboard": result.leaderboard}
    (Path(out_dir) / "demo.json").write_text(json.dumps(summary, indent=1))
    return result.report


@dataclass(kw_only=True)
class DemoOptions:
    """What ``xbench demo`` takes (the fields are its options)."""

    out_dir: Path = opt(Path('demo-out'), check=Text(click.Path(path_type=Path)), flag='--out',
                        help='Folder for the data, submissions, scores and report.')
    n_cases: int = opt(200, check=Int(4, MAX_PHANTOM_CASES), help='Phantom cases.')
    quick: bool = opt(False, check=Flag(), help='A small run for CI: 24 cases, 100 bootstrap resamples.')
    models: str = opt("", check=Text(), help='Comma-separated subset of the demo models (default: all of '
                      f'{",".join(DEMO_MODELS)} when torch is installed, else the torch-free baselines).')
    quiet: bool = opt(False, check=Flag(), short='-q', help='Print only the report path.')
    as_json: bool = opt(False, check=Flag(), flag='--json',
                        help='Print demo.json (cases, models, resamples, timings, report) on stdout.')


@command("demo", on_interrupt="interrupted; run the same command again (it starts over)")
@click_options(DemoOptions)
def demo(**params):
    """Run the whole pipeline on the synthetic phantom set and write a report.

    Runs the shipped suite suites/demo.yaml (the same as `xbench run suites/demo.yaml`): prepares
    the phantom cases, extracts maps with three baselines (random, center, dog) and an untrained
    tiny CLIP, scores all four and writes the report, all offline on the CPU (about a minute on two
    cores). Without torch (`make demo`'s venv) it runs the three baselines, which need none. A second run skips what is done. Open the printed index.html in a browser. The demo's
    settings differ from the commands' defaults (256 px images, float32 maps, 200 resamples for the
    scores, 1000 for the report's paired gaps); the page says so.

    \b
    Example:
      xbench demo --out demo-out
      xbench demo --quick            # about 30 s, for CI
    """
    o = parse(DemoOptions, params)
    out_dir, n_cases, quick, models, quiet, as_json = o.out_dir, o.n_cases, o.quick, o.models, o.quiet, o.as_json
    try:
        chosen = tuple(m.strip() for m in models.split(",") if m.strip()) or None
        if chosen is None and default_models() != DEMO_MODELS and not (quiet or as_json):
            click.echo(f"torch is not installed: the demo runs the weight-free baselines ({', '.join(default_models())}); "
                       "`make demo-models` installs torch and adds the untrained clip-tiny", err=True)
        index = run_demo(out_dir, n_cases=n_cases, quick=quick, progress=not (quiet or as_json), models=chosen)
    except Exception as err:  # xbench.suite (YAML) is imported after run_demo's check of the demo extra
        from xbench.suite import SuiteError

        if isinstance(err, SuiteError):
            raise UserError(err.problems) from None
        raise
    if as_json:
        click.echo((Path(out_dir) / "demo.json").read_text())
        return
    if not quiet:
        from xbench.suite import format_leaderboard

        info = json.loads((Path(out_dir) / "demo.json").read_text())
        click.echo(format_leaderboard(info["leaderboard"]))  # the ranked table, as `xbench run` prints it
        click.echo(f"demo finished in {info['timings_s']['total']:.0f} s")
    click.echo(f"report: {index.resolve()}")
