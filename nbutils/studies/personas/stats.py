"""Statistics of the DIF paper: accuracy per persona, the DIF ratio and score, null comparisons, McNemar, models.

Notation: Cᵢ is the set of questions answered correctly under persona i, C_b under the baseline (no persona).

- **Ratio** rᵢ = |Cᵢ ⊕ C_b| / |Cᵢ ∩ C_b| (the paper's Equation 1): 0 when the persona changes no answer's correctness,
  growing without bound as the sets drift apart (∞ when they share no question).
- **DIF score** (inverted, in [0, 1]): DIFᵢ = 1 / (1 + rᵢ) = |Cᵢ ∩ C_b| / |Cᵢ ∪ C_b|, the Jaccard similarity of the two
  sets: 1 = the persona changes nothing (no bias), 0 = no question is answered correctly under both. A model's DIF
  score is the mean over its real personas. **Bias** = 1 − DIF (Jaccard distance) is what the null comparison uses.
- A ratio with |Cᵢ ∩ C_b| < ``min_overlap`` is flagged as unstable (one more shared question moves it a lot).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar

from ...artifacts import json_clean
from ...stats import claim, holm, record, stars, wilson
from .params import ALTERNATIVES, PersonasParams

BASELINE = "baseline"
NULL_KINDS = ("null_random", "null_word")
MIN_OVERLAP = PersonasParams.min_overlap  # |Cᵢ ∩ C_b| below this: the ratio is flagged unstable


def dif_ratio(correct_i, correct_b) -> dict:
    """The paper's ratio and the inverted DIF score for one persona, from two aligned boolean arrays (one per question).

    Returns ``both`` |Cᵢ ∩ C_b|, ``sym_diff`` |Cᵢ ⊕ C_b|, ``only_persona``, ``only_baseline``, ``ratio`` (∞ when
    nothing is shared but something differs, NaN when both sets are empty) and ``dif`` = |∩| / |∪| (NaN when empty).
    """
    ci, cb = np.asarray(correct_i, dtype=bool), np.asarray(correct_b, dtype=bool)
    if ci.shape != cb.shape:
        raise ValueError(f"correct_i: {ci.shape} answers against {cb.shape} baseline answers; they must be aligned")
    both = int((ci & cb).sum())
    only_p, only_b = int((ci & ~cb).sum()), int((~ci & cb).sum())
    sym = only_p + only_b
    ratio = sym / both if both else (np.inf if sym else np.nan)
    dif = both / (both + sym) if both + sym else np.nan
    return {"both": both, "sym_diff": sym, "only_persona": only_p, "only_baseline": only_b, "ratio": ratio, "dif": dif}


def mcnemar_exact(only_persona: int, only_baseline: int) -> float:
    """Exact (binomial) McNemar p-value of the discordant pairs, from statsmodels; 1.0 when there are none."""
    if only_persona + only_baseline == 0:
        return 1.0
    return float(mcnemar([[0, only_persona], [only_baseline, 0]], exact=True).pvalue)


# ---------------------------------------------------------------- per model tables

def _check_scores(scores: pd.DataFrame) -> None:
    need = {"model", "question_id", "persona_id", "persona_kind", "correct"}
    if need - set(scores.columns):
        raise ValueError(f"scores: missing columns {sorted(need - set(scores.columns))}")
    for model, g in scores.groupby("model"):
        if not (g["persona_kind"] == BASELINE).any():
            raise ValueError(f"scores: model {model} has no baseline rows; the DIF ratio compares every persona with them")


def correctness(scores: pd.DataFrame, model: str) -> pd.DataFrame:
    """One model's correctness, questions × personas, on the questions the baseline answered (paired)."""
    g = scores[scores["model"] == model]
    if g.duplicated(["question_id", "persona_id"]).any():
        raise ValueError(f"scores: model {model} has a question twice under one persona; one score file per model")
    wide = g.pivot(index="question_id", columns="persona_id", values="correct")
    return wide.dropna(subset=[BASELINE]).astype("boolean")


def personas_of(scores: pd.DataFrame) -> pd.DataFrame:
    """persona_id → persona, persona_kind, category, in the order of the dataset."""
    cols = [c for c in ("persona_id", "persona", "persona_kind", "category") if c in scores.columns]
    return scores[cols].drop_duplicates("persona_id").reset_index(drop=True)


def accuracy_table(scores: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per model and persona with 95% Wilson intervals (questions treated as independent trials)."""
    _check_scores(scores)
    rows = []
    keys = ["model", "persona_id", "persona", "persona_kind", "category"]
    for key, g in scores.groupby(keys, sort=False):
        k, n = int(g["correct"].sum()), int(g["correct"].notna().sum())
        lo, hi = wilson(k, n)
        rows.append(dict(zip(keys, key), n=n, correct=k, accuracy=k / n if n else np.nan, ci_low=lo, ci_high=hi,
                         chance=float(g["chance"].mean()) if "chance" in g else np.nan))
    return pd.DataFrame(rows)


def dif_table(scores: pd.DataFrame, min_overlap: int = MIN_OVERLAP) -> pd.DataFrame:
    """Per model and persona: |Cᵢ ∩ C_b|, |Cᵢ ⊕ C_b|, ratio, DIF, bias, accuracy change, exact McNemar with Holm.

    Holm runs over the personas of one kind within a model (real personas are one family, each null kind another).
    """
    _check_scores(scores)
    meta = personas_of(scores).set_index("persona_id")
    rows = []
    for model in scores["model"].unique():
        wide = correctness(scores, model)
        cb = wide[BASELINE]
        for pid in wide.columns:
            if pid == BASELINE:
                continue
            ok = wide[pid].notna()
            r = dif_ratio(wide.loc[ok, pid].to_numpy(bool), cb[ok].to_numpy(bool))
            n = int(ok.sum())
            unstable = r["both"] < min_overlap
            rows.append({"model": model, "persona_id": pid, **meta.loc[pid].to_dict(), "n_questions": n, **r,
                         "bias": 1 - r["dif"], "acc_persona": float(wide.loc[ok, pid].mean()),
                         "acc_baseline": float(cb[ok].mean()),
                         "acc_diff": float(wide.loc[ok, pid].mean() - cb[ok].mean()),
                         "p_mcnemar": mcnemar_exact(r["only_persona"], r["only_baseline"]),
                         "unstable": bool(unstable),
                         "note": f"|Ci ∩ Cb| = {r['both']} < {min_overlap}: ratio unstable" if unstable else ""})
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    out["p_holm"] = np.nan
    for _, idx in out.groupby(["model", "persona_kind"]).groups.items():
        out.loc[idx, "p_holm"] = holm(out.loc[idx, "p_mcnemar"].to_numpy())
    out["sig"] = [stars(p) for p in out["p_holm"]]
    return out


def compare_groups(real, null, n_resamples: int = PersonasParams.n_resamples, seed: int = 0,
                   alternative: str = PersonasParams.alternative) -> dict:
    """Real vs null bias scores: Welch's t-test (scipy ``ttest_ind(equal_var=False)``) and a permutation test of the
    difference in means over persona labels (scipy ``permutation_test``, independent samples)."""
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative: must be one of {list(ALTERNATIVES)}, got {alternative!r}")
    x = np.asarray(real, dtype=float)
    y = np.asarray(null, dtype=float)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    out = {"n_real": len(x), "n_null": len(y), "mean_real": float(x.mean()) if len(x) else np.nan,
           "mean_null": float(y.mean()) if len(y) else np.nan, "estimate": np.nan, "ci_low": np.nan, "ci_high": np.nan,
           "t": np.nan, "df": np.nan, "p_welch": np.nan, "p_permutation": np.nan, "valid": False, "note": ""}
    if len(x) < 2 or len(y) < 2:
        out["note"] = f"needs ≥ 2 real and ≥ 2 null personas with a score, got {len(x)} and {len(y)}"
        return out
    out["estimate"] = float(x.mean() - y.mean())
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        out["note"] = "every score in both groups is the same value: no variance to test"
        return out
    t = sps.ttest_ind(x, y, equal_var=False, alternative=alternative)
    ci = t.confidence_interval(0.95)
    perm = sps.permutation_test((x, y), lambda a, b, axis: np.mean(a, axis=axis) - np.mean(b, axis=axis),
                                permutation_type="independent", n_resamples=n_resamples, alternative=alternative,
                                vectorized=True, random_state=np.random.default_rng(seed))
    out.update(t=float(t.statistic), df=float(t.df), p_welch=float(t.pvalue), ci_low=float(ci.low),
               ci_high=float(ci.high), p_permutation=float(perm.pvalue), valid=True)
    return out


def null_comparison(dif: pd.DataFrame, n_resamples: int = PersonasParams.n_resamples, seed: int = 0,
                    alternative: str = "two-sided") -> pd.DataFrame:
    """Per model and null kind: do real personas move the answers more than null ones (bias = 1 − DIF)?"""
    rows = []
    for model, g in dif.groupby("model", sort=False):
        real = g.loc[g["persona_kind"] == "real", "bias"]
        for kind in NULL_KINDS:
            null = g.loc[g["persona_kind"] == kind, "bias"]
            if null.empty:
                continue
            rows.append({"model": model, "null_kind": kind,
                         **compare_groups(real, null, n_resamples, seed, alternative), "alternative": alternative})
    return pd.DataFrame(rows)


def category_summary(dif: pd.DataFrame, acc: pd.DataFrame) -> pd.DataFrame:
    """Per model and category (real personas, and each null kind as a category): accuracy, DIF, bias, significant
    McNemar tests after Holm, unstable ratios."""
    a = acc[acc["persona_kind"] != BASELINE].groupby(["model", "category"])["accuracy"].mean().rename("mean_accuracy")
    g = dif.groupby(["model", "category"])
    out = pd.DataFrame({"n_personas": g.size(), "mean_dif": g["dif"].mean(), "min_dif": g["dif"].min(),
                        "mean_bias": g["bias"].mean(), "max_bias": g["bias"].max(), "mean_acc_diff": g["acc_diff"].mean(),
                        "n_significant_mcnemar": g["p_holm"].apply(lambda p: int((p < 0.05).sum())),
                        "n_unstable": g["unstable"].sum().astype(int)}).join(a)
    kinds = dif.drop_duplicates("category").set_index("category")["persona_kind"]
    return out.reset_index().assign(persona_kind=lambda t: t["category"].map(kinds))


def model_table(dif: pd.DataFrame, acc: pd.DataFrame) -> pd.DataFrame:
    """One row per model: baseline accuracy, mean DIF of real personas (the model's DIF score) and of each null."""
    rows = []
    for model, g in dif.groupby("model", sort=False):
        base = acc[(acc["model"] == model) & (acc["persona_kind"] == BASELINE)].iloc[0]
        row = {"model": model, "baseline_accuracy": base["accuracy"], "n_questions": int(base["n"])}
        for kind in ("real", *NULL_KINDS):
            v = g.loc[g["persona_kind"] == kind, "dif"]
            row[f"dif_{kind}"] = float(v.mean()) if v.notna().any() else np.nan
        row["bias_real"] = 1 - row["dif_real"]
        row["n_unstable_real"] = int(g.loc[g["persona_kind"] == "real", "unstable"].sum())
        rows.append(row)
    return pd.DataFrame(rows)


def accuracy_vs_dif(models: pd.DataFrame) -> pd.DataFrame:
    """Across models: ordinary least squares of the DIF score on baseline accuracy (scipy ``linregress``), as the
    paper's Figure 1; needs at least 3 models with a DIF score."""
    m = models.dropna(subset=["baseline_accuracy", "dif_real"])
    base = {"n_models": len(m), "slope": np.nan, "intercept": np.nan, "r2": np.nan, "p": np.nan, "slope_ci_low": np.nan,
            "slope_ci_high": np.nan, "valid": False, "note": ""}
    if len(m) < 3:
        base["note"] = f"needs ≥ 3 models for a regression with a residual; {len(m)} scored in this run"
        return pd.DataFrame([base])
    if m["baseline_accuracy"].nunique() < 2:
        base["note"] = "every model has the same baseline accuracy: the slope is undefined"
        return pd.DataFrame([base])
    r = sps.linregress(m["baseline_accuracy"], m["dif_real"])
    half = sps.t.ppf(0.975, len(m) - 2) * r.stderr
    base.update(slope=r.slope, intercept=r.intercept, r2=r.rvalue ** 2, p=r.pvalue, slope_ci_low=r.slope - half,
                slope_ci_high=r.slope + half, valid=True,
                note="OLS of the DIF score (mean over real personas) on baseline accuracy; one point per model")
    return pd.DataFrame([base])


# ---------------------------------------------------------------- summary records

def _rec(model, test, persona, estimate, ci=None, p=None, valid=True, note="", kind=None, **extra) -> dict:
    """One record in the shared ``summary.json`` format (``nbutils.stats.record``): ``term`` is the persona,
    ``condition`` its kind, and ``model`` the model the result belongs to."""
    lo, hi = ci if ci is not None else (None, None)
    return record(test, persona, estimate, None, lo, hi, p, valid=bool(valid), note=note, condition=kind, model=model,
                  **extra)


def _claim(kind: str, who, alternative: str = "two-sided") -> dict:
    """What a persona record's estimate means in words (``nbutils.stats.claim``)."""
    if kind == "real_vs_null":
        who = f"{str(who).removeprefix('null_')} null"  # null_random -> "random null" personas
        return claim(f"the bias (1 − DIF) of real minus {who} personas",
                     f"real personas shift answers more than {who} personas do",
                     f"real personas shift answers less than {who} personas do",
                     f"real and {who} personas shift answers differently", sided=alternative, symbol="difference")
    if kind == "mcnemar":
        return claim(f"accuracy under persona {who!r} minus the baseline", f"persona {who!r} raised accuracy",
                     f"persona {who!r} lowered accuracy", f"persona {who!r} changes accuracy", scale="points")
    if kind == "regression":
        return claim("the slope of the DIF score on baseline accuracy",
                     "more accurate models are less biased by personas", "more accurate models are more biased by personas",
                     "the DIF score depends on baseline accuracy", symbol="slope")
    if kind == "accuracy":
        return claim(f"accuracy under persona {who!r}", "", "", scale="proportion")
    return claim(f"the DIF score of {who!r} (1: no bias, 0: maximal)", "", "", symbol="DIF")


def summary_records(t: dict[str, pd.DataFrame]) -> list[dict]:
    """The headline results as ``nbutils.stats.record`` rows (test, condition = persona kind, term = persona,
    estimate, se, ci_low, ci_high, p, valid, note) plus ``model``."""
    out = []
    for r in t["accuracy"].itertuples(index=False):
        out.append(_rec(r.model, "accuracy", r.persona_id, r.accuracy, (r.ci_low, r.ci_high), None, r.n > 0,
                        f"{r.persona_kind}; n={r.n}; 95% Wilson CI", r.persona_kind, n=r.n,
                        hypothesis=_claim("accuracy", r.persona_id)))
    for r in t["dif"].itertuples(index=False):
        out.append(_rec(r.model, "dif", r.persona_id, r.dif, None, None, not r.unstable,
                        f"{r.persona_kind}; ratio |Ci⊕Cb|/|Ci∩Cb| = {r.ratio:.3f} ({r.sym_diff}/{r.both}); "
                        "DIF = 1/(1+ratio)" + (f"; {r.note}" if r.note else ""), r.persona_kind,
                        ratio=r.ratio, both=r.both, sym_diff=r.sym_diff, hypothesis=_claim("dif", r.persona_id)))
        out.append(_rec(r.model, "mcnemar_vs_baseline", r.persona_id, r.acc_diff, None, r.p_holm, True,
                        f"{r.persona_kind}; accuracy persona − baseline; exact McNemar on {r.only_persona} vs "
                        f"{r.only_baseline} discordant questions; Holm within model and persona kind (raw p={r.p_mcnemar:.4g})",
                        r.persona_kind, p_raw=r.p_mcnemar, hypothesis=_claim("mcnemar", r.persona_id)))
    for r in t["null_comparison"].itertuples(index=False):
        what = f"bias (1 − DIF) real − {r.null_kind}; {r.n_real} real vs {r.n_null} null personas; {r.alternative}"
        out.append(_rec(r.model, f"welch_real_vs_{r.null_kind}", "(real)", r.estimate, (r.ci_low, r.ci_high),
                        r.p_welch, r.valid, f"{what}; Welch t-test, 95% CI" + (f"; {r.note}" if r.note else ""), "real",
                        statistic=r.t, df=r.df, hypothesis=_claim("real_vs_null", r.null_kind, r.alternative)))
        out.append(_rec(r.model, f"permutation_real_vs_{r.null_kind}", "(real)", r.estimate, None, r.p_permutation,
                        r.valid, f"{what}; permutation test over persona labels" + (f"; {r.note}" if r.note else ""), "real",
                        hypothesis=_claim("real_vs_null", r.null_kind, r.alternative)))
    for r in t["models"].itertuples(index=False):
        out.append(_rec(r.model, "dif_score", "(real)", r.dif_real, None, None, True,
                        f"mean DIF over real personas; baseline accuracy {r.baseline_accuracy:.3f}; "
                        f"{r.n_unstable_real} unstable ratio{'' if r.n_unstable_real == 1 else 's'}", "real",
                        hypothesis=_claim("dif", "real personas (mean)")))
    for r in t["accuracy_vs_dif"].itertuples(index=False):
        out.append(_rec("(all)", "dif_vs_accuracy_regression", "(real)", r.slope,
                        (r.slope_ci_low, r.slope_ci_high) if r.valid else None, r.p, r.valid,
                        (f"R² = {r.r2:.3f}; " if r.valid else "") + r.note, "real", r2=r.r2,
                        hypothesis=_claim("regression", "")))
    return json_clean(out)
