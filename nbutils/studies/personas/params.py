"""The personas analysis's parameters (``analysis.analyze_run``, ``notebooks/personas/03_analyze.ipynb``, a sweep file's
``analyze`` block): one frozen record, checked when it is built (``nbutils.analysis``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...analysis import AnalysisParams

ALTERNATIVES = ("two-sided", "greater", "less")


@dataclass(frozen=True)
class PersonasParams(AnalysisParams):
    """``min_overlap``: a persona's ratio is flagged unstable when |Cᵢ ∩ C_b| is below it; ``n_resamples``:
    permutations of the persona labels (real vs null); ``alternative``: the real − null test's sidedness."""

    min_overlap: int = field(default=10, metadata={"min": 1, "help": "overlap below which a ratio is unstable"})
    n_resamples: int = field(default=9999, metadata={"min": 99, "help": "permutations of the persona labels"})
    alternative: str = field(default="two-sided", metadata={"choices": ALTERNATIVES,
                                                            "help": "greater: real personas more biased than null"})
