"""The results in words: the sentence engine against 12,000 random records (direction, verdict and numbers parsed
back), APA formatting, not-estimable records without numbers, each way the words were found to go wrong, a fallback
headline, the notes of summary.json in words, and the paragraph of the shipped sample run holding its own numbers."""
from __future__ import annotations

import math
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from nbutils.results import _headline as headline, _words as results
from nbutils import paths
from nbutils.stats import claim, record
from nbutils.studies.common import claims, model_comparison
from nbutils.studies.monotonicity import analysis
from nbutils.studies.monotonicity.results import results_text

SAMPLE = paths.repo_root() / "outputs" / "samples" / "monotonicity"


@pytest.mark.parametrize("p,text", [(0.0004, "p < .001"), (0.0321, "p = .032"), (0.5, "p = .500"), (0.99995, "p > .999"),
                                    (0.0496, "p = .0496"), (0.0500, "p = .050"), (0.04999999999, "p < .05"),
                                    (float("nan"), "p not available"), (None, "p not available")])
def test_p_values_in_apa_style_on_the_side_of_alpha_they_are(p, text):
    assert results.fmt_p(p) == text


@pytest.mark.parametrize("bad", [1.2, -0.0, -0.001])
def test_a_p_value_that_is_not_a_probability_is_refused(bad):
    for p in (bad, float("inf")):
        with pytest.raises(ValueError, match="p: must be a probability"):
            results.fmt_p(p)
    r = record("cmh", "upward", 0.5, p=bad, hypothesis=claim("the gap", "up", "down"))
    assert results.sentence(r).endswith("not estimable (its p-value " + repr(bad) + " is not a probability).")


def test_numbers_never_show_negative_zero_or_long_noise():
    assert results.fmt_num(-2.22e-16) == "0.00" and results.fmt_num(-0.0001, 3) == "0.000"
    assert results.fmt_num(1.23456) == "1.23" and results.fmt_num(12345.6) == "1.2e+04"


def test_odds_ratios_are_never_printed_as_zero():
    assert results.fmt_ratio(0.0032) == "0.0032" and results.fmt_ratio(0.004) == "0.004"
    assert results.fmt_ratio(0.04) == "0.04" and results.fmt_ratio(2.2e7) == "2.2e+07"
    r = record("glmm_lrt", "upward", 0.0, None, math.log(1e-5), math.log(1099.95), 0.99, hypothesis=claims.gap())
    assert "OR = 1.00, 95% CI [1e-05, 1099.95]" in results.sentence(r)


def test_a_record_in_apa_style_on_the_odds_ratio_scale():
    r = record("glmm_lrt", "upward", estimate=math.log(2.0), ci_low=math.log(1.25), ci_high=math.log(3.2), p=0.004,
               hypothesis=claims.gap())
    assert results.phrase(r) == "conditional OR = 2.00, 95% CI [1.25, 3.20], p = .004"
    assert results.sentence(r).startswith("upward concepts were learned better than downward ones: conditional OR = 2.00")


def test_a_record_that_cannot_be_estimated_says_why_and_shows_no_numbers():
    r = record("gee_bias_reduced", "upward", estimate=-1.96e-16, se=2.2e-08, p=1.0, valid=False,
               note="log odds ratio upward vs downward; needs at least 3 thresholds for clustered inference",
               hypothesis=claims.gap())
    text = results.sentence(r)
    assert text.endswith("not estimable (needs at least 3 thresholds for clustered inference).")
    assert not re.search(r"\d\.\d", text) and not re.search(r"\bp [<=>]", text)


# ---------------------------------------------------------------- each case of the words going wrong, as found

def _mono_summary(rec: dict, k: int = 5, **design) -> dict:
    return {"models": {"m": {"conditions": {"concept_learning": {"acc_up": 0.21, "acc_down": 0.88, "gap": -0.67}}}},
            "records": [rec], "design": {"models": ["m"], "conditions": ["concept_learning"], "n_concepts": 2 * k,
                                         "n_thresholds": k, "n_prompts": {"m": 120}, **design}}


def test_case_direction_a_gap_that_favours_downward_concepts_is_said_so():
    rec = record("glmm_lrt", "upward", math.log(0.04), None, math.log(0.01), math.log(0.18), 1e-6, model="m",
                 condition="concept_learning", headline=True, hypothesis=claims.gap("concept_learning"))
    summary = _mono_summary(rec)
    summary["models"]["m"]["conditions"]["concept_learning"]["uses_examples"] = {
        "uses": True, "p": 0.001, "score_upward": 2.0, "score_downward": 3.0}
    text = results_text(summary)
    assert ("downward concepts were learned better than upward ones (21.0% upward vs 88.0% downward correct; "
            "conditional OR = 0.04, 95% CI [0.01, 0.18], p < .001, binomial GLMM, LRT)") in text
    assert "upward concepts were learned better" not in text.lower()
    assert "21.0% upward vs 88.0% downward" in text
    # without a test of the examples, no learning is claimed: the gap's source is undetermined, and the words say so
    text = results_text(_mono_summary(rec))
    assert "were learned better" not in text and "downward concepts were answered right more often" in text
    assert "the examples test could not run" in text


def test_case_sidedness_ten_wrong_answers_of_ten_are_below_chance():
    from nbutils.studies.custom.stats import summary_records
    acc = pd.DataFrame([{"model": "m", "group": "custom", "n": 10, "k": 0, "accuracy": 0.0, "ci_low": 0.0,
                         "ci_high": 0.2775, "chance": 0.5, "p_binom": 0.001953125, "p_holm": 0.001953125}])
    empty = pd.DataFrame(columns=["model", "test", "group", "statistic", "p", "p_holm", "note"])
    recs = summary_records({"accuracy": acc, "response_bias": empty, "contrasts": pd.DataFrame(
        columns=["model", "group_a", "group_b", "diff", "ci_low", "ci_high", "p_holm", "test"]),
        "clustered_model": pd.DataFrame(columns=["model", "test", "term", "note"])})
    text = headline.generic_text({"records": recs}, "t", "d", lambda r: r["test"] == "accuracy_vs_chance")
    assert "group 'custom' was answered below chance: accuracy = 0.0%, 95% CI [0.0%, 27.8%], p = .002" in text
    assert "above chance" not in text


def test_case_rounding_a_p_just_under_alpha_is_not_printed_as_alpha():
    rec = record("cmh", "upward", 0.3, None, 0.01, 0.6, 0.0496, hypothesis=claims.gap())
    text = results.sentence(rec)
    assert "p = .0496" in text and "upward concepts were learned better" in text and ".050" not in text
    assert "no evidence at α = .05" in results.sentence({**rec, "p": 0.0504}) and "p = .050" in \
        results.sentence({**rec, "p": 0.0504})


def test_case_notes_response_bias_identical_conditions_and_precision_reach_the_words():
    rec = record("gee_bias_reduced", "upward", 0.1, None, -0.5, 0.7, 0.6, model="m", condition="concept_learning",
                 headline=True, hypothesis=claims.gap("concept_learning"))
    s = _mono_summary(rec, identical_conditions={"m": True})
    s["_notes"] = ["m: answers 'No' to every prompt (pure response bias)"]
    s["records"] += [record("precision_agreement", "m: 8bit vs float32", 0.95, ci_low=0.9, ci_high=0.98, n=120),
                     record("precision_mcnemar_exact", "m: 8bit vs float32", -0.02, p=0.5, n=120,
                            hypothesis=claim("accuracy at 8bit minus float32", "up", "down",
                                             "m's accuracy changes between float32 and 8bit", scale="points"))]
    text = results_text(s)
    assert "m answers 'No' to every prompt: a pure response bias" in text
    assert "identically in both conditions" in text
    assert "Precision, m: 8bit vs float32: the same answer on 95.0% of 120 prompts (95% CI [90.0%, 98.0%])" in text
    assert "no evidence at α = .05 that m's accuracy changes between float32 and 8bit: difference = -2.0 points" in text
    custom = results.note_lines({"_notes": ["m: chooses 'No' for every prompt (pure response bias)"]})
    personas = results.note_lines({"_notes": ["m: answers 'B' to every question (pure letter bias)"]})
    assert custom[0].startswith("m answers 'No' to every prompt: a pure response bias")
    assert personas[0].startswith("m answers 'B' to every question: a pure response bias")


def test_case_machine_wording_plurals_test_names_and_punctuation():
    rec = record("gee_bias_reduced", "upward", valid=False, model="m", condition="concept_learning", headline=True,
                 note="the gap; one threshold: no clustered inference (a plain logistic GLM, read as about this "
                      "threshold only)", hypothesis=claims.gap("concept_learning"))
    text = results_text(_mono_summary(rec, k=1))
    assert "(s)" not in text and "1 model (m)" in text and "2 concepts at 1 threshold," in text
    assert "only). with" not in text and "- with 1 threshold the results are about this threshold only" in text
    gap = record("monotonicity_gap", "custom", 0.0, None, -0.1, 0.1, 1.0, model="m",
                 hypothesis=claims.gap("custom", "points", "gap"))
    acc = record("accuracy_vs_chance", "more than 1/2", 0.6, None, 0.4, 0.77, 0.5, model="m",
                 hypothesis=claims.accuracy_vs_chance("group 'more than 1/2'"))
    words = headline.generic_text({"records": [gap, acc]}, "t", "d", lambda r: True)
    assert "monotonicity_gap" not in words and "accuracy_vs_chance" not in words
    assert "the upward vs downward gap in condition custom" not in words  # no-evidence lines name the question
    assert "no evidence at α = .05 that upward and downward concepts are learned differently: gap = 0.0 points" in words
    assert "no evidence at α = .05 that accuracy on group 'more than 1/2' differs from chance: accuracy = 60.0%" in words
    assert "which is not evidence that it does not" not in words


def test_a_fallback_headline_names_the_reason_of_its_own_model_not_another():
    glmm = [record("glmm_lrt", "upward", valid=False, model=m, condition="concept_learning", note=f"gap; {why}")
            for m, why in (("a", "reason of a"), ("b", "reason of b"))]
    cmh = record("cmh", "upward", 0.0, None, -1.0, 1.0, 1.0, model="b", condition="concept_learning", headline=True,
                 fallback_for="glmm_lrt", hypothesis=claims.gap("concept_learning"))
    assert results.sentence(cmh, records=[*glmm, cmh], who=False).endswith("not estimable here (reason of b).")


def test_a_fallback_headline_says_which_test_it_stands_in_for_and_why():
    glmm = record("glmm_lrt", "upward", valid=False, model="m", condition="concept_learning",
                  note="log odds ratio upward vs downward; random-effect SD 50.7 on the logit scale: quasi-separation",
                  hypothesis=claims.gap("concept_learning"))
    cmh = record("cmh", "upward", 0.0, None, math.log(0.30), math.log(3.32), 1.0, model="m",
                 condition="concept_learning", headline=True, fallback_for="glmm_lrt",
                 hypothesis=claims.gap("concept_learning"))
    text = results_text({**_mono_summary(cmh), "records": [{**glmm, "headline": True}, cmh]})
    assert text.count("- m, concept learning:") == 1  # the degenerate test is not a line of its own
    assert text == results_text({**_mono_summary(cmh), "records": [glmm, cmh]})
    generic = headline.generic_text({"records": [{**glmm, "headline": True}, cmh]}, "t", "d", lambda r: r["headline"])
    assert generic.split("*Caveats:*")[0].count("\n- ") == 1 and "standing in for the binomial GLMM" in generic
    assert ("marginal OR = 1.00, 95% CI [0.30, 3.32], p > .999, Mantel–Haenszel test standing in for the binomial "
            "GLMM") in text
    # why it is not estimable: once, in the caveats, not in the sentence
    assert text.count("SD 50.7") == 1 and text.index("SD 50.7") > text.index("*Caveats:*")
    assert ("- The binomial GLMM is not estimable for m: random-effect SD 50.7 on the logit scale (details: "
            "summary.json).") in text


# ---------------------------------------------------------------- the property: words agree with the record

_NUM = r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?"
_PHRASE = re.compile(rf"(?P<sym>\w+) = (?P<est>{_NUM})(?:%| points)?(?:, 95% CI \[(?P<lo>{_NUM})%?, (?P<hi>{_NUM})%?\])?"
                     r"(?:, p (?P<op>[<=>≥]) (?P<p>\.\d+))?")
_SCALES = ("log_odds_ratio", "proportion", "points", "number")


def _tol(text: str, value: float) -> bool:
    """Is the printed ``text`` ``value`` rounded as printed?"""
    shown = float(text)
    if "e" in text:
        return math.isclose(shown, value, rel_tol=0.051)
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(shown - value) <= 0.5 * 10 ** -decimals * (1 + 1e-9) + 1e-12 * abs(value)


def _p_agrees(op: str, text: str, p: float, alpha: float) -> bool:
    """Is the printed p (``op`` ``text``) true of ``p`` and on the same side of ``alpha``?"""
    printed = float(text)
    if op == "=":
        return _tol(text, p) and (printed < alpha) == (p < alpha)
    if op == "<":  # "p < .001", "p < .05": below a bound that is itself at or under alpha
        return p < alpha and p < printed <= alpha
    return p >= alpha and p >= printed >= alpha  # "p > .999", "p ≥ .05"


def _study_claims() -> list[dict]:
    """The hypotheses the studies' stats code declares, one of each kind (their words, scales, nulls and sides)."""
    from nbutils.analyses.cues.results import accuracy_claim
    from nbutils.studies.custom import stats as cstats
    from nbutils.studies.negation.stats import term_claim
    from nbutils.studies.monotonicity.robustness import heterogeneity_claim
    from nbutils.studies.personas.stats import _claim as persona_claim
    return [heterogeneity_claim("template"), claims.gap("concept_learning"), claims.gap("custom", "points", "gap"), claims.term("upward:explicit"),
            claims.term("explicit"), claims.gap_difference(), claims.homogeneity(), claims.threshold_gap("1/2"),
            claims.explicit_vs_learned("more than 1/2"), claims.accuracy_vs_chance("group 'g'", 1 / 3),
            claims.dprime_gap(), cstats._contrast_claim("a", "b"), cstats._clustered_claim("gee_logit", "b vs a"),
            cstats._clustered_claim("cochran_q", "all groups equal"), cstats._auc_claim("g"), cstats._bias_claim("g"),
            term_claim("context × form", "deviation", "log_ppl"), term_claim("form", "treatment", "ppl"),
            persona_claim("real_vs_null", "null_random", "greater"), persona_claim("real_vs_null", "null_word", "less"),
            persona_claim("mcnemar", "p1"), persona_claim("regression", ""), accuracy_claim("word:more"),
            model_comparison.hypothesis("model-a", "model-b", "explicit"), model_comparison.accuracy_claim("a", "b")]


STUDY_CLAIMS = _study_claims()


def _random_record(rng) -> dict:
    scale = _SCALES[rng.integers(4)]
    null = {"proportion": [0.5, 1 / 3, 0.25][rng.integers(3)], "number": [0.0, 0.5][rng.integers(2)]}.get(scale, 0.0)
    sided = ["two-sided", "two-sided", "greater", "less", "none"][rng.integers(5)]
    hyp = claim("WHAT", "MOREWORDS", "LESSWORDS", "DIFFERWORDS", scale=scale, null=null, sided=sided)
    if rng.random() < 0.5:
        hyp = STUDY_CLAIMS[rng.integers(len(STUDY_CLAIMS))]
        scale, null, sided = hyp["scale"], hyp["null"], hyp["sided"]
    kind = rng.integers(10)
    if kind == 0:
        est = null
    elif kind == 1:
        est = null + rng.choice([-1, 1]) * 10.0 ** rng.uniform(-12, -3)
    elif kind == 2:
        est = rng.choice([-1, 1]) * 10.0 ** (rng.uniform(4, 300) if scale != "log_odds_ratio" else rng.uniform(1.5, 3))
    elif kind == 3:
        est = float("nan")
    else:
        est = null + rng.normal(0, [0.3, 1, 3][rng.integers(3)])
    if scale == "proportion" and kind in (4, 5, 6, 7, 8, 9):
        est = float(np.clip(est, 0, 1))
    ci = None
    if rng.random() < 0.7 and math.isfinite(est):
        w1, w2 = abs(rng.normal(0, 0.5)), abs(rng.normal(0, 0.5))
        ci = (est - w1, est + w2)  # includes or excludes the null as it falls
        if rng.random() < 0.03:
            ci = (est + w1 + 1e-9, est + w1 + w2 + 1e-9)  # an interval that misses its own estimate: not readable
    r = rng.random()
    p = (rng.uniform() if r < 0.3 else 0.05 + rng.choice([-1, 1]) * 10.0 ** rng.uniform(-9, -2) if r < 0.55
         else 0.05 if r < 0.6 else rng.uniform(0, 1e-4) if r < 0.7 else [None, float("nan"), 1.2, -0.0, 0.0, 1.0,
                                                                          -1e-3][rng.integers(7)] if r < 0.8
         else rng.uniform(0.04, 0.06))
    return {"test": "x", "term": "t", "estimate": est, "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None,
            "p": p, "valid": bool(rng.random() > 0.1), "note": "what; REASON",
            "hypothesis": hyp}


def test_property_a_separated_effect_reads_as_strong_evidence_with_direction_estimate_ci_and_p():
    """Firth-shaped records (a gap of 4 to 12 log-odds either way, an asymmetric profile CI away from 0, p down to
    1e-300): the sentence claims the side the estimate is on and prints the odds ratio, its CI and p < .001."""
    rng = np.random.default_rng(7)
    hyps = [claims.gap("concept_learning"), claims.gap("explicit"), model_comparison.hypothesis("A", "B", None)]
    for _ in range(500):
        sign, est = rng.choice([-1, 1]), rng.uniform(4, 12)
        lo, hi = est - rng.uniform(0.5, est - 0.2), est + rng.uniform(0.5, 12)
        lo, hi = (lo, hi) if sign > 0 else (-hi, -lo)
        h = hyps[rng.integers(len(hyps))]
        rec = record("firth_plr", "upward", sign * est, 1.0, lo, hi, 10.0 ** -rng.uniform(4, 300), hypothesis=h)
        text = results.sentence(rec)
        side = h["more"] if sign > 0 else h["less"]
        assert results.verdict(rec) == ("more" if sign > 0 else "less")
        symbol = "marginal OR" if h["symbol"] == "OR" else h["symbol"]  # Firth's: a marginal odds ratio
        assert text.startswith(f"{side}: {symbol} = "), text
        assert re.search(r"95% CI \[[\d.e+-]+, [\d.e+-]+\], p < \.001 \(", text), text
        m = _PHRASE.search(text)
        assert m and _tol(m["est"], math.exp(sign * est)) and _tol(m["lo"], math.exp(lo)), text


def test_property_sentences_agree_with_their_records_in_direction_verdict_and_numbers():
    rng = np.random.default_rng(20261125)
    alpha = results.ALPHA
    seen = set()
    for _ in range(12000):
        rec = _random_record(rng)
        text = results.sentence(rec, alpha)
        h, est, p = rec["hypothesis"], rec["estimate"], rec["p"]
        more, less, differ = (re.escape(h[k]) for k in ("more", "less", "differ"))
        sides = "|".join(w for w in (more, less) if w) or "(?!)"
        p_prob = isinstance(p, float) and math.isfinite(p) and 0 <= p <= 1 and math.copysign(1, p) > 0
        p_missing = p is None or (isinstance(p, float) and math.isnan(p))
        if rec["valid"] and not math.isfinite(est) and h["sided"] == "none" and p_prob:  # a test without an estimate
            seen.add("p only")
            m = re.search(r": p (?P<op>[<=>≥]) (?P<p>\.\d+) \(", text)
            assert m and _p_agrees(m["op"], m["p"], p, alpha) and not re.search(r"\w = -?\d", text), (rec, text)
            assert text.startswith(h["differ"] + ": " if p < alpha else f"no evidence at α = .05 that {h['differ']}: ")
            continue
        shown = {"log_odds_ratio": lambda v: math.exp(v), "proportion": lambda v: 100 * v,
                 "points": lambda v: 100 * v}.get(h["scale"], lambda v: v)
        off_side = p_prob and p < alpha and h["sided"] != "none" and (
            est == h["null"] or (h["sided"] == "greater" and est < h["null"]) or (h["sided"] == "less" and est > h["null"]))
        readable = (rec["valid"] and math.isfinite(est) and (p_prob or p_missing) and not off_side
                    and (h["scale"] != "log_odds_ratio" or -745 < est < 709)
                    and (rec["ci_low"] is None or rec["ci_low"] <= est <= rec["ci_high"]))
        if not readable:
            seen.add("invalid")
            assert "not estimable (" in text and not re.search(r"\w = -?\d", text), (rec, text)
            assert not re.search(sides, text) and "no evidence" not in text, (rec, text)
            continue
        m = _PHRASE.search(text)
        assert m, (rec, text)
        assert _tol(m["est"], shown(est)), (rec, text)
        if rec["ci_low"] is not None:
            assert _tol(m["lo"], shown(rec["ci_low"])) and _tol(m["hi"], shown(rec["ci_high"])), (rec, text)
            assert not (h["scale"] == "log_odds_ratio" and float(m["lo"]) == 0), (rec, text)
        else:
            assert m["lo"] is None
        if p_missing:
            seen.add("descriptive")
            assert m["op"] is None and "no test" in text and "no evidence" not in text, (rec, text)
            assert not (h["more"] and text.startswith(h["more"])) and not (h["less"] and text.startswith(h["less"]))
            continue
        assert _p_agrees(m["op"], m["p"], p, alpha), (rec, text)
        if p >= alpha:
            seen.add("none")
            words = {"two-sided": h["differ"], "greater": h["more"], "less": h["less"], "none": h["differ"]}[h["sided"]]
            assert text.startswith(f"no evidence at α = .05 that {words}: "), (rec, text)
            rest = text[len(f"no evidence at α = .05 that {words}: "):]
            assert not re.search(sides, rest), (rec, text)
            continue
        if h["sided"] == "none":
            seen.add("effect")
            assert text.startswith(h["differ"] + ": ") and not re.search(sides, text), (rec, text)
            continue
        assert float(m["est"]) != shown(h["null"]), (rec, text)  # a claimed side never prints beside the null value
        for bound, printed in (("ci_low", m["lo"]), ("ci_high", m["hi"])):  # nor does a bound of its interval
            if printed is not None and rec[bound] != h["null"]:
                assert float(printed) != shown(h["null"]), (rec, text)
        side, other = (h["more"], less) if est > h["null"] else (h["less"], more)
        seen.add("more" if est > h["null"] else "less")
        assert text.startswith(side + ": ") and "no evidence" not in text, (rec, text)
        assert not re.search(other, text[len(side):]), (rec, text)
    assert seen == {"invalid", "descriptive", "effect", "more", "less", "none", "p only"}


@pytest.fixture(scope="module")
def sample_analysis(tmp_path_factory):
    run = tmp_path_factory.mktemp("sample") / "run"
    shutil.copytree(SAMPLE, run, ignore=shutil.ignore_patterns("notebooks", "tables", "figures", "*.md", "*.html",
                                                               "summary.json"))
    return run, analysis.analyze_run(run, n_boot=100, use_r=False)


def test_the_sample_runs_paragraph_is_written_and_holds_its_own_numbers(sample_analysis):
    run, a = sample_analysis
    text = (run / "results.md").read_text()
    assert text == a.text
    # the paragraph reports the gap per condition and its change (the explicit main effect is in the tables)
    head = [r for r in a.summary["records"] if r.get("headline") and r["term"] in ("upward", "upward:explicit")]
    assert len(head) == 3, "the analysis names its headline records"
    for r in head:  # the numbers of each, or (not estimable) its reason once in the caveats
        assert results.phrase(r) in text if results.verdict(r) != "invalid" else \
            results.reason(r).split(":")[0] in text.split("*Caveats:*")[1] or "no variation to compare" in text
    lines = [line for line in text.split("*Caveats:*")[0].splitlines() if line.startswith("- ")]
    assert lines and all(len(line.split()) <= 61 for line in lines), [len(line.split()) for line in lines]
    model = a.summary["design"]["models"][0]
    acc = a.summary["models"][model]["conditions"]["concept_learning"]["acc_up"]
    assert f"{100 * acc:.1f}% upward" in text


def test_property_headline_sentences_are_short_and_leave_the_diagnostics_to_the_caveats():
    """A headline sentence (``reasons=False``) is at most 60 words whatever the record holds; one that is not
    estimable says so in one clause, and ``fit_caveats`` says why, once per test and reason, with no internal
    threshold; a fallback names the test it stands in for."""
    from nbutils.results import fit_caveats, table_rows

    rng = np.random.default_rng(49)
    long_note = ("log odds ratio; every prompt pair was answered alike in both conditions, a quasi-separation by pair, "
                 "and the 95% CI spans 4.8 orders of magnitude of the odds ratio: the data do not locate the effect")
    for i in range(3000):
        rec = _random_record(rng)
        rec.update(model="olmo-2-1124-13b-instruct", condition="concept_learning", headline=True, note=long_note)
        if i % 3 == 0:
            rec["fallback_for"] = "glmm_lrt"
        words = results.sentence(rec, reasons=False)
        assert len(words.split()) <= 60, (len(words.split()), words)
        assert "orders of magnitude" not in words and "quasi-separation" not in words, words
        if results.verdict(rec) == "invalid" and not rec.get("valid", True):  # every pair answered alike: one
            assert "no variation to compare" in words and "not estimable" not in words  # description wherever said
            assert len(fit_caveats([rec])) == 1 and "no variation to compare" in fit_caveats([rec])[0]
            assert table_rows({"records": [rec]})[0]["estimate"] == "no variation to compare"
        elif results.verdict(rec) == "invalid":
            assert "not estimable (why: see the caveats)" in words and len(fit_caveats([rec])) == 1
        if rec.get("fallback_for"):
            assert "standing in for the binomial GLMM" in words
    glmm = [record("glmm_lrt", "upward", valid=False, model="m", condition=c, headline=True,
                   note=f"gap; the 95% CI spans {w} orders of magnitude of the odds ratio: the data do not locate it",
                   hypothesis=claims.gap(c)) for c, w in (("concept_learning", "4.8"), ("explicit", "3.4"))]
    (caveat,) = fit_caveats(glmm)  # the same reason for both: said once, the numbers that differ as a range
    assert caveat == ("The binomial GLMM is not estimable for m (2 tests): the 95% CI is too wide to locate the effect "
                      "(details: summary.json)")
    assert not re.search(r"more than \d|over \d|beyond ±", caveat)


def test_a_significant_interval_gets_the_digits_to_stay_off_the_null():
    r = record("glmm_lrt", "upward", math.log(1.35), ci_low=math.log(1.004), ci_high=math.log(1.82), p=0.03,
               hypothesis=claims.gap())
    assert results.phrase(r) == "conditional OR = 1.35, 95% CI [1.004, 1.820], p = .030"
    r["p"] = 0.3  # not significant: two decimals, a bound on the null is what a null result looks like
    assert results.phrase(r) == "conditional OR = 1.35, 95% CI [1.00, 1.82], p = .300"


def test_power_is_said_as_the_approximation_it_is():
    from nbutils.results._headline import detectable_gap, power_sentence

    assert detectable_gap(30, 30) == pytest.approx(0.3617, abs=1e-3)  # (1.960 + 0.842) · √(.25 · 2/30)
    words = power_sentence(30, 30, "upward", "downward", clusters="threshold")
    assert "about 36 points" in words and "approximately" in words and "normal approximation" in words
    assert len(words.split()) <= 60


def test_property_a_headline_names_its_method_in_six_words_and_a_caveat_says_why_in_forty():
    """Every procedure has a short name of at most six words, which is what a headline sentence prints; a caveat of
    a test that is not estimable is at most 40 words, whatever its reason holds, and prints no orders of magnitude."""
    from nbutils.results import fit_caveats
    from nbutils.results import METHODS, SHORT_METHODS

    assert set(METHODS) <= set(SHORT_METHODS)
    assert all(len(v.split()) <= 6 for v in SHORT_METHODS.values())
    rng = np.random.default_rng(50)
    reasons = ["the log odds ratio is 23.4: (quasi-)complete separation of the groups, so the test is not reliable",
               "the 95% CI spans 29498819.5 orders of magnitude of the odds ratio: the data do not locate the effect",
               "the pair random effect's SD is 63.7 on the logit scale, implausibly large: a quasi-separation by pair",
               "singular Hessian: the standard error is not finite or is zero",
               "a reason of some other kind that runs on and on " * 5]
    for _ in range(500):
        rec = _random_record(rng)
        rec.update(test=str(rng.choice(list(METHODS))), condition="concept_learning", headline=True, valid=False,
                   model=str(rng.choice(["olmo-2-1124-13b-instruct", "m"])),
                   note="what; " + ", and ".join(rng.choice(reasons, size=rng.integers(1, 4), replace=False)))
        words = results.sentence(rec, reasons=False)
        assert f"({results.short_method(rec)})" in words and len(results.short_method(rec).split()) <= 6, words
        for caveat in fit_caveats([rec]):
            assert len(caveat.split()) <= 40 and "orders of magnitude" not in caveat, caveat


def test_runs_and_the_report_call_the_same_records_found():
    """A one-sided test significant with its estimate on the side it does not look at is no finding, for the report's
    first table and for `nbutils runs` alike (one rule: ``results.found``)."""
    from nbutils.report import _run_index as run_index
    from nbutils.report._html import headline_table
    from nbutils.records import summary_json

    h = claim("the gap", "upward concepts were learned better", "downward concepts were learned better", sided="greater")
    wrong = record("gee", "upward", -0.4, ci_low=-0.8, ci_high=0.0, p=0.01, hypothesis=h, model="a", headline=True)
    right = record("gee", "upward", 0.4, ci_low=0.1, ci_high=0.8, p=0.01, hypothesis=h, model="b", headline=True)
    assert [results.found(r) for r in (wrong, right)] == [False, True]
    summary = summary_json({"records": [dict(wrong), dict(right)]})
    lines = run_index._headlines(summary, most=1)
    assert lines[0].startswith("b — ") and lines[1].startswith("… 1 more model, 0 of them with a finding"), lines
    rows = headline.table_rows(summary)
    assert str(headline_table(rows)).count('class="evidence"') == 1
