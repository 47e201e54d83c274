"""Statistics of quantifier concepts on any frame with a concept column (``family``, ``quantifier``, ``threshold``,
``monotonicity``, ``condition``, ``correct``, ``pred_yes``, ``model``): accuracy per concept with CIs, the papers'
Appendix-B layout, and the upward − downward gap pooled over matched thresholds. The mixed-effects test of the gap is
``quantifier_mixed_models``.
"""
from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.contingency_tables import StratifiedTable

from ...stats import N_BOOT, holm, sign_flip_test, t_interval, wilson

CONCEPT_KEYS = ["family", "quantifier", "threshold", "monotonicity"]


def threshold_value(threshold: str) -> float:
    """Numeric value of a threshold string ("3/10" → 0.3), for ordering columns."""
    return float(Fraction(threshold))


def accuracy_table(df: pd.DataFrame) -> pd.DataFrame:
    """Model × condition × concept: n, accuracy, 95% Wilson CI, exact binomial p vs 0.5, Holm p within model."""
    rows = []
    for (model, condition, concept), g in df.groupby(["model", "condition", "concept"], sort=False):
        n, k = len(g), int(g["correct"].sum())
        lo, hi = wilson(k, n)
        rows.append({"model": model, "condition": condition, "concept": concept,
                     **{c: g[c].iloc[0] for c in CONCEPT_KEYS}, "n": n, "n_correct": k,
                     "accuracy": k / n, "ci_low": lo, "ci_high": hi,
                     "p_binom": sps.binomtest(k, n, 0.5).pvalue, "yes_rate": float(g["pred_yes"].mean())})
    out = pd.DataFrame(rows)
    out["p_holm"] = out.groupby("model")["p_binom"].transform(lambda s: holm(s.to_numpy()))
    out["_t"] = out["threshold"].map(threshold_value)
    return out.sort_values(["model", "condition", "family", "_t", "quantifier"]).drop(columns="_t").reset_index(drop=True)


def appendix_b(acc: pd.DataFrame) -> pd.DataFrame:
    """The papers' Appendix-B layout: rows [more than p]/[less than p] per model and condition, columns thresholds, cells %."""
    t = acc.assign(row=lambda d: "[" + d["quantifier"].str.replace("_", " ") + " p]",
                   pct=lambda d: (100 * d["accuracy"]).round(1))
    wide = t.pivot_table(index=["model", "condition", "family", "row"], columns="threshold", values="pct", aggfunc="first")
    cols = sorted(wide.columns, key=threshold_value)
    return wide[cols].sort_index(level=["model", "condition", "family", "row"], ascending=[True, True, True, False])


def matched_thresholds(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose threshold has both an upward and a downward concept in the same model, condition and family."""
    both = df.groupby(["model", "condition", "family", "threshold"])["monotonicity"].transform("nunique") == 2
    return df[both]


def threshold_units(df: pd.DataFrame) -> pd.Series:
    """The unit of replication: one threshold of one family ("proportional:1/3"), shared by its up and down concept."""
    return df["family"].astype(str) + ":" + df["threshold"].astype(str)


def _empirical_logit(k, n):
    """log((k + ½) / (n − k + ½)): finite at 0% and 100%, nearly unbiased for the log-odds."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    return np.log((k + 0.5) / (n - k + 0.5))


def threshold_cells(df: pd.DataFrame) -> pd.DataFrame:
    """One row per model × condition × matched threshold: counts up and down, the accuracy gap and the log odds ratio.

    These are the units every threshold-level test and the cluster bootstrap resample: a claim about thresholds in
    general rests on how these K values vary, not on the thousands of prompts within them.
    """
    m = matched_thresholds(df)
    if m.empty:
        return pd.DataFrame(columns=["model", "condition", "cluster", "n_up", "k_up", "n_down", "k_down", "gap", "log_or"])
    m = m.assign(cluster=threshold_units(m), up=m["monotonicity"] == "upward", correct=m["correct"].astype(bool))
    g = m.groupby(["model", "condition", "cluster", "up"], sort=False)["correct"].agg(["size", "sum"]).unstack("up")
    out = pd.DataFrame({"n_up": g[("size", True)], "k_up": g[("sum", True)],
                        "n_down": g[("size", False)], "k_down": g[("sum", False)]}).astype(int).reset_index()
    out["gap"] = out["k_up"] / out["n_up"] - out["k_down"] / out["n_down"]
    out["log_or"] = _empirical_logit(out["k_up"], out["n_up"]) - _empirical_logit(out["k_down"], out["n_down"])
    return out


def cluster_bootstrap_gap(cells: pd.DataFrame, n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    """95% percentile CI of the pooled accuracy gap, resampling whole thresholds (never prompts within them)."""
    k = len(cells)
    if k < 2:
        return float("nan"), float("nan")
    pick = rng.integers(0, k, size=(n_boot, k))
    cols = {c: cells[c].to_numpy(dtype=float)[pick].sum(axis=1) for c in ("k_up", "n_up", "k_down", "n_down")}
    gaps = cols["k_up"] / cols["n_up"] - cols["k_down"] / cols["n_down"]
    return float(np.quantile(gaps, 0.025)), float(np.quantile(gaps, 0.975))


def _mantel_haenszel(cells: pd.DataFrame) -> dict:
    """Cochran–Mantel–Haenszel test (no continuity correction, no added 0.5), MH odds ratio with CI, Breslow–Day."""
    tables = [np.array([[r.k_up, r.n_up - r.k_up], [r.k_down, r.n_down - r.k_down]], dtype=float)
              for r in cells.itertuples(index=False)]
    out = {"or_mh": np.nan, "or_mh_ci_low": np.nan, "or_mh_ci_high": np.nan, "p_cmh": np.nan, "p_breslow_day": np.nan}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        st = StratifiedTable(tables)
        out["p_cmh"] = float(st.test_null_odds(correction=False).pvalue)
        out["or_mh"] = float(st.oddsratio_pooled)
        try:
            out["or_mh_ci_low"], out["or_mh_ci_high"] = (float(v) for v in st.oddsratio_pooled_confint())
            out["p_breslow_day"] = float(st.test_equal_odds().pvalue) if len(tables) > 1 else np.nan
        except (ZeroDivisionError, ValueError, np.linalg.LinAlgError):
            pass
    return out


def pooled_gap(df: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> pd.DataFrame:
    """Per model and condition: the gap pooled over matched thresholds, with two kinds of inference.

    About thresholds in general (the claim a paper makes): ``log_or_mean`` is the mean over thresholds of the
    per-threshold log odds ratio, with a t(K−1) CI and a sign-flip test (``p_signflip``, exact for K ≤ 16); the
    accuracy gap's CI resamples thresholds (cluster bootstrap). About these thresholds only (fixed-threshold
    tests): the Cochran–Mantel–Haenszel test ``p_cmh`` (no continuity correction), the Mantel–Haenszel odds ratio
    with its Robins–Breslow–Greenland CI, and Breslow–Day's test that the odds ratio is the same at every threshold.
    The CMH test rejects far more often than 5% when the gap varies from threshold to threshold around a mean of 0
    (benchmarks/results/calibration.json): read it as a statement about the thresholds in the table.
    """
    rng = np.random.default_rng(seed)
    cells = threshold_cells(df)
    rows = []
    for (model, condition), c in cells.groupby(["model", "condition"], sort=False):
        n_up, n_down = c["n_up"].sum(), c["n_down"].sum()
        acc_up, acc_down = c["k_up"].sum() / n_up, c["k_down"].sum() / n_down
        lo, hi = cluster_bootstrap_gap(c, n_boot, rng)
        mean, se, t_lo, t_hi = t_interval(c["log_or"])
        p_sf, exact = sign_flip_test(c["log_or"], seed=seed)
        rows.append({"model": model, "condition": condition, "n_thresholds": len(c), "n": int(n_up + n_down),
                     "acc_up": acc_up, "acc_down": acc_down, "gap": acc_up - acc_down,
                     "gap_ci_low": lo, "gap_ci_high": hi, "log_or_mean": mean, "log_or_se": se,
                     "log_or_ci_low": t_lo, "log_or_ci_high": t_hi, "p_signflip": p_sf, "signflip_exact": exact,
                     **_mantel_haenszel(c)})
    out = pd.DataFrame(rows)
    if len(out):
        out["p_holm_models"] = out.groupby("condition")["p_cmh"].transform(lambda s: holm(s.to_numpy()))
    return out


def headline_gap(df: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0, condition: str = "concept_learning") -> dict:
    """The study's headline in one record: the pooled upward − downward accuracy gap of ``condition`` (the first
    condition when it is absent), with its threshold-bootstrap CI and the sign-flip p over thresholds."""
    g = pooled_gap(df, n_boot=n_boot, seed=seed)
    if g.empty:
        return {"estimate": None, "ci_low": None, "ci_high": None, "p": None}
    row = g[g["condition"] == condition].iloc[0] if (g["condition"] == condition).any() else g.iloc[0]
    return {"estimate": float(row["gap"]), "ci_low": float(row["gap_ci_low"]), "ci_high": float(row["gap_ci_high"]),
            "p": float(row["p_signflip"]), "condition": row["condition"]}
