"""Statistics of the monotonicity study: accuracy with CIs, gaps, mixed models, paired tests, signal detection."""
from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.contingency_tables import StratifiedTable, mcnemar

from ...artifacts import json_clean
from ...stats import holm, wilson

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
    """The seeds' Appendix-B layout: rows [more than p]/[less than p] per model and condition, columns thresholds, cells %."""
    t = acc.assign(row=lambda d: "[" + d["quantifier"].str.replace("_", " ") + " p]",
                   pct=lambda d: (100 * d["accuracy"]).round(1))
    wide = t.pivot_table(index=["model", "condition", "family", "row"], columns="threshold", values="pct", aggfunc="first")
    cols = sorted(wide.columns, key=threshold_value)
    return wide[cols].sort_index(level=["model", "condition", "family", "row"], ascending=[True, True, True, False])


def _matched(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose threshold has both an upward and a downward concept in the same model, condition and family."""
    both = df.groupby(["model", "condition", "family", "threshold"])["monotonicity"].transform("nunique") == 2
    return df[both]


def gap_by_threshold(df: pd.DataFrame) -> pd.DataFrame:
    """Upward minus downward accuracy at each matched threshold, with Fisher's exact test."""
    rows = []
    for key, g in _matched(df).groupby(["model", "condition", "family", "threshold"], sort=False):
        up, down = g[g.monotonicity == "upward"]["correct"], g[g.monotonicity == "downward"]["correct"]
        table = [[up.sum(), len(up) - up.sum()], [down.sum(), len(down) - down.sum()]]
        rows.append(dict(zip(["model", "condition", "family", "threshold"], key), n_up=len(up), n_down=len(down),
                         acc_up=up.mean(), acc_down=down.mean(), gap=up.mean() - down.mean(),
                         p_fisher=sps.fisher_exact(table).pvalue))
    return pd.DataFrame(rows)


def _cluster_bootstrap_gap(g: pd.DataFrame, n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    """95% percentile CI of the pooled gap, resampling thresholds (and prompts within them)."""
    cells = {t: (d[d.monotonicity == "upward"]["correct"].to_numpy(), d[d.monotonicity == "downward"]["correct"].to_numpy())
             for t, d in g.groupby("threshold")}
    keys = list(cells)
    gaps = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.choice(len(keys), len(keys)) if len(keys) > 1 else [0]
        ups = [rng.choice(cells[keys[i]][0], len(cells[keys[i]][0])) for i in pick]
        downs = [rng.choice(cells[keys[i]][1], len(cells[keys[i]][1])) for i in pick]
        gaps[b] = np.concatenate(ups).mean() - np.concatenate(downs).mean()
    return float(np.quantile(gaps, 0.025)), float(np.quantile(gaps, 0.975))


def pooled_gap(df: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per model and condition: upward and downward accuracy, gap, cluster-bootstrap CI, Cochran–Mantel–Haenszel p."""
    rng = np.random.default_rng(seed)
    rows = []
    for (model, condition), g in _matched(df).groupby(["model", "condition"], sort=False):
        up, down = g[g.monotonicity == "upward"]["correct"], g[g.monotonicity == "downward"]["correct"]
        lo, hi = _cluster_bootstrap_gap(g, n_boot, rng)
        tables = []
        for _, d in g.groupby(["family", "threshold"]):
            u, w = d[d.monotonicity == "upward"]["correct"], d[d.monotonicity == "downward"]["correct"]
            tables.append(np.array([[u.sum(), len(u) - u.sum()], [w.sum(), len(w) - w.sum()]], dtype=float) + 0.5)
        p = float(StratifiedTable(tables).test_null_odds(correction=True).pvalue)
        rows.append({"model": model, "condition": condition, "n_thresholds": len(tables), "n": len(g),
                     "acc_up": up.mean(), "acc_down": down.mean(), "gap": up.mean() - down.mean(),
                     "gap_ci_low": lo, "gap_ci_high": hi, "p_cmh": p})
    out = pd.DataFrame(rows)
    if len(out):
        out["p_holm_models"] = out.groupby("condition")["p_cmh"].transform(lambda s: holm(s.to_numpy()))
    return out


def _design(g: pd.DataFrame) -> tuple[pd.DataFrame, str, list[str]]:
    d = g.assign(correct=g["correct"].astype(float), upward=(g["monotonicity"] == "upward").astype(float),
                 explicit=(g["condition"] == "explicit").astype(float))
    notes = []
    terms = ["upward"] if d["upward"].nunique() > 1 else []
    if d["explicit"].nunique() > 1:
        terms += ["explicit"] + (["upward:explicit"] if terms else [])
    else:
        notes.append(f"only one condition ({g['condition'].iloc[0]}): no condition term")
    if not terms:
        notes.append("only one monotonicity: nothing to compare")
    return d, "correct ~ " + (" + ".join(terms) if terms else "1"), notes


def mixed_model(df: pd.DataFrame) -> pd.DataFrame:
    """Per model: Bayesian mixed logistic regression ``correct ~ upward * explicit`` + random intercepts for threshold.

    Random intercepts for threshold and, where it varies, the query's noun. Fitted with statsmodels'
    BinomialBayesMixedGLM (variational Bayes); a GEE logit clustered by threshold gives
    frequentist p-values. Coefficients are log-odds; ``upward:explicit`` < 0 means the gap shrinks when explicit.
    """
    import statsmodels.api as sm
    import statsmodels.formula.api as smf
    from statsmodels.genmod.bayes_mixed_glm import BinomialBayesMixedGLM

    rows = []
    for model, g in df.groupby("model", sort=False):
        d, formula, notes = _design(g)
        d = d.assign(cluster=d["family"] + ":" + d["threshold"])
        n_clusters = d["cluster"].nunique()
        base = {"model": model, "formula": formula, "n": len(d), "n_thresholds": n_clusters}
        if d["correct"].nunique() < 2:
            rows.append({**base, "term": None, "note": "; ".join(notes + ["every answer equally correct: no model fitted"])})
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bayes, gee = None, None
            try:
                vc = {"threshold": "0 + C(cluster)"} if n_clusters > 1 else {}
                if "query_noun" in d and d["query_noun"].nunique() > 1:
                    vc["noun"] = "0 + C(query_noun)"  # the query's noun, crossed with threshold
                if n_clusters == 1:
                    notes.append("one threshold: no random intercept for threshold")
                if vc:
                    fit = BinomialBayesMixedGLM.from_formula(formula, vc, d).fit_vb()
                    bayes = pd.DataFrame({"mean": fit.fe_mean, "sd": fit.fe_sd}, index=fit.model.exog_names)
                    base["random_effects"] = ", ".join(f"{k} (sd {np.exp(m):.3f})" for k, m in zip(vc, fit.vcp_mean))
                else:
                    notes.append("no grouping identifiable: plain logistic GLM instead of a mixed model")
                    fit = smf.glm(formula, d, family=sm.families.Binomial()).fit()
                    bayes = pd.DataFrame({"mean": fit.params, "sd": fit.bse})
            except Exception as err:  # noqa: BLE001 - reported in the table, never a crash
                notes.append(f"mixed model failed: {type(err).__name__}: {err}")
            try:
                if n_clusters > 1:
                    gfit = smf.gee(formula, "cluster", d, family=sm.families.Binomial(),
                                   cov_struct=sm.cov_struct.Exchangeable()).fit()
                    if n_clusters < 10:
                        notes.append(f"GEE with {n_clusters} clusters: robust p-values are optimistic")
                else:
                    gfit = smf.glm(formula, d, family=sm.families.Binomial()).fit()
                gee = pd.DataFrame({"coef": gfit.params, "se": gfit.bse, "p": gfit.pvalues})
            except Exception as err:  # noqa: BLE001
                notes.append(f"GEE failed: {type(err).__name__}: {err}")
        terms = bayes.index if bayes is not None else (gee.index if gee is not None else [])
        for term in terms:
            row = {**base, "term": term, "note": "; ".join(notes)}
            if bayes is not None and term in bayes.index:
                m, s = bayes.loc[term, "mean"], bayes.loc[term, "sd"]
                row.update(post_mean=m, post_sd=s, ci_low=m - 1.96 * s, ci_high=m + 1.96 * s)
            if gee is not None and term in gee.index:
                row.update(gee_coef=gee.loc[term, "coef"], gee_se=gee.loc[term, "se"], gee_p=gee.loc[term, "p"])
            rows.append(row)
    return pd.DataFrame(rows)


def mcnemar_conditions(df: pd.DataFrame) -> pd.DataFrame:
    """Concept learning vs explicit on the same items (matched by pair_id): exact McNemar test per concept."""
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
    return pd.DataFrame(rows)


def signal_detection(df: pd.DataFrame) -> pd.DataFrame:
    """Yes-rate, hit rate (TPR), correct-rejection rate (TNR), d′ and criterion c per model × condition × concept.

    Rates use the log-linear correction ((k + 0.5) / (n + 1)) so d′ stays finite at 0% or 100%.
    """
    rows = []
    for (model, condition, concept), g in df.groupby(["model", "condition", "concept"], sort=False):
        pos, neg = g[g["label"]], g[~g["label"]]
        h = (pos["pred_yes"].sum() + 0.5) / (len(pos) + 1)
        f = (neg["pred_yes"].sum() + 0.5) / (len(neg) + 1)
        zh, zf = sps.norm.ppf(h), sps.norm.ppf(f)
        rows.append({"model": model, "condition": condition, "concept": concept,
                     **{c: g[c].iloc[0] for c in CONCEPT_KEYS}, "yes_rate": g["pred_yes"].mean(),
                     "tpr": pos["pred_yes"].mean() if len(pos) else np.nan,
                     "tnr": 1 - neg["pred_yes"].mean() if len(neg) else np.nan,
                     "d_prime": zh - zf, "criterion": -(zh + zf) / 2})
    return pd.DataFrame(rows)


def dprime_gap(sdt: pd.DataFrame) -> pd.DataFrame:
    """Upward minus downward d′ per model and condition: the gap with response bias factored out."""
    rows = []
    for (model, condition), g in sdt.groupby(["model", "condition"], sort=False):
        up, down = g[g.monotonicity == "upward"], g[g.monotonicity == "downward"]
        if len(up) and len(down):
            rows.append({"model": model, "condition": condition, "dprime_up": up["d_prime"].mean(),
                         "dprime_down": down["d_prime"].mean(), "dprime_gap": up["d_prime"].mean() - down["d_prime"].mean(),
                         "criterion_up": up["criterion"].mean(), "criterion_down": down["criterion"].mean()})
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


def summary(gaps: pd.DataFrame, mixed: pd.DataFrame, dgap: pd.DataFrame) -> dict:
    """The headline numbers per model and condition, for summary.json."""
    out: dict = {}
    for r in gaps.itertuples(index=False):
        entry = out.setdefault(r.model, {"conditions": {}})
        entry["conditions"][r.condition] = {
            "acc_up": r.acc_up, "acc_down": r.acc_down, "gap": r.gap, "gap_ci95": [r.gap_ci_low, r.gap_ci_high],
            "p_cmh": r.p_cmh, "p_holm_models": r.p_holm_models, "n_thresholds": r.n_thresholds}
    for r in dgap.itertuples(index=False):
        out.setdefault(r.model, {"conditions": {}})["conditions"].setdefault(r.condition, {})["dprime_gap"] = r.dprime_gap
    for model, g in mixed.groupby("model"):
        entry = out.setdefault(model, {"conditions": {}})
        entry["mixed_model"] = {
            str(t.term): {k: getattr(t, k, None) for k in ("post_mean", "post_sd", "ci_low", "ci_high", "gee_coef", "gee_p")}
            for t in g.itertuples(index=False) if isinstance(t.term, str)}
        entry["notes"] = sorted({n for n in g["note"].dropna() if n})
    return json_clean(out)
