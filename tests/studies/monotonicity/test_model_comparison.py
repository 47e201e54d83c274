"""Models compared on the same prompts: identical models never differ, a planted difference is found and said naming
both models (through a separated fit's Firth fallback too), only shared prompts are paired, more than two models are
each compared with the first and Holm-adjusted, the calibration file's rows hold their bounds, and a two-model run goes
through ``analyze_run`` to a sentence, a figure and the sweep's closing lines."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from nbutils.results import _headline as headline, _words as results
from nbutils import paths, report
from nbutils.stats import holm, r_available
from nbutils.studies.common import model_comparison as mc
from nbutils.studies.monotonicity import analysis
from nbutils.studies.monotonicity.results import comparison_lines
from simulated_runs import simulated_run

CALIBRATION = paths.repo_root() / "benchmarks" / "results" / "calibration_models.json"
PROMPTS = pd.read_parquet(paths.repo_root() / "outputs" / "samples" / "monotonicity" / "prompts.parquet")


def answers(model: str, p_up: float, p_down: float, seed: int, prompts: pd.DataFrame = PROMPTS) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    up = (prompts["monotonicity"] == "upward").to_numpy()
    correct = rng.random(len(prompts)) < np.where(up, p_up, p_down)
    pred = np.where(correct, prompts["label"], ~prompts["label"])
    return prompts.assign(model=model, correct=correct, pred_yes=pred, margin=np.where(pred, 1.0, -1.0))


def test_identical_models_never_differ(monkeypatch):
    monkeypatch.setenv("NB_RSCRIPT", "none")
    a = answers("A", 0.8, 0.5, seed=1)
    t = mc.compare(pd.concat([a, a.assign(model="B")]))
    assert set(t["test"]) == {"gee_models", "mcnemar_models", "mcnemar_midp_models"}
    assert (t["estimate"] == 0).all() and (t["p"] == 1).all() and t["valid"].all()
    for r in mc.records(t):
        assert results.verdict(r) == "none" and r["models"] == ["B", "A"] and r["reference"] == "A"
        if r["headline"]:
            assert results.sentence(r, who=False).startswith("no evidence at α = .05 that the gaps of B and A differ")


def test_a_separated_model_against_a_fair_one_is_strong_evidence_naming_both(monkeypatch):
    monkeypatch.setenv("NB_RSCRIPT", "none")
    d = pd.concat([answers("big", 1.0, 0.0, seed=2), answers("small", 0.7, 0.7, seed=3)])
    recs = mc.records(mc.compare(d))
    for cond in ("concept_learning", "explicit"):
        said = [r for r in results.replaced_dropped([r for r in recs if r["headline"]]) if r["condition"] == cond]
        assert len(said) == 1 and said[0]["test"] == "firth_models" and said[0]["fallback_for"] == "gee_models"
        r = said[0]  # five thresholds: t(4) on the per-threshold differences, floored at the Firth SE
        assert r["p"] < 0.05 and r["ci_high"] < -1 and results.verdict(r) == "less" and r["models"] == ["small", "big"]
        text = results.sentence(r, who=False, records=recs)
        assert text.startswith("the gap of small is smaller than big's: ratio of ORs = 0.") and "95% CI [" in text
        assert "It stands in for the headline test (logistic GEE clustered by prompt" in text
        acc = next(r for r in recs if r["test"] == "mcnemar_models" and r["condition"] == cond)
        assert acc["term"] == "accuracy:model" and not acc["headline"], "McNemar tests accuracy, not the gap"
        text = results.sentence(acc, who=False, records=recs)
        assert text.startswith("small answered more prompts right than big: difference = ") and "= -" not in text
        assert "exact McNemar test of equal accuracy" in text and "gap" not in text
    lines = comparison_lines(results.replaced_dropped([r for r in recs if r["headline"]]), recs)
    assert len(lines) == 2 and all(len(ln.split()) <= 60 for ln in lines), lines  # why: in the caveats
    assert all(ln.endswith(", standing in for the GEE by prompt).")
               for ln in lines)


def test_only_shared_prompts_are_paired_and_three_models_are_holm_adjusted_against_the_first(monkeypatch):
    monkeypatch.setenv("NB_RSCRIPT", "none")
    some = PROMPTS[PROMPTS["pair_id"].isin(PROMPTS["pair_id"].unique()[::2])]
    d = pd.concat([answers("A", 0.9, 0.4, 4), answers("B", 0.6, 0.6, 5), answers("C", 0.7, 0.6, 6, some)])
    t = mc.compare(d, order=["A", "B", "C"])
    assert set(zip(t["first"], t["second"])) == {("B", "A"), ("C", "A")}
    n = t.groupby("first")["n_prompts"].first()
    assert n["B"] == 60 and n["C"] == some.groupby("condition").size().iloc[0]
    for (_, _), g in t.groupby(["condition", "test"]):
        assert np.allclose(g["p_holm"], holm(g["p"]), equal_nan=True)
    for r in mc.records(t):
        if r["p"] is None:  # a fit the data separate (A answered every upward prompt of C's right) shows no p
            assert not r["valid"]
            continue
        assert r["p"] == pytest.approx(t[(t["first"] == r["models"][0]) & (t["condition"] == r["condition"])
                                         & (t["test"] == r["test"])]["p_holm"].iloc[0])
    summary = {"records": mc.records(t)}  # the headline for scripts and the report's table: one row per pair
    entries, rows = headline.entries(summary), headline.table_rows(summary)
    assert sorted((e["models"][0], e["condition"], e["n"]) for e in entries) == sorted(
        (s, c, int(n)) for s, c, n in t[t["test"] == "gee_models"][["first", "condition", "n_prompts"]].itertuples(
            index=False))
    assert sorted(r["model"] for r in rows) == ["B vs A", "B vs A", "C vs A", "C vs A"]


@pytest.mark.skipif(not r_available("lme4"), reason="R with lme4 is not installed")
def test_the_glmm_is_the_headline_with_r_and_agrees_with_the_gee_in_sign():
    d = pd.concat([answers("A", 0.9, 0.25, 7), answers("B", 0.6, 0.6, 8)])
    t = mc.compare(d)
    glmm, gee = (t[t["test"] == k].set_index("condition") for k in ("glmm_models", "gee_models"))
    assert glmm["valid"].all() and (np.sign(glmm["estimate"]) == np.sign(gee["estimate"])).all()
    assert (glmm["p"] < 0.05).all()
    assert {r["test"] for r in mc.records(t) if r["headline"]} == {"glmm_models"}


def test_the_calibration_file_holds_its_bounds():
    """Under equal gaps the headline comparison (the GEE without R, the GLMM with it, each with its fallbacks)
    rejects at most 7.5% of 200+ simulations at the demo's size and the paper's (the GLMM at the paper's size under
    concept learning only: the design with the concept stated is the same); McNemar, exact and mid-p, rejects at most
    7.5% where the two models are equally accurate; the power of each is recorded beside it."""
    rows = json.loads(CALIBRATION.read_text())["rows"]

    def cells(test, scenario, r):
        return {(x["thresholds"], x["prompts_per_concept"], x["condition"]): x for x in rows
                if x["test"] == test and x["scenario"] == scenario and x["r"] == r}

    both = {(k, n, c) for k, n in ((5, 6), (10, 100)) for c in ("concept_learning", "explicit")}
    need = {("headline", False): both, ("glmm_models", True): both - {(10, 100, "explicit")},
            ("headline", True): both - {(10, 100, "explicit")}, ("mcnemar_models", False): both,
            ("mcnemar_midp_models", False): both}
    for (test, r), where in need.items():
        null = cells(test, "equal_accuracy" if test.startswith("mcnemar") else "equal_gaps", r)
        power = cells(test, "equal_gaps" if test.startswith("mcnemar") else "different_gaps", r)
        assert where <= set(null) and where <= set(power), (test, r, where - set(null), where - set(power))
        for key in where:
            assert null[key]["null_true"] and not power[key]["null_true"]
            assert null[key]["n_sims"] >= 200 and null[key]["rate"] <= 0.075, (test, r, null[key])
            assert power[key]["n_sims"] >= 200 and power[key]["rate"] > null[key]["rate"], (test, r, power[key])


def test_the_statistics_page_shows_the_calibration_files():
    """The calibration tables of docs/statistics.md are the ones the results files give (``--tables``)."""
    import sys
    sys.path.insert(0, str(paths.repo_root() / "benchmarks"))
    from calibration_models import OUT_GAP, comparison_table, firth_table

    text = (paths.repo_root() / "docs" / "statistics.md").read_text()
    assert comparison_table(json.loads(CALIBRATION.read_text())["rows"]) in text
    assert firth_table(json.loads(OUT_GAP.read_text())["rows"]) in text


def test_a_few_simulations_of_equal_gaps_reject_rarely():
    """A handful of the calibration's simulations, run here: equal gaps, the demo's size."""
    import sys
    sys.path.insert(0, str(paths.repo_root() / "benchmarks"))
    from calibration_models import simulate

    rng = np.random.default_rng(0)
    p = [mc.compare(simulate(5, 6, rng), use_r=False).query("test == 'gee_models'")["p"] for _ in range(10)]
    assert (pd.concat(p) < 0.05).sum() <= 2


@pytest.mark.slow  # ~10 s on a quiet host, 25 s on two busy cores: the whole analysis of two models
def test_a_two_model_run_is_compared_through_the_analysis(tmp_path, monkeypatch):
    monkeypatch.setenv("NB_RSCRIPT", "none")
    rng = np.random.default_rng(9)
    run = simulated_run(tmp_path, {"zeta": lambda p: p["monotonicity"] == "upward",
                                   "alpha": lambda p: rng.random(len(p)) < 0.7})
    a = analysis.analyze_run(run, n_boot=50)
    assert a.summary["design"]["model_order"] == ["zeta", "alpha"], "the order the score files were written in"
    heads = [r for r in results.replaced_dropped([r for r in a.summary["records"] if r.get("headline")])
             if r.get("models")]
    assert {r["condition"] for r in heads} == {"concept_learning", "explicit"}
    assert all(r["models"] == ["alpha", "zeta"] and r["p"] < 0.05 for r in heads)
    lines = report.headline(run)
    said = [ln for ln in lines if ln.startswith("alpha vs zeta, ")]
    assert len(said) == 2 and all("the gap of alpha is smaller than zeta's: ratio of ORs = 0." in ln for ln in said)
    assert all(len(ln.split()) <= 60 for ln in said), "a comparison's sentence is pasted as the others are"
    written = json.loads(paths.summary_path(run).read_text())["headline"]
    assert sorted(e["condition"] for e in written if e.get("models") == ["alpha", "zeta"]) == [
        "concept_learning", "explicit"]
    assert (run / "figures" / "model_gaps.png").is_file()
    assert math.isfinite(next(r for r in heads)["estimate"])


def _ratio(text: str) -> float:
    """The first ``ratio of ORs`` (or McNemar's ``difference``) a sentence prints, as a number."""
    import re
    m = re.search(r"(?:ratio of ORs|difference) = ([+−-]?[0-9.]+)", text)
    return float(m.group(1).replace("−", "-"))


def test_every_comparison_reads_in_the_direction_of_its_estimate(monkeypatch):
    """Seeded random runs of three models with random gaps and accuracies: in every comparison record the model named
    first in the sentence is ``models[0]``, "exceeds"/"more" go with a ratio above 1 (a positive difference), "smaller"/
    "fewer" with one below, and the record, the table row and the CSV's ``what`` say the same direction."""
    monkeypatch.setenv("NB_RSCRIPT", "none")
    rng = np.random.default_rng(20240101)
    seen = set()
    for trial in range(12):
        ps = rng.uniform(0.05, 0.95, size=(3, 2))
        names = [f"m{trial}{c}" for c in "xyz"]
        d = pd.concat([answers(n, *p, seed=int(rng.integers(1 << 30))) for n, p in zip(names, ps)])
        t = mc.compare(d, order=names)
        assert set(t["second"]) == {names[0]} and (t["what"].str.startswith("first's")).all()
        for r in mc.records(t):
            first, second = r["models"]
            row = t[(t["first"] == first) & (t["condition"] == r["condition"]) & (t["test"] == r["test"])].iloc[0]
            assert second == r["reference"] == names[0] and row["estimate"] == pytest.approx(r["estimate"], nan_ok=True)
            v = results.verdict(r)
            text = results.sentence(r, who=False, records=[])
            seen.add((r["term"], v))
            if v == "more":
                assert text.startswith(f"the gap of {first} exceeds {second}'s: ratio of ORs = ") or text.startswith(
                    f"{first} answered more prompts right than {second}: difference = ")
                assert (_ratio(text) > 1) if r["term"] == "upward:model" else _ratio(text) > 0
            elif v == "less":
                assert text.startswith(f"the gap of {first} is smaller than {second}'s: ratio of ORs = ") or (
                    text.startswith(f"{first} answered fewer prompts right than {second}: difference = -"))
                assert (_ratio(text) < 1) if r["term"] == "upward:model" else _ratio(text) < 0
            if v in ("more", "less"):
                assert "exceeds" not in text or v == "more"
    assert {("upward:model", "more"), ("upward:model", "less"), ("accuracy:model", "more"),
            ("accuracy:model", "less")} <= seen, seen


def test_mcnemar_exact_and_mid_p_agree_with_their_references():
    """The exact p is statsmodels' exact McNemar; the mid-p is computed from scipy's binomial: twice the smaller tail
    less the observed split's probability; the mid-p is never above the exact p."""
    from scipy.stats import binom
    from statsmodels.stats.contingency_tables import mcnemar

    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(4, 60))
        first, second = rng.random(n) < rng.uniform(0.2, 0.9), rng.random(n) < rng.uniform(0.2, 0.9)
        g = pd.DataFrame({"prompt_id": np.tile(np.arange(n), 2), "model": ["A"] * n + ["B"] * n,
                          "correct": np.concatenate([first, second])})
        row, _ = mc.mcnemar_row(g, "A", "B")
        b, c = int((first & ~second).sum()), int((~first & second).sum())
        assert (row["only_first"], row["only_second"]) == (b, c)
        assert row["p"] == pytest.approx(mcnemar([[0, b], [c, 0]], exact=True).pvalue)
        k, m = min(b, c), b + c
        ref = min(1.0, 2 * sum(binom.pmf(i, m, 0.5) for i in range(k)) + binom.pmf(k, m, 0.5))
        assert row["p_midp"] == pytest.approx(ref, abs=1e-12) and row["p_midp"] <= row["p"] + 1e-12


def test_models_that_share_no_prompts_are_said_not_compared(monkeypatch):
    monkeypatch.setenv("NB_RSCRIPT", "none")
    half = PROMPTS["pair_id"].isin(PROMPTS["pair_id"].unique()[::2])
    d = pd.concat([answers("A", 0.8, 0.5, 1, PROMPTS[half]), answers("B", 0.6, 0.6, 2, PROMPTS[~half])])
    assert mc.compare(d, order=["A", "B"]).empty
    assert mc.unpaired(d, ["A", "B"]) == [f"B and A share no prompts ({int((~half).sum())} and {int(half.sum())} "
                                          "scored): their gaps are not compared"]
