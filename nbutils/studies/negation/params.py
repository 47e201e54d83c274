"""The negation analysis's parameters (``analysis.analyze_run``, ``notebooks/negation/03_analyze.ipynb``, a sweep file's
``analyze`` block): one frozen record, checked when it is built (``nbutils.analysis``)."""
from __future__ import annotations

from dataclasses import dataclass

from ...analysis import AnalysisParams, use_r_field


@dataclass(frozen=True)
class NegationParams(AnalysisParams):
    """``use_r``: the LMMs with lme4/lmerTest when R has them, else statsmodels MixedLM. ``seed`` is there because
    every analysis takes one; nothing in these fits is drawn at random."""

    use_r: bool = use_r_field()
