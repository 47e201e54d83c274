"""One call that turns a negation run's scores into tables, the interaction figure and summary.json."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ...analysis import Analysis, Steps, run_analysis, write_analysis
from ... import artifacts
from ...results import fmt_alpha, fmt_num, generic_text, plural, sentence
from ...records import Summary
from ...stats import ALPHA
from ...runstore import load_scores
from .. import get
from .params import NegationParams
from .plots import interaction_plot
from .stats import (PY_TEST, R_TEST, cell_means, fit_info_table, lmm_tables, predicted_cells, records, seed_table,
                    use_r_default)


def load_negation_scores(run_dir, include_limited: bool = False) -> pd.DataFrame:
    """Every complete model's sentence scores joined with the stimuli (one row per model × sentence).

    Adds ``log_ppl`` and, per item and context, the token-length difference between the negated and affirmative
    sentence (``token_diff_neg_minus_aff``) for this model's tokenizer.
    """
    df = load_scores(run_dir, get("negation").spec, include_limited=include_limited)
    df["log_ppl"] = np.log(df["ppl"])
    lengths = df.pivot_table(index=["model", "item_id", "context"], columns="form", values="n_tokens", aggfunc="first")
    if {"negated", "affirmative"}.issubset(lengths.columns):
        diff = (lengths["negated"] - lengths["affirmative"]).rename("token_diff_neg_minus_aff").reset_index()
        df = df.merge(diff, on=["model", "item_id", "context"], how="left")
    else:
        df["token_diff_neg_minus_aff"] = np.nan
    return df


LATEX = ("table1_ppl", "table1_log_ppl", "main_effects_ppl", "main_effects_log_ppl")


def compute(scores: pd.DataFrame, params: NegationParams | None = None, **options) -> Analysis:
    """All negation tables from a joined scores frame (see ``load_negation_scores``); ``predicted`` (the model's
    predicted cells, drawn in the interaction figure) is kept with them but not written as a table.

    ``use_r`` True fits the LMMs with lme4/lmerTest when R has them (Satterthwaite t, the headline), else with
    statsmodels MixedLM (z); False always with statsmodels. ``params``: a ``NegationParams``, or its fields as keywords.
    """
    use_r = NegationParams.of(params, options).use_r
    a = Analysis(scores)
    coefs, info, agreement = lmm_tables(scores, use_r=use_r and use_r_default())
    a.tables = {"lmm_coefficients": coefs, "lmm_fits": fit_info_table(info), "spec_agreement": agreement,
                "table1_ppl": seed_table(coefs, "ppl", "treatment"),
                "table1_log_ppl": seed_table(coefs, "log_ppl", "treatment"),
                "main_effects_ppl": seed_table(coefs, "ppl", "deviation"),
                "main_effects_log_ppl": seed_table(coefs, "log_ppl", "deviation"), "cell_means": cell_means(scores),
                "token_length": (scores.drop_duplicates(["model", "item_id", "context"])
                                 .groupby("model")["token_diff_neg_minus_aff"]
                                 .agg(mean_diff="mean", share_equal=lambda s: float((s == 0).mean())).reset_index()),
                "predicted": predicted_cells(coefs)}
    blocks: dict = {}
    dev = coefs[(coefs["coding"] == "deviation") & (coefs["term"] == "context × form")]
    for model, g in dev.groupby("model", sort=False):
        blocks[model] = {}
        for r in g.itertuples(index=False):
            blocks[model][r.spec] = {"interaction_coef": float(r.estimate), "p": float(r.p), "df": r.df,
                                      "ci95": [float(r.ci_low), float(r.ci_high)], "valid": bool(r.valid), "test": r.test}
    for r in agreement.itertuples(index=False):
        blocks.setdefault(r.model, {})["conclusions_agree"] = bool(r.interaction_conclusions_agree)
    summary: dict = {"models": blocks}
    summary["headline_test"] = ("deviation-coded context × form on log-perplexity (test "
                                + (R_TEST if info["satterthwaite"].any() else PY_TEST)
                                + "); the paper's Table 1 (perplexity, treatment coding) is reported alongside")
    summary["records"] = records(coefs, info)
    a.summary = artifacts.json_clean(summary)
    models = sorted(scores["model"].unique().tolist()) if len(scores) else []
    a.text = generic_text(
        a.summary, "Do models find negation more natural for stereotype-inconsistent behaviour?",
        f"{plural(len(models), 'model')} ({', '.join(models)}); "
        f"{plural(scores['item_id'].nunique() if len(scores) else 0, 'item')}, each "
        "in a stereotype-consistent and an -inconsistent context, affirmative and negated; the headline is the "
        "deviation-coded context × form interaction on log-perplexity in a linear mixed model.",
        lambda r: bool(r.get("headline")), extra=meaning_lines(a.summary))
    return a


def meaning_lines(summary: dict, alpha: float = ALPHA) -> list[str]:
    """What the headline's b means (its scale, coding and sign), each main effect found on the headline's scale in
    words, and what interaction each model's design could detect (normal approximation from its standard error)."""
    from scipy.stats import norm

    recs = [r for r in Summary(summary).records if r.get("spec") == "log_ppl" and r.get("coding") == "deviation"]
    heads = [r for r in recs if r.get("headline") and r.get("valid")]
    if not heads:
        return []
    out = ["Reading b: the difference in log-perplexity (a sentence's mean negative log-probability per token), "
           "deviation coded (consistent and affirmative +½, inconsistent and negated −½); an interaction below 0 "
           "means negation is relatively more natural in stereotype-inconsistent contexts, the bias the study asks "
           "about, above 0 in stereotype-consistent ones; b = 0.10 is a perplexity about 10% higher."]
    out += [sentence(r, alpha, recs, reasons=False) for r in recs if not r.get("headline") and r.get("valid")
            and str(r.get("term")).split(" [")[0] in ("context", "form") and isinstance(r.get("p"), float)
            and r["p"] < alpha]
    for r in heads:
        if isinstance(r.get("ci_low"), float) and isinstance(r.get("ci_high"), float) and r["ci_high"] > r["ci_low"]:
            half = (r["ci_high"] - r["ci_low"]) / 2  # its own test's critical value times its SE (t with few items)
            b = half * (norm.ppf(1 - alpha / 2) + norm.ppf(0.8)) / norm.ppf(1 - alpha / 2)
            out.append(f"Power, approximately: with {r['model']}'s 95% CI of b ±{fmt_num(half)} wide, an "
                       f"interaction of about |b| = {fmt_num(b)} (a ratio of perplexity ratios of "
                       f"{fmt_num(float(np.exp(b)))}) is found 4 times in 5 at α = {fmt_alpha(alpha)} (normal "
                       "approximation); a smaller one may go unseen.")
    return out


def write(a: Analysis, run_dir) -> list[Path]:
    """Tables as CSV (+ LaTeX for the paper's Table 1 and the main effects), the interaction figure as PNG and PDF,
    summary.json."""
    figs = {} if a.tables["predicted"].empty else {"interaction": interaction_plot(a.tables["predicted"])}
    return write_analysis(a, run_dir, figs, latex=LATEX, float_format="%.3g", skip=("predicted",))


STEPS = Steps(
    params=NegationParams,
    load=lambda run_dir, params: load_negation_scores(run_dir, include_limited=params.include_limited),
    compute=lambda scores, run_dir, params: compute(scores, params),
    write=lambda a, run_dir, variants: write(a, run_dir),
    cannot_compare="the negation study scores sentences (perplexity), with no decision to compare between "
                   "precisions, so each precision is analysed as a model of its own")


def analyze_run(run_dir, params: NegationParams | None = None, **options) -> Analysis:
    """Load every complete model's scores in ``run_dir`` (limited runs too when asked), compute all tables, write them
    (``analysis.run_analysis``).

    ``params``: a ``NegationParams``, or its fields as keywords (``use_r``: lme4/lmerTest when R has them, else
    statsmodels MixedLM; False: statsmodels; ``include_limited``; ``seed``, there because every analysis takes one:
    nothing in these fits is drawn at random), checked before anything in the run changes.
    """
    return run_analysis(run_dir, STEPS, NegationParams.of(params, options))
