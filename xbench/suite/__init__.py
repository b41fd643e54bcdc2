"""``xbench run SUITE.yaml``: a whole benchmark from one file, prepare -> extract -> score -> report.

A suite names the datasets (key, root, split, reader options, grid), the models (a registered name or
a model config, with saliency methods), the extraction, scoring and report options, and the output
folder. ``xbench run`` turns it into a plan of steps::

    prepare/<dataset>   OUT/data/images.zarr/<dataset> + OUT/data/gt.zarr/<dataset>
    extract/<model>     OUT/submissions/<model>.zarr      (all the suite's datasets)
    score/<model>       OUT/scores/<model>/               (metrics.json, pairs.parquet, tables)
    report              OUT/report/                       (leaderboard, figures, index.html)

and runs each step through the same Python functions the single-step commands call.

Skipping and resuming. Each step has a *fingerprint*: the sha256 of its options and of the content
digests of its inputs (the outputs of the steps it reads; for a raw dataset root, the list of its files
with their sizes and modification times, since hashing hundreds of GB of images on every run is not
affordable; beside it, what the reader's options name outside the root, its ``given_roots``: a folder listed
the same way, a file by its content). A step is skipped only when the run record ``OUT/xbench-run.json`` says it finished with
the same fingerprint *and* the content digest of its output today equals the one recorded then: a
store edited, truncated or replaced by hand runs again, whatever files are present. A step recorded
as started with the same fingerprint is resumed (prepare and extract resume block by block on their
own); any other step starts from an empty output. Content digests are sha256 over every file's bytes,
cached by (size, mtime) in ``OUT/.xbench-suite/digests.json`` as git's index does, so a second run
reads no unchanged file again. Augmentation and perturbation specs are fingerprinted in their canonical text
(:func:`canonical_specs`): two spellings of one spec are one fingerprint. A ``score:`` key that names a file or
folder (``thresholds_from``, ``human_dir``, ...; :func:`xbench.suite.fingerprint.path_digests`) counts by the content it names, so a
file edited in place under the same name is a new input.

One run at a time per output folder: a run holds an exclusive ``flock`` on ``OUT/.xbench-suite/lock``
(dropped by the kernel however the process ends), and a second one is refused with one line.

Recorded in the output: ``OUT/suite.yaml`` (the suite as given), ``OUT/xbench-run.json`` (the resolved
plan with each step's options, fingerprint, output digest, status and time, and every software
version). ``--limit N`` keeps the first N cases of each dataset and writes under ``OUT/limit-N`` so that
a smoke test never replaces a full run's results.

Checks before any step (docs/how-to/suites.md). The suite and the model config files it names are read by the
bounded input layer (``xbench.schemas.inputs``: size, depth, node count, no YAML aliases, no key twice).
``--dry-run`` lists every problem at once: each unset environment variable a path names (once, with where
it is used; such a path is not looked for), each missing root, each dataset whose annotation files do not
parse, each model whose config does not load or whose weight files are missing; the models are checked
whatever the state of the roots. ``--max-memory``/``--timeout`` bound these checks; the steps then run
under their own bounds (:func:`run_suite`'s ``before_steps``).

The package, by concern: ``parse`` (the suite file into a :class:`Suite`), ``fingerprint`` (content digests,
canonical specs, a model's declaration), ``plan`` (the steps and their states), ``checks`` (what a dry run
checks), ``steps`` (one executor per step kind), ``driver`` (:func:`run_suite`, the run record, the lock, the
leaderboard) and ``present`` (the printed board and plan, the ``xbench run`` command).
"""

from __future__ import annotations

from xbench.suite.parse import (CONFIG_SUFFIXES, EXTRACT_DEFAULTS, EXTRACT_FINGERPRINT_WHEN_SET, EXTRACT_NOT_IN_OUTPUT,
                                PREPARE_DEFAULTS, REPORT_DEFAULTS, SCORE_DEFAULTS, Suite, SuiteError, _grid, load_suite,
                                parse_suite, read_suite_file)
from xbench.suite.fingerprint import DigestCache, listing_digest, model_digest, tree_digest
from xbench.suite.plan import Step, evaluate, plan_steps, select_steps
from xbench.suite.steps import EXECUTORS, extract_argv
from xbench.suite.driver import RUN_RECORD, WORK_DIR, _lock, run_suite
from xbench.suite.present import format_leaderboard, run

__all__ = ["Suite", "SuiteError", "Step", "load_suite", "parse_suite", "plan_steps", "run_suite", "run",
           "tree_digest", "DigestCache", "extract_argv"]
