"""Inference shared by every study: intervals, multiplicity corrections, significance stars."""
from __future__ import annotations

import numpy as np

from ._levels import ALPHA
from ..records import RECORD_KEYS, Record  # noqa: F401 (the standard keys of every record)


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of k successes in n trials."""
    if n == 0:
        return (np.nan, np.nan)
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    return float(lo), float(hi)


def holm(pvalues) -> np.ndarray:
    """Holm-adjusted p-values (NaNs kept in place).

    The same arithmetic as ``statsmodels.stats.multitest.multipletests(p, method="holm")`` (the k-th smallest of m
    p-values times m − k + 1, a running maximum, capped at 1; a test checks the two agree exactly), written out
    because statsmodels' Holm branch runs a full ``gc.collect()`` on every call: about 0.1 s in a process that has
    torch and pandas loaded, which dominated analyses that adjust many small families.
    """
    p = np.asarray(pvalues, dtype=float)
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        q = p[ok]
        order = np.argsort(q)
        adjusted = np.maximum.accumulate(q[order] * np.arange(len(q), 0, -1))
        adjusted[adjusted > 1] = 1.0
        back = np.empty_like(adjusted)
        back[order] = adjusted
        out[ok] = back
    return out


def stars(p: float) -> str:
    """APA-style significance stars for a p-value (empty above .05 or for NaN)."""
    if p is None or not np.isfinite(p):
        return ""
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


SCALES = ("log_odds_ratio", "proportion", "points", "number")
SIDES = ("two-sided", "greater", "less", "none")


def claim(what: str, more: str, less: str, differ: str | None = None, *, scale: str = "number", null: float = 0.0,
          sided: str = "two-sided", symbol: str | None = None) -> dict:
    """What a record's estimate is and what its sides mean, for the sentence engine (``nbutils.results``).

    ``what``: the quantity in words ("the upward − downward gap under concept learning"); ``more`` / ``less``: the
    finding when the estimate is significantly above / below ``null`` ("upward concepts were learned better than
    downward ones"); ``differ``: the two-sided question ("upward and downward concepts differ"). ``scale``: how the
    estimate is shown: ``log_odds_ratio`` (as an odds ratio), ``proportion`` (percent; ``null`` is chance),
    ``points`` (a difference of proportions in percentage points) or ``number``. ``sided``: the test's alternative
    (``greater`` reads only ``more`` as evidence; ``none``: a test without a direction, e.g. a chi-square).
    """
    if scale not in SCALES:
        raise ValueError(f"scale: must be one of {list(SCALES)}, got {scale!r}")
    if sided not in SIDES:
        raise ValueError(f"sided: must be one of {list(SIDES)}, got {sided!r}")
    default = {"log_odds_ratio": "OR", "proportion": "accuracy", "points": "difference"}.get(scale, "estimate")
    return {"what": what, "symbol": symbol or default, "scale": scale, "null": float(null), "sided": sided,
            "more": more, "less": less, "differ": differ or f"{what} differs from its null value"}


def record(test: str, term: str, estimate=None, se=None, ci_low=None, ci_high=None, p=None, *, valid: bool = True,
           note: str = "", condition: str | None = None, hypothesis: dict | None = None, model: str | None = None,
           headline: bool | None = None, **extra) -> Record:
    """One inferential result as ``summary.json`` lists it (``summary["records"]``): a ``records.Record``.

    ``test`` names the procedure (e.g. ``"glmm_lrt"``, ``"gee_bias_reduced"``, ``"cmh"``); ``valid`` is False when
    the result must not be read (singular or non-converged fit, too few clusters…) and ``note`` then says why.
    ``hypothesis`` (``claim``) declares what the sentence engine needs to put the record in words. Extra keys
    (``df``, ``statistic``, ``n``, ``p_holm``…) are kept beside the standard ones.
    """
    return Record(test, term, estimate, se, ci_low, ci_high, p, valid=valid, note=note, condition=condition,
                  model=model, headline=headline, hypothesis=hypothesis, extra=extra)


def sign_flip_test(x, *, n_mc: int = 20000, seed: int = 0, exact_max: int = 16) -> tuple[float, bool]:
    """Two-sided sign-flip (one-sample randomization) test that the mean of ``x`` is 0; returns (p, exact).

    Valid whenever each value is symmetric about 0 under the null, e.g. one up − down difference per threshold
    when the two directions are exchangeable within a threshold; the values may differ in spread. Exact (every
    one of the 2^K sign patterns) for K ≤ ``exact_max``, else ``n_mc`` seeded Monte-Carlo patterns, the observed
    one counted in (so p ≥ 1/(n_mc + 1)). With K values the smallest attainable p is 2/2^K: at K ≤ 5 nothing
    can reach .05.
    """
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    k = len(x)
    if k == 0:
        return float("nan"), True
    observed = abs(x.mean())
    tol = 1e-12 * max(1.0, float(np.abs(x).max()))
    if k <= exact_max:
        signs = 1 - 2 * ((np.arange(2**k)[:, None] >> np.arange(k)) & 1)
        return float(np.mean(np.abs(signs @ x) / k >= observed - tol)), True
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_mc, 4096):  # in blocks, so memory stays small for any K
        signs = rng.choice([-1.0, 1.0], size=(min(4096, n_mc - start), k))
        hits += int(np.sum(np.abs(signs @ x) / k >= observed - tol))
    return float((hits + 1) / (n_mc + 1)), False


def t_interval(x, level: float = 0.95) -> tuple[float, float, float, float]:
    """Mean, standard error and the t(K−1) confidence interval of the mean of ``x`` (NaN where K < 2)."""
    from scipy import stats as sps

    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    k = len(x)
    if k < 2:
        return (float(x.mean()) if k else float("nan")), float("nan"), float("nan"), float("nan")
    m, se = float(x.mean()), float(x.std(ddof=1) / np.sqrt(k))
    q = float(sps.t.ppf(0.5 + level / 2, k - 1))
    return m, se, m - q * se, m + q * se


# --- degenerate fits: what keeps a model-based record out of a headline ------------------------------------------

SEPARATION_LOG_ODDS = 8.0   # |log odds ratio| beyond this: the likelihood has no finite maximum in practice
SD_MAX = 10.0               # a random-effect SD over this on the logit scale has exploded
CI_DECADES_MAX = 3.0        # a 95% CI over more than three orders of magnitude on the odds-ratio scale says nothing


def fit_problems(estimate, se=None, ci_low=None, ci_high=None, *, log_odds: bool = True, random_sd: dict | None = None,
                 check_se: bool = True) -> list[str]:
    """Why a fitted coefficient must not be read, as plain reasons (empty when none applies).

    A singular Hessian (standard error not finite or zero); on the log-odds scale (``log_odds``) an estimate beyond
    ±8 (separation or quasi-separation) and a 95% CI wider than three orders of magnitude of the odds ratio; a random
    effect (``random_sd``: name → SD on the logit scale) over 10, or at its boundary of 0. These are the fits whose
    numbers look like results but are not: a one-threshold GLMM with every prompt pair answered alike gives an odds
    ratio of 1.00 with a 95% CI of [0.00, 1099.95] from a pair SD of 50.7.
    """
    def finite(x):
        try:
            return x is not None and bool(np.isfinite(float(x)))
        except (TypeError, ValueError):
            return False

    out = []
    # a variance that is zero in exact arithmetic comes out near machine epsilon (1e-16), and its square root near
    # 1e-8, depending on the host's BLAS kernels: a standard error under 1e-6 of the estimate's scale is zero
    if check_se and not (finite(se) and float(se) > 1e-6 * max(1.0, abs(float(estimate)) if finite(estimate) else 1.0)):
        out.append("singular Hessian: the standard error is not finite or is zero")
    if log_odds and finite(estimate) and abs(float(estimate)) > SEPARATION_LOG_ODDS:
        out.append(f"the log odds ratio is {float(estimate):.1f}: (quasi-)complete separation of the groups, so the "
                   "test is not reliable")
    if log_odds and finite(ci_low) and finite(ci_high):
        decades = (float(ci_high) - float(ci_low)) / np.log(10)
        if decades > CI_DECADES_MAX:
            out.append(f"the 95% CI spans {decades:.1f} orders of magnitude of the odds ratio: the data do not locate "
                       "the effect")
    for name, sd in (random_sd or {}).items():
        if not finite(sd):
            continue
        if float(sd) > SD_MAX:
            out.append(f"the {name} random effect's SD is {float(sd):.1f} on the logit scale, implausibly large: a "
                       f"quasi-separation by {name}")
        elif float(sd) < 1e-4:
            out.append(f"the {name} random effect's SD is at its boundary of 0, a singular fit")
    return out


def can_reject(record: dict, alpha: float = ALPHA) -> bool:
    """False for a test whose smallest attainable p (``min_p``, e.g. a sign-flip test over 5 thresholds: 2/2^5 =
    .0625) is not below ``alpha``: it cannot find anything at this design, so it never stands in as a headline."""
    m = record.get("min_p")
    return not (isinstance(m, (int, float)) and m >= alpha)


def fallback_headlines(records: list[dict], order: list[str], key=("model", "condition", "term")) -> list[dict]:
    """Give every headline record that is not valid a stand-in: the first valid record of the same ``key`` whose test
    comes later in ``order`` (e.g. lme4's GLMM → the GEE → the Mantel–Haenszel odds ratio) and that can reject at
    this design (``can_reject``).

    The stand-in gets ``headline`` True and ``fallback_for``: the invalid record's test; the invalid record keeps
    ``headline`` True, so the paragraph says it is not estimable and why, then gives the stand-in. Records are
    changed in place and returned.
    """
    rank = {t: i for i, t in enumerate(order)}
    for head in [r for r in records if r.get("headline") and not r.get("valid", True) and r.get("test") in rank]:
        if head.get("fallback_for"):
            continue
        k = tuple(head.get(c) for c in key)
        later = [r for r in records if r is not head and r.get("test") in rank and rank[r["test"]] > rank[head["test"]]
                 and tuple(r.get(c) for c in key) == k and r.get("valid", True) and r.get("estimate") is not None
                 and can_reject(r)]
        if later:
            best = min(later, key=lambda r: rank[r["test"]])
            best["headline"] = True
            best["fallback_for"] = head["test"]
    return records
