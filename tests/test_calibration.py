"""The calibration study (benchmarks/calibration.py): fast bounds in the suite, the committed results' claims, and
the whole --fast run (slow tier)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "calibration.json"


@pytest.fixture(scope="module")
def cal():
    spec = importlib.util.spec_from_file_location("calibration", ROOT / "benchmarks" / "calibration.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["calibration"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


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
    and on average at most .06; every point-bound excess listed in ``violations`` (the one there, the GLMM
    interaction at 0.080 ± 0.019, is reported, not hidden); the CMH's failure under a varying gap reported; the
    power grid complete."""
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
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "calibration.py"), "--fast", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["fast"] and res["violations"] == []
    tests = {r["test"] for r in res["rows"]}
    assert "gee_bias_reduced:upward:explicit" in tests and "signflip_gap_difference" in tests
