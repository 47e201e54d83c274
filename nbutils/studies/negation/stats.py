"""Linear mixed models of the negation probe (seed 003): the seed's coding, on perplexity and log-perplexity."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ...stats import stars as _stars


def fit_lmm(df: pd.DataFrame, outcome: str = "ppl", covariate: bool = False) -> tuple[pd.DataFrame, dict]:
    """``outcome ~ context * form`` (+ n_tokens), random intercepts and context slopes by root item (statsmodels MixedLM).

    Coded as the seed: stereotype-consistent context = 1, affirmative form = 1. Returns the fixed effects with p,
    95% CI and stars, and fit information; a fit that did not converge is flagged, never reported as valid.
    """
    import statsmodels.formula.api as smf
    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    d = df.assign(context=(df["context"] == "consistent").astype(float), form=(df["form"] == "affirmative").astype(float))
    formula = f"{outcome} ~ context * form" + (" + n_tokens" if covariate else "")
    info = {"formula": formula, "outcome": outcome, "n": len(d), "n_items": int(d["root_id"].nunique()), "converged": False, "note": ""}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fit = smf.mixedlm(formula, d, groups=d["root_id"], re_formula="~context").fit(reml=True)
        except Exception as err:  # noqa: BLE001 - reported, not raised
            info["note"] = f"fit failed: {type(err).__name__}: {err}"
            return pd.DataFrame(), info
    conv_warn = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    info["converged"] = bool(fit.converged) and not conv_warn
    if not info["converged"]:
        info["note"] = "did not converge" + (f": {conv_warn[0]}" if conv_warn else "")
    ci = fit.conf_int()
    names = [n for n in fit.fe_params.index]
    table = pd.DataFrame({"term": names, "coef": fit.fe_params.values, "se": fit.bse_fe.values,
                          "p": fit.pvalues[names].values, "ci_low": ci.loc[names, 0].values, "ci_high": ci.loc[names, 1].values})
    table["term"] = table["term"].replace({"context:form": "context × form"})
    table["stars"] = table["p"].map(_stars)
    return table, info


def lmm_tables(scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per model: the seed's LMM on perplexity, on log-perplexity, and on log-perplexity with token count.

    Returns the long coefficient table (non-converged fits marked ``valid=False``) and one row per model
    saying whether the interaction's sign and significance agree across the three specifications.
    """
    specs = {"ppl": ("ppl", False), "log_ppl": ("log_ppl", False), "log_ppl+tokens": ("log_ppl", True)}
    rows, agree = [], []
    for model, g in scores.groupby("model", sort=False):
        verdicts = {}
        for spec, (outcome, cov) in specs.items():
            table, info = fit_lmm(g, outcome, cov)
            if table.empty:
                rows.append({"model": model, "spec": spec, "valid": False, "note": info["note"]})
                continue
            for r in table.to_dict("records"):
                rows.append({"model": model, "spec": spec, **r, "valid": info["converged"], "note": info["note"]})
            inter = table[table.term == "context × form"].iloc[0]
            verdicts[spec] = (np.sign(inter["coef"]), inter["p"] < 0.05) if info["converged"] else None
        valid = [v for v in verdicts.values() if v is not None]
        agree.append({"model": model, "specs_converged": len(valid),
                      "interaction_conclusions_agree": bool(valid) and len(set(valid)) == 1,
                      **{f"interaction_{k}": (None if v is None else f"{'negative' if v[0] < 0 else 'positive'}"
                                                f"{', p < .05' if v[1] else ', n.s.'}") for k, v in verdicts.items()}})
    return pd.DataFrame(rows), pd.DataFrame(agree)


def seed_table(coefs: pd.DataFrame, spec: str = "ppl") -> pd.DataFrame:
    """Seed 003's Table-1 shape: per model the three effects with coefficient (stars), p and 95% CI."""
    t = coefs[(coefs["spec"] == spec) & coefs["term"].isin(["context", "form", "context × form"])].copy()
    t["cell"] = [f"{c:.3f}{s}" if v else f"({c:.3f}, not converged)" for c, s, v in zip(t["coef"], t["stars"], t["valid"])]
    t["ci"] = [f"[{lo:.3f}, {hi:.3f}]" for lo, hi in zip(t["ci_low"], t["ci_high"])]
    return t[["model", "term", "cell", "p", "ci", "valid"]].reset_index(drop=True)


def predicted_cells(coefs: pd.DataFrame, spec: str = "ppl") -> pd.DataFrame:
    """Model-predicted outcome for the four cells (fixed effects only) from ``lmm_tables``' coefficients."""
    rows = []
    for model, g in coefs[coefs["spec"] == spec].groupby("model", sort=False):
        if "term" not in g or g["term"].isna().all():
            continue
        b = dict(zip(g["term"], g["coef"]))
        for context in (0.0, 1.0):
            for form in (0.0, 1.0):
                y = b["Intercept"] + b["context"] * context + b["form"] * form + b["context × form"] * context * form
                rows.append({"model": model, "context": "consistent" if context else "inconsistent",
                             "form": "affirmative" if form else "negated", "predicted": y,
                             "converged": bool(g["valid"].all())})
    return pd.DataFrame(rows)


def cell_means(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean and median perplexity per model and cell (SA, SN, NA, NN)."""
    return (scores.groupby(["model", "condition", "context", "form"], sort=False)["ppl"]
                  .agg(mean="mean", median="median", n="size").reset_index())
