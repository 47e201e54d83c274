"""The negation mixed model as a reviewer checks it: codings, random-structure ladder, lme4 agreement, calibration."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nbutils.paths import repo_root
from nbutils.stats import RECORD_KEYS
from nbutils.studies.negation import stats as nstats

sys.path.insert(0, str(Path(__file__).parent))
from test_negation import simulate  # noqa: E402

HAS_R = nstats.use_r_default()
needs_r = pytest.mark.skipif(not HAS_R, reason="R with lme4 and lmerTest is not installed")


def calibration_module():
    path = repo_root() / "benchmarks" / "calibration_negation.py"
    spec = importlib.util.spec_from_file_location("calibration_negation", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def by(coefs: pd.DataFrame, coding: str, term: str) -> pd.Series:
    return coefs[(coefs.coding == coding) & (coefs.term == term)].iloc[0]


def test_deviation_coding_means_main_effects_and_treatment_is_the_seeds_simple_effects():
    # simulate() plants, in the seed's coding, context +3 (negated), form +4 (inconsistent) and interaction −8
    coefs, info = nstats.fit_lmm(simulate(-8.0, seed=11, n_roots=60), use_r=False)
    assert info["valid"].iloc[0]
    for coding, term, truth in [("treatment", "context", 3), ("treatment", "form", 4), ("deviation", "context", 3 - 4),
                                ("deviation", "form", 4 - 4), ("deviation", "context × form", -8)]:
        r = by(coefs, coding, term)
        assert abs(r["estimate"] - truth) < 3.5 * r["se"], (coding, term, r["estimate"])
    dev = coefs[coefs.coding == "deviation"].set_index("term")["estimate"].reindex(nstats.TERMS).values
    trt = coefs[coefs.coding == "treatment"].set_index("term")["estimate"].reindex(nstats.TERMS).values
    np.testing.assert_allclose(nstats.TREATMENT @ dev, trt, rtol=1e-10)


@pytest.mark.slow  # ~6 s
def test_singular_structure_is_simplified_with_a_reason_and_degenerate_data_is_invalid():
    d = simulate(0.0, seed=12)  # no item intercept and no form or interaction slope is planted
    _, info = nstats.fit_lmm(d, use_r=False)
    assert info["valid"].iloc[0] and "dropped" in info["steps"].iloc[0] and "(1 | item)" not in info["random"].iloc[0]
    flat = d.assign(ppl=42.0)
    coefs, info = nstats.fit_lmm(flat, use_r=False)
    assert not info["valid"].iloc[0] and info["note"].iloc[0]
    assert coefs.empty or not coefs["valid"].any()


@needs_r
def test_r_ladder_reports_singular_steps_and_uses_satterthwaite():
    coefs, info = nstats.fit_lmm(simulate(0.0, seed=12), use_r=True)
    i = info.iloc[0]
    assert i["valid"] and i["satterthwaite"] and i["test"] == nstats.R_TEST
    assert "correlated" in i["steps"] and "dropped" in i["steps"]
    assert coefs["df"].notna().all() and (coefs["df"] < len(simulate(0.0, seed=12))).all()
    flat = simulate(0.0, seed=12).assign(ppl=42.0)
    coefs, info = nstats.fit_lmm(flat, use_r=True)
    assert not info["valid"].iloc[0] and (coefs.empty or not coefs["valid"].any())


@pytest.mark.slow  # ~8 s: the full MixedLM ladder
def test_python_path_is_used_and_named_without_r(monkeypatch):
    monkeypatch.setenv("NB_RSCRIPT", "none")
    coefs, info, _ = nstats.lmm_tables(simulate(-8.0, seed=13))
    assert set(coefs["test"]) == {nstats.PY_TEST} and coefs["df"].isna().all()
    recs = nstats.records(coefs, info)
    assert all(set(RECORD_KEYS) <= set(r) for r in recs) and len(recs) == len(coefs)
    assert all("Wald z" in r["note"] for r in recs)
    head = [r for r in recs if r["headline"]]
    assert len(head) == 1 and head[0]["term"] == "context × form [deviation]" and head[0]["spec"] == "log_ppl"


def test_bad_scores_name_the_problem():
    with pytest.raises(ValueError, match=r"^scores: lacks columns \['root_id'\]"):
        nstats.design(simulate(0.0, seed=1).drop(columns="root_id"))
    with pytest.raises(ValueError, match=r"^scores: unexpected context/form values \['neutral'\]"):
        nstats.design(simulate(0.0, seed=1).replace({"context": {"consistent": "neutral"}}))


@needs_r
def test_python_mixedlm_agrees_with_lmer_on_the_same_structure():
    """Fixed simulated dataset, full uncorrelated structure in both: estimates within 2%, SEs within 10%."""
    cal = calibration_module()
    d = cal.simulate("planted", 1, seed=2024, n_roots=30, n_items=4)
    py, py_info = nstats.fit_python(d, ladder=False)
    info, r = nstats.fit_r(d, random="uncorrelated")
    assert py_info["valid"] and bool(info["valid"].iloc[0]), (py_info, info.iloc[0].to_dict())
    assert py_info["random"] == info["random"].iloc[0]
    both = py.merge(r, on=["coding", "term"], suffixes=("_py", "_r"))
    assert len(both) == 8
    slopes = both[both.term != "Intercept"]
    np.testing.assert_allclose(both["estimate_py"], both["estimate_r"], rtol=0.02)
    np.testing.assert_allclose(slopes["se_py"], slopes["se_r"], rtol=0.10)
    np.testing.assert_allclose(both["se_py"], both["se_r"], rtol=0.10)


@pytest.mark.slow  # ~20 s
def test_fast_calibration_bounds_and_power():
    """10 simulations per scenario (seconds): loose bounds that a miscalibrated test or a lost effect would fail."""
    cal = calibration_module()
    rows = cal.run(n_sims=10, seed=7, scenarios=["null", "planted"], n_roots=16)
    assert {r["test"] for r in rows} == ({nstats.R_TEST, nstats.PY_TEST} if HAS_R else {nstats.PY_TEST})
    for r in rows:
        assert set(r) >= {"study", "test", "scenario", "n_sims", "rejections", "rate", "mc_se"}
        assert r["n_valid"] >= 8, r
        if r["null_true"]:
            assert r["rejections"] <= 3, r
    planted = {(r["test"], r["term"]): r for r in rows if r["scenario"] == "planted"}
    for test in {r["test"] for r in rows}:
        inter = planted[(test, "context × form [deviation]")]
        assert abs(inter["mean_estimate"] - inter["true_effect"]) < 0.04, inter
        assert planted[(test, "form [treatment]")]["rejections"] >= 5


def test_a_failing_r_falls_back_to_python_and_says_so(monkeypatch):
    monkeypatch.setenv("NB_RSCRIPT", "/bin/false")
    coefs, info = nstats.fit_lmm(simulate(-8.0, seed=14), use_r=True)
    assert set(coefs["test"]) == {nstats.PY_TEST} and info["steps"].iloc[0].startswith("R failed, statsmodels used instead")


@needs_r
@pytest.mark.slow  # ~13 s: six lme4 fits
def test_the_same_r_fit_gives_the_same_digits_in_every_process():
    # R's vectorised sums depend on where an array starts in memory: with address-space randomisation on, the same
    # fit on the same data gave two sets of last digits in six processes (Satterthwaite df near the 5th digit)
    from nbutils.stats import _rbridge as rbridge

    if shutil.which("setarch"):
        assert rbridge.fixed_layout(), "setarch is here: R must run with a fixed memory layout"
    d = nstats.design(simulate(0.0, seed=12), "ppl")
    fits = {tuple(nstats.fit_r(d)[1][["estimate", "se", "df", "p"]].to_numpy().ravel().tolist()) for _ in range(6)}
    assert len(fits) == 1, f"{len(fits)} different results from six runs of one fit"
