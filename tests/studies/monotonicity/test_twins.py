"""Twin prompts and the readings they decide.

- the generator: originals unchanged, each twin's gold answer what its kind says (label-flipped: the complement;
  threshold-shifted: the other side of another threshold of the design; copy: the label just shown);
- the statistics against reference implementations on the same data (statsmodels' exact McNemar and OLS standard
  error, an enumeration of the exact threshold test, a simulation of the exact power);
- calibration and power: the shipped results hold their bounds and the statistics page shows them, and a fast rerun;
- readings end to end on simulated runs with twins (a learner, the mirror, a prior on the query), and property tests
  that a reading never claims more than its tests show.
"""
from __future__ import annotations

import json
import re
import sys
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from nbutils import paths
from nbutils.results import _readings as readings, entries
from nbutils.studies.common.quantifiers import parse_concept
from nbutils.studies.common import verdicts
from nbutils.studies.monotonicity import analysis, dataset, twins

from simulated_runs import TWIN_CONCEPTS, twin_run

ROOT = paths.repo_root()
RESULTS = ROOT / "benchmarks" / "results" / "calibration_twins.json"
sys.path.insert(0, str(ROOT / "benchmarks"))
import calibration_twins  # noqa: E402

KINDS = ["label_flip", "threshold_shift", "copy"]


@pytest.fixture(scope="module")
def prompts():
    return dataset.generate_prompts(TWIN_CONCEPTS, prompts_per_concept=8, n_examples=4, seed=3, twins=KINDS)


def _lines(text):
    return text.split("\n")


def test_twins_leave_the_original_prompts_as_they_were_and_are_recorded_only_where_asked(prompts):
    plain = dataset.generate_prompts(TWIN_CONCEPTS, prompts_per_concept=8, n_examples=4, seed=3)
    orig = prompts[prompts["twin"].isna()].drop(columns=dataset.TWIN_COLUMNS).reset_index(drop=True)
    pd.testing.assert_frame_equal(orig, plain)
    assert not set(dataset.TWIN_COLUMNS) & set(plain.columns)
    assert "twins" not in dataset.parameters(TWIN_CONCEPTS, ["concept_learning"], 8, 4, 3)
    assert dataset.parameters(TWIN_CONCEPTS, ["concept_learning"], 8, 4, 3, twins=KINDS)["twins"] == KINDS
    assert set(prompts.loc[prompts["twin"].notna(), "condition"]) == {"concept_learning"}
    assert prompts["prompt_id"].is_unique


def test_each_twin_has_the_gold_answer_its_kind_says(prompts):
    by_id = prompts.set_index("prompt_id")
    counts = prompts["twin"].value_counts()
    n_cl = int((prompts["twin"].isna() & (prompts["condition"] == "concept_learning")).sum())
    assert counts["label_flip"] == counts["copy"] == n_cl and 0 < counts["threshold_shift"] < n_cl
    for r in prompts[prompts["twin"].notna()].itertuples(index=False):
        o = by_id.loc[r.twin_of]
        ol, tl = _lines(o.text), _lines(r.text)
        assert len(ol) == len(tl)
        if r.twin == "label_flip":
            assert r.label != o.label and tl[-1] == ol[-1]
            for a, b in zip(ol[:-1], tl[:-1]):  # the same numbers and nouns, every label complemented
                assert a.rsplit(" ", 1)[0] == b.rsplit(" ", 1)[0] and a.endswith("Yes.") == b.endswith("No.")
        elif r.twin == "threshold_shift":
            assert r.label != o.label and tl[-1] == ol[-1]
            other = parse_concept(f"{o.quantifier.replace('_', ' ')} {r.twin_threshold}")
            assert other.value != parse_concept(o.concept).value
            assert other.holds(int(o.query_total), int(o.query_count)) == r.label
            for line in tl[:-1]:  # the examples are labelled by the other threshold
                t, c = map(int, re.findall(r"\d+", line)[:2])
                assert other.holds(t, c) == line.endswith("Yes.")
        else:
            assert tl[:-1] == ol[:-1] and tl[-1] + (" Yes." if r.label else " No.") in tl[:-1]


def test_a_bad_twins_parameter_is_refused_by_name():
    for bad in ("label_flip", ["label_flip", "label_flip"], ["flip"], [1]):
        with pytest.raises(ValueError, match="twins"):
            dataset.generate_prompts(TWIN_CONCEPTS[:2], prompts_per_concept=2, n_examples=4, twins=bad)
    with pytest.raises(ValueError, match="twins: twins are made of concept-learning prompts"):
        dataset.generate_prompts(TWIN_CONCEPTS[:2], conditions=["explicit"], prompts_per_concept=2, n_examples=4,
                                 twins=["copy"])


# ---------------------------------------------------------------- the statistics against references

def test_the_paired_net_and_its_test_agree_with_statsmodels_on_the_same_pairs():
    import statsmodels.api as sm
    from statsmodels.stats.contingency_tables import mcnemar

    rng = np.random.default_rng(5)
    for _ in range(25):
        n = int(rng.integers(10, 200))
        cells = rng.multinomial(n, rng.dirichlet([1, 1, 2]))
        b, c = int(cells[0]), int(cells[1])
        est, se, lo, hi = twins.agresti_min(b, c, n)
        d = np.r_[np.ones(b), -np.ones(c), np.zeros(n - b - c)]
        ols = sm.OLS(d, np.ones(n)).fit()
        assert est == pytest.approx(ols.params[0])
        assert se == pytest.approx(ols.bse[0] * np.sqrt((n - 1) / n))  # the ML variance, n rather than n − 1
        assert lo <= est <= hi or b + c == 0
        assert twins.mcnemar_exact(b, c) == pytest.approx(mcnemar([[0, b], [c, 0]], exact=True).pvalue)


def test_the_exact_threshold_test_is_its_enumerated_distribution():
    from itertools import product
    from scipy.stats import binom

    for (b1, c1), (b2, c2) in [((7, 2), (1, 6)), ((3, 3), (5, 0)), ((0, 4), (2, 2))]:
        m1, m2 = b1 + c1, b2 + c2
        stat = (b1 - c1) ** 2 / m1 + (b2 - c2) ** 2 / m2
        ref = sum(binom.pmf(x, m1, .5) * binom.pmf(y, m2, .5) for x, y in product(range(m1 + 1), range(m2 + 1))
                  if (2 * x - m1) ** 2 / m1 + (2 * y - m2) ** 2 / m2 >= stat - 1e-9)
        assert twins.threshold_p([(b1, c1), (b2, c2)]) == pytest.approx(ref)


def test_the_exact_power_is_what_a_simulation_of_the_test_finds():
    rng = np.random.default_rng(2)
    pf, pa, n = 0.3, 0.1, 60
    cells = rng.multinomial(n, [pf, pa, 1 - pf - pa], size=4000)
    for one in (False, True):
        alt = "greater" if one else "two-sided"
        sim = np.mean([twins.mcnemar_exact(int(b), int(c), alt) < 0.05 for b, c, _ in cells])
        assert twins.mcnemar_power(pf, pa, n, 0.05, one) == pytest.approx(sim, abs=0.025)


def test_the_shipped_calibration_holds_its_bounds_and_the_statistics_page_shows_it():
    res = json.loads(RESULTS.read_text())
    assert res["n_sims"] >= 200 and not res["failures"], res["failures"]
    rows = res["rows"]
    assert not calibration_twins.check(rows)
    assert {r["design"] for r in rows} == {"control", "study400"}
    page = (ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")
    assert calibration_twins.markdown(rows) in page
    get = {(r["design"], r["responder"], r["component"]): r["rate"] for r in rows}
    said = re.sub(r"\s+", " ", page)
    assert (f"`learned` in {100 * get[('control', 'learner65', 'reading:learned')]:.0f}% of runs, the mirror right 65% "
            f"of the time `mirror` in {100 * get[('control', 'mirror65', 'reading:mirror')]:.0f}%") in said
    assert f"{100 * get[('study400', 'sharp_prior', 'reading:prior')]:.0f}% of runs for the sharp prior at 400" in said


def test_the_twin_calibration_reruns_fast_and_tells_the_three_apart():
    rows = calibration_twins.run(40, seed=7, designs=("control",), kinds=("soft_prior", "learner85", "mirror85"),
                                 prompt_sets=4)
    get = {(r["responder"], r["component"]): r["rate"] for r in rows}
    for comp in ("labels", "threshold", "upward_reading"):
        assert get[("soft_prior", comp)] <= 0.15
    assert get[("learner85", "reading:learned")] >= 0.9 and get[("mirror85", "reading:mirror")] >= 0.9
    assert get[("soft_prior", "reading:learned")] + get[("soft_prior", "reading:mirror")] <= 0.15


# ---------------------------------------------------------------- readings end to end

def _yes(kind):
    def yes(p: pd.DataFrame) -> np.ndarray:
        rng = np.random.default_rng(sum(map(ord, kind)))
        q = verdicts.query_position(p).to_numpy(dtype=float)
        gold = p["label"].to_numpy(dtype=bool)
        thr = p["twin_threshold"].where(p["twin"] == "threshold_shift", p["threshold"])
        t_ex = np.array([float(Fraction(str(t))) for t in thr])
        right = rng.random(len(p)) < 0.9
        if kind == "learner":
            return np.where(right, gold, ~gold)
        if kind == "mirror":  # "more than the examples' threshold", whatever the concept
            return np.where(right, q > t_ex, q <= t_ex)
        return q > 0.5  # a prior on the query
    return yes


@pytest.fixture(scope="module")
def three_models(tmp_path_factory):
    run = twin_run(tmp_path_factory.mktemp("twins"), {k: _yes(k) for k in ("learner", "mirror", "prior")})
    return run, analysis.analyze_run(run, n_boot=50, use_r=False)


def test_twins_tell_a_learner_a_mirror_and_a_prior_apart_end_to_end(three_models):
    run, a = three_models
    got = {e["model"]: e for e in entries(a.summary) if e["condition"] == "concept_learning" and e["term"] == "upward"
           and not e.get("models")}
    assert {m: got[m]["reading"] for m in got} == {"learner": "no_evidence", "mirror": "mirror", "prior": "prior"}, \
        {m: got[m]["sentence"] for m in got}
    assert "read every concept as \"more than\" it" in got["mirror"]["sentence"]
    assert "every use of the examples is excluded beyond ±15 points" in got["prior"]["sentence"]
    assert "no evidence that it copies the label it was just shown" in got["prior"]["sentence"]
    tw = a.summary["models"]["learner"]["conditions"]["concept_learning"]["twins"]
    assert tw["labels"]["p"] < 0.001 and tw["copy"]["estimate"] > 0.8
    n_cl = 120
    assert tw["labels"]["n"] == n_cl and tw["copy"]["n"] == n_cl
    # the twins are left out of every statistic of the design: its prompts are the originals
    assert a.summary["design"]["n_prompts"] == {"learner": 240, "mirror": 240, "prior": 240}
    text = (run / "results.md").read_text(encoding="utf-8")
    assert got["mirror"]["sentence"] in text
    recs = [r for r in a.summary["records"] if r["test"].startswith(("twin_", "copy_"))]
    assert {r["test"] for r in recs} == {"twin_mcnemar", "twin_threshold_exact", "twin_prior_gap", "copy_binomial"}


# ---------------------------------------------------------------- property tests of the readings

def _component(rng, n, p_sig, small=False):
    est = float(rng.uniform(-0.05, 0.05) if small else rng.uniform(-0.6, 0.6))
    half = float(rng.uniform(0.02, 0.12) if small else rng.uniform(0.02, 0.3))
    p = float(rng.uniform(0, 0.05)) if rng.random() < p_sig else float(rng.uniform(0.05, 1))
    return {"n": n, "estimate": est, "ci_low": est - half, "ci_high": est + half, "ci90_low": est - 0.84 * half,
            "ci90_high": est + 0.84 * half, "p": p, "follow": 1, "against": 1}


def _block(rng):
    n = int(rng.choice([20, 60, 120]))
    small = bool(rng.random() < 0.3)  # a model whose every component is near zero: where a prior can be shown
    up, down = _component(rng, n // 4, 0.4, small), _component(rng, n // 4, 0.4, small)
    both = {"n": n // 2, "p": float(rng.uniform(0, 0.1)), "upward_reading": float(rng.uniform(-0.5, 0.5)),
            "upward_reading_p": float(rng.choice([rng.uniform(0, 0.05), rng.uniform(0.05, 1)]))}
    return {"labels": _component(rng, n, 0.4, small), "threshold": {"upward": up, "downward": down, "both": both},
            "copy": {"n": n, "estimate": float(rng.uniform(0.3, 1)), "p": float(rng.uniform(0, 1))},
            "power": {"learner": 0.9, "mirror": 0.7, "n_label_pairs": n, "n_threshold_pairs": n // 2,
                      "prompts_needed": 170, "reference_accuracy": 0.65, "margin": 0.15}}


def test_property_a_twin_reading_claims_only_what_its_tests_show():
    rng = np.random.default_rng(20261128)
    seen = set()
    for _ in range(3000):
        tw = _block(rng)
        ev = readings.twin_evidence(tw)
        kind, text = ev["kind"], ev["text"]
        seen.add(kind)
        lab, both = tw["labels"], tw["threshold"]["both"]
        labels_shown = lab["p"] < 0.05 and lab["estimate"] > 0
        if kind == "learned":
            assert labels_shown and "follow the labels' direction" in text
        elif kind == "mirror":
            assert not labels_shown and both["upward_reading_p"] < 0.05 and both["upward_reading"] > 0
            assert "no evidence of following the labels' direction" in text
        elif kind == "prior":  # shown, never assumed: every component's 90% CI inside the margin
            for r in (lab, tw["threshold"]["upward"], tw["threshold"]["downward"]):
                assert -0.15 < r["ci90_low"] and r["ci90_high"] < 0.15
            assert not labels_shown
        else:
            assert kind == "undetermined" and "power" in text and not labels_shown
            assert not re.search(r"\b(do not|does not|don't) use\b|\bignore", text), text
    assert seen == {"learned", "mirror", "prior", "undetermined"}


def _summary_without_twins(rng):
    from nbutils.studies.common import claims

    cond = str(rng.choice(["concept_learning", "explicit"]))
    p = float(rng.choice([rng.uniform(0, 0.05), rng.uniform(0.05, 1)]))
    est = float(rng.choice([-1, 1]) * rng.uniform(0.5, 3))
    rec = {"test": "gee_bias_reduced", "term": "upward", "model": "m", "condition": cond, "estimate": est, "se": 0.5,
           "ci_low": est - 1, "ci_high": est + 1, "p": p, "valid": True, "headline": True, "note": "",
           "hypothesis": claims.gap(cond)}
    up_p = float(rng.uniform(0, 1)) if rng.random() > 0.15 else float("nan")
    fl = float(rng.uniform(0, 1))
    hi = float(rng.uniform(0.52, 0.7))
    block = {"acc_up": 0.8, "acc_down": 0.4, "gap": 0.4, "n": 60,
             "floor": {"accuracy": 0.55, "ci_low": 0.45, "ci_high": hi, "p": fl, "n": 60, "chance": 0.5},
             "uses_examples": {"uses": (up_p < 0.05) if np.isfinite(up_p) else None, "p": up_p, "note": "",
                               "score_upward": float(rng.normal()), "score_downward": float(rng.normal())},
             "twin_design": {"learner": 0.87, "mirror": 0.49, "n_label_pairs": 60, "n_threshold_pairs": 21,
                             "prompts_needed": 116, "reference_accuracy": 0.65}}
    overall = {"accuracy": 0.6, "ci_low": 0.5, "ci_high": float(rng.uniform(0.55, 0.7)), "p": float(rng.uniform(0, 1)),
               "chance": 0.5}
    return {"records": [rec], "models": {"m": {"conditions": {cond: block}, "overall": {"floor": overall}}}}, cond, block


def test_property_without_twins_no_reading_is_prior_and_a_missing_test_is_never_learned():
    from nbutils.results import verdict

    rng = np.random.default_rng(11)
    for _ in range(2000):
        summary, cond, block = _summary_without_twins(rng)
        rd = readings.reading(summary, "m", cond)
        kind, s = rd["reading"], rd["sentence"]
        assert kind != "prior", s
        uses = block["uses_examples"]
        if verdict(summary["records"][0]) in ("more", "less"):
            if uses["uses"] is None:
                assert kind == "undetermined" and "could not run" in s, s
            elif uses["uses"] is False:
                assert kind == "undetermined" and "does not show that they ignore" in s, s
            else:
                assert kind in ("learned", "mirror"), s
                if kind == "mirror":
                    assert cond == "concept_learning" and uses["score_upward"] > 0 > uses["score_downward"]
            ov = summary["models"]["m"]["overall"]["floor"]
            if kind == "learned" and ov["p"] >= 0.05:
                assert "over both directions its accuracy is" in s, s
        fl = block["floor"]
        if kind == "below_floor":
            state = readings.floor_state(fl)
            assert ("below the task floor" in s) == (state == "below") and \
                ("at the edge of the task floor" in s) == (state == "edge"), s


def test_the_floor_is_above_at_or_at_its_edge():
    assert readings.floor_state({"p": 0.01, "ci_high": 0.7, "chance": 0.5}) == "above"
    assert readings.floor_state({"p": 0.4, "ci_high": 0.58, "chance": 0.5}) == "below"
    assert readings.floor_state({"p": 0.06, "ci_high": 0.66, "chance": 0.5}) == "edge"
    assert readings.floor_state(None) is None


def test_a_mirror_is_claimed_only_beyond_chance_and_a_zero_gap_is_no_disagreement():
    base = {"model": "m", "condition": "concept_learning", "mirror_agreement_down": 0.5, "mirror_agreement_up": 0.0,
            "p_exact_stratified": 0.0001}
    coin = readings.rule_block({"rules_mirror_test": [dict(base, p_down_above_chance=0.6)]}, "m", "concept_learning")
    assert not coin["answers_as_mirror"]
    said = readings.rule_sentence("m", "concept_learning", coin)
    assert "no evidence of a mirror" in said and "were answered as their upward mirror" not in said
    real = readings.rule_block({"rules_mirror_test": [dict(base, mirror_agreement_down=0.9, p_down_above_chance=1e-5)]},
                               "m", "concept_learning")
    assert real["answers_as_mirror"]
    summary = {"records": [{"test": "signflip_dprime_gap", "term": "upward", "model": "m", "condition": "explicit",
                            "estimate": 0.06, "p": 0.9, "valid": True}], "models": {}}
    assert readings._caveats(summary, "m", "explicit", {"gap": 0.0}, None, 0.05) == []


# ---------------------------------------------------------------- readings across prompt sets

def test_the_pooled_gap_is_stouffers_z_and_is_calibrated():
    from scipy import stats as sps

    from nbutils.studies.monotonicity import stability

    rng = np.random.default_rng(3)
    rejections = 0
    for _ in range(2000):  # null sets: two-sided p uniform, the sign of the estimate a coin
        ps, ests = rng.uniform(0, 1, 3), rng.choice([-1.0, 1.0], 3)
        z = sum(stability._z(p, e) for p, e in zip(ps, ests)) / np.sqrt(3)
        one_sided = [p / 2 if e > 0 else 1 - p / 2 for p, e in zip(ps, ests)]
        ref = sps.combine_pvalues(one_sided, method="stouffer").statistic
        assert z == pytest.approx(ref)
        rejections += 2 * sps.norm.sf(abs(z)) < 0.05
    assert 0.035 <= rejections / 2000 <= 0.065


def test_twin_counts_pool_over_prompt_sets_and_each_set_keeps_its_reading(three_models, tmp_path):
    from nbutils.studies.monotonicity import stability

    run, _ = three_models
    s = json.loads((run / "summary.json").read_text())
    rows = {r["model"]: r for r in stability.table({"set 1": s, "set 2": s})}
    assert rows["mirror"]["per_set"] == {"set 1": "mirror", "set 2": "mirror"} and rows["mirror"]["agree"] == 2
    assert rows["mirror"]["pooled"] == "mirror"
    pooled = stability.pooled_summary("mirror", [s, s])["models"]["mirror"]["conditions"]["concept_learning"]
    one = s["models"]["mirror"]["conditions"]["concept_learning"]["twins"]["labels"]
    assert pooled["twins"]["labels"]["n"] == 2 * one["n"] and pooled["twins"]["labels"]["follow"] == 2 * one["follow"]
    assert "2 of 2 agree" in stability.sentence(rows["mirror"])


def test_the_pages_quote_the_controls_twin_reading_at_400_prompts():
    """The README's control paragraph and the validation page say what the control's twins show at 400 prompts, from
    its results file: the reading, its sentence, the label twins' net with its CI, the threshold's and the prior's."""
    from prose import says, text

    res = json.loads((ROOT / "benchmarks" / "results" / "control-twins-400.json").read_text())
    m = res["models"]["SmolLM2-135M + upward control"]
    tw = m["twins"]
    lab, both, prior = tw["labels"], tw["threshold"]["both"], tw["prior"]
    assert m["reading"] == "mirror" and m["n"] == 400 and lab["n"] == 400
    readme = text("README.md")
    says(readme, "on {} prompts, flipped labels do not move its answers (net +{} points, 95% CI [{}, {}]), a moved "
         "threshold moves a few as the mirror would (+{} points, p = {}), and {} points of the gap ride on the prior",
         m["n"], 100 * lab["estimate"], 100 * lab["ci_low"], 100 * lab["ci_high"], 100 * both["upward_reading"],
         both["upward_reading_p"], 100 * prior["estimate"], where="README.md")
    assert lab["ci_low"] < 0 < lab["ci_high"] < 0.05 and both["upward_reading_p"] < 0.05 and prior["p"] < 0.05
    page = " ".join((ROOT / "docs" / "validation.md").read_text().split())
    assert m["sentence"] in page
