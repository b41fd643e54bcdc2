"""The scorer's input errors: each is an :class:`~xbench.schemas.errors.InputError` (every command exits 2 on
it, one line per problem, without validating anything a second time) and a ``ValueError`` (what these
functions raised before the errors were typed, so a caller that caught ``ValueError`` still does).

Errors of the stores themselves are :class:`~xbench.schemas.errors.InvalidStoreError`; an unknown dataset
key is :class:`~xbench.schemas.errors.UnknownNameError`. A ``ValueError`` that stays plain in ``xbench.score``
is a caller's programming error (arrays of the wrong shape handed to a kernel), never something a file or an
option can cause.
"""
from __future__ import annotations

from xbench.schemas.errors import InputError, InvalidStoreError

__all__ = ["ScoreInputError", "ThresholdsError", "GroundTruthMismatchError", "MissingCasesError"]


class ScoreInputError(InputError, ValueError):
    """An option or argument of scoring that cannot be used (a negative tolerance, an unknown output format)."""


class ThresholdsError(ScoreInputError):
    """Transferred thresholds (``--thresholds-from``) that cannot be used: not a metrics.json, a class
    without thresholds, a threshold off the 0.01 grid."""


class GroundTruthMismatchError(ScoreInputError):
    """Two results compared pairwise were scored against different ground truth (one problem per dataset)."""


class MissingCasesError(InvalidStoreError):
    """Submissions that lack cases (or whole datasets) of the ground truth, scored without ``allow_missing``.

    ``problems``: every problem found (the missing cases among them); ``coverage``: {submission: (cases
    present, cases of the ground truth)} over the datasets to score, of each submission that lacks some, so
    a command can say how many ``--allow-missing`` would score."""

    def __init__(self, problems, coverage: dict[str, tuple[int, int]]) -> None:
        super().__init__(problems)
        self.coverage = dict(coverage)
