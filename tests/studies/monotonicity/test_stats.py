"""The analysis on simulated data where the truth is known."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scipy import stats as sps

from nbutils.stats import RECORD_KEYS, holm, sign_flip_test
from nbutils.studies.common import quantifier_mixed_models as qmixed, quantifier_stats as qstats
from nbutils.studies.monotonicity import analysis, stats
from nbutils.studies.monotonicity.dataset import generate_prompts

CONCEPTS = ["more than 1/2", "less than 1/2", "more than 1/3", "less than 1/3", "more than 1/4", "less than 1/4"]


@pytest.fixture(scope="module")
def prompts() -> pd.DataFrame:
    return generate_prompts(CONCEPTS, prompts_per_concept=120, n_examples=20, seed=11)


def simulate(prompts: pd.DataFrame, model: str, p_up: float, p_down: float, p_explicit: float, seed: int) -> pd.DataFrame:
    """Answers correct with the given probabilities (concept learning: by monotonicity; explicit: one rate)."""
    rng = np.random.default_rng(seed)
    p = np.where(prompts["monotonicity"] == "upward", p_up, p_down)
    p = np.where(prompts["condition"] == "explicit", p_explicit, p)
    correct = rng.random(len(prompts)) < p
    pred = np.where(correct, prompts["label"], ~prompts["label"])
    margin = np.where(pred, 1.0, -1.0) * rng.exponential(1.0, len(prompts))
    return prompts.assign(model=model, correct=correct, pred_yes=pred, margin=margin)


def test_planted_gap_is_detected_and_shrinks_when_explicit(prompts):
    a = analysis.compute(simulate(prompts, "biased", 0.85, 0.55, 0.85, seed=1), n_boot=300, use_r=False)
    g = a.tables["gap_pooled"].set_index("condition")
    cl = g.loc["concept_learning"]
    assert 0.2 < cl["gap"] < 0.4 and cl["gap_ci_low"] > 0 and cl["p_cmh"] < 1e-6
    assert cl["or_mh_ci_low"] > 2 and cl["log_or_ci_low"] > 0.5 and cl["p_breslow_day"] > 0.05
    assert cl["p_signflip"] == pytest.approx(0.25), "3 thresholds, all positive: the smallest exact p is 2/2^3"
    assert g.loc["explicit", "p_cmh"] > 0.01 and g.loc["explicit", "gap_ci_low"] < 0 < g.loc["explicit", "gap_ci_high"]
    mm = a.tables["mixed_model"]
    assert set(mm["test"]) == {"gee_bias_reduced"} and mm["headline"].all()
    assert not mm["valid"].any() and mm["p"].isna().all(), "3 thresholds, 4 coefficients: the GEE is not estimable"
    diff = a.tables["gap_difference"].iloc[0]
    assert diff["log_or_cl_minus_explicit"] > 1 and diff["ci_low"] > 0
    s = a.summary["models"]["biased"]["conditions"]["concept_learning"]
    assert s["gap"] == pytest.approx(cl["gap"]) and s["p_cmh"] < 1e-6
    assert a.summary["models"]["biased"]["mixed_model"]["test"] == "gee_bias_reduced"
    fisher = a.tables["gap_by_threshold"]
    assert len(fisher[fisher.condition == "concept_learning"]) == 3 and (fisher["p_fisher"] <= 1).all()
    assert (fisher["p_holm"] >= fisher["p_fisher"] - 1e-12).all()
    for (_, _), f in fisher.groupby(["model", "condition"]):
        assert np.allclose(f["p_holm"], holm(f["p_fisher"]))


def test_zero_gap_is_not_detected(prompts):
    a = analysis.compute(simulate(prompts, "fair", 0.7, 0.7, 0.7, seed=2), n_boot=300, use_r=False)
    for r in a.tables["gap_pooled"].itertuples():
        # (the cluster bootstrap's percentile CI over 3 thresholds is too narrow to test with: see calibration.json)
        assert r.p_signflip > 0.05 and r.p_cmh > 0.05 and r.log_or_ci_low < 0 < r.log_or_ci_high
    assert not a.tables["mixed_model"]["valid"].any(), "3 thresholds, 4 coefficients: the GEE is not estimable"


def test_the_gee_finds_a_planted_gap_and_its_shrinking_and_no_gap_where_there_is_none(six_thresholds):
    """Six thresholds, both conditions (4 coefficients): estimable. t(K − 1 = 5) p-values and CIs."""
    mm = analysis.compute(simulate(six_thresholds, "biased", 0.85, 0.55, 0.85, seed=1), n_boot=100,
                          use_r=False).tables["mixed_model"]
    assert set(mm["test"]) == {"gee_bias_reduced"} and mm["headline"].all() and mm["valid"].all()
    gee = mm.set_index(["term", "condition"], drop=False)
    up = gee.loc[("upward", "concept_learning")]
    assert up["ci_low"] > 0 and up["p"] < 0.01 and up["df"] == 5, "t with K − 1 = 5 degrees of freedom"
    assert up["p"] == pytest.approx(2 * sps.t.sf(up["estimate"] / up["se"], 5))
    inter = mm[mm["term"] == "upward:explicit"].iloc[0]
    assert inter["ci_high"] < 0, "the gap shrinks when the concept is explicit"
    ex = gee.loc[("upward", "explicit")]
    assert ex["ci_low"] < 0 < ex["ci_high"] and ex["estimate"] == pytest.approx(up["estimate"] + inter["estimate"])
    fair = analysis.compute(simulate(six_thresholds, "fair", 0.7, 0.7, 0.7, seed=2), n_boot=100,
                            use_r=False).tables["mixed_model"]
    assert fair["valid"].all() and (fair["p"] > 0.05).all()
    assert (fair["ci_low"] < 0).all() and (fair["ci_high"] > 0).all()


@pytest.mark.slow  # ~6 s
def test_pure_yes_bias_has_no_discrimination(prompts):
    d = prompts.assign(model="yes-sayer", pred_yes=True)
    d = d.assign(correct=d["label"], margin=1.0)
    a = analysis.compute(d, n_boot=100)
    sdt = a.tables["signal_detection"]
    assert np.allclose(sdt["d_prime"], 0, atol=1e-9) and (sdt["yes_rate"] == 1).all()
    assert (sdt["criterion"] < -1).all(), "a liberal criterion"
    assert any("answers 'Yes' to every prompt" in n for n in a.notes)
    acc = a.tables["accuracy"]
    assert np.allclose(acc["accuracy"], 0.5)


def test_wilson_interval_and_binomial_test():
    lo, hi = stats.wilson(80, 100)
    assert lo == pytest.approx(0.7111, abs=1e-3) and hi == pytest.approx(0.8666, abs=1e-3)
    df = pd.DataFrame({"model": "m", "condition": "concept_learning", "concept": "more than 1/2", "family": "proportional",
                       "quantifier": "more_than", "threshold": "1/2", "monotonicity": "upward",
                       "correct": [True] * 15 + [False] * 5, "pred_yes": True})
    row = stats.accuracy_table(df).iloc[0]
    assert row["p_binom"] == pytest.approx(0.04138947, rel=1e-5)


def test_mcnemar_uses_the_pairs(prompts):
    d = simulate(prompts, "m", 0.6, 0.6, 0.6, seed=3)
    # make explicit right exactly where concept learning was wrong, and vice versa
    cl = d[d.condition == "concept_learning"].set_index("pair_id")["correct"]
    flip = d["condition"] == "explicit"
    d.loc[flip, "correct"] = ~d.loc[flip, "pair_id"].map(cl).to_numpy()
    mc = stats.mcnemar_conditions(d)
    assert len(mc) == len(CONCEPTS) and (mc["n_pairs"] == 120).all()
    assert ((mc["only_cl_correct"] + mc["only_explicit_correct"]) == 120).all()


@pytest.mark.parametrize("case", ["one_model_one_threshold", "missing_condition", "only_upward", "perfect"])
def test_degenerate_inputs_do_not_crash(prompts, case):
    d = simulate(prompts, "m", 0.8, 0.6, 0.8, seed=4)
    if case == "one_model_one_threshold":
        d = d[d.threshold == "1/2"]
    elif case == "missing_condition":
        d = d[d.condition == "concept_learning"]
    elif case == "only_upward":
        d = d[d.monotonicity == "upward"]
    else:
        d = d.assign(correct=True, pred_yes=d["label"])
    a = analysis.compute(d, n_boot=50, use_r=False)
    acc = a.tables["accuracy"]
    assert len(acc) == d.groupby(["condition", "concept"]).ngroups and acc["n"].sum() == len(d)
    recs = a.summary["records"]
    assert recs and all(tuple(r)[:len(RECORD_KEYS)] == RECORD_KEYS for r in recs)
    if case == "only_upward":
        assert a.tables["gap_pooled"].empty and any("no gap" in n for n in a.notes)
        assert list(a.tables["mixed_model"]["term"]) == ["explicit"], "only the condition can be compared"
    if case == "one_model_one_threshold":
        assert any("one threshold" in n for n in a.notes)
        one = [r for r in recs if r["test"] in ("signflip_gap", "cluster_bootstrap", "gee_bias_reduced")]
        assert one and not any(r["valid"] for r in one), "nothing generalises beyond a single threshold"
    if case == "missing_condition":
        assert any("only one condition" in n for n in a.notes) and a.tables["mcnemar"].empty
        assert a.tables["gap_difference"].empty
        gee = a.tables["mixed_model"]
        assert list(gee["term"]) == ["upward"] and list(gee["condition"]) == ["concept_learning"]
    if case == "perfect":
        assert any("no model fitted" in n for n in a.notes)
        assert (a.tables["gap_pooled"]["gap"] == 0).all() and (a.tables["gap_pooled"]["p_signflip"] == 1).all()


def test_many_models_get_holm_across_models(prompts):
    d = pd.concat([simulate(prompts, f"m{i}", 0.8, 0.6 + 0.05 * i, 0.8, seed=i) for i in range(3)])
    g = stats.pooled_gap(d, n_boot=100)
    assert set(g["model"]) == {"m0", "m1", "m2"}
    assert (g["p_holm_models"] >= g["p_cmh"] - 1e-12).all()


@pytest.mark.slow
def test_false_positive_rate_near_five_percent(prompts):
    """Repeated null simulations: the pooled-gap test rejects about 5% of the time."""
    base = prompts[prompts.condition == "concept_learning"]
    rejections = [stats.pooled_gap(simulate(base, "null", 0.7, 0.7, 0.7, seed=s), n_boot=10)["p_cmh"].iloc[0] < 0.05
                  for s in range(200)]
    rate = float(np.mean(rejections))
    assert 0.01 <= rate <= 0.10, rate


def test_sign_flip_is_exact_for_few_thresholds_and_seeded_monte_carlo_for_many():
    import itertools

    x = np.array([0.3, 1.2, -0.4, 0.8, 0.5, 0.9, -0.1])
    brute = np.mean([abs(np.mean(np.array(s) * x)) >= abs(x.mean()) - 1e-12
                     for s in itertools.product([-1, 1], repeat=len(x))])
    p, exact = sign_flip_test(x)
    assert exact and p == pytest.approx(brute)
    assert sign_flip_test([1.0, 2.0, 3.0]) == (pytest.approx(0.25), True)
    p_mc, exact_mc = sign_flip_test(x, exact_max=0, n_mc=40000, seed=1)
    assert not exact_mc and p_mc == pytest.approx(brute, abs=0.01)
    assert sign_flip_test(x, exact_max=0, seed=3) == sign_flip_test(x, exact_max=0, seed=3), "seeded"
    p20, _ = sign_flip_test(np.ones(20), n_mc=5000)
    assert p20 == pytest.approx(1 / 5001, rel=0.5)


def test_cmh_has_no_continuity_correction_and_reports_the_mantel_haenszel_odds_ratio(prompts):
    d = simulate(prompts[prompts.condition == "concept_learning"], "m", 0.75, 0.65, 0.7, seed=5)
    r = stats.pooled_gap(d, n_boot=50).iloc[0]
    cells = qstats.threshold_cells(d)
    a, b = cells["k_up"].to_numpy(float), (cells["n_up"] - cells["k_up"]).to_numpy(float)
    c, dd = cells["k_down"].to_numpy(float), (cells["n_down"] - cells["k_down"]).to_numpy(float)
    n = a + b + c + dd
    expected = (a + b) * (a + c) / n
    var = (a + b) * (c + dd) * (a + c) * (b + dd) / (n**2 * (n - 1))
    chi2 = (a - expected).sum() ** 2 / var.sum()  # textbook CMH, no −0.5, no added 0.5 per cell
    assert r["p_cmh"] == pytest.approx(sps.chi2.sf(chi2, 1), rel=1e-9)
    assert r["or_mh"] == pytest.approx((a * dd / n).sum() / (b * c / n).sum(), rel=1e-12)
    assert r["or_mh_ci_low"] < r["or_mh"] < r["or_mh_ci_high"] and 0 <= r["p_breslow_day"] <= 1
    rec = next(x for x in stats.records({"gap_pooled": stats.pooled_gap(d, n_boot=50)}) if x["test"] == "cmh")
    assert rec["note"].startswith("fixed-threshold test (these thresholds only)")
    assert rec["estimate"] == pytest.approx(np.log(r["or_mh"])) and rec["p"] == pytest.approx(r["p_cmh"])


def test_cluster_bootstrap_resamples_thresholds_not_prompts(prompts):
    """Every threshold with exactly the same counts: resampling thresholds cannot move the gap, so the CI has zero
    width (resampling prompts within thresholds would give it width)."""
    d = prompts[prompts.condition == "concept_learning"].copy()
    d["correct"] = np.where(d["monotonicity"] == "upward", d.groupby("concept").cumcount() % 4 != 0,
                            d.groupby("concept").cumcount() % 2 == 0)
    d = d.assign(model="m", pred_yes=np.where(d["correct"], d["label"], ~d["label"]))
    r = stats.pooled_gap(d, n_boot=500).iloc[0]
    assert r["gap"] == pytest.approx(0.25) and r["gap_ci_low"] == pytest.approx(0.25) and r["gap_ci_high"] == pytest.approx(0.25)


def test_mcnemar_family_gets_holm(prompts):
    d = simulate(prompts, "m", 0.8, 0.6, 0.7, seed=6)
    mc = stats.mcnemar_conditions(d)
    assert np.allclose(mc["p_holm"], holm(mc["p_mcnemar"])) and (mc["p_holm"] >= mc["p_mcnemar"]).all()


@pytest.fixture(scope="module")
def six_thresholds() -> pd.DataFrame:
    concepts = [f"{q} than {t}" for t in ("1/2", "1/3", "2/3", "1/4", "3/4", "1/5") for q in ("more", "less")]
    return generate_prompts(concepts, prompts_per_concept=60, n_examples=20, seed=12)


def test_dprime_gap_has_threshold_level_inference(six_thresholds):
    d = simulate(six_thresholds, "m", 0.9, 0.6, 0.75, seed=7)
    dg = stats.dprime_gap(stats.signal_detection(d)).set_index("condition")
    cl, ex = dg.loc["concept_learning"], dg.loc["explicit"]
    assert cl["n_thresholds"] == 6 and cl["dprime_gap_matched"] > 0.5 and cl["ci_low"] > 0
    assert cl["p_signflip"] == pytest.approx(2 / 64), "all six threshold differences positive: exact p = 2/2^6"
    assert ex["p_signflip"] > 0.05 and ex["ci_low"] < 0 < ex["ci_high"]
    assert 0 < cl["se_delta"] < 1
    gap = stats.pooled_gap(d, n_boot=200).set_index("condition")
    assert gap.loc["concept_learning", "p_signflip"] == pytest.approx(2 / 64)


def test_without_r_the_gee_is_the_headline(six_thresholds, monkeypatch):
    monkeypatch.setenv("NB_RSCRIPT", "none")
    d = simulate(six_thresholds, "m", 0.85, 0.6, 0.85, seed=8)
    a = analysis.compute(d, n_boot=100)
    mm = a.tables["mixed_model"]
    assert set(mm["test"]) == {"gee_bias_reduced"} and mm["headline"].all()
    assert any("R with lme4 not found" in n for n in a.notes)
    recs = a.summary["records"]
    assert {"gee_bias_reduced", "signflip_gap", "cluster_bootstrap", "cmh", "breslow_day", "signflip_gap_difference",
            "fisher", "mcnemar", "binomial", "signflip_dprime_gap", "floor_binomial",
            "examples_score_test"} == {r["test"] for r in recs}
    head = [r for r in recs if r.get("headline")]
    assert {(r["term"], r["condition"]) for r in head} == {("upward", "concept_learning"), ("upward", "explicit"),
                                                           ("explicit", None), ("upward:explicit", None)}
    assert all(r["valid"] and r["df"] == 5 for r in head)


def test_a_gee_with_no_more_thresholds_than_coefficients_is_not_estimable_and_shows_no_numbers(prompts):
    """Two thresholds and both conditions (4 coefficients): the sandwich covariance of 2 cluster scores is singular,
    so every GEE row is invalid, says why, and carries no estimate, SE, CI or p; no numerical warning escapes."""
    import warnings

    two = prompts[prompts["threshold"].isin(["1/2", "1/3"])]
    d = simulate(two, "m", 0.85, 0.6, 0.85, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = qmixed.gee_model(d)
    assert len(g) == 4 and not g["valid"].any()
    assert g["note"].str.contains("not estimable: the clustered GEE needs more thresholds than coefficients "
                                  r"\(2 thresholds, 4 coefficients\); use at least 5 thresholds").all()
    assert g[["estimate", "se", "ci_low", "ci_high", "p"]].isna().all().all()
    five = prompts[prompts["threshold"].isin(["1/2", "1/3", "1/4"])]  # 3 thresholds, 1 condition: 2 coefficients
    g1 = qmixed.gee_model(simulate(five[five["condition"] == "concept_learning"], "m", 0.85, 0.6, 0.85, seed=4))
    assert g1["valid"].all() and g1["se"].notna().all() and (g1["df"] == 2).all()
