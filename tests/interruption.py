"""A scoring run interrupted after its first batches, for the tests of checkpoints and resumption, with no hook for it
in the package: the records of the first ``n`` batches reach the run's checkpoints and every later one is lost, as
when the process stops after the result that completes ``n`` batches (a result that holds several batches, tails
split together, is never cut, as a real interruption cannot cut it). The run then ends as an interrupted one does:
its checkpoint written, the records so far returned with ``complete`` False."""
from __future__ import annotations

import pytest

from nbutils.engine import run as engine_run


class _Lost:
    """A record callback that passes on the results completing the first ``n`` batches and drops the rest."""

    def __init__(self, record, n: int):
        self.record, self.left = record, n

    def __call__(self, records: dict, batches: int = 1) -> None:
        if self.left > 0:
            self.record(records, batches)
        self.left -= batches


def score_until(n: int, *args, **kwargs):
    """``engine.run.score_run(*args, **kwargs)`` interrupted after ``n`` batches (see the module docstring)."""
    real = engine_run.make_scorer

    def make(*a, **k):
        scorer = real(*a, **k)
        full = scorer.run
        scorer.run = lambda batches, record, progress=True: full(batches, _Lost(record, n), progress)
        return scorer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_run, "make_scorer", make)
        return engine_run.score_run(*args, **kwargs)
