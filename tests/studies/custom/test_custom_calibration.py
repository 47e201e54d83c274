"""The custom study's inferential tests hold α under realistic nulls and agree with R on the same data.

Null used throughout: items differ in difficulty (random item effects, SD 1 on the log-odds scale) and the model has
a yes-bias, but the group makes no difference. Bounds: α plus three Monte-Carlo standard errors.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from nbutils.stats import _rbridge as rbridge
from nbutils.studies.custom import stats

ALPHA = 0.05


def bound(n: int) -> float:
    return ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / n)


def null_frame(rng, n_items: int = 30, groups=("a", "b", "c"), paired: bool = True, effect: float = 0.0) -> pd.DataFrame:
    """Yes/No items; each item has its own difficulty; group ``groups[-1]`` shifts the log-odds by ``effect``."""
    difficulty = rng.normal(0.5, 1.0, n_items)
    rows = []
    for gi, g in enumerate(groups):
        shift = effect if gi == len(groups) - 1 else 0.0
        for i in range(n_items):
            d = difficulty[i] if paired else rng.normal(0.5, 1.0)
            gold = "Yes" if i % 2 == 0 else "No"
            right = rng.random() < 1 / (1 + np.exp(-(d + shift)))
            choice = gold if right else ("No" if gold == "Yes" else "Yes")
            rows.append({"model": "m", "row_id": f"{g}::{i}", "item_id": f"i{i}" if paired else f"{g}{i}", "group": g,
                         "answer": gold, "choice": choice, "correct": bool(right), "correct_norm_token": bool(right),
                         "correct_norm_char": bool(right), "margin": 0.0,
                         "scored": json.dumps(["Yes", "No"]), "n_options": 2})
    return pd.DataFrame(rows)


def rejection_rates(n_sims: int, seed: int, **kw) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    hits: dict[str, list[bool]] = {}
    for _ in range(n_sims):
        df = null_frame(rng, **kw)
        for r in stats.pairwise_contrasts(df).itertuples(index=False):
            hits.setdefault(r.test, []).append(r.p < ALPHA)
        if kw.get("paired", True):
            cm = stats.clustered_model(df)
            for test in ("gee_wald", "cochran_q"):
                p = cm.loc[cm["test"] == test, "p"]
                if len(p):
                    hits.setdefault(test, []).append(float(p.iloc[0]) < ALPHA)
    return {k: (float(np.mean(v)), len(v)) for k, v in hits.items() if v}


@pytest.mark.slow  # ~25 s each: 200 simulated runs
@pytest.mark.parametrize("paired", [True, False])
def test_group_tests_hold_alpha_when_groups_do_not_differ(paired):
    rates = rejection_rates(200, seed=11 if paired else 12, paired=paired)
    expected = {"mcnemar_exact", "gee_wald", "cochran_q"} if paired else {"fisher_exact"}
    assert expected <= set(rates)
    for test, (rate, n) in rates.items():
        print(f"{test}: false-positive rate {rate:.3f} over {n} tests")
        assert rate <= bound(n), f"{test} rejected {rate:.3f} of {n} true nulls"


@pytest.mark.slow  # ~10 s
def test_group_tests_find_a_planted_group_effect():
    rng = np.random.default_rng(5)
    found = {"mcnemar_exact": [], "gee_wald": [], "cochran_q": []}
    for _ in range(40):
        df = null_frame(rng, n_items=60, groups=("a", "b"), effect=-2.0)
        found["mcnemar_exact"].append(stats.pairwise_contrasts(df)["p"].iloc[0] < ALPHA)
        cm = stats.clustered_model(df)
        for t in ("gee_wald", "cochran_q"):
            found[t].append(cm.loc[cm["test"] == t, "p"].iloc[0] < ALPHA)
    for t, v in found.items():
        assert np.mean(v) > 0.8, f"{t}: power {np.mean(v):.2f} against a log-odds shift of 2"


@pytest.mark.slow  # ~100 s: simulated guessing models
def test_accuracy_against_chance_holds_alpha_for_a_guessing_model():
    rng = np.random.default_rng(8)
    p = []
    for _ in range(400):
        df = null_frame(rng, n_items=40, groups=("a",))
        df["correct"] = df["correct_norm_token"] = df["correct_norm_char"] = rng.random(len(df)) < 0.5  # a guesser: right half the time whatever the item
        acc = stats.accuracy_by_group(df)
        p.append(float(acc.loc[acc["group"] == "a", "p_binom"].iloc[0]))
    rate = float((np.asarray(p) < ALPHA).mean())
    assert rate <= bound(len(p)), rate


@pytest.mark.skipif(not rbridge.r_available("geepack"), reason="R with geepack not installed")
def test_gee_cochran_and_mcnemar_agree_with_r():
    """Same data in R: geepack's exchangeable logistic GEE (estimate and sandwich SE; statsmodels' plain robust
    covariance is what geepack computes, the bias-reduced one multiplies it by the Mancl–DeRouen correction, so the
    robust fit is compared), Cochran's Q from its formula, McNemar's exact test as binom.test on the discordant pairs."""
    import statsmodels.api as sm
    import statsmodels.formula.api as smf

    rng = np.random.default_rng(21)
    df = null_frame(rng, n_items=80, groups=("a", "b", "c"), effect=-0.8)
    df["y"] = df["correct"].astype(int)
    df["cluster"] = df["item_id"].str[1:].astype(int)
    df = df.sort_values(["cluster", "group"]).reset_index(drop=True)
    py = smf.gee("y ~ C(group)", "cluster", df, family=sm.families.Binomial(),
                 cov_struct=sm.cov_struct.Exchangeable()).fit(cov_type="robust")
    out = rbridge.run_r("""
library(geepack)
d <- nb_in("d"); d$group <- factor(d$group)
f <- geeglm(y ~ group, id = cluster, data = d, family = binomial, corstr = "exchangeable")
s <- summary(f)$coefficients
nb_out(data.frame(term = rownames(s), estimate = s[, 1], se = s[, 2]), "gee")
w <- reshape(d[, c("cluster", "group", "y")], idvar = "cluster", timevar = "group", direction = "wide")
x <- as.matrix(w[, -1]); k <- ncol(x); G <- colSums(x); L <- rowSums(x)
Q <- (k - 1) * (k * sum(G^2) - sum(G)^2) / (k * sum(L) - sum(L^2))
nb_out(data.frame(Q = Q, p = pchisq(Q, k - 1, lower.tail = FALSE)), "q")
ab <- merge(d[d$group == "a", c("cluster", "y")], d[d$group == "b", c("cluster", "y")], by = "cluster")
b <- sum(ab$y.x == 1 & ab$y.y == 0); c <- sum(ab$y.x == 0 & ab$y.y == 1)
nb_out(data.frame(p = binom.test(b, b + c, 0.5)$p.value), "mcnemar")
""", {"d": df[["y", "group", "cluster"]]})
    gee = out["gee"]
    np.testing.assert_allclose(py.params.to_numpy(), gee["estimate"].to_numpy(), rtol=0.02, atol=1e-4)
    np.testing.assert_allclose(py.bse.to_numpy(), gee["se"].to_numpy(), rtol=0.10)
    ours = stats.clustered_model(df)
    q = ours[ours["test"] == "cochran_q"].iloc[0]
    assert q["estimate"] == pytest.approx(out["q"]["Q"].iloc[0], rel=1e-9)
    assert q["p"] == pytest.approx(out["q"]["p"].iloc[0], rel=1e-7)
    c = stats.pairwise_contrasts(df)
    ab = c[(c.group_a == "a") & (c.group_b == "b")].iloc[0]
    assert ab["p"] == pytest.approx(out["mcnemar"]["p"].iloc[0], rel=1e-9)
