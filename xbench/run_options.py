"""The options of ``xbench run SUITE.yaml``, declared once (:mod:`xbench.schemas.options`).

Kept apart from :mod:`xbench.suite` (which parses, plans and runs a suite) so the declaration stays light:
click and the option machinery only.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from xbench.schemas.options import MAX_CASES, Flag, Int, Text, opt


@dataclass(kw_only=True)
class RunOptions:
    """What ``xbench run SUITE.yaml`` takes besides SUITE.yaml (the fields are its options)."""

    out: Path | None = opt(None, check=Text(click.Path(file_okay=False, path_type=Path)),
                           help="Output folder (default: the suite's `out`).")
    limit: int | None = opt(None, check=Int(1, MAX_CASES),
                            help='Only the first N cases of each dataset (writes under OUT/limit-N).')
    dry_run: bool = opt(False, check=Flag(), help='Check the inputs and print the plan; write nothing.')
    only: tuple = opt(default_factory=tuple, check=Text(), multiple=True, metavar='STEP/KEY',
                      help='Run only these steps: prepare, extract/clip, score/*, report ... (repeatable; globs'
                           ' allowed).')
    quiet: bool = opt(False, check=Flag(), short='-q', help='Print only the leaderboard and the report path.')
    as_json: bool = opt(False, check=Flag(), flag='--json', help='Print the result as JSON.')
