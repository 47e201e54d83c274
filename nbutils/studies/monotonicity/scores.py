"""This study's view of a run's score files: every complete full-run model joined with the prompts."""
from __future__ import annotations

from ...runstore import load_scores as _load
from .. import get


def load_scores(run_dir, include_limited: bool = False):
    """Scores of every complete model joined with ``prompts.parquet`` (one row per model × prompt)."""
    return _load(run_dir, get("monotonicity").spec, include_limited=include_limited)
