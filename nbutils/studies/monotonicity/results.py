"""The monotonicity (concept learning) study's results in words, from its ``summary.json``."""
from __future__ import annotations

from ...results import fmt_num, meaning, paragraph, phrase, reason
from . import robustness

CONDITION_NAMES = {"concept_learning": "concept learning", "explicit": "the concept stated"}


def _acc(x) -> str:
    return f"{100 * x:.0f}%" if isinstance(x, (int, float)) else "n/a"


def results_text(summary: dict) -> str:
    """Design, the headline test (upward vs downward, per condition, and whether stating the concept closes the gap)
    with estimate, CI and p per model, validity and power caveats, and one plain sentence per result."""
    d = summary.get("design", {})
    models = d.get("models") or [k for k in summary if not k.startswith("_") and isinstance(summary[k], dict)
                                 and "conditions" in summary[k]]
    conds = d.get("conditions", [])
    k = d.get("n_thresholds")
    design = (f"{len(models)} model(s) ({', '.join(models)}); {d.get('n_concepts', '?')} concepts at "
              f"{k if k is not None else '?'} threshold(s), each as 'more than p' (upward) and 'less than p' (downward); "
              f"conditions: {', '.join(CONDITION_NAMES.get(c, c) for c in conds) or '?'}; "
              + "; ".join(f"{n:,} prompts for {m}" for m, n in d.get("n_prompts", {}).items()) + ".")
    recs = [r for r in summary.get("records", []) if r.get("headline")]
    test = recs[0]["test"] if recs else None
    test_name = {"glmm_lrt": "binomial GLMM (lme4, likelihood-ratio test)",
                 "gee_bias_reduced": "logistic GEE clustered by threshold (bias-reduced SE, t(K−1))"}.get(test, test)
    lines, caveats = [], []
    for m in models:
        per = summary.get(m, {}).get("conditions", {})
        for c, h in per.items():
            rec = next((r for r in recs if r.get("model") == m and r.get("condition") == c and r.get("term") == "upward"), None)
            acc = f"accuracy {_acc(h.get('acc_up'))} upward vs {_acc(h.get('acc_down'))} downward (gap {fmt_num(100 * h['gap'], 1) if isinstance(h.get('gap'), (int, float)) else 'n/a'} points)"
            if rec is None:
                lines.append(f"{m}, {CONDITION_NAMES.get(c, c)}: {acc}; no headline test.")
                continue
            lines.append(f"{m}, {CONDITION_NAMES.get(c, c)}: {acc}; {test_name}: {phrase(rec, odds_ratio=True)}. "
                         + meaning(rec, "upward concepts are learned better than downward ones"))
            if not rec.get("valid", True):
                caveats.append(reason(rec))
        inter = next((r for r in recs if r.get("model") == m and r.get("term") == "upward:explicit"), None)
        if inter is not None:
            lines.append(f"{m}, does stating the concept change the gap (upward × explicit, OR < 1: the gap shrinks): "
                         f"{phrase(inter, odds_ratio=True)}. "
                         + meaning(inter, "stating the concept changes the upward-vs-downward gap"))
        if d.get("identical_conditions", {}).get(m):
            lines.append(f"{m} answered every prompt pair identically in both conditions, so the paired comparisons "
                         "(McNemar, the change of the gap) have nothing to compare: this is what the data are, not an "
                         "error.")
    if isinstance(k, int) and k < 5:
        caveats.append(f"with {k} threshold(s) the results are about these thresholds only; a claim about thresholds "
                       "in general needs more of them (the sign-flip test cannot reach p < .05 below 5)")
    caveats += [n for n in summary.get("_notes", []) if "R with lme4 not found" in n]
    lines += robustness.sentences(summary)  # does the gap survive how the question is asked (prompt variants)?
    return paragraph("Is upward monotonicity learned better than downward?", design, lines or
                     ["No model has both an upward and a downward concept at a threshold: no gap to test."], caveats)
