"""The terminal's results table (``nbutils.results_table``) says what summary.json's headline entries say: 500 random
entries, each row's odds ratio and interval the exponent of the log odds ratio, p on its side of α, accuracy and gap
as percentages and points, and no number at all for a test that is not valid; and the notebooks' notes leave the
fit diagnostics to the caveats."""
from __future__ import annotations

import math

import numpy as np
import pytest

from nbutils.display import notes_line
from nbutils.results import fmt_p
from nbutils.results._terminal_table import opening, rows, table_lines


def _entry(rng, model="m", condition="concept_learning") -> dict:
    est = float(rng.normal(0, 2))
    half = float(rng.uniform(0.01, 2))
    up, down = (float(x) for x in rng.uniform(0, 1, 2))
    return {"model": model, "condition": condition, "term": "upward", "test": "gee_bias_reduced", "estimate": est,
            "ci_low": est - half, "ci_high": est + half, "p": float(rng.uniform(0, 1)), "valid": bool(rng.random() > 0.2),
            "verdict": "none", "sentence": "", "scale": "log_odds_ratio", "symbol": "OR", "acc_up": up,
            "acc_down": down, "gap": up - down}


def test_every_row_says_what_its_entry_says():
    rng = np.random.default_rng(11)
    entries = [_entry(rng, f"model-{i // 2}", ("concept_learning", "explicit")[i % 2]) for i in range(500)]
    head, body = rows({"headline": entries})
    assert head == ["model", "condition", "acc up", "acc down", "gap", "OR [95% CI]", "p"]
    for e, row in zip(entries, body):
        assert row[:2] == [e["model"], {"concept_learning": "concept learning", "explicit": "concept stated"}[
            e["condition"]]]
        assert row[2:5] == [f"{100 * e['acc_up']:.1f}%", f"{100 * e['acc_down']:.1f}%", f"{100 * e['gap']:+.1f} pts"]
        if not e["valid"]:
            assert row[5:] == ["not estimable", "-"], "an invalid test shows no number"
            continue
        est, lo, hi = (float(x.strip("[],")) for x in row[5].split())
        for shown, value in zip((est, lo, hi), (e["estimate"], e["ci_low"], e["ci_high"])):
            assert shown == pytest.approx(math.exp(value), rel=0.03, abs=0.006)  # 2 significant digits from 10,000
        assert fmt_p(e["p"]).endswith(row[6]) and (row[6].startswith("<") or row[6].startswith(">")
                                                    or (float(row[6]) < 0.05) == (e["p"] < 0.05))
    lines = table_lines({"headline": entries})
    assert len({len(line) for line in lines[:2]}) == 1 and len(lines) == 502


def test_model_comparisons_are_left_to_the_words_and_a_study_without_conditions_names_its_tests():
    rng = np.random.default_rng(2)
    both = dict(_entry(rng), model=None, models=["a", "b"], symbol="ratio of ORs")
    assert [r[0] for r in rows({"headline": [_entry(rng, "a"), both]})[1]] == ["a"]
    negation = {"model": "m", "condition": None, "term": "context × form", "test": "lmm", "estimate": -0.11,
                "ci_low": -0.25, "ci_high": 0.03, "p": 0.113, "valid": True, "verdict": "none", "sentence": "",
                "scale": "number", "symbol": "b"}
    head, body = rows({"headline": [negation]})
    assert head == ["model", "test", "b [95% CI]", "p"] and body == [["m", "context × form", "-0.11 [-0.25, 0.03]",
                                                                      ".113"]]
    assert table_lines({"headline": []}) == [] and table_lines({}) == []
    accuracy = dict(negation, term="(all)", scale="proportion", symbol="accuracy", estimate=0.4167, ci_low=0.2447,
                    ci_high=0.6117, p=0.541)
    assert rows({"headline": [accuracy]})[1] == [["m", "(all)", "41.7% [24.5%, 61.2%]", ".541"]], "percent, as said"
    twice = [dict(negation, condition="real", what=f"real minus {k} null personas") for k in ("random", "word")]
    head, body = rows({"headline": twice})
    assert head[1] == "test" and [r[1] for r in body] == ["real minus random null personas", "real minus word null "
                                                          "personas"], "two tests of one condition: each named"
    assert opening(["Title", "a finding"], ["t1", "t2"]) == ["Title", "", "t1", "t2", "", "a finding"]
    assert opening(["Title", "a finding"], []) == ["Title", "a finding"]


def test_the_notebooks_notes_leave_fit_diagnostics_to_the_caveats():
    notes = ["m: answers 'Yes' to every prompt (pure response bias)",
             "singular fit: dropped (1 | cluster) (SD estimated 8.4e-06); every prompt pair was answered alike",
             "singular Hessian: the standard error is not finite or is zero"]
    out = notes_line(notes).splitlines()
    assert out[0] == notes[0] and len(out) == 2 and out[1].startswith("2 model-fit diagnostics: what they mean is in")
    assert notes_line([]) == "no warnings" and notes_line(notes[:1]) == notes[0]
