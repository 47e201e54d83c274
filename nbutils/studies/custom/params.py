"""The custom study's analysis parameters (``analysis.analyze_run``, ``notebooks/custom/03_analyze.ipynb``, a sweep
file's ``analyze`` block): one frozen record, checked when it is built (``nbutils.analysis``)."""
from __future__ import annotations

from dataclasses import dataclass

from ...analysis import AnalysisParams, n_boot_field, use_r_field


@dataclass(frozen=True)
class CustomParams(AnalysisParams):
    """``n_boot``: bootstrap resamples of the concept-learning gap (a file with a ``concept`` column); ``use_r``: that
    analysis's GLMM with lme4 when R has it."""

    n_boot: int = n_boot_field()
    use_r: bool = use_r_field()
