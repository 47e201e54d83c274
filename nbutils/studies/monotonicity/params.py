"""The monotonicity analysis's parameters (``analysis.analyze_run``, ``notebooks/monotonicity/03_analyze.ipynb``, a
sweep file's ``analyze`` block): one frozen record, checked when it is built (``nbutils.analysis``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...analysis import AnalysisParams, n_boot_field, use_r_field


@dataclass(frozen=True)
class MonotonicityParams(AnalysisParams):
    """``n_boot``: bootstrap resamples of the pooled gap's CI; ``rules_k``: the neighbours the knn_majority rule
    consults (None: 5, or the prompts' number of examples when smaller); ``use_r``: the headline GLMM with lme4 when
    R has it (else the GEE is the headline)."""

    n_boot: int = n_boot_field()
    rules_k: int | None = field(default=None, metadata={"min": 1, "help": "neighbours of the knn_majority rule"})
    use_r: bool = use_r_field()
