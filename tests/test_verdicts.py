"""A verdict says what it means: the task floor, whether the answers use the examples, the rule followed instead,
near-constant responders, the odds ratio's scale, and no test that cannot reject standing in.

- the two new tests agree with R on the same data (the score test with ``anova(glm, test = "Rao")``, the floor with
  ``binom.test`` and Wilson's interval) and are calibrated by simulation (the shipped results, and a fast rerun);
- the readings kept apart on simulated runs analysed end to end (a prior on the query, a learner that learns upward
  concepts better, a responder at chance, a near-constant responder), and on the shipped control sample;
- property tests over the sentence engine: the words agree with the facts, and a gap of 60 points or more on 30 + 30
  prompts is never "no evidence".
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nbutils import paths
from nbutils.results import _readings as readings, entries
from nbutils.studies.common import verdicts
from nbutils.studies.monotonicity import analysis

from simulated_runs import simulated_run

ROOT = paths.repo_root()
CONTROL = ROOT / "outputs" / "samples" / "control"
DEMO = ROOT / "outputs" / "samples" / "monotonicity"
RESULTS = ROOT / "benchmarks" / "results" / "calibration_verdicts.json"
sys.path.insert(0, str(ROOT / "benchmarks"))
import calibration_verdicts  # noqa: E402

HAS_R = shutil.which("Rscript") is not None
CONTROL_MODEL = "smollm2-135m-instruct.smollm2-135m-upward-control-e56ef6f3"
BASE_MODEL = "smollm2-135m-instruct"
CONTROL_LABEL, BASE_LABEL = "SmolLM2-135M + upward control", "SmolLM2-135M-Instruct"  # the names results print


def _control_frame(model: str) -> pd.DataFrame:
    prompts = pd.read_parquet(CONTROL / "prompts.parquet")
    scores = pd.read_parquet(CONTROL / "scores" / f"{model}.parquet")[["prompt_id", "pred_yes", "correct"]]
    return analysis.originals(scores.merge(prompts, on="prompt_id").assign(model=model))  # the twins read apart


# ---------------------------------------------------------------- the tests against R

@pytest.mark.skipif(not HAS_R, reason="R is not installed")
def test_the_examples_score_test_and_the_floor_agree_with_r_on_the_control_sample(tmp_path):
    from scipy import stats as sps

    checked = 0
    for model in (BASE_MODEL, CONTROL_MODEL):
        d = _control_frame(model)
        for cond, g in d.groupby("condition"):
            ours = verdicts.examples_test(g)
            fl = verdicts.floor_test(g["correct"], g["label"])
            ex = verdicts.label_terms(g)
            csv = tmp_path / "d.csv"
            pd.DataFrame({"y": g["pred_yes"].astype(int), "q": verdicts.query_position(g), "lu": ex[:, 0],
                          "ld": ex[:, 1], "correct": g["correct"].astype(int)}).to_csv(csv, index=False)
            # both fits converged tightly (R's default stops at a relative change of 1e-8, which moves the score
            # statistic in the fourth digit where the control's answers nearly separate)
            script = (f'd <- read.csv("{csv}"); c <- glm.control(epsilon = 1e-14, maxit = 100); '
                      'f0 <- glm(y ~ poly(q, 3), binomial, d, control = c); '
                      'f1 <- glm(y ~ poly(q, 3) + lu + ld, binomial, d, control = c); a <- anova(f0, f1, test = "Rao"); '
                      'k <- sum(d$correct); n <- nrow(d); b <- binom.test(k, n, 0.5, alternative = "greater"); '
                      'w <- prop.test(k, n, correct = FALSE)$conf.int; '
                      'cat(format(c(a$Rao[2], b$p.value, w[1], w[2]), digits = 15), sep = "\\n")')
            out = subprocess.run(["Rscript", "-e", script], capture_output=True, text=True, check=True).stdout.split()
            rao, p_binom, lo, hi = map(float, out)
            assert ours["statistic"] == pytest.approx(rao, rel=1e-4, abs=1e-8), (model, cond)  # two fits converged to 1e-8
            assert ours["p"] == pytest.approx(sps.f.sf(rao / 2, 2, len(g) - 4 - 2), rel=1e-4)
            assert fl["p"] == pytest.approx(p_binom, rel=1e-6) and fl["chance"] == 0.5
            assert (fl["ci_low"], fl["ci_high"]) == pytest.approx((lo, hi), rel=1e-6)
            checked += 1
    assert checked == 4


def test_the_score_test_holds_where_the_label_or_the_query_explains_every_answer():
    d = _control_frame(BASE_MODEL)
    g = d[d["condition"] == "concept_learning"]
    perfect = verdicts.examples_test(g.assign(pred_yes=g["label"]))  # a perfect learner: the labels separate
    assert np.isfinite(perfect["statistic"]) and perfect["p"] < 1e-6
    step = verdicts.examples_test(g.assign(pred_yes=verdicts.query_position(g) > 0.5))  # a sharp prior at 1/2
    assert step["p"] > 0.05
    const = verdicts.examples_test(g.assign(pred_yes=False))
    assert np.isnan(const["p"]) and "one answer to every prompt" in const["note"]


# ---------------------------------------------------------------- calibration

def test_the_shipped_calibration_meets_its_bounds_and_the_statistics_page_prints_it():
    res = json.loads(RESULTS.read_text())
    assert res["n_sims"] >= 200 and not res["failures"]
    rows = res["rows"]
    assert not calibration_verdicts.check(rows)
    assert {r["design"] for r in rows} == {"demo", "study"}
    learners = [r for r in rows if r["test"] == "examples" and r["uses_examples"]]
    assert all(r["rate"] >= 0.5 for r in learners)  # power for a learner that uses the examples
    page = (ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")
    assert calibration_verdicts.markdown(rows) in page


def test_the_calibration_reruns_fast_and_stays_near_alpha():
    rows = calibration_verdicts.run(60, seed=11, designs=("demo",), kinds=("coin", "soft_prior", "upward_learner"))
    null = [r for r in rows if r["responder"] != "upward_learner" and r["test"] == "examples"]
    assert all(r["rate"] <= 0.15 for r in null), null
    power = [r for r in rows if r["responder"] == "upward_learner" and r["test"] == "examples"]
    assert all(r["rate"] >= 0.6 for r in power), power


# ---------------------------------------------------------------- readings end to end

def _answers(kind: str):
    """A simulated model as ``simulated_run`` takes it: the correct answers it gives to the demo's prompts."""
    def correct(prompts: pd.DataFrame) -> np.ndarray:
        rng = np.random.default_rng(sum(map(ord, kind)))
        label = prompts["label"].to_numpy(dtype=bool)
        up = (prompts["monotonicity"] == "upward").to_numpy()
        q = verdicts.query_position(prompts).to_numpy()
        n = len(prompts)
        if kind == "prior":  # Yes for large proportions, whatever the examples say
            yes = q > 0.5
        elif kind == "learner":  # learns upward concepts, guesses on downward ones
            yes = np.where(rng.random(n) < np.where(up, 0.95, 0.6), label, ~label)
        elif kind == "chance":
            yes = rng.random(n) < 0.5
        else:  # near-constant: No to all but one prompt per condition
            yes = np.zeros(n, dtype=bool)
            yes[[0, n - 1]] = True
        return yes == label
    return correct


@pytest.fixture(scope="module")
def four_models(tmp_path_factory):
    run = simulated_run(tmp_path_factory.mktemp("readings"),
                        {k: _answers(k) for k in ("prior", "learner", "chance", "constant")})
    a = analysis.analyze_run(run, n_boot=50, use_r=HAS_R)  # lme4's GLMM where R is: the design's powerful test
    return run, a


def test_the_four_readings_are_kept_apart_end_to_end(four_models):
    run, a = four_models
    got = {(e["model"], e["condition"]): e for e in entries(a.summary)}
    cl = {m: got[(m, "concept_learning")] for m in ("prior", "learner", "chance", "constant")}
    # a prior on the query, read without twin prompts: the score test finds no use of the examples, and that is said
    # as no evidence, never as a prior shown (only twins can exclude a use of the examples)
    assert cl["prior"]["reading"] == "undetermined" and cl["prior"]["uses_examples"]["uses"] is False
    assert "which does not show that they ignore it" in cl["prior"]["sentence"]
    assert "twin prompts" in cl["prior"]["sentence"]
    assert cl["learner"]["uses_examples"]["uses"] is True
    if HAS_R:  # the GEE's t(K−1) over five thresholds misses this gap; the GLMM finds it
        assert cl["learner"]["reading"] == "learned", cl["learner"]["sentence"]
        assert "upward concepts were learned better than downward ones" in cl["learner"]["sentence"]
        assert re.search(r"conditional OR = .*, binomial GLMM, LRT; marginal OR = .*, GEE by threshold",
                         cl["learner"]["sentence"])
    assert not re.search(r"prior|floor|caveat", cl["learner"]["sentence"])
    assert cl["chance"]["reading"] == "below_floor" and "below the task floor" in cl["chance"]["sentence"]
    assert "no evidence" not in cl["chance"]["sentence"]
    assert cl["constant"]["constant"]["answer"] == "No"
    assert "caveat: it answered No to 59 of 60 prompts" in cl["constant"]["sentence"]
    text = (run / "results.md").read_text(encoding="utf-8")
    for e in cl.values():  # results.md says what summary.json's headline says
        assert e["sentence"] in text
    assert "prior, concept learning, what was learned: downward concepts were answered as their upward mirror" in text
    summary = json.loads((run / "summary.json").read_text())
    assert summary["headline"][0]["reading"] in readings.READINGS


def test_the_control_sample_is_read_by_its_twins_and_the_base_model_as_below_the_floor(tmp_path):
    """The control's gap is read from its twin prompts: a reading that says which twin tests decided it, or, where
    none did, that the source is undetermined with the power the twins had; never a prior assumed from a test that
    failed to reject."""
    run = tmp_path / "control"
    shutil.copytree(CONTROL, run, ignore=shutil.ignore_patterns("*.md"))
    a = analysis.analyze_run(run, n_boot=50, use_r=False)
    got = {(e["model"], e["condition"]): e for e in entries(a.summary)}
    control = got[(CONTROL_LABEL, "concept_learning")]
    tw = control["twins"]
    assert tw["labels"]["n"] == 120 and tw["threshold"]["both"]["n"] > 0 and tw["copy"]["n"] == 120
    assert control["reading"] == "undetermined", control["sentence"]
    assert "label-flipped twins" in control["sentence"] and "power against a learner" in control["sentence"]
    assert "not from learning from the examples" not in control["sentence"]
    assert "downward concepts were answered as their upward mirror" in control["rule_sentence"] if "rule_sentence" in \
        control else True
    for cond in ("concept_learning", "explicit"):
        base = got[(BASE_LABEL, cond)]
        assert base["reading"] == "below_floor" and re.search(r"(below|at the edge of) the task floor",
                                                              base["sentence"]), base["sentence"]
        assert "no evidence that upward" not in base["sentence"]


# ---------------------------------------------------------------- property tests of the sentence engine

def _summary(rng: np.random.Generator) -> tuple[dict, dict]:
    """A random model × condition: a headline record (GLMM or GEE, any direction and significance, or not valid),
    the floor, the examples test, a near-constant answer or not, the rule analysis."""
    cond = rng.choice(["concept_learning", "explicit"])
    n = int(rng.choice([20, 60, 200]))
    acc_up, acc_down = rng.uniform(0, 1, 2)
    gap = acc_up - acc_down
    test = rng.choice(["glmm_lrt", "gee_bias_reduced", "cmh"])
    est = float(rng.normal(0, 2))
    se = float(rng.uniform(0.1, 1))
    p = float(rng.choice([rng.uniform(0, 0.05), rng.uniform(0.05, 1)]))
    valid = bool(rng.random() > 0.15)
    from nbutils.studies.common import claims
    rec = {"test": test, "term": "upward", "model": "m", "condition": cond, "estimate": est, "se": se,
           "ci_low": est - 2 * se, "ci_high": est + 2 * se, "p": p, "valid": valid, "headline": True,
           "note": "the gap; a reason" if not valid else "the gap", "hypothesis": claims.gap(cond)}
    floor_p = float(rng.uniform(0, 1))
    uses_p = float(rng.uniform(0, 1)) if rng.random() > 0.1 else float("nan")
    const = bool(rng.random() < 0.2)
    block = {"acc_up": acc_up, "acc_down": acc_down, "gap": gap, "n": n,
             "floor": {"accuracy": 0.5, "ci_low": 0.4, "ci_high": 0.6, "p": floor_p, "n": n, "chance": 0.5,
                       "above": floor_p < 0.05},
             "uses_examples": {"uses": (uses_p < 0.05) if np.isfinite(uses_p) else None, "p": uses_p,
                               "statistic": 1.0, "df": 2, "query_p": 0.01, "note": ""},
             "constant": {"answer": "No", "count": n - 1, "n": n, "share": (n - 1) / n} if const else None,
             "per_threshold": [{"threshold": "1/2", "k_up": 3, "n_up": 3, "k_down": 0, "n_down": 3}]}
    summary = {"records": [rec], "models": {"m": {"conditions": {cond: block}}},
               "rules_mirror_test": [{"model": "m", "condition": cond, "mirror_agreement_down": 0.8,
                                      "mirror_agreement_up": 0.1, "p_exact_stratified": 0.001}]}
    return summary, {"cond": cond, "rec": rec, "block": block}


def test_property_readings_agree_with_their_facts_in_direction_significance_floor_and_validity():
    from nbutils.results import verdict

    rng = np.random.default_rng(20261127)
    seen = set()
    for _ in range(3000):
        summary, f = _summary(rng)
        rd = readings.reading(summary, "m", f["cond"])
        s, kind, v = rd["sentence"], rd["reading"], verdict(f["rec"])
        seen.add(kind)
        assert kind in readings.READINGS
        uses = f["block"]["uses_examples"]["uses"]
        if v == "invalid":
            assert kind == "no_valid_test" and "no valid test" in s and "OR =" not in s, s
        elif v in ("more", "less"):
            # no twins here: a use of the examples is never excluded, and a test that could not run reads no source
            assert kind == ("learned" if uses else "undetermined"), (kind, s)
            assert "prior" not in s or "does not show" in s, s
            better = "upward" if v == "more" else "downward"
            assert re.search(rf"{better} concepts were (learned|answered)", s), s
            assert "no evidence at α" not in s and "below the task floor" not in s
        else:
            assert kind in ("below_floor", "no_evidence"), (kind, s)
            assert "better" not in s and "prior" not in s
            if kind == "below_floor":
                assert f["block"]["floor"]["above"] is False and "no conclusion about a bias" in s
        if "no evidence at α" in s:  # never beside a gap the design should find 4 times in 5
            n = f["block"]["n"]
            assert abs(f["block"]["gap"]) < readings.detectable_gap(n // 2, n // 2), s
        assert ("caveat: it answered No" in s) == (f["block"]["constant"] is not None), s
        if v != "invalid" and "OR =" in s:  # every odds ratio says its scale
            assert all(re.search(r"(conditional|marginal) OR = ", m) for m in re.findall(r"\w+ OR = ", s)), s
            assert ("conditional OR = " in s) == (f["rec"]["test"] == "glmm_lrt"), s
        if f["cond"] == "explicit":
            assert "learned better" not in s and "learned differently" not in s, s
    assert seen == set(readings.READINGS) - {"mirror", "prior"}  # the property's records carry no twins


def _extreme_scores(rng: np.random.Generator, up_acc: float, down_acc: float, hetero: bool) -> pd.DataFrame:
    prompts = pd.read_parquet(DEMO / "prompts.parquet")
    up = (prompts["monotonicity"] == "upward").to_numpy()
    label = prompts["label"].to_numpy(dtype=bool)
    n = len(prompts)
    correct = np.zeros(n, dtype=bool)
    at = (prompts["threshold"] == "1/2").to_numpy() if hetero else np.zeros(n, dtype=bool)
    # exactly the accuracies asked for in each direction (and, with ``hetero``, half right both ways at 1/2: the gap
    # differs between thresholds), so that the gap is what the case says by construction
    for mask, acc in ((up & ~at, up_acc), (~up & ~at, down_acc), (up & at, 0.5), (~up & at, 0.5)):
        idx = np.flatnonzero(mask)
        k = int(round(acc * len(idx)))
        correct[idx] = False
        correct[rng.choice(idx, k, replace=False)] = True
    pred = np.where(correct, label, ~label)
    return prompts.assign(model="m", pred_yes=pred, correct=correct, margin=np.where(pred, 1.0, -1.0))


def test_property_a_gap_of_sixty_points_on_thirty_and_thirty_prompts_is_never_no_evidence():
    rng = np.random.default_rng(7)
    cases = [(1.0, 0.0, False), (0.0, 1.0, False), (0.97, 0.03, False), (0.03, 0.97, False), (0.9, 0.2, False),
             (1.0, 0.1, True), (0.1, 1.0, True), (0.95, 0.15, True), (0.65, 0.0, False), (0.3, 1.0, False)]
    for up_acc, down_acc, hetero in cases:
        scores = _extreme_scores(rng, up_acc, down_acc, hetero)
        a = analysis.compute(scores, n_boot=50, use_r=False)
        for cond in ("concept_learning", "explicit"):
            gap = a.summary["models"]["m"]["conditions"][cond]["gap"]
            assert abs(gap) >= 0.6 - 1e-9
            rd = readings.reading(a.summary, "m", cond)
            # the gap is never "no evidence" (the examples' test may be: that is another test)
            assert "no evidence at α" not in rd["sentence"], (up_acc, down_acc, hetero, rd["sentence"])
            # a test that cannot reject at five thresholds never stands in as the headline
            head = readings.headline_record(a.summary, "m", cond)
            assert head is None or head["test"] != "signflip_gap", rd["sentence"]
