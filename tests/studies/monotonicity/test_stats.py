"""The analysis on simulated data where the truth is known."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

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
    a = analysis.compute(simulate(prompts, "biased", 0.85, 0.55, 0.85, seed=1), n_boot=300)
    g = a.tables["gap_pooled"].set_index("condition")
    cl = g.loc["concept_learning"]
    assert 0.2 < cl["gap"] < 0.4 and cl["gap_ci_low"] > 0 and cl["p_cmh"] < 1e-6
    assert g.loc["explicit", "p_cmh"] > 0.01 and g.loc["explicit", "gap_ci_low"] < 0 < g.loc["explicit", "gap_ci_high"]
    mm = a.tables["mixed_model"].set_index("term")
    assert mm.loc["upward", "ci_low"] > 0 and mm.loc["upward", "gee_p"] < 1e-6
    assert mm.loc["upward:explicit", "ci_high"] < 0, "the gap shrinks when the concept is explicit"
    s = a.summary["biased"]["conditions"]["concept_learning"]
    assert s["gap"] == pytest.approx(cl["gap"]) and s["p_cmh"] < 1e-6
    fisher = a.tables["gap_by_threshold"]
    assert len(fisher[fisher.condition == "concept_learning"]) == 3 and (fisher["p_fisher"] <= 1).all()


def test_zero_gap_is_not_detected(prompts):
    a = analysis.compute(simulate(prompts, "fair", 0.7, 0.7, 0.7, seed=2), n_boot=300)
    for r in a.tables["gap_pooled"].itertuples():
        assert r.gap_ci_low < 0 < r.gap_ci_high and r.p_cmh > 0.05


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
    a = analysis.compute(d, n_boot=50)
    assert len(a.tables["accuracy"]) > 0
    if case == "only_upward":
        assert a.tables["gap_pooled"].empty and any("no gap" in n for n in a.notes)
    if case == "one_model_one_threshold":
        assert any("one threshold" in n for n in a.notes)
    if case == "missing_condition":
        assert any("only one condition" in n for n in a.notes) and a.tables["mcnemar"].empty
    if case == "perfect":
        assert any("no model fitted" in n for n in a.notes)


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
