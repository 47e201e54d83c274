"""The mirror test is calibrated (false-positive rate at α = .05 under nulls) and agrees with R's exact test."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from nbutils.stats import _rbridge as rbridge
from nbutils.studies.common import rules
from nbutils.studies.monotonicity.dataset import generate_prompts

ALPHA = 0.05


def rate_bound(n_sims: int) -> float:
    """α plus three Monte-Carlo standard errors: a calibrated test stays under it with probability > .99."""
    return ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / n_sims)


def null_strata(rng, n_thresholds: int) -> list[tuple[int, int, int, int]]:
    """Downward and upward concepts of each threshold share one agreement rate, which differs across thresholds."""
    out = []
    for _ in range(n_thresholds):
        p = rng.uniform(0.2, 0.8)
        n_a, n_b = rng.integers(20, 80, size=2)
        out.append((int(rng.binomial(n_a, p)), int(n_a), int(rng.binomial(n_b, p)), int(n_b)))
    return out


def test_pooled_exact_stratified_test_is_calibrated_under_varying_rates():
    rng = np.random.default_rng(2024)
    n_sims = 2000
    p = np.array([rules.exact_stratified_p(null_strata(rng, int(rng.integers(2, 8)))) for _ in range(n_sims)])
    rate = float((p < ALPHA).mean())
    print(f"exact stratified test: false-positive rate {rate:.4f} over {n_sims} simulated nulls")
    assert rate <= rate_bound(n_sims), f"exact stratified test rejected {rate:.3f} of true nulls"
    assert rate > 0.01, f"rate {rate:.3f}: the test never rejects — it would be useless"
    # under a planted difference it finds it
    power = np.mean([rules.exact_stratified_p([(int(rng.binomial(50, .7)), 50, int(rng.binomial(50, .4)), 50)
                                               for _ in range(4)]) < ALPHA for _ in range(200)])
    assert power > 0.9


@pytest.fixture(scope="module")
def prompts() -> pd.DataFrame:
    return generate_prompts(["more than 1/2", "less than 1/2", "more than 1/3", "less than 1/3"],
                            prompts_per_concept=40, n_examples=20, seed=9)


@pytest.mark.slow  # ~80 s: 200 simulated models through the full rule tables
def test_mirror_test_is_calibrated_for_yes_biased_random_models(prompts):
    """A model answering at random with a yes-bias agrees with the mirror only by chance: both p-values hold α."""
    rng = np.random.default_rng(7)
    n_sims = 200
    frames = []
    for i in range(n_sims):  # many simulated models in one frame: the rules are computed once per concept
        pred = rng.random(len(prompts)) < rng.uniform(0.3, 0.8)
        frames.append(prompts.assign(model=f"coin{i}", pred_yes=pred, correct=pred == prompts["label"].to_numpy(),
                                     margin=0.0))
    table, _ = rules.mirror_test(rules.rule_tables(pd.concat(frames, ignore_index=True), k=5)[0])
    assert table["model"].nunique() == n_sims
    p_chance, p_up = table["p_above_chance"].tolist(), table["p_vs_upward"].tolist()
    for name, p in (("above chance", p_chance), ("vs upward", p_up)):
        rate = float((np.asarray(p) < ALPHA).mean())
        print(f"mirror test {name}: false-positive rate {rate:.3f} over {len(p)} concept tests")
        assert rate <= rate_bound(len(p)), f"mirror test ({name}) rejected {rate:.3f} of true nulls"


def test_mirror_table_is_rebuilt_exactly(prompts):
    """mirror_test rebuilds each model × mirror 2×2 table from rates; it must equal a direct cross-tabulation."""
    rng = np.random.default_rng(3)
    pred = rng.random(len(prompts)) < 0.6
    scored = prompts.assign(model="coin", pred_yes=pred, correct=pred == prompts["label"].to_numpy(), margin=0.0)
    rt, _ = rules.rule_tables(scored, k=5)
    table, _ = rules.mirror_test(rt)
    long = rules.predict(prompts, k=5)
    mirror = long[long["rule"] == "mirror"].set_index("prompt_id")["answer"]
    assert len(table) == 2 * prompts["condition"].nunique()
    for r in table.itertuples(index=False):
        rows = ((prompts["concept"] == r.concept) & (prompts["condition"] == r.condition)).to_numpy()
        m = mirror.loc[prompts.loc[rows, "prompt_id"]].to_numpy(dtype=bool)
        ct = pd.crosstab(pred[rows], m).reindex(index=[True, False], columns=[True, False], fill_value=0).to_numpy()
        assert r.p_above_chance == pytest.approx(sps.fisher_exact(ct, alternative="greater").pvalue, rel=1e-9)


@pytest.mark.skipif(not rbridge.r_available(), reason="R (Rscript) not installed")
def test_exact_stratified_p_equals_r_mantelhaen_exact():
    rng = np.random.default_rng(11)
    cases = [null_strata(rng, k) for k in (1, 2, 3, 5, 8)] + [[(30, 40, 12, 35), (25, 30, 20, 38)]]
    rows = [{"case": i, "k_a": a, "n_a": na, "k_b": b, "n_b": nb} for i, st in enumerate(cases) for a, na, b, nb in st]
    out = rbridge.run_r("""
d <- nb_in("strata"); res <- data.frame(case = integer(), p = numeric())
for (c in unique(d$case)) {
  s <- d[d$case == c, ]
  if (nrow(s) == 1) {
    p <- fisher.test(matrix(c(s$k_a, s$k_b, s$n_a - s$k_a, s$n_b - s$k_b), 2), alternative = "greater")$p.value
  } else {
    a <- array(as.vector(t(cbind(s$k_a, s$k_b, s$n_a - s$k_a, s$n_b - s$k_b))), dim = c(2, 2, nrow(s)))
    p <- mantelhaen.test(a, exact = TRUE, alternative = "greater")$p.value
  }
  res <- rbind(res, data.frame(case = c, p = p))
}
nb_out(res, "p")
""", {"strata": pd.DataFrame(rows)})["p"]
    ours = [rules.exact_stratified_p(st) for st in cases]
    np.testing.assert_allclose(ours, out.sort_values("case")["p"].to_numpy(), rtol=1e-7)
