"""Inference shared by every study: intervals, multiplicity corrections, significance stars."""
from __future__ import annotations

import numpy as np
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of k successes in n trials."""
    if n == 0:
        return (np.nan, np.nan)
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    return float(lo), float(hi)


def holm(pvalues) -> np.ndarray:
    """Holm-adjusted p-values (NaNs kept in place)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = multipletests(p[ok], method="holm")[1]
    return out


def stars(p: float) -> str:
    """APA-style significance stars for a p-value (empty above .05 or for NaN)."""
    if p is None or not np.isfinite(p):
        return ""
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


RECORD_KEYS = ("test", "condition", "term", "estimate", "se", "ci_low", "ci_high", "p", "valid", "note")


def record(test: str, term: str, estimate=None, se=None, ci_low=None, ci_high=None, p=None, *, valid: bool = True,
           note: str = "", condition: str | None = None, **extra) -> dict:
    """One inferential result as ``summary.json`` lists it (``summary["records"]``), with every key of RECORD_KEYS.

    ``test`` names the procedure and, for models, the model (e.g. ``"glmm_lrt"``, ``"gee_bias_reduced"``, ``"cmh"``);
    ``valid`` is False when the result must not be read (singular or non-converged fit, too few clusters…) and
    ``note`` then says why. Extra keys (``df``, ``statistic``, ``n``, ``p_holm``…) are kept after the standard ones.
    """
    def num(x):
        return None if x is None or (isinstance(x, float) and not np.isfinite(x)) else float(x)
    out = {"test": str(test), "condition": condition, "term": str(term), "estimate": num(estimate), "se": num(se),
           "ci_low": num(ci_low), "ci_high": num(ci_high), "p": num(p), "valid": bool(valid), "note": str(note)}
    out.update(extra)
    return out
