"""Statistics of the monotonicity study: accuracy with CIs, gaps, mixed models, paired tests, signal detection.

Accuracy per concept, the Appendix-B table, the pooled gap and the mixed model are the shared quantifier statistics
(``nbutils.studies.common.quantifier_stats`` and ``quantifier_mixed_models``, which the custom study runs on a file's concept column too); this module
adds the tests the monotonicity analysis reports beside them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar

from ...artifacts import json_clean
from ...stats import fallback_headlines, fit_problems, holm, record, sign_flip_test, t_interval, wilson
from ..common import claims
from ..common.quantifier_mixed_models import mixed_model
from ..common.quantifier_stats import (CONCEPT_KEYS, accuracy_table, appendix_b, matched_thresholds, pooled_gap,
                                       threshold_cells)

__all__ = ["accuracy_table", "appendix_b", "pooled_gap", "mixed_model", "gap_by_threshold", "gap_difference",
           "mcnemar_conditions", "signal_detection", "dprime_gap", "difficulty", "calibration", "records", "summary"]


def gap_by_threshold(df: pd.DataFrame) -> pd.DataFrame:
    """Upward minus downward accuracy at each matched threshold: Fisher's exact test, Holm within model × condition.

    A per-threshold test is about that threshold only; ``p_holm`` controls the family-wise error over the
    thresholds of one model and condition.
    """
    rows = []
    for key, g in matched_thresholds(df).groupby(["model", "condition", "family", "threshold"], sort=False):
        up, down = g[g.monotonicity == "upward"]["correct"], g[g.monotonicity == "downward"]["correct"]
        table = [[up.sum(), len(up) - up.sum()], [down.sum(), len(down) - down.sum()]]
        rows.append(dict(zip(["model", "condition", "family", "threshold"], key), n_up=len(up), n_down=len(down),
                         acc_up=up.mean(), acc_down=down.mean(), gap=up.mean() - down.mean(),
                         p_fisher=sps.fisher_exact(table).pvalue))
    out = pd.DataFrame(rows)
    if len(out):
        out["p_holm"] = out.groupby(["model", "condition"])["p_fisher"].transform(lambda s: holm(s.to_numpy()))
    return out


def gap_difference(df: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Per model: does the gap change when the concept is explicit? Threshold-level test of the interaction.

    For every threshold with both conditions, the concept-learning log odds ratio (up vs down) minus the explicit
    one; their mean (> 0: the gap shrinks when explicit) with a t(K−1) CI and a sign-flip test.
    """
    cells = threshold_cells(df)
    rows = []
    for model, c in cells.groupby("model", sort=False):
        wide = c.pivot_table(index="cluster", columns="condition", values="log_or", aggfunc="first")
        if not {"concept_learning", "explicit"} <= set(wide.columns):
            continue
        diff = (wide["concept_learning"] - wide["explicit"]).dropna()
        mean, se, lo, hi = t_interval(diff)
        p, exact = sign_flip_test(diff, seed=seed)
        rows.append({"model": model, "n_thresholds": len(diff), "log_or_cl_minus_explicit": mean, "se": se,
                     "ci_low": lo, "ci_high": hi, "p_signflip": p, "signflip_exact": exact})
    return pd.DataFrame(rows)


def mcnemar_conditions(df: pd.DataFrame) -> pd.DataFrame:
    """Concept learning vs explicit on the same items (matched by pair_id): exact McNemar test per concept,
    Holm over the concepts of a model (``p_holm``)."""
    rows = []
    for (model, concept), g in df.groupby(["model", "concept"], sort=False):
        wide = g.pivot_table(index="pair_id", columns="condition", values="correct", aggfunc="first")
        if not {"concept_learning", "explicit"}.issubset(wide.columns):
            continue
        wide = wide.dropna().astype(bool)
        a, b = wide["concept_learning"], wide["explicit"]
        table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
        rows.append({"model": model, "concept": concept, "n_pairs": len(wide), "acc_concept_learning": a.mean(),
                     "acc_explicit": b.mean(), "only_cl_correct": table[0][1], "only_explicit_correct": table[1][0],
                     "p_mcnemar": float(mcnemar(table, exact=True).pvalue)})
    out = pd.DataFrame(rows)
    if len(out):
        out["p_holm"] = out.groupby("model")["p_mcnemar"].transform(lambda s: holm(s.to_numpy()))
    return out


def signal_detection(df: pd.DataFrame) -> pd.DataFrame:
    """Yes-rate, hit rate (TPR), correct-rejection rate (TNR), d′ and criterion c per model × condition × concept.

    Rates use the log-linear correction ((k + 0.5) / (n + 1)) so d′ stays finite at 0% or 100%; ``d_prime_var``
    is the delta-method variance (Gourevitch & Galanter) used for the fixed-threshold SE of the d′ gap.
    """
    rows = []
    for (model, condition, concept), g in df.groupby(["model", "condition", "concept"], sort=False):
        pos, neg = g[g["label"]], g[~g["label"]]
        h = (pos["pred_yes"].sum() + 0.5) / (len(pos) + 1)
        f = (neg["pred_yes"].sum() + 0.5) / (len(neg) + 1)
        zh, zf = sps.norm.ppf(h), sps.norm.ppf(f)
        var = h * (1 - h) / ((len(pos) + 1) * sps.norm.pdf(zh) ** 2) + f * (1 - f) / ((len(neg) + 1) * sps.norm.pdf(zf) ** 2)
        rows.append({"model": model, "condition": condition, "concept": concept,
                     **{c: g[c].iloc[0] for c in CONCEPT_KEYS}, "yes_rate": g["pred_yes"].mean(),
                     "tpr": pos["pred_yes"].mean() if len(pos) else np.nan,
                     "tnr": 1 - neg["pred_yes"].mean() if len(neg) else np.nan,
                     "d_prime": zh - zf, "d_prime_var": var, "criterion": -(zh + zf) / 2})
    return pd.DataFrame(rows)


def dprime_gap(sdt: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Upward minus downward d′ per model and condition: the gap with response bias factored out, with inference.

    ``dprime_gap`` averages all up and all down concepts. Inference uses the matched thresholds: the mean of the
    per-threshold differences with a t(K−1) CI and a sign-flip test (about thresholds in general, the same logic
    as the accuracy gap), and ``se_delta``, the delta-method SE that treats the thresholds as fixed (for reference:
    like the CMH test it ignores how the gap varies between thresholds).
    """
    rows = []
    for (model, condition), g in sdt.groupby(["model", "condition"], sort=False):
        up, down = g[g.monotonicity == "upward"], g[g.monotonicity == "downward"]
        if not (len(up) and len(down)):
            continue
        row = {"model": model, "condition": condition, "dprime_up": up["d_prime"].mean(),
               "dprime_down": down["d_prime"].mean(), "dprime_gap": up["d_prime"].mean() - down["d_prime"].mean(),
               "criterion_up": up["criterion"].mean(), "criterion_down": down["criterion"].mean()}
        key = ["family", "threshold"]
        both = up.merge(down, on=key, suffixes=("_up", "_down"))
        diff = (both["d_prime_up"] - both["d_prime_down"]).to_numpy()
        mean, se, lo, hi = t_interval(diff)
        p, exact = sign_flip_test(diff, seed=seed)
        se_delta = float(np.sqrt((both["d_prime_var_up"] + both["d_prime_var_down"]).sum()) / len(both)) if len(both) else np.nan
        row.update(n_thresholds=len(both), dprime_gap_matched=mean, se=se, ci_low=lo, ci_high=hi, p_signflip=p,
                   signflip_exact=exact, se_delta=se_delta)
        rows.append(row)
    return pd.DataFrame(rows)


def difficulty(df: pd.DataFrame, bins: int = 5) -> pd.DataFrame:
    """Accuracy by the query's distance from the threshold (quantile bins within family), upward vs downward."""
    rows = []
    for (model, condition, family), g in df.groupby(["model", "condition", "family"], sort=False):
        q = pd.qcut(g["query_distance"], min(bins, g["query_distance"].nunique()), duplicates="drop")
        for (interval, mono), d in g.groupby([q, "monotonicity"], observed=True):
            k, n = int(d["correct"].sum()), len(d)
            lo, hi = wilson(k, n)
            rows.append({"model": model, "condition": condition, "family": family, "monotonicity": mono,
                         "distance_mid": float(interval.mid), "distance_bin": str(interval), "n": n,
                         "accuracy": k / n, "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def calibration(df: pd.DataFrame) -> pd.DataFrame:
    """Mean Yes–No log-probability margin by true label, per model × condition × monotonicity."""
    return (df.groupby(["model", "condition", "monotonicity", "label"], sort=False)["margin"]
              .agg(mean_margin="mean", sd_margin="std", n="size").reset_index())


def records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """Every inferential result of the analysis tables as ``nbutils.stats.record`` dicts (``summary["records"]``).

    Estimates of the model-based, CMH and sign-flip rows are log odds (ratios); the bootstrap row is the accuracy
    gap; ``headline`` marks the mixed-effects test to report (lme4's GLMM where R is installed, else the GEE) and,
    where one of its terms is not valid, the stand-in that reports the same term instead (``fallback_for``: the
    invalid record's test; see ``HEADLINE_ORDER``).
    """
    parts = (_mixed_model_records, _gap_pooled_records, _gap_difference_records, _gap_by_threshold_records,
             _mcnemar_records, _accuracy_records, _dprime_gap_records)
    out = [rec for part in parts for rec in part(t)]
    return json_clean(fallback_headlines(out, HEADLINE_ORDER))


def _rows(t: dict[str, pd.DataFrame], name: str):
    """The rows of one analysis table (none where the analysis did not make it)."""
    return t[name].itertuples(index=False) if name in t and len(t[name]) else []


def _mixed_model_records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """The records of the mixed-effects model's terms (lme4's GLMM or the GEE)."""
    out = []
    for r in _rows(t, "mixed_model"):
        if isinstance(r.term, str):
            out.append(record(r.test, r.term, r.estimate, r.se, r.ci_low, r.ci_high, r.p, valid=r.valid,
                              note="; ".join(filter(None, [r.meaning, r.note])),
                              condition=r.condition if isinstance(r.condition, str) else None, model=r.model,
                              headline=bool(r.headline), statistic=r.statistic, df=r.df, odds_ratio=r.odds_ratio,
                              formula=r.formula, random_effects=r.random_effects,
                              hypothesis=claims.term(r.term, r.condition)))
        else:
            out.append(record(r.test, "(none)", valid=False, note=r.note, model=r.model, headline=bool(r.headline)))
    return out


def _gap_pooled_records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """The records of the pooled gap: the sign-flip test over thresholds, the cluster bootstrap, the Mantel-Haenszel odds ratio and Breslow-Day."""
    out = []
    for r in _rows(t, "gap_pooled"):
        k = int(r.n_thresholds)
        few = "" if k >= 2 else "; one threshold: no variation between thresholds to test against"
        wide = ", and ".join(fit_problems(r.log_or_mean, r.log_or_se, r.log_or_ci_low, r.log_or_ci_high)) \
            if k >= 2 else ""
        out.append(record("signflip_gap", "upward", r.log_or_mean, r.log_or_se, r.log_or_ci_low, r.log_or_ci_high,
                          r.p_signflip, valid=k >= 2 and not wide, condition=r.condition, model=r.model, n_thresholds=k,
                          exact=bool(r.signflip_exact), min_p=signflip_min_p(k, bool(r.signflip_exact)),
                          note="mean over thresholds of the up-vs-down log odds ratio; sign-flip test, t(K−1) CI" + few
                               + (f"; {wide}" if wide else ""),
                          hypothesis=claims.gap(r.condition)))
        out.append(record("cluster_bootstrap", "upward", r.gap, ci_low=r.gap_ci_low, ci_high=r.gap_ci_high,
                          valid=k >= 2, condition=r.condition, model=r.model, n_thresholds=k,
                          note="descriptive: accuracy gap, 95% percentile CI resampling thresholds (too narrow "
                               "with few thresholds: 9-12% false positives at 10 in calibration.json)" + few,
                          hypothesis=claims.gap(r.condition, "points", "gap")))
        finite_or = bool(np.isfinite(r.or_mh)) and r.or_mh > 0
        log_or = np.log(r.or_mh) if finite_or else np.nan
        ci = [np.log(v) if np.isfinite(v) and v > 0 else np.nan for v in (r.or_mh_ci_low, r.or_mh_ci_high)]
        bad = ", and ".join(fit_problems(log_or, ci_low=ci[0], ci_high=ci[1], check_se=False)) if finite_or else \
            "the Mantel-Haenszel odds ratio is 0, infinite or undefined: one direction is answered all right or all wrong"
        out.append(record("cmh", "upward", log_or, None, ci[0], ci[1], r.p_cmh, condition=r.condition,
                          model=r.model, odds_ratio=r.or_mh, p_holm_models=r.p_holm_models, n_thresholds=k,
                          valid=not bad, note="fixed-threshold test (these thresholds only): Mantel-Haenszel log odds "
                                              "ratio, CMH without continuity correction" + (f"; {bad}" if bad else ""),
                          hypothesis=claims.gap(r.condition)))
        out.append(record("breslow_day", "upward", p=r.p_breslow_day, condition=r.condition, model=r.model,
                          valid=k >= 2, n_thresholds=k,
                          note="fixed-threshold test that the odds ratio is the same at every threshold",
                          hypothesis=claims.homogeneity()))
    return out


def _gap_difference_records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """The records of the gap under concept learning minus under the stated concept."""
    out = []
    for r in _rows(t, "gap_difference"):
        # both conditions answered alike at every threshold: every difference is 0, and a test of 0.000 [0.000,
        # 0.000], p > .999 would read as a precise null; there is nothing to compare
        same = abs(r.se) < 1e-12 and abs(r.log_or_cl_minus_explicit) < 1e-12
        out.append(record("signflip_gap_difference", "upward:explicit", r.log_or_cl_minus_explicit, r.se, r.ci_low,
                          r.ci_high, r.p_signflip, valid=r.n_thresholds >= 2 and not same, model=r.model,
                          n_thresholds=int(r.n_thresholds), exact=bool(r.signflip_exact),
                          note="mean over thresholds of the log odds ratio under concept learning minus explicit "
                               "(> 0: the gap shrinks); sign-flip test, t(K−1) CI"
                               + ("; no variation to compare: the two conditions were answered alike at every "
                                  "threshold" if same else ""), hypothesis=claims.gap_difference()))
    return out


def _gap_by_threshold_records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """The records of the gap at each threshold (Fisher, Holm over thresholds)."""
    out = []
    for r in _rows(t, "gap_by_threshold"):
        out.append(record("fisher", f"upward@{r.family}:{r.threshold}", r.gap, p=r.p_fisher, condition=r.condition,
                          model=r.model, p_holm=r.p_holm,
                          note="accuracy gap at this threshold only; Holm over the thresholds of a model and condition",
                          hypothesis=claims.threshold_gap(r.threshold)))
    return out


def _mcnemar_records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """The records of stated minus concept-learning accuracy per concept (McNemar)."""
    out = []
    for r in _rows(t, "mcnemar"):
        out.append(record("mcnemar", f"explicit@{r.concept}", r.acc_explicit - r.acc_concept_learning, p=r.p_mcnemar,
                          model=r.model, p_holm=r.p_holm, n=int(r.n_pairs),
                          note="explicit minus concept-learning accuracy on the same prompts; exact McNemar, "
                               "Holm over the concepts of a model", hypothesis=claims.explicit_vs_learned(r.concept)))
    return out


def _accuracy_records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """The records of each concept's accuracy against chance (binomial)."""
    out = []
    for r in _rows(t, "accuracy"):
        out.append(record("binomial", f"accuracy@{r.concept}", r.accuracy, None, r.ci_low, r.ci_high, r.p_binom,
                          condition=r.condition, model=r.model, p_holm=r.p_holm, n=int(r.n),
                          note="accuracy vs 0.5: exact binomial test, Wilson CI, Holm within the model",
                          hypothesis=claims.accuracy_vs_chance(repr(r.concept))))
    return out


def _dprime_gap_records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """The records of the d′ gap over matched thresholds."""
    out = []
    for r in _rows(t, "dprime_gap"):
        k = int(r.n_thresholds)
        out.append(record("signflip_dprime_gap", "upward", r.dprime_gap_matched, r.se, r.ci_low, r.ci_high,
                          r.p_signflip, valid=k >= 2, condition=r.condition, model=r.model, n_thresholds=k,
                          se_delta=r.se_delta, exact=bool(r.signflip_exact),
                          min_p=signflip_min_p(k, bool(r.signflip_exact)),
                          note="mean over matched thresholds of d′ up − d′ down; sign-flip test, t(K−1) CI; "
                               "se_delta treats the thresholds as fixed", hypothesis=claims.dprime_gap()))
    return out


# a headline record that is not valid hands over to the first valid record of the same model, condition and term in
# this order: the GLMM, the GEE (clustered by threshold), the sign-flip test over thresholds, the fixed-threshold
# Mantel-Haenszel odds ratio (the last two exist for the gap, ``upward``, only)
HEADLINE_ORDER = ["glmm_lrt", "gee_bias_reduced", "firth_plr", "signflip_gap", "cmh"]


def signflip_min_p(k: int, exact: bool, n_mc: int = 20000) -> float:
    """The smallest p a two-sided sign-flip test over ``k`` thresholds can give: 2/2^k exact, 1/(n_mc + 1) sampled."""
    return float(min(1.0, 2.0 / 2 ** k)) if exact else 1.0 / (n_mc + 1)


def per_threshold(gbt: pd.DataFrame) -> dict:
    """Correct answers per matched threshold, upward and downward, per model and condition (what a sentence shows
    where no test can be read)."""
    out: dict = {}
    for r in gbt.itertuples(index=False):
        out.setdefault((r.model, r.condition), []).append(
            {"threshold": str(r.threshold), "k_up": int(round(r.acc_up * r.n_up)), "n_up": int(r.n_up),
             "k_down": int(round(r.acc_down * r.n_down)), "n_down": int(r.n_down)})
    return out


def summary(gaps: pd.DataFrame, mixed: pd.DataFrame, dgap: pd.DataFrame) -> dict:
    """The headline numbers per model and condition, for summary.json (every test is in ``records`` too)."""
    out: dict = {}
    for r in gaps.itertuples(index=False):
        entry = out.setdefault(r.model, {"conditions": {}})
        entry["conditions"][r.condition] = {
            "acc_up": r.acc_up, "acc_down": r.acc_down, "gap": r.gap, "n": int(r.n),
            "gap_ci95_bootstrap": [r.gap_ci_low, r.gap_ci_high],  # descriptive: too narrow with few thresholds
            "log_or_mean": r.log_or_mean, "p_signflip": r.p_signflip, "or_mh": r.or_mh, "p_cmh": r.p_cmh,
            "p_holm_models": r.p_holm_models, "n_thresholds": r.n_thresholds}
    for r in dgap.itertuples(index=False):
        out.setdefault(r.model, {"conditions": {}})["conditions"].setdefault(r.condition, {}).update(
            dprime_gap=r.dprime_gap, dprime_gap_p_signflip=r.p_signflip)
    for model, g in mixed.groupby("model"):
        entry = out.setdefault(model, {"conditions": {}})
        head = g[g["headline"] & g["term"].map(lambda x: isinstance(x, str))]
        entry["mixed_model"] = {
            "test": head["test"].iloc[0] if len(head) else None,
            "terms": [{k: getattr(t, k, None) for k in ("term", "condition", "estimate", "se", "odds_ratio", "or_ci_low",
                                                        "or_ci_high", "p", "valid")} for t in head.itertuples(index=False)]}
        entry["notes"] = sorted({n for n in g["note"].dropna() if n})
    return json_clean(out)
