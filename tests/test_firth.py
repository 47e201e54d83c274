"""Firth's penalised logistic regression, the separation fallback: its estimates and SEs against R's brglm2 on the same
data, the closed form of a 2 × 2 table, the mean gap over thresholds tested against their spread, the calibration's
bounds, and a run whose upward concepts are all right and downward all wrong (the demo's shape) reading as strong
evidence through the real analysis path."""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from nbutils.stats import _firth as firth, r_available, run_r
from nbutils import report
from nbutils.results import _words as results
from nbutils.studies.monotonicity import analysis
from simulated_runs import simulated_run


def design(seed: int = 1, flips: int = 1):
    """5 thresholds × 6 upward + 6 downward prompts; upward right, downward wrong, ``flips`` upward answers wrong."""
    t = np.repeat(np.arange(5), 12)
    u = np.tile(np.repeat([1.0, 0.0], 6), 5)
    y = u.copy()
    y[np.random.default_rng(seed).choice(np.flatnonzero(u), flips, replace=False)] = 0
    X = np.column_stack([np.ones(60), u] + [(t == k).astype(float) for k in range(1, 5)])
    return X, y, ["(Intercept)", "u", "t1", "t2", "t3", "t4"]


def test_a_two_by_two_table_has_the_closed_form_of_half_added_cells():
    """With one binary covariate Firth's estimate is the log odds ratio of the table with 0.5 added to each cell."""
    for a, b, c, d in [(30, 0, 0, 30), (12, 3, 5, 10), (7, 0, 4, 9)]:
        y = np.r_[np.ones(a), np.zeros(b), np.ones(c), np.zeros(d)]
        x = np.r_[np.ones(a + b), np.zeros(c + d)]
        fit = firth.firth_fit(np.column_stack([np.ones_like(x), x]), y)
        assert fit.converged
        assert fit.params[1] == pytest.approx(math.log((a + .5) * (d + .5) / ((b + .5) * (c + .5))), abs=1e-7)


@pytest.mark.skipif(not r_available("brglm2"), reason="R with brglm2 is not installed")
@pytest.mark.parametrize("flips", [0, 2])
def test_estimates_and_standard_errors_equal_brglm2_on_the_same_data(flips):
    """Both designs against brglm2 in one R session: thresholds as fixed strata, and the fallback's gap per threshold
    in sum-to-zero coding (its ``u`` the mean gap the headline tests)."""
    X, y, names = design(flips=flips)
    t = np.repeat(np.arange(5), 12)
    Xs, snames, _ = firth.strata_design({"u": X[:, 1]}, t)
    d = pd.DataFrame(X[:, 1:], columns=names[1:]).assign(y=y, t=t)
    ref = run_r('suppressPackageStartupMessages(library(brglm2)); d <- nb_in("d"); d$t <- factor(d$t)\n'
                'f <- function(m) { s <- summary(m)$coefficients; data.frame(est = s[, 1], se = s[, 2]) }\n'
                'nb_out(f(glm(y ~ u + t1 + t2 + t3 + t4, data = d, family = binomial, method = "brglmFit",\n'
                '             type = "AS_mean")), "fixed")\n'
                'nb_out(f(glm(y ~ u * t, data = d, family = binomial, method = "brglmFit", type = "AS_mean",\n'
                '             contrasts = list(t = "contr.sum"))), "strata")', {"d": d})
    for (A, ys, nm), key in (((X, y, names), "fixed"), ((Xs, y, snames), "strata")):
        fit = firth.firth_fit(A, ys, nm)
        assert np.allclose(fit.params, ref[key]["est"], atol=1e-6) and np.allclose(fit.se, ref[key]["se"], atol=1e-6)
    mean = firth.mean_over_strata({"u": X[:, 1]}, t, y, "u")
    assert mean["estimate"] == pytest.approx(ref["strata"]["est"][1], abs=1e-6)
    assert mean["firth_se"] == pytest.approx(ref["strata"]["se"][1], abs=1e-6)


@pytest.mark.parametrize("flips", [0, 1, 5, 12])
def test_the_mean_over_thresholds_is_tested_against_their_spread(flips):
    """Each threshold's gap is its 2 × 2 table's closed form; the estimate is their mean; the SE is their spread's
    (SD / √K) or the Firth SE of the mean, whichever is larger; the t(K−1) CI excludes 0 exactly when p < .05."""
    X, y, _ = design(seed=flips, flips=flips)
    t, u = np.repeat(np.arange(5), 12), X[:, 1]
    res = firth.mean_over_strata({"u": u}, t, y, "u")
    closed = []
    for k in range(5):
        a, c = y[(t == k) & (u == 1)].sum(), y[(t == k) & (u == 0)].sum()
        closed.append(math.log((a + .5) * (6 - c + .5) / ((6 - a + .5) * (c + .5))))
    assert np.allclose(res["effects"], closed, atol=1e-6) and res["estimate"] == pytest.approx(np.mean(closed))
    assert res["se"] == pytest.approx(max(res["firth_se"], np.std(closed, ddof=1) / math.sqrt(5)))
    assert res["df"] == 4 and (res["p"] < 0.05) == (res["ci_low"] > 0 or res["ci_high"] < 0)
    if flips == 0:  # every threshold separated alike: no spread, the Firth SE alone
        assert res["se"] == res["firth_se"] and res["ci_low"] > 2


def test_the_calibration_file_holds_its_bounds():
    """The fallback on every simulated dataset, separated or not: at most 7.5% of 200+ simulations rejected where the
    mean gap is 0 (the same at every threshold, or varying between them), at the demo's size and the paper's."""
    import json

    from nbutils import paths

    rows = json.loads((paths.repo_root() / "benchmarks" / "results" / "calibration_firth.json").read_text())["rows"]
    null = [r for r in rows if r["test"] == "firth_plr" and r["null_true"]]
    assert {(r["thresholds"], r["prompts_per_concept"], r["scenario"]) for r in null} >= {
        (k, n, s) for k, n in ((5, 6), (10, 100)) for s in ("null", "null_varying_gap")}
    assert all(r["n_sims"] >= 200 and r["rate"] <= 0.075 for r in null), null


def test_fewer_than_two_thresholds_are_refused():
    with pytest.raises(ValueError, match="strata: the mean over strata needs two or more strata"):
        firth.mean_over_strata({"u": np.r_[np.ones(6), np.zeros(6)]}, np.zeros(12), np.r_[np.ones(6), np.zeros(6)],
                               "u")


def test_a_design_matrix_without_full_rank_is_refused():
    with pytest.raises(ValueError, match="X: the design matrix must have full column rank"):
        firth.firth_fit(np.ones((10, 2)), np.r_[np.ones(5), np.zeros(5)])


@pytest.mark.slow  # 5 s on a quiet host, 12 s on two busy cores: the whole analysis of one model
def test_upward_always_right_downward_always_wrong_reads_as_strong_evidence(tmp_path, monkeypatch):
    """The demo's 120 prompts, upward concepts all right and downward all wrong: the GEE (no R here) has no finite
    estimate, and the headline gives Firth's direction, odds ratio, CI and p, saying which test it stands in for. Five
    thresholds alike: the gap at each is log(6.5² / 0.5²), tested with t(4) at the Firth SE (p ≈ .007)."""
    monkeypatch.setenv("NB_RSCRIPT", "none")
    run = simulated_run(tmp_path, {"m": lambda p: p["monotonicity"] == "upward"})
    a = analysis.analyze_run(run, n_boot=50)
    head = [r for r in a.summary["records"] if r.get("headline") and r["term"] == "upward"
            and r["test"] == "firth_plr"]
    assert {r["condition"] for r in head} == {"concept_learning", "explicit"}
    for r in head:
        assert r["valid"] and r["fallback_for"] == "gee_bias_reduced" and r["p"] < 0.01 and r["ci_low"] > 2
        assert r["estimate"] == pytest.approx(math.log(6.5 ** 2 / 0.5 ** 2), abs=1e-6)
        assert results.verdict(r) == "more"
    lines = report.headline(run)
    said = next(ln for ln in lines if ln.startswith("m, concept learning: "))
    # every downward answer wrong: the answers lean away from the downward gold beyond the query, the mirror's pattern
    assert re.search(r"upward concepts were answered right more often \(100\.0% vs 0\.0%; marginal OR = [\d.]+, 95% CI "
                     r"\[[\d.]+, [\d.e+]+\], p = \.00\d, Firth regression by threshold standing in for the GEE by "
                     r"threshold\), and the answers show the mirror", said), said
    assert (run / "results.md").read_text() == a.text
