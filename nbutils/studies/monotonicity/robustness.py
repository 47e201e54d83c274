"""The robustness multiverse: does the upward − downward gap survive how the question is asked?

A dataset made with several templates, phrases or answer words (``variants.py``) holds one variant per axis in each
prompt. Per model × condition × axis this module gives the gap under every variant (``tables/robustness.csv``) and
a test that the gap is the same under all of them (``test: heterogeneity`` records). Both tests hold each
threshold's intercept and gap as fixed effects (the thresholds are a nuisance here: the variants are dealt within
every concept) beside a variant intercept, and test the V−1 upward × variant terms. The reported one is a Wald test
from a logistic GEE clustered by the query's noun, with the bias-reduced (Mancl–DeRouen) covariance and an
F(V−1, G−1) reference for G nouns; where R is installed the likelihood-ratio test (χ², V−1 df) in a binomial GLMM
with a random intercept for the noun (lme4) is computed beside it as a cross-check. Both are calibrated in ``benchmarks/results/calibration_robustness.json``.
"""
from __future__ import annotations

import warnings
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd
from scipy import stats as sps

from ...results import fmt_alpha, fmt_num, fmt_p, reason, verdict

from ...stats import ALPHA, claim, record
from ..common.quantifier_stats import _mantel_haenszel, threshold_cells, threshold_units
from ..common.variants import AXES, wording

AXIS_NAMES = {"template": ("template", "templates"), "phrase": ("phrase", "phrases"),
              "answer_words": ("answer-word pair", "answer-word pairs")}
COLUMNS = ["model", "condition", "axis", "variant", "n", "n_up", "n_down", "acc_up", "acc_down", "gap", "gap_ci_low",
           "gap_ci_high", "log_or", "log_or_ci_low", "log_or_ci_high", "p"]
TEST_COLUMNS = ["model", "condition", "axis", "n_variants", "n", "method", "statistic", "df", "df_denom", "p", "valid",
                "p_gee_wald", "p_glmm_lrt", "glmm_lrt_valid", "random_effects", "note"]
CONDITION_NAMES = {"concept_learning": "concept learning", "explicit": "the concept stated"}
PLACEBO = "the phrase does not appear in explicit prompts (the concept is stated): a check that should find nothing"


def varied_axes(df: pd.DataFrame) -> list[str]:
    """The variant axes the data hold more than one variant of (a dataset without the columns has none)."""
    return [a for a in AXES if a in df and df[a].nunique() > 1]


def variant_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per model × condition × varied axis × variant: prompts, upward and downward accuracy, the gap with
    its Newcombe 95% CI, and the Mantel–Haenszel log odds ratio over the variant's thresholds with its CI and the
    CMH p (about these thresholds)."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    rows = []
    for axis in varied_axes(df):
        for (model, condition, variant), g in df.groupby(["model", "condition", axis], sort=False):
            up, down = g.loc[g["monotonicity"] == "upward", "correct"], g.loc[g["monotonicity"] == "downward", "correct"]
            row = {"model": model, "condition": condition, "axis": axis, "variant": variant, "n": len(g),
                   "n_up": len(up), "n_down": len(down), "acc_up": up.mean() if len(up) else np.nan,
                   "acc_down": down.mean() if len(down) else np.nan}
            row["gap"] = row["acc_up"] - row["acc_down"]
            row["gap_ci_low"] = row["gap_ci_high"] = np.nan
            if len(up) and len(down):
                lo, hi = confint_proportions_2indep(int(up.sum()), len(up), int(down.sum()), len(down),
                                                    method="newcomb", compare="diff")
                row["gap_ci_low"], row["gap_ci_high"] = float(lo), float(hi)
            cells = threshold_cells(g)
            mh = _mantel_haenszel(cells) if len(cells) else {}
            or_, lo, hi = (mh.get(k, np.nan) for k in ("or_mh", "or_mh_ci_low", "or_mh_ci_high"))
            row.update(log_or=_log(or_), log_or_ci_low=_log(lo), log_or_ci_high=_log(hi), p=mh.get("p_cmh", np.nan))
            rows.append(row)
    out = pd.DataFrame(rows, columns=COLUMNS)
    out.insert(out.columns.get_loc("variant") + 1, "wording", [wording(a, v) for a, v in zip(out["axis"], out["variant"])])
    order = {a: i for i, a in enumerate(AXES)}
    return out.sort_values(["model", "condition", "axis"], key=lambda s: s.map(order) if s.name == "axis" else s,
                           kind="stable").reset_index(drop=True)


def _log(x) -> float:
    return float(np.log(x)) if isinstance(x, (int, float)) and np.isfinite(x) and x > 0 else np.nan


def _design(g: pd.DataFrame, axis: str) -> tuple[np.ndarray, np.ndarray, list[str], int]:
    """Logistic design: threshold intercepts and threshold-specific gaps (fixed), variant intercepts, and the V−1
    upward × variant terms last; returns (X, y, column names, number of tested columns)."""
    cl = threshold_units(g).to_numpy()
    u = (g["monotonicity"] == "upward").to_numpy(float)
    var = g[axis].astype(str).to_numpy()
    levels_c, levels_v = sorted(set(cl)), sorted(set(var))
    cols, names = [], []
    for c in levels_c:
        ind = (cl == c).astype(float)
        cols += [ind, ind * u]
        names += [f"threshold[{c}]", f"upward@{c}"]
    for v in levels_v[1:]:
        cols.append((var == v).astype(float))
        names.append(f"{axis}[{v}]")
    for v in levels_v[1:]:
        cols.append((var == v).astype(float) * u)
        names.append(f"upward:{axis}[{v}]")
    return np.column_stack(cols), g["correct"].to_numpy(float), names, len(levels_v) - 1


def gee_wald(g: pd.DataFrame, axis: str) -> dict:
    """Wald test that upward × variant is zero: logistic GEE, threshold-specific gaps fixed, clustered by the query's
    noun, bias-reduced covariance, F(V−1, G−1) reference. Returns statistic (F), df, df_denom, p, valid, note."""
    import statsmodels.api as sm

    X, y, names, q = _design(g, axis)
    groups = g["query_noun"].astype(str).to_numpy() if "query_noun" in g else np.arange(len(g))
    n_groups = len(set(groups))
    out = {"method": "gee_wald", "statistic": np.nan, "df": q, "df_denom": n_groups - 1, "p": np.nan, "valid": False,
           "note": ""}
    if q < 1 or np.unique(y).size < 2:
        out["note"] = "every answer equally correct: no model fitted" if q >= 1 else "one variant: nothing to compare"
        return out
    if np.linalg.matrix_rank(X) < X.shape[1]:
        out["note"] = "a variant lacks upward or downward prompts at every threshold: the interaction is not estimable"
        return out
    if n_groups <= X.shape[1]:
        out["note"] = f"not estimable: {n_groups} nouns for {X.shape[1]} coefficients; the clustered test needs more"
        return out
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = sm.GEE(y, X, groups=groups, family=sm.families.Binomial(),
                         cov_struct=sm.cov_struct.Independence()).fit(cov_type="bias_reduced", maxiter=100)
        beta, cov = np.asarray(fit.params)[-q:], np.asarray(fit.cov_params())[-q:, -q:]
        wald = float(beta @ np.linalg.solve(cov, beta))
    except Exception as err:  # noqa: BLE001 - reported in the table, never a crash
        out["note"] = f"GEE failed: {type(err).__name__}: {err}"
        return out
    if not np.isfinite(wald) or np.abs(np.asarray(fit.params)).max() > 8:
        out["note"] = "an estimate beyond ±8 log-odds: (quasi-)complete separation, the test is not reliable"
        return out
    f = wald / q
    out.update(statistic=f, p=float(sps.f.sf(f, q, n_groups - 1)), valid=True)
    return out


@lru_cache(maxsize=1)
def _r_script() -> str:
    return resources.files(__package__).joinpath("robustness.R").read_text()


def glmm_lrt(units: dict[str, tuple[pd.DataFrame, str]], seed: int = 0) -> dict[str, dict]:
    """Likelihood-ratio tests of upward × variant (χ², V−1 df) in a binomial GLMM (threshold intercepts and gaps
    fixed, noun random; a plain logistic model when the noun's variance is estimated at 0), one ``Rscript`` for every unit
    (``{unit: (frame, axis)}``). Empty when R with lme4 is not installed; a failed R run is reported per unit."""
    from ...stats import RError, r_available, run_r

    if not units or not r_available("lme4"):
        return {}
    data = pd.concat([pd.DataFrame({
        "unit": key, "correct": g["correct"].astype(int).to_numpy(), "u": (g["monotonicity"] == "upward").astype(int).to_numpy(),
        "cluster": threshold_units(g).to_numpy(), "noun": g["query_noun"].astype(str).to_numpy() if "query_noun" in g else "none",
        "variant": g[axis].astype(str).to_numpy()}) for key, (g, axis) in units.items()], ignore_index=True)
    try:
        info = run_r(_r_script(), {"het": data}, seed=seed)["info"]
    except RError as err:
        return {key: {"method": "glmm_lrt", "valid": False, "note": f"lme4 failed: {err}"} for key in units}
    out = {}
    for r in info.itertuples(index=False):
        out[str(r.unit)] = {"method": "glmm_lrt", "statistic": r.chisq, "df": int(r.df), "p": r.p, "valid": bool(r.valid),
                            "note": "" if pd.isna(r.note) else str(r.note), "random_effects": r.random}
    return out


def heterogeneity(df: pd.DataFrame, use_r: bool = True, seed: int = 0) -> pd.DataFrame:
    """Per model × condition × varied axis: does the gap differ across the variants? The reported test is the GEE
    Wald test, whose level was shown on 200 simulations per cell; with R the GLMM likelihood-ratio test is computed
    beside it (``p_glmm_lrt``), a cross-check that rejected a true null 6–10% of the time in fewer simulations."""
    units = {}
    for axis in varied_axes(df):
        for (model, condition), g in df.groupby(["model", "condition"], sort=False):
            units[f"{model}|{condition}|{axis}"] = (g, axis)
    glmm = glmm_lrt(units, seed=seed) if use_r else {}
    rows = []
    for key, (g, axis) in units.items():
        model, condition, _ = key.rsplit("|", 2)
        gee = gee_wald(g, axis)
        lrt = glmm.get(key)
        use = gee  # the calibrated test (benchmarks/results/calibration_robustness.json); the LRT is a cross-check
        notes = [PLACEBO] if axis == "phrase" and condition == "explicit" else []
        if lrt is not None:
            notes.append(f"GLMM likelihood-ratio test beside it: p = {lrt['p']:.3g}" if lrt.get("valid") and
                         pd.notna(lrt.get("p")) else f"GLMM likelihood-ratio test not valid ({lrt.get('note') or 'no fit'})")
        notes.append(use.get("note", ""))
        rows.append({"model": model, "condition": condition, "axis": axis, "n_variants": g[axis].nunique(),
                     "n": len(g), "method": use["method"], "statistic": use.get("statistic"), "df": use.get("df"),
                     "df_denom": use.get("df_denom"), "p": use.get("p"), "valid": bool(use.get("valid")),
                     "p_gee_wald": gee["p"], "p_glmm_lrt": lrt.get("p") if lrt and lrt.get("valid") else np.nan,
                     "glmm_lrt_valid": bool(lrt.get("valid")) if lrt else None,  # None: not computed (no R)
                     "random_effects": (lrt or {}).get("random_effects", ""), "note": "; ".join(n for n in notes if n)})
    return pd.DataFrame(rows, columns=TEST_COLUMNS)


def heterogeneity_claim(axis: str) -> dict:
    """What a heterogeneity record says (``nbutils.stats.claim``): a test without a direction; its estimate is the
    spread of the gap over the axis's variants, in percentage points."""
    many = AXIS_NAMES.get(axis, (axis, axis))[1]
    return claim(f"whether the upward vs downward gap is the same across the {many}", "", "",
                 f"the gap differs across the {many}", scale="points", sided="none", symbol="spread of the gap")


def records(table: pd.DataFrame, het: pd.DataFrame) -> list[dict]:
    """``test: heterogeneity`` records (``term`` the axis) for summary.json: the estimate is the spread of the gap
    (largest minus smallest variant gap, accuracy as a proportion), the p the heterogeneity test's."""
    out = []
    for r in het.itertuples(index=False):
        t = table[(table["model"] == r.model) & (table["condition"] == r.condition) & (table["axis"] == r.axis)]
        gaps = t["gap"].dropna()
        test = ("binomial GLMM likelihood-ratio test of upward × variant (χ²)" if r.method == "glmm_lrt" else
                "logistic GEE Wald test of upward × variant, clustered by noun, bias-reduced, F reference")
        out.append(record("heterogeneity", r.axis, float(gaps.max() - gaps.min()) if len(gaps) else None, p=r.p,
                          valid=r.valid, condition=r.condition, model=r.model, method=r.method, statistic=r.statistic,
                          df=r.df, df_denom=None if pd.isna(r.df_denom) or r.method == "glmm_lrt" else r.df_denom,
                          n_variants=int(r.n_variants), n=int(r.n),
                          n_positive_gap=int((gaps > 0).sum()), gap_min=float(gaps.min()) if len(gaps) else None,
                          gap_max=float(gaps.max()) if len(gaps) else None,
                          p_gee_wald=r.p_gee_wald, p_glmm_lrt=r.p_glmm_lrt, glmm_lrt_valid=r.glmm_lrt_valid,
                          hypothesis=heterogeneity_claim(r.axis),
                          note="; ".join(filter(None, [f"does the gap differ across the {AXIS_NAMES[r.axis][1]}? "
                                                       f"{test}; estimate: largest minus smallest variant gap", r.note]))))
    from ...artifacts import json_clean

    return json_clean(out)


def _stat(rec: dict, alpha: float = ALPHA) -> str:
    """χ²(df) = x or F(df1, df2) = x, APA style, with its p (printed on its own side of ``alpha``)."""
    s, df = rec.get("statistic"), rec.get("df")
    if rec.get("method") == "glmm_lrt":
        return f"χ²({int(df)}) = {fmt_num(s)}, {fmt_p(rec.get('p'), alpha)}"
    return f"F({int(df)}, {int(rec.get('df_denom'))}) = {fmt_num(s)}, {fmt_p(rec.get('p'), alpha)}"


def sentences(summary: dict, alpha: float = ALPHA) -> list[str]:
    """One line per heterogeneity record for results.md: how many variants show the gap (upward better), its range,
    and the heterogeneity test in APA style with what it means."""
    lines = []
    for r in summary.get("records", []):
        if r.get("test") != "heterogeneity":
            continue
        one, many = AXIS_NAMES.get(r["term"], (r["term"], r["term"]))
        who = f"{r.get('model')}, {CONDITION_NAMES.get(r.get('condition'), r.get('condition'))}, {many}"
        spread = (f"the gap (upward minus downward accuracy) is positive under {r['n_positive_gap']} of "
                  f"{r['n_variants']} {many}, from {fmt_num(100 * r['gap_min'], 1)} to {fmt_num(100 * r['gap_max'], 1)} "
                  "points" if r.get("gap_min") is not None else f"no gap could be computed under the {many}")
        if r.get("p") is None and r.get("valid"):
            lines.append(f"{who}: {spread}; whether it differs across {many} was not tested.")
            continue
        method = "GLMM likelihood-ratio test" if r.get("method") == "glmm_lrt" else "GEE Wald test"
        v = verdict(r, alpha)  # the sentence engine's reading of the record: a test without a direction
        if v == "invalid":
            lines.append(f"{who}: {spread}; whether it differs across {many} is not estimable ({reason(r)}).")
            continue
        said = (f"the gap differs across the {many}" if v == "effect" else
                f"no evidence at α = {fmt_alpha(alpha)} that the gap differs across the {many}")
        lines.append(f"{who}: {spread}; {said}: heterogeneity ({method}), {_stat(r, alpha)}.")
    return lines


def tick(axis: str, name) -> str:
    """A variant as a figure names it: its phrase in quotes or its answer words (``wording``), a template by its name
    in words (its text is too long for a label)."""
    return wording(axis, name) if axis in ("phrase", "answer_words") else str(name).replace("_", " ")


def figure(table: pd.DataFrame, pooled: pd.DataFrame):
    """The gap per variant with its Newcombe 95% CI, one panel per axis (a row of panels per model), colour by
    condition; the pooled gap of each condition as a dashed reference line."""
    import matplotlib.pyplot as plt

    colors = {"concept_learning": "#2ca02c", "explicit": "#9467bd"}
    axes_ = [a for a in AXES if (table["axis"] == a).any()]
    models = list(table["model"].unique())
    nmax = max(table.groupby(["model", "axis"])["variant"].nunique().max(), 2)
    fig, grid = plt.subplots(len(models), len(axes_), figsize=(3.3 * len(axes_) + 0.6, (0.45 * nmax + 1.6) * len(models)),
                             squeeze=False, sharex=True)
    for i, model in enumerate(models):
        for j, axis in enumerate(axes_):
            ax = grid[i][j]
            d = table[(table["model"] == model) & (table["axis"] == axis)]
            variants = list(dict.fromkeys(d["variant"]))
            conds = list(dict.fromkeys(d["condition"]))
            for k, cond in enumerate(conds):
                c = d[d["condition"] == cond]
                y = c["variant"].map({v: n for n, v in enumerate(variants)}) + (k - (len(conds) - 1) / 2) * 0.18
                lo = (100 * (c["gap"] - c["gap_ci_low"])).clip(lower=0).fillna(0)
                hi = (100 * (c["gap_ci_high"] - c["gap"])).clip(lower=0).fillna(0)
                ax.errorbar(100 * c["gap"], y, xerr=[lo, hi], fmt="o", capsize=3, color=colors.get(cond, "black"),
                            label={"explicit": "the concept stated"}.get(cond, cond.replace("_", " ")))
                p = pooled[(pooled["model"] == model) & (pooled["condition"] == cond)]
                if len(p):
                    ax.axvline(100 * p["gap"].iloc[0], ls="--", lw=1, color=colors.get(cond, "black"))
            ax.axvline(0, color="grey", lw=0.8)
            ax.set_yticks(range(len(variants)), [tick(axis, v) for v in variants], fontsize=8)
            ax.set_ylim(-0.6, len(variants) - 0.4)
            ax.set_title(f"{model}\n{AXIS_NAMES[axis][0]}", fontsize=9)
            if i == len(models) - 1:
                ax.set_xlabel("upward − downward accuracy (pp)\nNewcombe 95% CI; dashed: pooled gap", fontsize=7)
    handles, labels = grid[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, bbox_to_anchor=(0.5, 0.0), frameon=False, fontsize=8)
    fig.tight_layout()
    return fig
