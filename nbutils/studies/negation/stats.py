"""Linear mixed models of the negation probe (Wang, Sommerauer and Bloem), fitted the way a reviewer would check them.

One model per language model and outcome: ``y ~ context * form`` with **deviation (±0.5) coding**
(stereotype-consistent = +½, affirmative = +½), so ``context`` is the consistent − inconsistent difference averaged
over both forms, ``form`` the affirmative − negated difference averaged over both contexts, ``context × form`` the
difference of differences and the intercept the grand mean of the four cells. The paper's **treatment coding**
(consistent = 1, affirmative = 1) for its Table-1 replica is the same fitted model re-expressed by linear contrasts:
its ``context`` is the context effect for *negated* sentences only and its ``form`` the form effect in
stereotype-*inconsistent* contexts; the interaction is identical in both codings.

Random effects: root-item intercepts with slopes for context, form and their interaction (correlated), plus an
intercept per item (root × variant × structure: the four sentences of an item share most of their words). A
singular or non-converged fit is simplified step by step — correlated → uncorrelated slopes → drop the component
whose SD is estimated at 0 (or the smallest) — and every step is reported with its reason.

Two paths: with R (lme4 + lmerTest) the fits are ``lmer`` by REML with Satterthwaite df and t p-values (the
headline); without R, statsmodels ``MixedLM`` (REML) fits the *uncorrelated* structures (variance components by
root; it cannot fit the correlated one here) with Wald z p-values, which are somewhat liberal with few roots.
"""
from __future__ import annotations

import warnings
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from ...stats import claim, fit_problems, record, stars as _stars

TERMS = ["Intercept", "context", "form", "context × form"]
COMPONENTS = ["root", "context", "form", "context × form", "item"]  # random-effect components
RANDOM_TERMS = {"root": "(1 | root)", "context": "(0 + c | root)", "form": "(0 + f | root)",
                "context × form": "(0 + cf | root)", "item": "(1 | item)"}  # lme4 spelling, as the R script writes them
R_TEST = "lmm_negation_satterthwaite"
PY_TEST = "lmm_negation_mixedlm_z"
# deviation coefficients -> treatment (seed) coefficients: b_treat = T @ b_dev (columns: Intercept, c, f, cf)
TREATMENT = np.array([[1, -0.5, -0.5, 0.25], [0, 1, 0, -0.5], [0, 0, 1, -0.5], [0, 0, 0, 1]], dtype=float)
SPECS = {"ppl": ("ppl", False), "log_ppl": ("log_ppl", False), "log_ppl+tokens": ("log_ppl", True)}


def design(df: pd.DataFrame, outcome: str = "ppl", covariate: bool = False, unit: str = "unit") -> pd.DataFrame:
    """The columns both paths read: unit, y, c and f (±0.5), cf = c·f, root, item and (if asked) centred n_tokens."""
    need = {"context", "form", "root_id", "item_id", outcome} | ({"n_tokens"} if covariate else set())
    missing = sorted(need - set(df.columns))
    if missing:
        raise ValueError(f"scores: lacks columns {missing} needed for the negation mixed model")
    bad = sorted(set(df["context"]) - {"consistent", "inconsistent"}) + sorted(set(df["form"]) - {"affirmative", "negated"})
    if bad:
        raise ValueError(f"scores: unexpected context/form values {bad} (expected consistent/inconsistent, affirmative/negated)")
    c = np.where(df["context"] == "consistent", 0.5, -0.5)
    f = np.where(df["form"] == "affirmative", 0.5, -0.5)
    out = pd.DataFrame({"unit": df[unit].astype(str).values if unit in df else "1", "y": df[outcome].astype(float).values,
                        "c": c, "f": f, "cf": c * f, "root": df["root_id"].astype(str).values,
                        "item": df["item_id"].astype(str).values})
    if covariate:
        tok = df["n_tokens"].astype(float).values
        out["tok"] = tok - np.nanmean(tok)
    return out


def _contrasts(beta: np.ndarray, cov: np.ndarray, covariate: bool) -> list[tuple[str, str, np.ndarray]]:
    """(coding, term, weights over the fixed effects) for every reported coefficient."""
    k = len(beta)
    rows = []
    for coding, mat in (("deviation", np.eye(4)), ("treatment", TREATMENT)):
        for term, w in zip(TERMS, mat):
            rows.append((coding, term, np.concatenate([w, np.zeros(k - 4)])))
        if covariate:
            rows.append((coding, "n_tokens", np.eye(k)[4]))
    return rows


# ---------------------------------------------------------------- R path: lme4 + lmerTest, many units in one Rscript
@lru_cache(maxsize=1)
def lmm_script() -> str:
    """The lme4 + lmerTest script ``fit_r`` hands to R (``lmm.R`` beside this module)."""
    return resources.files(__package__).joinpath("lmm.R").read_text()


def _contrast_table() -> pd.DataFrame:
    rows = _contrasts(np.zeros(5), np.eye(5), covariate=True)
    return pd.DataFrame([{"coding": c, "term": t, **{f"w{i}": x for i, x in enumerate(w)}} for c, t, w in rows])


def fit_r(data: pd.DataFrame, covariate: bool = False, random: str = "auto", seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fit every ``unit`` of ``data`` (see ``design``) with lmerTest in one Rscript.

    ``random="auto"`` runs the simplification ladder; ``"uncorrelated"`` fits the full uncorrelated structure as is
    (the one the Python path can fit; for cross-checks). Returns (info per unit, coefficients per unit × coding ×
    term with estimate, se, Satterthwaite df, t, p and 95% CI). Raises rbridge.RError when R fails.
    """
    from ...stats import run_r

    if random not in ("auto", "uncorrelated"):
        raise ValueError(f"random: expected 'auto' or 'uncorrelated', got {random!r}")
    config = pd.DataFrame({"random": [random], "covariate": [bool(covariate)]})
    out = run_r(lmm_script(), {"lmm": data, "config": config, "contrasts": _contrast_table()}, seed=seed)
    info, coefs = out["info"], out["coefs"]
    info["unit"] = info["unit"].astype(str)
    if len(coefs):
        coefs["unit"] = coefs["unit"].astype(str)
    for col in ("steps", "note", "sd"):
        info[col] = ["" if pd.isna(x) else str(x) for x in info[col]]
    return info, coefs


# ---------------------------------------------------------------- Python path: statsmodels MixedLM (uncorrelated)
def _vc_formula(active: list[str]) -> dict:
    parts = {"root": "1", "context": "0 + c", "form": "0 + f", "context × form": "0 + cf", "item": "0 + C(item)"}
    return {k.replace(" × ", "_x_"): parts[k] for k in active}


def fit_python(d: pd.DataFrame, covariate: bool = False, ladder: bool = True) -> tuple[pd.DataFrame, dict]:
    """statsmodels MixedLM by REML on one unit of ``design`` output: uncorrelated root components + item intercept.

    With ``ladder`` a singular (a component's SD < 1e-3 × residual SD, or statsmodels' boundary warning) or
    non-converged fit is refitted without the component estimated smallest; every step is noted. Returns the
    coefficient table (both codings; Wald z p-values and CIs) and fit information.
    """
    import statsmodels.formula.api as smf
    from statsmodels.tools.sm_exceptions import ConvergenceWarning

    fixed = "y ~ c + f + cf" + (" + tok" if covariate else "")
    active = list(COMPONENTS)
    if d["item"].nunique() == d["root"].nunique():
        active.remove("item")
    steps, fit, singular, conv_msgs = [], None, False, []
    while active:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                fit = smf.mixedlm(fixed, d, groups=d["root"], re_formula="0", vc_formula=_vc_formula(active)).fit(reml=True)
                err = None
            except Exception as e:  # noqa: BLE001 - reported, not raised
                fit, err = None, f"{type(e).__name__}: {e}"
        msgs = [str(w.message) for w in caught if issubclass(w.category, (ConvergenceWarning, RuntimeWarning))]
        if fit is None:
            conv_msgs, singular = [f"fit failed: {err}"], False
            break
        sds = np.sqrt(np.clip(np.asarray(fit.vcomp, float), 0, None))
        names = [n.replace("_x_", " × ") for n in fit.model.exog_vc.names]
        sd = dict(zip(names, sds))
        resid = float(np.sqrt(fit.scale)) if np.isfinite(fit.scale) and fit.scale > 0 else 0.0
        boundary = any("boundary" in m for m in msgs)
        singular = boundary or resid == 0 or any(s < 1e-3 * resid for s in sds)
        conv_msgs = [] if fit.converged and not any("failed" in m or "not converge" in m for m in msgs if "Retrying" not in m) \
            else ["did not converge"] + [m for m in msgs if "Retrying" not in m][:1]
        if not (singular or conv_msgs) or not ladder or len(active) == 1:
            break
        zero = [k for k in active if sd.get(k, 0) < 1e-3 * resid] or [min(active, key=lambda k: sd.get(k, 0))]
        steps.append(f"{'singular' if singular else 'not converged'}: dropped {' + '.join(zero)} "
                     f"(SD {min(sd.get(k, 0) for k in zero):.2g})")
        active = [k for k in active if k not in zero]
    info = {"path": "statsmodels MixedLM (REML, Wald z)", "random": " + ".join(RANDOM_TERMS[k] for k in active),
            "singular": bool(singular), "converged": not conv_msgs, "steps": "; ".join(steps),
            "note": "; ".join((["singular fit"] if singular else []) + conv_msgs), "satterthwaite": False}
    info["valid"] = fit is not None and not singular and not conv_msgs
    if fit is None:
        return pd.DataFrame(), info
    from scipy import stats as sps

    k = len(fit.fe_params)
    beta = fit.fe_params.values
    cov = np.asarray(fit.cov_params())[:k, :k]
    rows = []
    for coding, term, w in _contrasts(beta, cov, covariate):
        est, se = float(w @ beta), float(np.sqrt(max(w @ cov @ w, 0)))
        z = est / se if se > 0 else np.nan
        p = float(2 * sps.norm.sf(abs(z))) if np.isfinite(z) else np.nan
        rows.append({"coding": coding, "term": term, "estimate": est, "se": se, "df": np.nan, "stat": z, "p": p,
                     "ci_low": est - 1.959964 * se, "ci_high": est + 1.959964 * se})
    info["sd"] = ", ".join(f"{k} {v:.3g}" for k, v in sd.items()) + f", residual {np.sqrt(fit.scale):.3g}"
    return pd.DataFrame(rows), info


def use_r_default() -> bool:
    """True when lme4 and lmerTest load (the headline path)."""
    from ...stats import r_available

    return r_available("lme4", "lmerTest")


def fit_lmm(df: pd.DataFrame, outcome: str = "ppl", covariate: bool = False, use_r: bool | None = None,
            unit: str = "model") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fit ``outcome ~ context * form`` (+ centred n_tokens) for every ``unit`` of ``df`` (default: per model).

    Returns (coefficients: unit, coding, term, estimate, se, df, stat, p, ci_low, ci_high, stars, valid, note;
    info: one row per unit with the path, the random structure used, the simplification steps and validity).
    """
    use_r = use_r_default() if use_r is None else use_r
    from ...stats import RError

    d = design(df, outcome, covariate, unit=unit)
    r_failed = ""
    if use_r:
        try:
            info, coefs = fit_r(d, covariate)
            info["path"] = np.where(info["satterthwaite"], "lme4/lmerTest (REML, Satterthwaite t)",
                                    "lme4 (REML, Wald z: Satterthwaite unavailable)")
        except RError as err:  # reported in every record of the Python fits that replace it
            use_r, r_failed = False, f"R failed, statsmodels used instead: {str(err).splitlines()[-1][:200]}"
    if not use_r:
        infos, tabs = [], []
        for u, g in d.groupby("unit", sort=False):
            t, i = fit_python(g.reset_index(drop=True), covariate)
            infos.append({"unit": u, **i})
            if len(t):
                tabs.append(t.assign(unit=u))
        info = pd.DataFrame(infos)
        if r_failed:
            info["steps"] = [f"{r_failed}; {x}" if x else r_failed for x in info["steps"]]
        coefs = pd.concat(tabs, ignore_index=True) if tabs else pd.DataFrame(columns=["unit", "coding", "term"])
    info["test"] = np.where(info["satterthwaite"], R_TEST, PY_TEST if not use_r else "lmm_negation_lme4_z")
    if len(coefs):
        coefs = coefs.merge(info[["unit", "valid", "note", "test"]], on="unit", how="left")
        coefs["stars"] = coefs["p"].map(_stars)
    return coefs, info


def lmm_tables(scores: pd.DataFrame, use_r: bool | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Per model: the LMM on perplexity, on log-perplexity, and on log-perplexity with token count.

    Returns the long coefficient table (model, spec, coding, term, …; invalid fits marked ``valid=False``), the fit
    information per model × spec, and one row per model saying whether the deviation-coded interaction's sign and
    significance agree across the three specifications (only valid fits count).
    """
    use_r = use_r_default() if use_r is None else use_r
    coefs, infos = [], []
    for spec, (outcome, cov) in SPECS.items():
        c, i = fit_lmm(scores, outcome, cov, use_r=use_r, unit="model")
        coefs.append(c.assign(spec=spec))
        infos.append(i.assign(spec=spec))
    coefs = pd.concat(coefs, ignore_index=True).rename(columns={"unit": "model"})
    info = pd.concat(infos, ignore_index=True).rename(columns={"unit": "model"})
    agree = []
    for model in scores["model"].astype(str).unique():
        verdicts = {}
        for spec in SPECS:
            inter = coefs[(coefs.model == model) & (coefs.spec == spec) & (coefs.coding == "deviation")
                          & (coefs.term == "context × form")] if len(coefs) else coefs
            ok = len(inter) and bool(inter["valid"].iloc[0])
            verdicts[spec] = (np.sign(inter["estimate"].iloc[0]), bool(inter["p"].iloc[0] < 0.05)) if ok else None
        valid = [v for v in verdicts.values() if v is not None]
        agree.append({"model": model, "specs_valid": len(valid),
                      "interaction_conclusions_agree": bool(valid) and len(set(valid)) == 1,
                      **{f"interaction_{k}": (None if v is None else f"{'negative' if v[0] < 0 else 'positive'}"
                                                f"{', p < .05' if v[1] else ', n.s.'}") for k, v in verdicts.items()}})
    cols = ["model", "spec", "coding", "term", "estimate", "se", "df", "stat", "p", "ci_low", "ci_high", "stars",
            "valid", "note", "test"]
    return coefs.reindex(columns=cols), info, pd.DataFrame(agree)


def seed_table(coefs: pd.DataFrame, spec: str = "ppl", coding: str = "treatment") -> pd.DataFrame:
    """The negation paper's Table-1 shape: per model the three effects with coefficient (stars), p and 95% CI.

    ``coding="treatment"`` is the paper's (consistent = 1, affirmative = 1); ``"deviation"`` gives main effects.
    """
    t = coefs[(coefs["spec"] == spec) & (coefs["coding"] == coding) & coefs["term"].isin(TERMS[1:])].copy()
    t["cell"] = [f"{c:.3f}{s}" if v else f"({c:.3f}, not valid)" for c, s, v in zip(t["estimate"], t["stars"], t["valid"])]
    t["ci"] = [f"[{lo:.3f}, {hi:.3f}]" for lo, hi in zip(t["ci_low"], t["ci_high"])]
    return t[["model", "term", "cell", "df", "p", "ci", "valid"]].reset_index(drop=True)


def fit_info_table(info: pd.DataFrame) -> pd.DataFrame:
    """Which path and random structure produced each model × spec's numbers, and why it was simplified."""
    return info[["model", "spec", "test", "path", "random", "steps", "singular", "converged", "valid", "note", "sd"]]


def predicted_cells(coefs: pd.DataFrame, spec: str = "ppl") -> pd.DataFrame:
    """Model-predicted outcome for the four cells (fixed effects only, deviation coding, tokens at their mean)."""
    rows = []
    sel = coefs[(coefs["spec"] == spec) & (coefs["coding"] == "deviation")]
    for model, g in sel.groupby("model", sort=False):
        b = dict(zip(g["term"], g["estimate"]))
        for c in (0.5, -0.5):
            for f in (0.5, -0.5):
                y = b["Intercept"] + b["context"] * c + b["form"] * f + b["context × form"] * c * f
                rows.append({"model": model, "context": "consistent" if c > 0 else "inconsistent",
                             "form": "affirmative" if f > 0 else "negated", "predicted": y,
                             "converged": bool(g["valid"].all())})
    return pd.DataFrame(rows)


OUTCOME_WORDS = {"ppl": "perplexity", "log_ppl": "log-perplexity", "log_ppl+tokens": "log-perplexity adjusted for length"}


def term_claim(term: str, coding: str, spec: str) -> dict:
    """What a coefficient's sign means in words (``nbutils.stats.claim``; consistent = +½, affirmative = +½, so the
    interaction is the affirmative − negated difference in consistent minus in inconsistent contexts: below 0,
    negation is relatively more natural in stereotype-inconsistent contexts)."""
    y = OUTCOME_WORDS.get(spec, spec)
    if term == "context × form":
        return claim(f"the {coding}-coded context × form interaction on {y}",
                     "negation was relatively more natural in stereotype-consistent contexts",
                     "negation was relatively more natural in stereotype-inconsistent contexts",
                     "context and form interact (how natural negation is depends on stereotype consistency)", symbol="b")
    where = {"context": " for negated sentences", "form": " in stereotype-inconsistent contexts"}.get(term, "") \
        if coding == "treatment" else ""
    if term == "context":
        return claim(f"stereotype-consistent minus -inconsistent {y}{where}, {coding}-coded",
                     f"stereotype-consistent sentences had higher {y}{where}",
                     f"stereotype-inconsistent sentences had higher {y}{where}", f"context changes {y}{where}",
                     symbol="b")
    if term == "form":
        return claim(f"affirmative minus negated {y}{where}, {coding}-coded", f"affirmative sentences had higher {y}{where}",
                     f"negated sentences had higher {y}{where}", f"form changes {y}{where}", symbol="b")
    return claim(f"the {term} of {y}, {coding}-coded", f"the {term} is above 0", f"the {term} is below 0", symbol="b")


def records(coefs: pd.DataFrame, info: pd.DataFrame) -> list[dict]:
    """Every coefficient as a ``summary.json`` record; ``test`` names the model and path, ``term`` says the coding."""
    out = []
    keyed = info.set_index(["model", "spec"])
    for r in coefs.itertuples(index=False):
        i = keyed.loc[(r.model, r.spec)]
        # a fit that converged with a singular covariance of its fixed effects is degenerate (log-perplexity scale:
        # the odds-ratio rules do not apply)
        singular = ", and ".join(fit_problems(r.estimate, r.se, log_odds=False)) if bool(r.valid) else ""
        # the record's own note (why it is not valid, when it is not) last: that is the reason the words give
        note = "; ".join(x for x in (i["path"], f"random {i['random']}", i["steps"],
                                     "Wald z (no Satterthwaite df): slightly liberal with few roots" if not i["satterthwaite"] else "",
                                     r.note if isinstance(r.note, str) else "", singular)
                         if x)
        out.append(record(r.test, f"{r.term} [{r.coding}]", r.estimate, r.se, r.ci_low, r.ci_high, r.p,
                          valid=bool(r.valid) and not singular,
                          note=note, model=r.model, spec=r.spec, coding=r.coding,
                          df=None if not np.isfinite(r.df) else float(r.df), random=i["random"],
                          headline=bool(r.term == "context × form" and r.coding == "deviation" and r.spec == "log_ppl"),
                          hypothesis=term_claim(r.term, r.coding, r.spec)))
    return out


def cell_means(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean and median perplexity per model and cell (SA, SN, NA, NN)."""
    return (scores.groupby(["model", "condition", "context", "form"], sort=False)["ppl"]
                  .agg(mean="mean", median="median", n="size").reset_index())
