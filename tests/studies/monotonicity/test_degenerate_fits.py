"""Degenerate fits never reach a headline: a separated or exploding fit is not valid, says why, and its headline
falls back to the next valid test of the same quantity (``fallback_for``).

Simulated scores only (no model): a one-threshold design with every prompt pair answered alike in both conditions
(its GLMM has a pair SD of 50.7 and reads "OR = 1.00, 95% CI [0.00, 1099.95]" at face value), a model answering
"No" to every prompt, a five-threshold run with pairs answered alike, a design cell answered all correct; and sound
designs, which must stay valid.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import special

from nbutils.stats import fallback_headlines, fit_problems, r_available
from nbutils.results import reason
from nbutils.studies.monotonicity import stats

needs_r = pytest.mark.skipif(not r_available("lme4"), reason="R with lme4 is not installed")
CL, EX = "concept_learning", "explicit"


def frame(k: int, n: int, seed: int, *, acc: float = 2 / 3, alike: bool = True, all_no: bool = False,
          exact: bool = False, gap: float = 0.0, sd_pair: float = 0.5) -> pd.DataFrame:
    """k thresholds × up/down × n prompts × both conditions. ``alike``: each pair is answered the same in both
    conditions (correct with probability ``acc``, or exactly round(acc·n) of n per concept with ``exact``); else a
    logistic truth with a pair effect and the log odds ratio ``gap`` for upward concepts. ``all_no``: "No" to all."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(k):
        for up in (1, 0):
            right = ((np.arange(n) < round(acc * n))[rng.permutation(n)] if exact else rng.random(n) < acc)
            for i in range(n):
                label, pair = i % 2 == 0, rng.normal(0, sd_pair)
                for cond in (CL, EX):
                    ok = right[i] if alike else rng.random() < special.expit(0.5 + up * gap + pair)
                    pred = False if all_no else (label if ok else not label)
                    rows.append({"model": "m", "condition": cond, "family": "proportional",
                                 "threshold": f"{t + 1}/{k + 1}",
                                 "monotonicity": "upward" if up else "downward",
                                 "quantifier": "more_than" if up else "less_than",
                                 "concept": f"{'more' if up else 'less'} than {t + 1}/{k + 1}",
                                 "pair_id": f"{t}-{up}-{i}", "query_noun": f"n{rng.integers(12)}", "label": label,
                                 "pred_yes": pred, "correct": pred == label})
    return pd.DataFrame(rows)


def analysed(d: pd.DataFrame) -> list[dict]:
    """The analysis's records of the mixed model and the pooled gap."""
    return stats.records({"mixed_model": stats.mixed_model(d), "gap_pooled": stats.pooled_gap(d, n_boot=50)})


def headline(d: pd.DataFrame) -> list[dict]:
    return [r for r in analysed(d) if r.get("headline")]


def odds_ratio(r: dict) -> tuple[str, str, str]:
    return tuple(f"{math.exp(r[k]):.2f}" for k in ("estimate", "ci_low", "ci_high"))


def by(recs, test, term="upward", condition=CL) -> dict:
    return next(r for r in recs if r["test"] == test and r["term"] == term and r["condition"] == condition)


def test_fit_problems_names_each_degeneracy_and_passes_a_sound_fit():
    assert fit_problems(0.3, 0.2, -0.1, 0.7) == []
    assert fit_problems(0.3, 0.2, -0.1, 0.7, random_sd={"threshold": 0.4, "pair": 9.9}) == []
    assert "singular Hessian" in fit_problems(0.3, float("nan"))[0]
    assert "singular Hessian" in fit_problems(0.3, 1e-16)[0]
    assert "separation" in fit_problems(9.0, 1.0)[0]
    # [0.00, 1099.95] on the odds-ratio scale: 6.1 orders of magnitude; [0.01, 40.08]: 3.6; [0.30, 3.32]: 1.0
    assert "6.1 orders of magnitude" in fit_problems(0.0, 3.57, -7.0, 7.0)[0]
    assert fit_problems(0.0, 1.0, math.log(0.01), math.log(40.08))
    assert fit_problems(0.0, 0.6, math.log(0.30), math.log(3.32)) == []
    sd = fit_problems(0.0, 1.0, -1.0, 1.0, random_sd={"pair": 50.74})
    assert len(sd) == 1 and "SD is 50.7" in sd[0] and "over 10" not in sd[0]  # no internal threshold
    assert "boundary" in fit_problems(0.0, 1.0, -1.0, 1.0, random_sd={"noun": 0.0})[0]


def test_fallback_goes_to_the_first_valid_later_test_of_the_same_term():
    recs = [{"test": "glmm_lrt", "model": "m", "condition": CL, "term": "upward", "valid": False, "headline": True,
             "estimate": 0.0},
            {"test": "gee_bias_reduced", "model": "m", "condition": CL, "term": "upward", "valid": False,
             "estimate": None},
            {"test": "cmh", "model": "m", "condition": EX, "term": "upward", "valid": True, "estimate": 0.1},
            {"test": "cmh", "model": "m", "condition": CL, "term": "upward", "valid": True, "estimate": 0.2},
            {"test": "signflip_gap", "model": "m", "condition": CL, "term": "upward", "valid": True, "estimate": 0.3},
            {"test": "glmm_lrt", "model": "m", "condition": None, "term": "explicit", "valid": True, "headline": True,
             "estimate": 0.4}]
    fallback_headlines(recs, ["glmm_lrt", "gee_bias_reduced", "signflip_gap", "cmh"])
    assert [r.get("fallback_for") for r in recs] == [None, None, None, None, "glmm_lrt", None]
    assert [bool(r.get("headline")) for r in recs] == [True, False, False, False, True, True]


def test_the_sample_design_without_r_falls_back_to_the_mantel_haenszel_odds_ratio(monkeypatch):
    """One threshold, 16 of 24 right per concept, pairs alike: the GEE has no clustered inference; the headline says
    so and hands the gap to the Mantel–Haenszel odds ratio, OR 1.00 [0.30, 3.32]."""
    monkeypatch.setenv("NB_RSCRIPT", "none")
    head = headline(frame(1, 24, seed=0, exact=True))
    gee = by(head, "gee_bias_reduced")
    assert not gee["valid"] and "one threshold" in reason(gee)
    for cond in (CL, EX):
        cmh = by(head, "cmh", condition=cond)
        assert cmh["valid"] and cmh["fallback_for"] == "gee_bias_reduced"
        assert odds_ratio(cmh) == ("1.00", "0.30", "3.32")
    assert {r["test"] for r in head} == {"gee_bias_reduced", "cmh"}


@needs_r
def test_the_sample_design_glmm_is_not_valid_and_names_the_separation():
    """The one-threshold design's GLMM (pair SD 50.7; "OR = 1.00, 95% CI [0.00, 1099.95]" at face value) is not
    valid, every term says the pairs separate the data, and the gap falls back to the Mantel–Haenszel odds ratio."""
    head = headline(frame(1, 24, seed=0, exact=True))
    glmm = [r for r in head if r["test"] == "glmm_lrt"]
    assert len(glmm) == 4 and not any(r["valid"] for r in glmm)
    assert all(reason(r).startswith("every prompt pair was answered alike in both conditions") for r in glmm)
    up = by(head, "glmm_lrt")
    assert (up["ci_high"] - up["ci_low"]) / math.log(10) > 3, "an interval that says nothing"
    for cond in (CL, EX):
        cmh = by(head, "cmh", condition=cond)
        assert cmh["fallback_for"] == "glmm_lrt" and odds_ratio(cmh) == ("1.00", "0.30", "3.32")


@needs_r
def test_a_model_answering_no_to_every_prompt_has_no_valid_glmm():
    """All "No": every pair is answered alike; the optimizer stops at a pair SD under 10, but the pairs still separate
    the data, so every GLMM term is not valid (at face value the gap reads "OR = 1.00, 95% CI [0.00, 2.2e+07]")."""
    head = headline(frame(1, 24, seed=1, all_no=True))
    glmm = [r for r in head if r["test"] == "glmm_lrt"]
    assert glmm and not any(r["valid"] for r in glmm)
    assert all("answered alike" in reason(r) for r in glmm)
    assert odds_ratio(by(head, "cmh"))[0] == "1.00" and by(head, "cmh")["fallback_for"] == "glmm_lrt"


@needs_r
def test_five_thresholds_with_pairs_answered_alike_fall_back_to_the_gee():
    """Five thresholds × 6 prompts, pairs alike (at face value an interval like "OR = 0.58, 95% CI [0.01, 40.08]"):
    the GLMM is not valid; the gap is reported by the GEE clustered by threshold, whose terms within pairs
    (explicit, upward × explicit) have a zero sandwich variance and are not valid either, with the reason."""
    recs = analysed(frame(5, 6, seed=1, acc=0.5))
    head = [r for r in recs if r.get("headline")]
    assert not any(r["valid"] for r in head if r["test"] == "glmm_lrt")
    within = [r for r in recs if r["test"] == "gee_bias_reduced" and r["term"] in ("explicit", "upward:explicit")]
    assert len(within) == 2 and all(not r["valid"] and "singular" in reason(r) for r in within)
    for cond in (CL, EX):
        gee = by(head, "gee_bias_reduced", condition=cond)
        assert gee["valid"] and gee["fallback_for"] == "glmm_lrt"
        lo, hi = math.exp(gee["ci_low"]), math.exp(gee["ci_high"])
        assert lo > 0.1 and hi < 10 and (math.log10(hi) - math.log10(lo)) < 3


def test_a_design_cell_answered_all_correct_is_separation(monkeypatch):
    """Every upward prompt right under concept learning: the GEE's gap there is not valid (quasi-complete separation)
    and names the cell; the gap's headline falls back to a valid test of the same condition."""
    monkeypatch.setenv("NB_RSCRIPT", "none")
    d = frame(6, 20, seed=3, alike=False, gap=0.8)
    d.loc[(d["monotonicity"] == "upward") & (d["condition"] == CL), "correct"] = True
    head = headline(d)
    gee = by(head, "gee_bias_reduced")
    assert not gee["valid"] and "every answer to upward concepts under concept learning is correct" in reason(gee)
    stand_in = next(r for r in head if r.get("fallback_for") == "gee_bias_reduced" and r["condition"] == CL)
    assert stand_in["valid"] and stand_in["term"] == "upward"
    assert by(head, "gee_bias_reduced", condition=EX)["valid"], "the other condition's cells are not separated"


@pytest.mark.parametrize("use_r", [pytest.param(True, marks=needs_r), False])
def test_a_sound_design_stays_valid_with_no_fallback(use_r, monkeypatch):
    """Six thresholds × 16 prompts, a planted gap and pair variance: every headline term is valid, no rule fires."""
    if not use_r:
        monkeypatch.setenv("NB_RSCRIPT", "none")
    d = frame(6, 16, seed=11, alike=False, gap=0.8)
    mm = stats.mixed_model(d)
    head = headline(d)
    assert head and all(r["valid"] and not r.get("fallback_for") for r in head)
    assert {r["test"] for r in head} == {"glmm_lrt" if use_r else "gee_bias_reduced"}
    assert (mm["degenerate"] == "").all()
