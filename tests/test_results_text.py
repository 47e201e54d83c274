"""The results in words: APA formatting, not-estimable records without numbers, identical conditions named, and the
paragraph of the shipped sample run holding the numbers of its own summary."""
from __future__ import annotations

import math
import re
import shutil

import pytest

from nbutils import paths, results
from nbutils.stats import record
from nbutils.studies.monotonicity import analysis
from nbutils.studies.monotonicity.results import results_text

SAMPLE = paths.repo_root() / "outputs" / "samples" / "monotonicity"


@pytest.mark.parametrize("p,text", [(0.0004, "p < .001"), (0.0321, "p = .032"), (0.5, "p = .500"), (0.99995, "p > .999"),
                                    (float("nan"), "p not available"), (None, "p not available")])
def test_p_values_in_apa_style(p, text):
    assert results.fmt_p(p) == text


def test_numbers_never_show_negative_zero_or_long_noise():
    assert results.fmt_num(-2.22e-16) == "0.00" and results.fmt_num(-0.0001, 3) == "0.000"
    assert results.fmt_num(1.23456) == "1.23" and results.fmt_num(12345.6) == "1.2e+04"


def test_a_record_in_apa_style_on_the_odds_ratio_scale():
    r = record("glmm_lrt", "upward", estimate=math.log(2.0), ci_low=math.log(1.25), ci_high=math.log(3.2), p=0.004)
    assert results.phrase(r, odds_ratio=True) == "OR = 2.00, 95% CI [1.25, 3.20], p = .004"
    assert "evidence that" in results.meaning(r, "x holds") and "no evidence" not in results.meaning(r, "x holds")


def test_a_record_that_cannot_be_estimated_says_why_and_shows_no_numbers():
    r = record("gee_bias_reduced", "upward", estimate=-1.96e-16, se=2.2e-08, p=1.0, valid=False,
               note="log odds ratio upward vs downward; needs at least 3 thresholds for clustered inference")
    text = results.phrase(r, odds_ratio=True)
    assert text == "not estimable (needs at least 3 thresholds for clustered inference)"
    assert not re.search(r"\d\.\d", text)
    assert "cannot say" in results.meaning(r, "x holds")


def test_headline_not_estimable_and_identical_conditions_in_the_paragraph():
    rec = record("gee_bias_reduced", "upward", valid=False, condition="concept_learning",
                 note="the gap; needs at least 3 thresholds", model="m", headline=True)
    summary = {"m": {"conditions": {"concept_learning": {"acc_up": 0.75, "acc_down": 0.5, "gap": 0.25}}},
               "records": [rec], "design": {"models": ["m"], "conditions": ["concept_learning", "explicit"],
                                            "n_concepts": 4, "n_thresholds": 2, "n_prompts": {"m": 64},
                                            "identical_conditions": {"m": True}}}
    text = results_text(summary)
    assert "not estimable (needs at least 3 thresholds)" in text
    assert "75% upward vs 50% downward" in text
    assert "identically in both conditions" in text
    assert "with 2 threshold(s)" in text


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
    for r in head:
        assert results.phrase(r, odds_ratio=True) in text
    model = a.summary["design"]["models"][0]
    acc = a.summary[model]["conditions"]["concept_learning"]["acc_up"]
    assert f"{100 * acc:.0f}% upward" in text
