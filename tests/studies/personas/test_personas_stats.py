"""Statistics of the persona study: the DIF ratio by hand, the tests against their references, and simulations
(a planted persona effect is found; none is found when none is planted, at the nominal false-positive rate)."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from nbutils.stats import RECORD_KEYS
from nbutils.studies.personas import analysis, stats

N_REAL, N_NULL = 22, 20


def test_dif_ratio_matches_a_hand_computed_example():
    # questions 1..8; Ci = {1, 2, 3, 5}, Cb = {1, 2, 4, 6, 7}: ∩ = {1, 2}, ⊕ = {3, 4, 5, 6, 7}
    ci = np.isin(np.arange(1, 9), [1, 2, 3, 5])
    cb = np.isin(np.arange(1, 9), [1, 2, 4, 6, 7])
    r = stats.dif_ratio(ci, cb)
    assert (r["both"], r["sym_diff"], r["only_persona"], r["only_baseline"]) == (2, 5, 2, 3)
    assert r["ratio"] == pytest.approx(5 / 2) and r["dif"] == pytest.approx(2 / 7)  # 1 / (1 + 2.5)
    assert r["dif"] == pytest.approx(1 / (1 + r["ratio"]))
    same = stats.dif_ratio(cb, cb)
    assert same["ratio"] == 0 and same["dif"] == 1
    disjoint = stats.dif_ratio(~cb, cb)
    assert disjoint["ratio"] == np.inf and disjoint["dif"] == 0
    none = stats.dif_ratio(np.zeros(4, bool), np.zeros(4, bool))
    assert np.isnan(none["ratio"]) and np.isnan(none["dif"])
    with pytest.raises(ValueError, match="^correct_i: .* must be aligned"):
        stats.dif_ratio(ci[:3], cb)


def test_mcnemar_is_the_exact_binomial_test_of_the_discordant_pairs():
    for b, c in [(0, 5), (3, 9), (7, 7), (12, 2), (1, 0)]:
        ref = min(1.0, 2 * sps.binom.cdf(min(b, c), b + c, 0.5))
        assert stats.mcnemar_exact(b, c) == pytest.approx(ref)
    assert stats.mcnemar_exact(0, 0) == 1.0


def _scores(correct: np.ndarray, kinds: list[str], model: str = "m") -> pd.DataFrame:
    """A joined-scores frame from a questions × personas correctness matrix (persona 0 is the baseline)."""
    q, p = correct.shape
    pids = ["baseline" if k == "baseline" else f"{k}_{j}" for j, k in enumerate(kinds)]
    cats = {"baseline": "baseline", "real": "gender", "null_random": "null_random", "null_word": "null_word"}
    return pd.DataFrame({"model": model, "question_id": np.repeat([f"q{i}" for i in range(q)], p),
                         "persona_id": pids * q, "persona": pids * q, "persona_kind": kinds * q,
                         "category": [cats[k] for k in kinds] * q, "correct": correct.reshape(-1),
                         "chance": 0.25, "choice": np.where(correct.reshape(-1), "A", "B")})


def simulate(rng, n_q: int = 60, delta: float = 0.0, flip: float = 0.10, n_real: int = N_REAL, n_null: int = N_NULL,
             null_kinds=("null_random",)) -> tuple[np.ndarray, list[str]]:
    """Correctness of questions × personas: each question has its own difficulty; a persona re-draws each answer with
    probability ``flip`` (nulls) or ``flip + delta`` (real personas), so only real personas carry the planted effect."""
    p = rng.uniform(0.3, 0.95, n_q)
    base = rng.random(n_q) < p
    kinds = ["baseline"] + ["real"] * n_real + [k for k in null_kinds for _ in range(n_null)]
    cols = [base]
    for k in kinds[1:]:
        redraw = rng.random(n_q) < (flip + delta if k == "real" else flip)
        cols.append(np.where(redraw, rng.random(n_q) < p, base))
    return np.column_stack(cols), kinds


def _biases(correct: np.ndarray, kinds: list[str]) -> tuple[np.ndarray, np.ndarray]:
    b = np.array([1 - stats.dif_ratio(correct[:, j], correct[:, 0])["dif"] for j in range(1, len(kinds))])
    k = np.array(kinds[1:])
    return b[k == "real"], b[k != "real"]


def test_welch_and_permutation_agree_with_their_references():
    rng = np.random.default_rng(1)
    x, y = rng.normal(0.3, 0.05, 22), rng.normal(0.25, 0.08, 20)
    r = stats.compare_groups(x, y, n_resamples=999, seed=0)
    ref = sps.ttest_ind(x, y, equal_var=False)
    assert r["t"] == pytest.approx(ref.statistic) and r["p_welch"] == pytest.approx(ref.pvalue)
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)  # Welch by hand: t and Satterthwaite df
    assert r["t"] == pytest.approx((x.mean() - y.mean()) / np.sqrt(vx + vy))
    assert r["df"] == pytest.approx((vx + vy) ** 2 / (vx ** 2 / (len(x) - 1) + vy ** 2 / (len(y) - 1)))
    assert r["estimate"] == pytest.approx(x.mean() - y.mean()) and r["ci_low"] < r["estimate"] < r["ci_high"]
    ci = ref.confidence_interval(0.95)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((ci.low, ci.high))
    # small groups: every split of the labels enumerated by hand is the exact permutation p-value
    a, b = np.array([0.31, 0.42, 0.38, 0.5]), np.array([0.2, 0.33, 0.25, 0.29, 0.4])
    pooled, obs = np.r_[a, b], a.mean() - b.mean()
    diffs = [pooled[list(s)].mean() - np.delete(pooled, list(s)).mean() for s in itertools.combinations(range(9), 4)]
    diffs = np.array(diffs)
    greater, less = np.mean(diffs >= obs - 1e-12), np.mean(diffs <= obs + 1e-12)
    assert stats.compare_groups(a, b, n_resamples=9999, alternative="greater")["p_permutation"] == pytest.approx(greater)
    two_sided = min(1.0, 2 * min(greater, less))  # scipy's two-sided definition: twice the smaller tail
    assert stats.compare_groups(a, b, n_resamples=9999)["p_permutation"] == pytest.approx(two_sided)


def test_compare_groups_says_why_it_cannot_test():
    r = stats.compare_groups([0.1], [0.2, 0.3])
    assert not r["valid"] and "needs ≥ 2 real and ≥ 2 null" in r["note"]
    r = stats.compare_groups([0.0, 0.0], [0.0, 0.0, 0.0])
    assert not r["valid"] and "no variance" in r["note"]
    with pytest.raises(ValueError, match="^alternative: must be one of"):
        stats.compare_groups([0.1, 0.2], [0.2, 0.3], alternative="bigger")


def test_tables_on_a_planted_persona_effect():
    rng = np.random.default_rng(7)
    correct, kinds = simulate(rng, n_q=120, delta=0.25, null_kinds=("null_random", "null_word"))
    correct[:, 1] = False  # one real persona answers nothing right: McNemar must flag it
    scores = _scores(correct, kinds)
    a = analysis.compute(scores, min_overlap=10, n_resamples=999)
    dif = a.tables["dif"]
    row = dif[dif["persona_id"] == "real_1"].iloc[0]
    assert row["both"] == 0 and row["ratio"] == np.inf and row["dif"] == 0 and row["unstable"]
    assert row["p_holm"] < 1e-6 and row["sig"] == "***"
    ref = stats.dif_ratio(correct[:, 5], correct[:, 0])
    assert dif.loc[dif["persona_id"] == "real_5", ["both", "sym_diff", "dif"]].iloc[0].tolist() == \
        [ref["both"], ref["sym_diff"], pytest.approx(ref["dif"])]
    nc = a.tables["null_comparison"].set_index("null_kind")
    assert set(nc.index) == {"null_random", "null_word"}
    assert (nc["estimate"] > 0).all() and (nc["p_welch"] < 0.01).all() and (nc["p_permutation"] < 0.01).all()
    acc = a.tables["accuracy"]
    r0 = acc[acc["persona_id"] == "baseline"].iloc[0]
    assert (r0["ci_low"], r0["ci_high"]) == pytest.approx(proportion_confint(r0["correct"], r0["n"], method="wilson"))
    cats = a.tables["categories"].set_index("category")
    assert cats.loc["gender", "n_personas"] == N_REAL and cats.loc["gender", "n_significant_mcnemar"] >= 1
    recs = pd.DataFrame(a.summary["records"])
    assert {"accuracy", "dif", "mcnemar_vs_baseline", "welch_real_vs_null_random", "permutation_real_vs_null_word",
            "dif_score", "dif_vs_accuracy_regression"} <= set(recs["test"])
    assert list(recs.columns[:len(RECORD_KEYS) + 1]) == [*RECORD_KEYS, "model"]  # the shared summary.json format
    welch = recs[recs["test"] == "welch_real_vs_null_random"].iloc[0]
    assert welch["p"] == pytest.approx(nc.loc["null_random", "p_welch"]) and welch["ci_low"] < welch["estimate"]
    assert not recs.loc[recs["test"] == "dif_vs_accuracy_regression", "valid"].iloc[0]


def test_no_baseline_is_one_clear_error():
    correct, kinds = simulate(np.random.default_rng(0), n_q=10, n_real=3, n_null=3)
    scores = _scores(correct, kinds)
    with pytest.raises(ValueError, match="^scores: model m has no baseline rows"):
        stats.dif_table(scores[scores["persona_kind"] != "baseline"])


def test_accuracy_vs_dif_regression_across_models():
    models = pd.DataFrame({"model": list("abcde"), "baseline_accuracy": [0.3, 0.45, 0.6, 0.72, 0.9],
                           "dif_real": [0.55, 0.6, 0.74, 0.78, 0.93]})
    r = stats.accuracy_vs_dif(models).iloc[0]
    ref = sps.linregress(models["baseline_accuracy"], models["dif_real"])
    assert r["valid"] and r["slope"] == pytest.approx(ref.slope) and r["p"] == pytest.approx(ref.pvalue)
    assert r["r2"] == pytest.approx(np.corrcoef(models["baseline_accuracy"], models["dif_real"])[0, 1] ** 2)
    assert r["slope_ci_low"] < r["slope"] < r["slope_ci_high"]
    two = stats.accuracy_vs_dif(models.head(2)).iloc[0]
    assert not two["valid"] and "needs ≥ 3 models" in two["note"]


def _fpr(n_sims: int, seed: int, n_resamples: int) -> tuple[int, int, int]:
    rng = np.random.default_rng(seed)
    hits_w = hits_p = hits_m = 0
    for _ in range(n_sims):
        correct, kinds = simulate(rng, n_q=60, delta=0.0)
        real, null = _biases(correct, kinds)
        r = stats.compare_groups(real, null, n_resamples=n_resamples, seed=int(rng.integers(1 << 31)))
        hits_w += r["p_welch"] < 0.05
        hits_p += r["p_permutation"] < 0.05
        b = int((correct[:, 1] & ~correct[:, 0]).sum())
        c = int((~correct[:, 1] & correct[:, 0]).sum())
        hits_m += stats.mcnemar_exact(b, c) < 0.05  # one persona vs baseline: same flip rate, no effect
    return hits_w, hits_p, hits_m


def _consistent_with_alpha(hits: int, n: int, alpha: float = 0.05) -> bool:
    return sps.binomtest(hits, n, alpha).pvalue > 0.001


def test_no_effect_planted_gives_the_nominal_false_positive_rate_fast():
    n = 300
    w, p, m = _fpr(n, seed=11, n_resamples=199)
    assert _consistent_with_alpha(w, n) and _consistent_with_alpha(p, n), (w, p)
    assert m <= sps.binom.ppf(0.999, n, 0.05)  # exact McNemar: at most nominal (conservative by construction)


def test_a_planted_effect_is_recovered_fast():
    rng = np.random.default_rng(3)
    found = 0
    for _ in range(40):
        correct, kinds = simulate(rng, n_q=60, delta=0.15)
        real, null = _biases(correct, kinds)
        r = stats.compare_groups(real, null, n_resamples=199, seed=0)
        found += r["p_welch"] < 0.05 and r["p_permutation"] < 0.05 and r["estimate"] > 0
    assert found >= 36  # power ≥ 90% at this effect size


@pytest.mark.slow
def test_no_effect_planted_gives_the_nominal_false_positive_rate_long():
    n = 2000
    w, p, m = _fpr(n, seed=12, n_resamples=999)
    assert abs(w / n - 0.05) < 0.015 and abs(p / n - 0.05) < 0.015, (w, p)
    assert _consistent_with_alpha(w, n) and _consistent_with_alpha(p, n)
    assert m / n <= 0.05 + 0.01


@pytest.mark.slow
def test_power_grows_with_the_planted_effect_long():
    rng = np.random.default_rng(5)
    power = {}
    for delta in (0.0, 0.05, 0.1, 0.2):
        hits = 0
        for _ in range(300):
            real, null = _biases(*simulate(rng, n_q=60, delta=delta))
            hits += stats.compare_groups(real, null, n_resamples=199)["p_permutation"] < 0.05
        power[delta] = hits / 300
    assert power[0.0] < 0.08 and power[0.05] < power[0.1] < power[0.2] and power[0.2] > 0.95, power
