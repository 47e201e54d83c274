"""The headline GLMM (lme4 through R) checked against independent fits, planted effects, and singular fits.

Comparing the bridge's lme4 fit with another lme4 call would be circular, so the checks here are independent:
the random-intercept GLMM's estimates and SEs against a maximum-likelihood fit written here (numerical integration
over the random intercept, scipy's optimizer, a numerical Hessian), and statsmodels' GEE against R's geepack
(skipped where geepack is not installed). Every test skips cleanly when R with lme4 is not installed.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import optimize, special, stats as sps
from statsmodels.tools.numdiff import approx_hess3

from nbutils.stats import r_available, run_r
from nbutils.studies.common import quantifier_mixed_models as qmixed
from nbutils.studies.monotonicity import stats

pytestmark = pytest.mark.skipif(not r_available("lme4"), reason="R with lme4 is not installed")


def frame(k: int, n: int, seed: int, sd_threshold: float = 0.6, gap: float = 0.7, interaction: float = -0.7,
          explicit: float = 0.5, sd_pair: float = 0.0, sd_gap: float = 0.0) -> pd.DataFrame:
    """A scores-like frame: k thresholds × up/down × n prompts × two conditions, logistic truth."""
    rng = np.random.default_rng(seed)
    b = rng.normal(0, sd_threshold, k)
    g = rng.normal(0, sd_gap, k)
    rows = []
    for t in range(k):
        for up in (1, 0):
            for i in range(n):
                pair = rng.normal(0, sd_pair)
                for cond in ("concept_learning", "explicit"):
                    e = float(cond == "explicit")
                    eta = 0.4 + b[t] + up * (gap + g[t]) + e * explicit + up * e * interaction + pair
                    correct = rng.random() < special.expit(eta)
                    label = i % 2 == 0
                    rows.append({"model": "m", "condition": cond, "family": "proportional", "threshold": f"{t + 1}/40",
                                 "monotonicity": "upward" if up else "downward",
                                 "quantifier": "more_than" if up else "less_than",
                                 "concept": f"{'more' if up else 'less'} than {t + 1}/40", "pair_id": f"{t}-{up}-{i}",
                                 "query_noun": f"n{rng.integers(40)}", "label": label, "correct": correct,
                                 "pred_yes": label == correct, "margin": 1.0})
    return pd.DataFrame(rows)


def ml_random_intercept(d: pd.DataFrame, columns=("u", "e", "ue")) -> tuple[np.ndarray, np.ndarray, float]:
    """Independent ML fit of correct ~ columns + (1 | threshold): the likelihood integrates the random intercept
    numerically on a fine grid per threshold (cell counts are sufficient), maximized with BFGS; SEs from the
    inverse numerical Hessian of (β, log σ). Returns (β with the intercept first, SE(β), log-likelihood)."""
    x = qmixed.glmm_input(d)
    cells = x.groupby(["cluster", "u", "e"]).agg(k=("correct", "sum"), n=("correct", "size")).reset_index()
    cells["ue"] = cells["u"] * cells["e"]
    X = np.column_stack([np.ones(len(cells))] + [cells[c].to_numpy(float) for c in columns])
    p = X.shape[1]
    cl = cells["cluster"].astype("category").cat.codes.to_numpy()
    z = np.linspace(-7, 7, 2801)  # standard-normal grid; b = σ z
    logw = sps.norm.logpdf(z) + np.log(z[1] - z[0])
    k, n = cells["k"].to_numpy(float), cells["n"].to_numpy(float)
    const = special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)

    def negll(theta):
        beta, sigma = theta[:p], np.exp(theta[p])
        eta = (X @ beta)[:, None] + sigma * z[None, :]
        ll_cells = k[:, None] * eta - n[:, None] * np.logaddexp(0, eta)
        per_cluster = np.zeros((cl.max() + 1, len(z)))
        np.add.at(per_cluster, cl, ll_cells)
        return -(special.logsumexp(per_cluster + logw[None, :], axis=1).sum() + const.sum())

    fit = optimize.minimize(negll, np.r_[np.zeros(p), np.log(0.5)], method="BFGS", options={"gtol": 1e-8})
    cov = np.linalg.inv(approx_hess3(fit.x, negll))
    return fit.x[:p], np.sqrt(np.diag(cov)[:p]), -fit.fun


@pytest.fixture(scope="module")
def fixed_dataset() -> pd.DataFrame:
    return frame(k=12, n=60, seed=7)


def test_lme4_agrees_with_an_independent_ml_fit(fixed_dataset):
    """Estimates within 2% and SEs within 10% of a likelihood maximised here, for every fixed effect, and the
    likelihood-ratio statistic of the interaction within 2% of the one from the independent fits (Laplace vs
    numerical integration: close, not equal)."""
    info, terms = qmixed.run_glmm(qmixed.glmm_input(fixed_dataset), random=["threshold"])
    assert info["random"].iloc[0] == "(1 | cluster)" and bool(info["valid"].iloc[0])
    beta, se, ll_full = ml_random_intercept(fixed_dataset)
    got = terms.set_index("key")
    for i, key in ((1, "u"), (2, "e"), (3, "ue")):
        assert got.loc[key, "estimate"] == pytest.approx(beta[i], rel=0.02), key
        assert got.loc[key, "se"] == pytest.approx(se[i], rel=0.10), key
    assert got.loc["u@explicit", "estimate"] == pytest.approx(beta[1] + beta[3], rel=0.02, abs=1e-3)
    _, _, ll_reduced = ml_random_intercept(fixed_dataset, columns=("u", "e"))
    assert got.loc["ue", "chisq"] == pytest.approx(2 * (ll_full - ll_reduced), rel=0.02, abs=0.05)
    assert got.loc["ue", "p"] == pytest.approx(sps.chi2.sf(2 * (ll_full - ll_reduced), 1), rel=0.05, abs=1e-4)


def test_geepack_agrees_with_statsmodels_gee(fixed_dataset):
    """Same exchangeable GEE in statsmodels and in R's geepack: coefficients and the robust (sandwich) SEs agree."""
    if not r_available("geepack"):
        pytest.skip("R package geepack is not installed (apt-get install r-cran-geepack)")
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    d = qmixed.glmm_input(fixed_dataset).sort_values("cluster", kind="stable").reset_index(drop=True)
    ref = run_r("""
        suppressPackageStartupMessages(library(geepack))
        d <- nb_in("d"); d$cluster <- factor(d$cluster)
        m <- geeglm(correct ~ u + e + ue, id = cluster, data = d, family = binomial, corstr = "exchangeable")
        s <- summary(m)$coefficients
        nb_out(data.frame(term = rownames(s), estimate = s[, 1], se = s[, 2]), "coef")
    """, {"d": d})["coef"].set_index("term")
    fit = smf.gee("correct ~ u + e + ue", "cluster", d, family=sm.families.Binomial(),
                  cov_struct=sm.cov_struct.Exchangeable()).fit()
    for term in ("u", "e", "ue"):
        assert fit.params[term] == pytest.approx(ref.loc[term, "estimate"], rel=0.02, abs=1e-4), term
        assert fit.bse[term] == pytest.approx(ref.loc[term, "se"], rel=0.10), term
    br = qmixed.gee_model(fixed_dataset).set_index(["term", "condition"], drop=False)
    assert (br["se"].to_numpy() > 0).all() and br["df"].eq(11).all()


def test_glmm_finds_planted_effects_with_the_full_random_structure():
    d = frame(k=10, n=40, seed=3, sd_pair=0.5, sd_gap=0.2)
    mm = stats.mixed_model(d)
    g = mm[mm["test"] == "glmm_lrt"].set_index(["term", "condition"], drop=False)
    assert g["headline"].all() and not mm.loc[mm["test"] == "gee_bias_reduced", "headline"].any()
    up = g.loc[("upward", "concept_learning")]
    assert up["p"] < 1e-4 and up["estimate"] > 0.3 and up["or_ci_low"] > 1
    inter = mm[(mm["test"] == "glmm_lrt") & (mm["term"] == "upward:explicit")].iloc[0]
    assert inter["p"] < 0.01 and inter["estimate"] < 0
    gap_ex = g.loc[("upward", "explicit")]
    assert gap_ex["p"] > 0.01 and gap_ex["ci_low"] < 0 < gap_ex["ci_high"], "the planted gap is closed when explicit"
    assert "(1 | cluster)" in up["random_effects"] and up["statistic"] > 0 and up["df"] == 1


def test_singular_fit_is_flagged_and_simplified():
    """No threshold variance at all: lme4 estimates SD 0, the term is dropped with the reason, never silently kept."""
    d = frame(k=8, n=40, seed=5, sd_threshold=0.0, gap=0.0, interaction=0.0, explicit=0.0)
    info, terms = qmixed.run_glmm(qmixed.glmm_input(d), random=["threshold"])
    assert "singular fit: dropped (1 | cluster)" in info["note"].iloc[0]
    random = info["random"].iloc[0]
    assert (pd.isna(random) or random == "") and bool(info["valid"].iloc[0])
    mm = qmixed.glmm_model(d)
    assert mm["note"].str.contains("singular fit: dropped").all()
    assert mm["valid"].all() and (mm["p"] > 0.001).all()


def test_records_name_the_model_and_the_headline():
    d = frame(k=6, n=30, seed=11, sd_pair=0.5)
    tables = {"mixed_model": stats.mixed_model(d), "gap_pooled": stats.pooled_gap(d, n_boot=100)}
    recs = [r for r in stats.records(tables) if r["test"] == "glmm_lrt"]
    assert sorted((r["term"], r["condition"] or "") for r in recs) == [
        ("explicit", ""), ("upward", "concept_learning"), ("upward", "explicit"), ("upward:explicit", "")]
    assert all(r["headline"] and r["formula"] == "correct ~ u + e + ue" and r["model"] == "m" for r in recs)
    summary = stats.summary(tables["gap_pooled"], tables["mixed_model"], pd.DataFrame())
    assert summary["m"]["mixed_model"]["test"] == "glmm_lrt"
