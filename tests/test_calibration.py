"""The calibration study (benchmarks/calibration.py) and the tests it calibrates: the headline gap test's level and
power on seeded simulations, every pure-Python test's output on one seeded dataset against recorded values, the
committed results' claims, and (slow tier) larger simulation runs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "calibration.json"
FIRST_SIMULATION = Path(__file__).parent / "data" / "calibration_first_simulation.json"


@pytest.fixture(scope="module")
def cal(load_benchmark):
    return load_benchmark("calibration")


def test_simulated_design_has_the_analysis_columns_and_the_planted_truth(cal):
    rng = np.random.default_rng(0)
    d = cal.simulate(cal.SCENARIOS["gap_or2"], 6, 200, rng)
    assert len(d) == 6 * 2 * 200 * 2 and d["pair_id"].nunique() == 6 * 2 * 200 and d["threshold"].nunique() == 6
    assert (d.groupby("pair_id")["condition"].nunique() == 2).all() and d["label"].mean() == 0.5
    acc = d.groupby(["condition", "monotonicity"])["correct"].mean()
    lo = np.log(acc / (1 - acc))
    assert 0.4 < lo[("concept_learning", "upward")] - lo[("concept_learning", "downward")] < 1.0  # log 2 ≈ 0.69, attenuated
    yes = cal.simulate(cal.SCENARIOS["null_yes_bias"], 6, 200, rng)
    assert yes["pred_yes"].mean() > 0.6 and abs(yes.groupby("monotonicity")["correct"].mean().diff().iloc[-1]) < 0.05


def _study(cal, name: str):
    """The study's function ``name``, from whichever of the study's modules the benchmark analyses with."""
    modules = [m for m in vars(cal).values() if isinstance(m, ModuleType) and m.__name__.startswith("nbutils.studies.")]
    return next(getattr(m, name) for m in modules if hasattr(m, name))


def _gee_gap(cal, d):
    """The headline pure-Python test of the gap on one dataset: the GEE's ``upward`` row (concept learning)."""
    g = _study(cal, "gee_model")(d)
    return g[g["term"] == "upward"].iloc[0]


def test_headline_gap_test_keeps_its_level_under_a_varying_gap_null(cal):
    """500 seeded datasets with 6 thresholds whose gaps vary around 0 (the null fixed-threshold tests fail): the GEE
    rejects at most as often as a 5% test may by chance (one-sided binomial bound at 0.001; it rejects about 4%),
    every fit is valid, and its 95% CI excludes 0 exactly when p < .05.

    The documented failure, the plain sandwich SE with normal p-values, rejects about 14% here and fails always;
    normal instead of t(K−1) p-values (about 10%) fails most of the time; smaller changes are the recorded
    values' to catch (test_first_simulation_gives_the_recorded_test_results)."""
    sims, k, n = 500, 6, 20
    rng = np.random.default_rng([cal.DEFAULT_SEED, k, n])
    fits = [_gee_gap(cal, cal.simulate(cal.SCENARIOS["null_varying_gap"], k, n, rng, conditions=(cal.CL,)))
            for _ in range(sims)]
    assert all(f["valid"] and f["df"] == k - 1 for f in fits)
    rejections = sum(f["p"] < cal.ALPHA for f in fits)
    assert rejections <= binom.isf(0.001, sims, cal.ALPHA), f"{rejections}/{sims} rejections of a true null"
    assert all((f["p"] < cal.ALPHA) == (f["ci_low"] > 0 or f["ci_high"] < 0) for f in fits)


def test_headline_gap_test_finds_a_planted_gap_in_its_direction(cal):
    """100 seeded datasets with an odds ratio of 2 between upward and downward concepts (6 thresholds, 20 prompts):
    the mean GEE estimate is positive and near log 2 (0.62 expected, attenuated by the random effects; ±6 SEs) and
    the test rejects at least 15 times (34 expected, 4 SDs above 15)."""
    sims, k, n = 100, 6, 20
    rng = np.random.default_rng([cal.DEFAULT_SEED, k, n, 2])
    fits = [_gee_gap(cal, cal.simulate(cal.SCENARIOS["gap_or2"], k, n, rng, conditions=(cal.CL,)))
            for _ in range(sims)]
    assert 0.45 < np.mean([f["estimate"] for f in fits]) < 0.8
    assert sum(f["valid"] and f["p"] < cal.ALPHA for f in fits) >= 15


def first_simulation(cal) -> dict:
    """Every pure-Python test's output on the first dataset of the committed gap-OR-2-with-interaction cell (its
    design, seed and bootstrap size): the calibration's reject/keep decisions and the numbers behind them, per table
    row."""
    k, n, scenario, seed, n_boot = 10, 100, "gap_or2_interaction", cal.DEFAULT_SEED, 1000
    rng = np.random.default_rng([seed, list(cal.SCENARIOS).index(scenario)])
    d = cal.simulate(cal.SCENARIOS[scenario], k, n, rng)
    f = {name: _study(cal, name) for name in ("gee_model", "pooled_gap", "gap_difference", "gap_by_threshold",
                                              "mcnemar_conditions", "accuracy_table", "dprime_gap", "signal_detection")}
    tables = {  # name: (table, the columns that name a row, the columns recorded)
        "gee": (f["gee_model"](d), ["term", "condition"], ["estimate", "se", "p"]),
        "pooled_gap": (f["pooled_gap"](d, n_boot=n_boot, seed=seed), ["condition"],
                       ["log_or_mean", "gap", "gap_ci_low", "gap_ci_high", "p_signflip", "or_mh", "p_cmh",
                        "p_breslow_day"]),
        "gap_difference": (f["gap_difference"](d, seed=seed), ["model"], ["log_or_cl_minus_explicit", "p_signflip"]),
        "fisher": (f["gap_by_threshold"](d), ["condition", "threshold"], ["gap", "p_fisher", "p_holm"]),
        "mcnemar": (f["mcnemar_conditions"](d), ["concept"], ["p_mcnemar", "p_holm"]),
        "accuracy": (f["accuracy_table"](d), ["condition", "concept"], ["accuracy", "p_binom", "p_holm"]),
        "dprime_gap": (f["dprime_gap"](f["signal_detection"](d), seed=seed), ["condition"],
                       ["dprime_gap", "p_signflip"]),
    }
    out = {"design": {"scenario": scenario, "thresholds": k, "prompts_per_concept": n, "seed": seed, "n_boot": n_boot},
           "decisions": {key: bool(v) for key, v in cal.python_tests(d, n_boot=n_boot, seed=seed).items()}}
    for name, (table, keys, values) in tables.items():
        out[name] = {"|".join("" if pd.isna(r[c]) else str(r[c]) for c in keys): {v: r[v] for v in values}
                     for r in table.to_dict("records")}
    return out


def _leaves(x, path=()):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path, x


def test_first_simulation_gives_the_recorded_test_results(cal):
    """The GEE's estimates, SEs and p-values, the sign-flip, CMH, Breslow-Day, Fisher, McNemar and binomial p-values
    (raw and Holm-adjusted), the bootstrap CI and the d′ gap on one seeded dataset equal those recorded in
    data/calibration_first_simulation.json (made with ``first_simulation`` above), as do the calibration's decisions.
    Same data, same arithmetic: agreement to rel 1e-6, far above rounding differences between machines."""
    recorded = json.loads(FIRST_SIMULATION.read_text())
    committed = next(r for r in json.loads(RESULTS.read_text())["rows"]
                     if r.get("part") == "python" and r["scenario"] == recorded["design"]["scenario"])
    assert (committed["thresholds"], committed["prompts_per_concept"]) == (recorded["design"]["thresholds"],
                                                                            recorded["design"]["prompts_per_concept"])
    now, before = dict(_leaves(first_simulation(cal))), dict(_leaves(recorded))
    assert set(now) == set(before)
    for path, want in before.items():
        got, where = now[path], " ".join(map(str, path))
        if isinstance(want, (bool, str)) or want is None:
            assert got == want or (want is None and pd.isna(got)), f"{where}: {got!r} now, {want!r} recorded"
        else:
            assert got == pytest.approx(want, rel=1e-6, abs=1e-12), f"{where}: {got!r} now, {want!r} recorded"


@pytest.mark.slow  # ~35 s
def test_fast_bounds_headline_false_positives_and_power(cal):
    """10 null and 10 OR-2 datasets through every pure-Python test: the headline tests reject a true null at most
    twice in 10 (a true 5% rate does it 3+ times with probability 0.012) and find the planted gap at least 6 times."""
    rows = cal.run_python(["null", "gap_or2"], n_sims=10, k=8, n=30, seed=3, n_boot=100)
    assert {r["test"] for r in rows} >= {"gee_bias_reduced:upward@concept_learning", "signflip_gap@concept_learning",
                                         "cmh@concept_learning", "mcnemar_holm_any", "signflip_dprime_gap@explicit"}
    assert cal.check(rows, bound=0.2, min_power=0.6) == []
    power = next(r for r in rows if r["scenario"] == "gap_or2" and r["test"] == "gee_bias_reduced:upward@concept_learning")
    assert power["rate"] >= 0.6 and power["null_true"] is False and power["headline"]
    assert all(r["n_sims"] == 10 and r["mc_se"] == pytest.approx(np.sqrt(r["rate"] * (1 - r["rate"]) / 10)) for r in rows)


def test_committed_results_meet_the_claims():
    """benchmarks/results/calibration.json: ≥ 200 simulations per cell; the pure-Python headline test (GEE) at most
    .075 in every cell where its null is true; the GLMM's null cells consistent with 5% (within 2 Monte-Carlo SEs)
    and on average at most .06; every point-bound excess listed in ``violations`` (reported, not hidden); the CMH's
    failure under a varying gap reported; the power grid complete."""
    res = json.loads(RESULTS.read_text())
    rows = [r for r in res["rows"] if r["study"] == "monotonicity"]
    assert rows and all(r["n_sims"] >= 200 for r in rows)
    head = [r for r in rows if r["headline"] and r["null_true"]]
    assert {r["scenario"] for r in head} == {"chance", "null", "null_varying_gap", "null_yes_bias", "gap_or1.5",
                                             "gap_or2", "gap_or1.5_interaction", "gap_or2_interaction"}
    gee = [r for r in head if r["test"].startswith("gee_bias_reduced")]
    glmm = [r for r in head if r["test"].startswith("glmm_lrt")]
    assert len(gee) == 22 and all(r["rate"] <= 0.075 for r in gee)
    assert len(glmm) in (0, 22)  # 0 where the results were made without R
    assert all(r["rate"] - 0.05 <= 2 * r["mc_se"] for r in glmm)
    assert not glmm or np.mean([r["rate"] for r in glmm]) <= 0.06
    listed = {v.rsplit(": false-positive", 1)[0] for v in res["violations"]}
    over = {f"{r['test']} in {r['scenario']}" for r in head if r["rate"] > 0.075}
    assert over <= listed, "every point-bound excess is listed in violations"
    cmh = next(r for r in rows if r["test"] == "cmh@concept_learning" and r["scenario"] == "null_varying_gap")
    assert cmh["rate"] > 0.075 and not cmh["own_null_true"], "the fixed-threshold test fails the varying-gap null"
    grid = {(p["thresholds"], p["prompts_per_concept"]) for p in res["power"]}
    assert grid >= {(k, n) for k in (5, 10, 19) for n in (50, 100, 200, 500)}


@pytest.mark.slow  # ~25 s
def test_rerunning_part_of_the_committed_calibration_agrees_within_monte_carlo_error(cal):
    """The committed results are re-derived, in part, by today's code: the first 40 simulations of two committed
    cells (null and gap OR 2; every pure-Python test; the committed design, seed and bootstrap size) run again.
    Those 40 are the first 40 of the committed 200, so given the committed count of rejections, the count among
    them is hypergeometric; a count outside the central 99.9% of that law fails. A change that moves a test's
    rejection rate by about 0.2 or more fails here; smaller shifts need the full benchmark run."""
    from scipy.stats import hypergeom

    res = json.loads(RESULTS.read_text())
    committed = {(r["scenario"], r["test"]): r for r in res["rows"] if r.get("part") == "python"}
    design = committed[("null", "gee_bias_reduced:upward@concept_learning")]
    assert res["parts"]["python-null"]["seed"] == cal.DEFAULT_SEED
    n = 40
    rows = cal.run_python(["null", "gap_or2"], n_sims=n, k=design["thresholds"], n=design["prompts_per_concept"],
                          seed=cal.DEFAULT_SEED, n_boot=1000)
    assert {(r["scenario"], r["test"]) for r in rows} == {k for k in committed if k[0] in ("null", "gap_or2")}
    for r in rows:
        c = committed[(r["scenario"], r["test"])]
        law = hypergeom(c["n_sims"], c["rejections"], n)
        tail = min(law.cdf(r["rejections"]), law.sf(r["rejections"] - 1))
        assert tail > 0.0005, (f"{r['test']} in {r['scenario']}: {r['rejections']}/{n} now, "
                               f"{c['rejections']}/{c['n_sims']} committed (tail probability {tail:.2g})")


@pytest.mark.slow
def test_fast_mode_runs_end_to_end(tmp_path):
    out = tmp_path / "fast.json"
    # 20 simulations per cell (the fast mode's default is 40): every part still runs, in about half the time
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "calibration.py"), "--fast", "--n-sims", "20",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["fast"] and res["violations"] == []
    tests = {r["test"] for r in res["rows"]}
    assert "gee_bias_reduced:upward:explicit" in tests and "signflip_gap_difference" in tests


def test_the_degenerate_fit_rules_leave_calibration_unchanged():
    """benchmarks/results/calibration-rules.json: the committed cells' simulations (same seeds and designs) run again
    with the degenerate-fit rules, for the GLMM, the GEE and the GEE's power at 5 thresholds, null and planted gaps,
    plus a small GLMM design (5 thresholds × 10 prompts). In every cell the rules flag at most 1% of the fits, and the
    rejection rate with the rules is within one Monte-Carlo SE of the same simulations' rate without them."""
    res = json.loads((ROOT / "benchmarks" / "results" / "calibration-rules.json").read_text())
    cells = res["rows"] + res["power"]
    assert {r["test"].split(":")[0] for r in cells} == {"glmm_lrt", "gee_bias_reduced"}
    assert any(r.get("null_true") for r in res["rows"]) and any(r.get("null_true") is False for r in res["rows"])
    assert res["power"] and all(r["n_sims"] >= 30 for r in cells)
    for r in cells:
        assert r["n_flagged"] <= 0.01 * r["n_sims"], r
        assert r["rejections_without_rules"] >= r["rejections"], "a rule can only take a rejection away"
        assert abs(r["rejections_without_rules"] - r["rejections"]) / r["n_sims"] <= max(r["mc_se"], 1 / r["n_sims"]), r
