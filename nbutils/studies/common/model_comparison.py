"""Models compared on the same prompts: does the upward − downward gap of one model differ from another's?

Each model after the first is compared with the first (the reference), per condition, on the prompts both scored:
lme4's GLMM ``correct ~ u × m`` with the prompt as a random intercept (R, where installed), a logistic GEE with the
same terms clustered by prompt (always; the headline without R), Firth's penalised regression with the terms per
threshold, their mean tested against their spread between thresholds, where a model answers one direction all right or
all wrong (the fallback when the first two are degenerate), and beside them McNemar's test of the two models' accuracy
(equal accuracy, not equal gaps), exact and mid-p (the exact test is conservative: Fagerland, Lydersen and Laake, "The
McNemar test for binary matched-pairs data: mid-p and asymptotic are better than exact conditional").

One direction everywhere: a comparison's ``first`` is the model compared, ``second`` the reference, and the estimate is
the first's gap minus the second's, in log odds (its exponent, the ratio of ORs, is above 1 when the first's gap is the
larger), as the sentence names them: "the gap of <first> exceeds <second>'s: ratio of ORs = …". With more than one
comparison the p-values are Holm-adjusted over them. Models that share no prompts are not compared (``unpaired`` says
so in words).
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from importlib import resources

from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar

from ... import paths
from ...runstore import read_sidecar
from ...stats import claim, fallback_headlines, fit_problems, holm, mean_over_strata, record
from .quantifier_mixed_models import separated_cells
from .quantifier_stats import threshold_units

ORDER = ["glmm_models", "gee_models", "firth_models"]  # the headline and its stand-ins, in this order
MCNEMAR_NOTE = ("exact McNemar test of equal accuracy of the two models on the same prompts (a test of accuracy, "
                "not of the gap)")
MIDP_NOTE = ("McNemar's mid-p test of equal accuracy of the two models on the same prompts (the exact test's p less "
             "the probability of the observed split; a test of accuracy, not of the gap)")
WHAT = {"gap": "first's upward vs downward gap minus second's, log odds (exp: ratio of ORs, > 1: first's gap larger)",
        "accuracy": "first's accuracy minus second's on the same prompts, proportion"}
IDENTICAL = "the two models gave the same answer to every shared prompt: their gaps are equal (no fit needed)"


def glmm_script() -> str:
    """The lme4 script ``glmm`` hands to R (``model_comparison.R`` beside this module)."""
    return resources.files(__package__).joinpath("model_comparison.R").read_text()


def scored_order(run_dir, models, slugs: dict | None = None) -> list[str]:
    """``models`` in the order their score files were written (a sweep scores the models of its file in order); a
    model without a readable sidecar goes last, in the order given. ``slugs``: each model's score file slug where
    ``models`` are labels (``load_scores``' ``attrs["slugs"]``)."""
    created = {}
    for side in paths.score_sidecars(run_dir):
        try:
            created[side.stem] = str(read_sidecar(side).get("created") or "")
        except ValueError:
            continue
    slug = (slugs or {}).get
    return sorted(dict.fromkeys(models), key=lambda m: (slug(m, m) not in created, created.get(slug(m, m), "")))


def hypothesis(first: str, second: str, condition) -> dict:
    """What a comparison's estimate means in words: the first model's gap relative to the second's (log odds; its
    ratio of ORs above 1 when the first's gap is the larger). Both sides name the first model first, so the number
    after the words is always the gap of the model named first over the other's."""
    where = {"concept_learning": " under concept learning", "explicit": " with the concept stated"}.get(condition, "")
    return claim(f"the upward vs downward gap of {first} relative to {second}'s{where}",
                 f"the gap of {first} exceeds {second}'s", f"the gap of {first} is smaller than {second}'s",
                 f"the gaps of {first} and {second} differ", scale="log_odds_ratio", symbol="ratio of ORs")


def accuracy_claim(first: str, second: str) -> dict:
    """McNemar: the first model's accuracy minus the second's on the same prompts, in points; both sides name the first
    model first, as the sign of the difference after them."""
    return claim(f"{first}'s accuracy minus {second}'s on the same prompts", f"{first} answered more prompts right "
                 f"than {second}", f"{first} answered fewer prompts right than {second}",
                 f"{first} and {second} differ in accuracy", scale="points")


def pairs(df: pd.DataFrame, order: list[str] | None = None) -> list[tuple[str, str, pd.DataFrame]]:
    """(other, reference, rows of both on the prompts both scored) for every model after the first of ``order`` (the
    reference): the model compared is named first, as the sentences name it."""
    models = [m for m in (order or list(dict.fromkeys(df["model"]))) if m in set(df["model"])]
    out = []
    for other in models[1:]:
        ids = set(df.loc[df["model"] == models[0], "prompt_id"]) & set(df.loc[df["model"] == other, "prompt_id"])
        both = df[df["model"].isin([models[0], other]) & df["prompt_id"].isin(ids)]
        out.append((other, models[0], both))
    return out


def unpaired(df: pd.DataFrame, order: list[str] | None = None) -> list[str]:
    """A sentence for every model that shares no prompt with the reference (so nothing of it is compared), naming the
    two models and how many prompts each scored."""
    n = df.groupby("model")["prompt_id"].nunique()
    return [f"{first} and {second} share no prompts ({n[first]} and {n[second]} scored): their gaps are not compared"
            for first, second, both in pairs(df, order) if both.empty]


def _frame(d: pd.DataFrame, first: str) -> pd.DataFrame:
    u = (d["monotonicity"] == "upward").astype(float)
    m = (d["model"] == first).astype(float)
    return d.assign(correct=d["correct"].astype(float), u=u, m=m, um=u * m)


def gee(d: pd.DataFrame) -> dict:
    """GEE logit ``correct ~ u + m + u·m`` clustered by prompt (exchangeable, bias-reduced sandwich), Wald z."""
    import statsmodels.api as sm

    X = np.column_stack([np.ones(len(d)), d["u"], d["m"], d["um"]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.GEE(d["correct"].to_numpy(), X, groups=d["prompt_id"].astype(str).to_numpy(),
                     family=sm.families.Binomial(), cov_struct=sm.cov_struct.Exchangeable()).fit(cov_type="bias_reduced")
    var = float(fit.cov_params()[3, 3])
    est, se = float(fit.params[3]), float(np.sqrt(var)) if var > 0 else np.nan
    p = float(2 * sps.norm.sf(abs(est / se))) if np.isfinite(se) else np.nan
    return {"estimate": est, "se": se, "ci_low": est - 1.96 * se, "ci_high": est + 1.96 * se, "statistic": est / se,
            "p": p}


def firth(d: pd.DataFrame) -> dict:
    """Firth's penalised logistic regression ``correct ~ (u + m + u·m) × threshold`` (sum-to-zero): the mean over
    thresholds of the u·m term, tested with t(K − 1) on its spread between thresholds (``stats.mean_over_strata``)."""
    res = mean_over_strata({c: d[c].to_numpy() for c in ("u", "m", "um")}, threshold_units(d).to_numpy(),
                           d["correct"].to_numpy(), "um")
    return {k: res[k] for k in ("estimate", "se", "ci_low", "ci_high", "statistic", "p")} | {
        "ok": res["converged"], "df": res["df"], "firth_se": res["firth_se"]}


def separated(d: pd.DataFrame) -> list[str]:
    """The model × direction cells answered all right or all wrong, in words."""
    out = []
    for model, g in d.groupby("model", sort=False):
        out += [f"{model}: {why}" for why in separated_cells(g.assign(e=0.0)).values()]
    return out


def glmm(units: pd.DataFrame) -> pd.DataFrame:
    """The GLMM of every unit (a comparison × condition) in one Rscript; empty without R and lme4."""
    from ...stats import RError, r_available, run_r

    if units.empty or not r_available("lme4"):
        return pd.DataFrame()
    try:
        out = run_r(glmm_script(), {"cmp": units})
    except RError as err:
        return pd.DataFrame({"unit": units["unit"].unique(), "valid": False, "note": f"lme4 failed: {err}"})
    return out["info"].merge(out.get("terms", pd.DataFrame(columns=["unit"])), on="unit", how="left")


def midp(only_first: int, only_second: int) -> float:
    """McNemar's two-sided mid-p from the discordant counts: twice (the smaller tail of Binomial(b + c, 1/2)
    less half the probability of the observed split): the exact p less that probability (at most 1)."""
    n, k = only_first + only_second, min(only_first, only_second)
    return float(min(1.0, 2 * (sps.binom.cdf(k, n, 0.5) - 0.5 * sps.binom.pmf(k, n, 0.5))))


def mcnemar_row(g: pd.DataFrame, first: str, second: str) -> tuple[dict, bool]:
    """McNemar's test of equal accuracy of ``first`` and ``second`` on the prompts of ``g`` both answered: its exact
    row (the estimate the first's accuracy minus the second's; ``p_midp`` the mid-p beside it), and whether they
    answered every prompt alike."""
    wide = g.pivot_table(index="prompt_id", columns="model", values="correct", aggfunc="first").dropna()
    a, b = wide[first].astype(bool), wide[second].astype(bool)
    table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
    return {"test": "mcnemar_models", "estimate": float(a.mean() - b.mean()), "valid": True,
            "p": float(mcnemar(table, exact=True).pvalue), "p_midp": midp(table[0][1], table[1][0]),
            "only_first": table[0][1], "only_second": table[1][0], "note": MCNEMAR_NOTE}, bool((a == b).all())


def prepare(df: pd.DataFrame, order: list[str] | None = None, use_r: bool = True
            ) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """The comparisons' Python tests (``gee_models``, ``firth_models`` where a cell is separated, ``mcnemar_models``)
    and the GLMM's input, one frame per comparison × condition (``unit`` ``u0``, ``u1``, …), for ``glmm``."""
    rows, units = [], []
    for first, second, both in pairs(df, order):
        for condition, g in both.groupby("condition", sort=False):
            d = _frame(g, first)
            base = {"first": first, "second": second, "condition": condition, "n_prompts": d["prompt_id"].nunique()}
            sep = separated(d)
            row, same = mcnemar_row(g, first, second)
            rows.append({**base, **row, "what": WHAT["accuracy"]})
            rows.append({**base, **row, "test": "mcnemar_midp_models", "p": row["p_midp"], "what": WHAT["accuracy"],
                         "note": MIDP_NOTE})
            if same:  # the same answer to every prompt: the gaps are equal, whatever a fit would say
                rows += [{**base, "test": t, "estimate": 0.0, "p": 1.0, "valid": True, "note": IDENTICAL}
                         for t in (["glmm_models"] if use_r else []) + ["gee_models"]]
                continue
            try:
                r = gee(d)
                bad = fit_problems(r["estimate"], r["se"], r["ci_low"], r["ci_high"])
                rows.append({**base, "test": "gee_models", **r, "valid": not (sep or bad),
                             "note": "; ".join(["logistic GEE clustered by prompt, bias-reduced SE, Wald z",
                                                ", and ".join(sep + bad)]).strip("; ")})
            except (ValueError, np.linalg.LinAlgError) as err:
                rows.append({**base, "test": "gee_models", "valid": False, "note": f"GEE failed: {err}"})
            if sep:
                try:
                    r = firth(d)
                    ok = r.pop("ok") and bool(np.all(np.isfinite([r["ci_low"], r["ci_high"], r["p"]])))
                    rows.append({**base, "test": "firth_models", **r, "valid": ok,
                                 "note": f"Firth's penalised logistic regression with a model × upward term per "
                                         f"threshold; their mean (Firth SE {r.pop('firth_se'):.3g}) tested with "
                                         f"t({r['df']}) on their spread between thresholds"
                                         + ("" if ok else "; did not converge")})
                except (ValueError, np.linalg.LinAlgError) as err:
                    rows.append({**base, "test": "firth_models", "valid": False, "note": f"Firth fit failed: {err}"})
            units.append(pd.DataFrame({"unit": f"u{len(units)}", "correct": d["correct"].astype(int), "u": d["u"],
                                       "m": d["m"], "prompt": d["prompt_id"].astype(str)}).assign(**base, sep="; "
                                                                                                   .join(sep)))
    return pd.DataFrame(rows), units


def finish(rows: pd.DataFrame, units: list[pd.DataFrame], fits: pd.DataFrame | None = None) -> pd.DataFrame:
    """``prepare``'s rows with the GLMM's (``fits``: ``glmm``'s table for ``units``; none without R) and ``p_holm``
    (over the comparisons of one condition and test)."""
    out, new = rows, []
    for unit, u in zip(fits.get("unit", []) if fits is not None else [], (fits if fits is not None else
                                                                          pd.DataFrame()).itertuples(index=False)):
        first = units[int(str(unit)[1:])].iloc[0]
        base = first[["first", "second", "condition", "n_prompts"]].to_dict()
        sep = [s for s in str(first["sep"]).split("; ") if s]
        est, se = getattr(u, "estimate", np.nan), getattr(u, "se", np.nan)
        bad = fit_problems(est, se, est - 1.96 * se, est + 1.96 * se) if np.isfinite(est) else ["no fit"]
        note = "; ".join(filter(None, ["binomial GLMM, prompt random intercept, likelihood-ratio test",
                                       "" if pd.isna(u.note) else str(u.note), ", and ".join(sep + bad)]))
        new.append({**base, "test": "glmm_models", "estimate": est, "se": se, "ci_low": est - 1.96 * se,
                    "ci_high": est + 1.96 * se, "statistic": getattr(u, "chisq", np.nan), "p": getattr(u, "p", np.nan),
                    "valid": bool(u.valid) and not (sep or bad), "note": note})
    if new:
        out = pd.concat([out, pd.DataFrame(new)], ignore_index=True)
    for col in ("estimate", "se", "ci_low", "ci_high", "statistic", "p"):
        if len(out) and col not in out:
            out[col] = np.nan
    if len(out):
        out["p_holm"] = out.groupby(["condition", "test"])["p"].transform(lambda s: holm(s.to_numpy()))
        out["what"] = np.where(out["test"].str.startswith("mcnemar"), WHAT["accuracy"], WHAT["gap"])
    return out


def glmm_input(units: list[pd.DataFrame]) -> pd.DataFrame:
    """``prepare``'s units as the one table ``glmm`` fits (their bookkeeping columns dropped)."""
    return pd.concat(units, ignore_index=True)[["unit", "correct", "u", "m", "prompt"]]


def compare(df: pd.DataFrame, order: list[str] | None = None, use_r: bool = True) -> pd.DataFrame:
    """One row per comparison × condition × test (``glmm_models``, ``gee_models``, ``firth_models`` where a cell is
    separated, ``mcnemar_models`` and ``mcnemar_midp_models``): ``first`` (the model compared), ``second`` (the
    reference), the estimate (first's gap minus second's; McNemar: first's accuracy minus second's; ``what`` says which),
    CI, p, ``p_holm`` (over the comparisons of one condition and test), ``valid``, note."""
    from ...stats import r_available

    use_r = use_r and r_available("lme4")
    rows, units = prepare(df, order, use_r)
    return finish(rows, units, glmm(glmm_input(units)) if use_r and units else None)


def _holm_note(note: str) -> str:
    """The note with "Holm over the comparisons" after its description (the reason, if any, stays last)."""
    head, _, rest = str(note).partition("; ")
    return "; ".join(filter(None, [head, "p Holm-adjusted over the comparisons", rest]))


def records(t: pd.DataFrame) -> list[dict]:
    """The comparisons as ``summary.json`` records, ``models`` [first, second] (the model compared, the reference: the
    estimate is the first's minus the second's, as the sentence names them); the headline is the GLMM (the GEE without
    R), each invalid one handing over to the next valid test of ``ORDER``. McNemar's records (``term``
    ``accuracy:model``, exact and mid-p) test equal accuracy of the two models, not their gaps. With more than one comparison the
    record's ``p`` is the Holm-adjusted one (``p_unadjusted`` keeps the raw)."""
    out = []
    several = t[["first", "second"]].drop_duplicates().shape[0] > 1 if len(t) else False
    has_glmm = bool((t.get("test", pd.Series(dtype=str)) == "glmm_models").any())
    for r in t.itertuples(index=False):
        mc = r.test in ("mcnemar_models", "mcnemar_midp_models")
        p = r.p_holm if several else r.p
        out.append(record(r.test, "accuracy:model" if mc else "upward:model", r.estimate, None if mc else r.se,
                          None if mc else r.ci_low, None if mc else r.ci_high, p, valid=bool(r.valid),
                          condition=r.condition, models=[r.first, r.second],
                          note=_holm_note(r.note) if several else r.note,
                          headline=r.test == ("glmm_models" if has_glmm else "gee_models"), p_unadjusted=r.p,
                          n_prompts=int(r.n_prompts), reference=r.second,
                          hypothesis=accuracy_claim(r.first, r.second) if mc else hypothesis(r.first, r.second,
                                                                                            r.condition)))
    return fallback_headlines(out, ORDER, key=("models", "condition", "term"))
