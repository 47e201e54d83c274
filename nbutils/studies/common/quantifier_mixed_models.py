"""The mixed-effects test of the upward − downward gap of quantifier concepts (any frame with the concept columns of
``quantifier_stats``): lme4's GLMM through R (the script in ``glmm.R``), else a bias-reduced GEE in Python; the terms'
names, the separated cells and the problems that make a term's estimate unusable.
"""
from __future__ import annotations

import warnings
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd
from scipy import stats as sps

from ...stats import fit_problems, mean_over_strata as firth_mean_gap
from .quantifier_stats import threshold_units


def _design(g: pd.DataFrame) -> tuple[pd.DataFrame, list[str], list[str]]:
    """0/1 columns u (upward), e (explicit), ue (their product), ucl = u·(1 − e); the fixed terms; notes."""
    e = (g["condition"] == "explicit").astype(float)
    u = (g["monotonicity"] == "upward").astype(float)
    d = g.assign(correct=g["correct"].astype(float), u=u, e=e, ue=u * e, ucl=u * (1 - e), cluster=threshold_units(g))
    notes = []
    terms = ["u"] if d["u"].nunique() > 1 else []
    if d["e"].nunique() > 1:
        terms += ["e"] + (["ue"] if terms else [])
    else:
        notes.append(f"only one condition ({g['condition'].iloc[0]}): no condition term")
    if not terms:
        notes.append("only one monotonicity: nothing to compare")
    return d, terms, notes


# term key → (reported term, condition); "u@explicit" is the gap under the explicit condition, β_u + β_ue
TERM_NAMES = {"u": "upward", "e": "explicit", "ue": "upward:explicit", "u@explicit": "upward"}
TERM_NOTES = {"u": "log odds ratio upward vs downward (the gap)",
              "e": "log odds ratio explicit vs concept learning, downward concepts",
              "ue": "change of the gap's log odds ratio when explicit (< 0: the gap shrinks)",
              "u@explicit": "log odds ratio upward vs downward (the gap)"}


# the cells (u, e) of the 2 × 2 design each term's estimate rests on; a cell answered all correct or all wrong makes
# the term's maximum-likelihood estimate infinite (quasi-complete separation)
TERM_CELLS = {"u": ((1, 0), (0, 0)), "e": ((0, 1), (0, 0)), "ue": ((1, 0), (0, 0), (1, 1), (0, 1)),
              "u@explicit": ((1, 1), (0, 1))}
CELL_NAMES = {(1, 0): "upward concepts under concept learning", (0, 0): "downward concepts under concept learning",
              (1, 1): "upward concepts with the concept stated", (0, 1): "downward concepts with the concept stated"}


def separated_cells(d: pd.DataFrame) -> dict[tuple[int, int], str]:
    """Cells (u, e) of a ``_design`` frame answered all correct or all wrong, each with its reason (with one
    condition, e is 0 whichever it is: its only term, u, rests on the cells (1, 0) and (0, 0))."""
    out = {}
    both = d["e"].nunique() > 1
    for (u, e), g in d.groupby([d["u"].astype(int), d["e"].astype(int) * int(both)]):
        if g["correct"].nunique() == 1:
            what = CELL_NAMES[(u, e)] if both else ("upward" if u else "downward") + " concepts"
            out[(u, e)] = (f"every answer to {what} is {'correct' if g['correct'].iloc[0] else 'wrong'}: "
                           "quasi-complete separation")
    return out


def pairs_alike(d: pd.DataFrame) -> bool:
    """True when every prompt pair seen in both conditions was answered alike (both correct or both wrong) in both."""
    if "pair_id" not in d or d["e"].nunique() < 2:
        return False
    both = d.groupby("pair_id")["correct"].agg(["size", "nunique"])
    both = both[both["size"] > 1]
    return len(both) > 0 and bool((both["nunique"] == 1).all())


def term_problems(key: str, estimate, se, ci_low, ci_high, separated: dict, random_sd: dict | None = None,
                  alike: bool = False) -> str:
    """Why one term of a fit is degenerate (``nbutils.stats.fit_problems`` plus the data's separation), as one
    clause with no ';' (so it reads as the record's reason), or "" when the term may be read."""
    cells = [separated[c] for c in TERM_CELLS.get(key, ()) if c in separated]
    # a random SD at 0 is lme4's singular fit, which the R script drops and refits (and marks when it stays); here
    # only an exploding one counts (the SDs come rounded to 3 decimals)
    exploding = {k: v for k, v in (random_sd or {}).items() if v > 1}
    found = fit_problems(estimate, se, ci_low, ci_high, random_sd=exploding)
    if alike and random_sd and "pair" in random_sd:  # the pair variance has no finite maximum, whatever SD it reached
        found = [f for f in found if not f.startswith("the pair random effect")]
        found.insert(0, "every prompt pair was answered alike in both conditions, a quasi-separation by pair")
    return ", and ".join(dict.fromkeys(cells + found))


def parse_sd(text) -> dict[str, float]:
    """``"threshold 0.412, pair 50.740"`` (the GLMM's ``random_sd``) → ``{"threshold": 0.412, "pair": 50.74}``."""
    out = {}
    for part in str(text or "").split(","):
        bits = part.split()
        if len(bits) == 2:
            try:
                out[bits[0]] = float(bits[1])
            except ValueError:
                continue
    return out


def _term_condition(key: str, conditions: list[str]) -> str | None:
    if key == "u@explicit":
        return "explicit"
    if key == "u":
        return "concept_learning" if len(conditions) > 1 else conditions[0]
    return None


def gee_model(df: pd.DataFrame) -> pd.DataFrame:
    """Per model: GEE logit ``correct ~ u + e + u·e``, clustered by threshold, exchangeable working correlation,
    bias-reduced (Mancl–DeRouen) sandwich covariance, and t(K−1) p-values and CIs for K thresholds.

    The pure-Python test, calibrated for the 5–20 thresholds a study has (the plain robust SE with normal
    p-values rejected a true null 10–13% of the time at 10 thresholds). ``u`` is the gap under concept
    learning; the gap under the explicit condition is the contrast u + u·e.
    """
    rows = []
    for model, g in df.groupby("model", sort=False):
        d, terms, notes = _design(g)
        k = d["cluster"].nunique()
        conditions = list(dict.fromkeys(g["condition"]))
        base = {"model": model, "test": "gee_bias_reduced", "formula": "correct ~ " + (" + ".join(terms) or "1"),
                "random_effects": "", "n": len(d), "n_thresholds": k}
        if not terms:
            continue
        if d["correct"].nunique() < 2:
            rows.append({**base, "valid": False, "note": "; ".join(notes + ["every answer equally correct: no model fitted"])})
            continue
        valid = k >= 2
        if k < 2:
            notes.append("one threshold: no clustered inference (a plain logistic GLM, read as about this threshold only)")
        try:
            fit, dfree = _gee_fit(base["formula"], d, k)
            cov, names = np.asarray(fit.cov_params()), list(fit.params.index)
        except Exception as err:  # noqa: BLE001 - reported in the table, never a crash
            rows.append({**base, "valid": False, "note": "; ".join(notes + [f"GEE failed: {type(err).__name__}: {err}"])})
            continue
        rows += _gee_rows(base, fit.params.to_numpy(), cov, names, dfree, terms, k, valid, notes, d, conditions)
    return pd.DataFrame(rows)


def _gee_fit(formula: str, d: pd.DataFrame, k: int):
    """The GEE clustered by threshold with the bias-reduced covariance (a plain logistic GLM for one threshold), and
    its degrees of freedom for t tests (K − 1; infinite for the GLM)."""
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if k >= 2:
            return smf.gee(formula, "cluster", d, family=sm.families.Binomial(),
                           cov_struct=sm.cov_struct.Exchangeable()).fit(cov_type="bias_reduced"), k - 1
        return smf.glm(formula, d, family=sm.families.Binomial()).fit(), np.inf


def _gee_rows(base: dict, params: np.ndarray, cov: np.ndarray, names: list[str], dfree, terms: list[str], k: int,
              valid: bool, notes: list[str], d: pd.DataFrame, conditions: list[str]) -> list[dict]:
    """One row per term of the fitted GEE (and the gap under the explicit condition, u + u·e): estimate, SE, t CI and
    p, or why it is not estimable."""
    out = []
    contrasts = {t: np.eye(len(names))[names.index(t)] for t in terms}
    if "ue" in terms:
        contrasts["u@explicit"] = contrasts["u"] + contrasts["ue"]
    if 2 <= k <= len(names):
        # the clustered (sandwich) covariance sums K cluster scores that add up to zero: its rank is at most
        # K − 1, so with no more thresholds than coefficients it is singular and its SEs are meaningless
        valid = False
        notes.append(f"not estimable: the clustered GEE needs more thresholds than coefficients ({k} thresholds, "
                     f"{len(names)} coefficients); use at least {len(names) + 1} thresholds")
    q = float(sps.t.ppf(0.975, dfree))
    separated = separated_cells(d)
    for key, c in contrasts.items():
        est, var = float(c @ params), float(c @ cov @ c)
        se = float(np.sqrt(var)) if np.isfinite(var) and var > 0 else np.nan
        ok = valid and bool(np.isfinite(se))
        degenerate = term_problems(key, est, se, est - q * se, est + q * se, separated) if valid else ""
        sep = [degenerate] if degenerate else []
        tval = est / se if ok else np.nan
        out.append({**base, "term": TERM_NAMES[key], "condition": _term_condition(key, conditions),
                     "estimate": est if ok else np.nan, "se": se if ok else np.nan,
                     "ci_low": est - q * se if ok else np.nan, "ci_high": est + q * se if ok else np.nan,
                     "statistic": tval, "df": dfree, "p": float(2 * sps.t.sf(abs(tval), dfree)) if ok else np.nan,
                     "valid": ok and not sep, "meaning": TERM_NOTES[key], "note": "; ".join(notes + sep),
                     "degenerate": degenerate})
    return out


def firth_gap(df: pd.DataFrame) -> pd.DataFrame:
    """Per model and condition whose upward or downward concepts are answered all right or all wrong (the cells where
    the GLMM and the GEE have no finite estimate): Firth's penalised logistic regression with a gap per threshold
    (``correct ~ u × threshold``, sum-to-zero coding), and the mean of those gaps tested against their spread between
    thresholds with t(K − 1), its SE floored at the Firth SE (``nbutils.stats.mean_over_strata``): thresholds as a
    sample, like the GLMM and the GEE. Thresholds that hold one direction only are left out. Empty where no cell is
    separated."""
    rows = []
    for (model, condition), g in df.groupby(["model", "condition"], sort=False):
        d, _, _ = _design(g.assign(condition="concept_learning"))
        if d["u"].nunique() < 2 or not separated_cells(d):
            continue
        both = d.groupby("cluster")["u"].transform("nunique") == 2
        d = d[both]
        n_thr = d["cluster"].nunique()
        base = {"model": model, "test": "firth_plr", "term": "upward", "condition": condition, "n": len(d),
                "n_thresholds": n_thr, "random_effects": "", "meaning": TERM_NOTES["u"], "degenerate": "",
                "formula": "correct ~ u × threshold (sum-to-zero), Firth penalty; mean gap, t(K−1) on its spread"}
        try:
            res = firth_mean_gap({"u": d["u"].to_numpy()}, d["cluster"].to_numpy(), d["correct"].to_numpy(), "u")
        except (ValueError, np.linalg.LinAlgError) as err:
            rows.append({**base, "valid": False, "note": f"Firth fit failed: {err}"})
            continue
        ok = res["converged"] and all(np.isfinite([res["ci_low"], res["ci_high"], res["p"]]))
        left = f"; {int((~both).sum())} prompts of thresholds with one direction only left out" if (~both).any() else ""
        rows.append({**base, **{k: res[k] for k in ("estimate", "se", "ci_low", "ci_high", "statistic", "df", "p")},
                     "valid": ok, "note": f"Firth's penalised logistic regression with a gap per threshold; their mean "
                     f"(Firth SE {res['firth_se']:.3g}) tested with t({n_thr - 1}) on their spread between thresholds"
                     + left + ("" if ok else "; the penalised fit did not converge")})
    return pd.DataFrame(rows)


@lru_cache(maxsize=1)
def glmm_script() -> str:
    """The lme4 script ``run_glmm`` hands to R (``glmm.R`` beside this module)."""
    return resources.files(__package__).joinpath("glmm.R").read_text()


def glmm_input(df: pd.DataFrame, unit: str = "model") -> pd.DataFrame:
    """The columns the lme4 script reads: unit (one fit each), correct, u, e, ue, ucl, cluster, noun, pair."""
    d, _, _ = _design(df)
    noun = d["query_noun"].astype(str) if "query_noun" in d else "none"
    pair = d["pair_id"].astype(str) if "pair_id" in d else np.arange(len(d)).astype(str)
    out = pd.DataFrame({"unit": d[unit].astype(str), "correct": d["correct"].astype(int), "u": d["u"].astype(int),
                        "e": d["e"].astype(int), "ue": d["ue"].astype(int), "ucl": d["ucl"].astype(int),
                        "cluster": d["cluster"], "noun": noun, "pair": pair})
    for axis in ("template", "phrase", "answer_words"):  # prompt variants: a random effect where a unit has several
        if axis in d:
            out[axis] = d[axis].astype(str).to_numpy()
    return out


def run_glmm(data: pd.DataFrame, seed: int = 0, random: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fit the GLMM and its likelihood-ratio tests in one ``Rscript`` for every unit of ``data`` (see glmm_input).

    ``random`` restricts the random terms tried (names among "threshold", "slope", "noun", "pair" and, for prompt
    variants, "template", "phrase", "answer_words" with their "<axis>_slope"; default: every one the data identify). Returns (info per unit, terms per unit × term key). Raises rbridge.RError when R fails.
    """
    from ...stats import run_r

    config = pd.DataFrame({"random": [",".join(random) if random else "auto"]})
    out = run_r(glmm_script(), {"glmm": data, "config": config}, seed=seed)
    return out["info"], out.get("terms", pd.DataFrame())


def glmm_model(df: pd.DataFrame) -> pd.DataFrame:
    """Per model: binomial GLMM (lme4::glmer, Laplace) of ``correct ~ u + e + u·e`` with random intercepts for
    threshold, the query's noun and the prompt pair (both conditions of one prompt), and an uncorrelated random
    slope of upward by threshold (and, for each prompt-variant axis with more than one variant in the data, a random
    intercept and upward slope by variant); p-values by likelihood-ratio tests of nested models (χ², 1 df), Wald CIs.

    Random terms whose variance is estimated at 0 (a singular fit) are dropped one round at a time and the model
    refitted, each drop reported in ``note``; a fit that stays singular or does not converge (after lme4's
    restart from its own estimates) is kept but marked ``valid=False``. Empty when R with lme4 is not installed.
    """
    from ...stats import RError, r_available

    if not r_available("lme4"):
        return pd.DataFrame()
    data = glmm_input(df)
    rows = []
    try:
        info, terms = run_glmm(data)
    except RError as err:
        return pd.DataFrame([{"model": m, "test": "glmm_lrt", "valid": False, "note": f"lme4 failed: {err}"}
                             for m in df["model"].unique()])
    info = info.set_index("unit")
    for model, g in df.groupby("model", sort=False):
        i = info.loc[str(model)]
        conditions = list(dict.fromkeys(g["condition"]))
        d, _, notes = _design(g)
        separated, alike, sds = separated_cells(d), pairs_alike(d), parse_sd(i["sd"])
        base = {"model": model, "test": "glmm_lrt", "formula": i["formula"], "random_effects": i["random"],
                "random_sd": i["sd"], "n": len(g), "n_thresholds": threshold_units(g).nunique()}
        fit_note = "" if pd.isna(i["note"]) else str(i["note"])
        t = terms[terms["unit"] == str(model)] if len(terms) else terms
        if t.empty:
            rows.append({**base, "valid": False, "note": "; ".join(filter(None, notes + [fit_note, "no term to test"]))})
        for r in t.itertuples(index=False):
            sep = term_problems(r.key, r.estimate, r.se, r.estimate - 1.96 * r.se, r.estimate + 1.96 * r.se,
                                separated, sds, alike)
            note = "; ".join(filter(None, [*notes, fit_note, "" if pd.isna(r.note) else str(r.note), sep]))
            rows.append({**base, "term": TERM_NAMES[r.key], "condition": _term_condition(r.key, conditions),
                         "estimate": r.estimate, "se": r.se, "ci_low": r.estimate - 1.96 * r.se,
                         "ci_high": r.estimate + 1.96 * r.se, "statistic": r.chisq, "df": r.df, "p": r.p,
                         "p_wald": r.p_wald, "valid": bool(r.valid) and not sep, "meaning": TERM_NOTES[r.key],
                         "note": note, "degenerate": sep})
    return pd.DataFrame(rows)


def mixed_model(df: pd.DataFrame, use_r: bool = True) -> pd.DataFrame:
    """Per model: the headline mixed-effects test and its pure-Python counterpart, one row per model × test × term.

    ``glmm_lrt`` (lme4 through R, when installed and ``use_r``) is the headline; ``gee_bias_reduced`` is always
    computed and is the headline where R is absent or lme4 failed. ``headline`` marks the rows to report; a headline
    term that is not valid (``degenerate`` says why when the fit looks fine but is not) keeps it, and the records name
    its stand-in (``nbutils.stats.fallback_headlines``). Coefficients are log
    odds; ``odds_ratio`` and its CI are their exponentials. ``upward`` (concept learning) is the gap;
    ``upward:explicit`` < 0 means stating the concept shrinks it.
    """
    parts = [glmm_model(df) if use_r else pd.DataFrame(), gee_model(df), firth_gap(df)]
    out = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else pd.DataFrame()
    if out.empty:
        return pd.DataFrame(columns=["model", "test", "term", "condition", "estimate", "p", "valid", "headline", "note"])
    for col in ("term", "condition", "meaning", "estimate", "se", "ci_low", "ci_high", "statistic", "df", "p"):
        if col not in out:
            out[col] = np.nan if col not in ("term", "condition", "meaning") else None
    with np.errstate(over="ignore"):  # a separated fit's odds ratio is inf: its row says it is not valid
        out["odds_ratio"] = np.exp(out["estimate"].astype(float))
        out["or_ci_low"], out["or_ci_high"] = np.exp(out["ci_low"].astype(float)), np.exp(out["ci_high"].astype(float))
    fitted = (out["test"] == "glmm_lrt") & out["term"].map(lambda t: isinstance(t, str))
    has_glmm = fitted.groupby(out["model"]).transform("any")  # lme4 failed outright: the GEE is the headline
    # a fitted GLMM stays the headline even where a term is not valid (its reason is said); the records give each
    # invalid headline term its stand-in (``fallback_for``: the GEE, else the sign-flip or Mantel–Haenszel test)
    out["headline"] = np.where(has_glmm, out["test"] == "glmm_lrt", out["test"] == "gee_bias_reduced")
    out["note"] = out["note"].fillna("")
    out["degenerate"] = out["degenerate"].fillna("") if "degenerate" in out else ""
    out["meaning"] = out["meaning"].fillna("")
    return out
