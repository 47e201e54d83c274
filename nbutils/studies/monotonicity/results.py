"""The monotonicity (concept learning) study's results in words, from its ``summary.json``."""
from __future__ import annotations

from ...records import model_block
from ...results import (fit_caveats, fmt_num, model_names, models_applies, models_markdown, note_lines, paragraph,
                        plural, power_sentence, reading, replaced_dropped, sentence)
from ...stats import ALPHA
from ..common import option_mass
from . import prediction, robustness

CONDITION_NAMES = {"concept_learning": "concept learning", "explicit": "the concept stated"}


def _acc(x) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "n/a"


def comparison_lines(heads: list[dict], records: list[dict], alpha: float = ALPHA) -> list[str]:
    """One sentence per comparison of two models and condition (its headline record), naming both models; why a test
    is not estimable goes to the caveats (``fit_caveats``), as for the other headline sentences."""
    out = []
    for r in heads:
        if r.get("models") and r.get("term") == "upward:model":
            first, second = r["models"]
            where = CONDITION_NAMES.get(r.get("condition"), r.get("condition"))
            out.append(f"{first} vs {second}, {where}: {sentence(r, alpha, records, who=False, reasons=False)}")
    return out


def results_text(summary: dict, alpha: float = ALPHA) -> str:
    """Design, the headline test (upward vs downward, per condition, and whether stating the concept closes the gap)
    per model, each in the words of the side its data point to (the sentence engine), the notes of ``summary.json``
    in words (response bias, identical conditions, precision), and the caveats of a small design."""
    d = summary.get("design", {})
    models = d.get("models") or [k for k, v in (summary.get("models") or {}).items() if "conditions" in v]
    conds = d.get("conditions", [])
    k = d.get("n_thresholds")
    prompts = "; ".join(f"{plural(n, 'prompt')} for {m}" for m, n in d.get("n_prompts", {}).items())
    design = (f"{plural(len(models), 'model')} ({', '.join(models)}); {plural(d.get('n_concepts'), 'concept')} at "
              f"{plural(k, 'threshold')}, each as 'more than p' (upward) and 'less than p' (downward); "
              f"conditions: {', '.join(CONDITION_NAMES.get(c, c) for c in conds) or '?'}"
              + (f"; {prompts}" if prompts else "") + ".")
    records = summary.get("records", [])
    recs = replaced_dropped([r for r in records if r.get("headline")])
    lines, caveats, learned = [], [], []
    identical = d.get("identical_conditions") or {}  # both conditions answered alike: nothing to compare between them
    for m in models:
        per = model_block(summary, m).get("conditions", {})
        for c, h in per.items():
            rec = next((r for r in recs if r.get("model") == m and r.get("condition") == c and r.get("term") == "upward"), None)
            gap = h.get("gap")
            if rec is None:
                lines.append(f"{m}, {CONDITION_NAMES.get(c, c)}: accuracy {_acc(h.get('acc_up'))} upward vs "
                             f"{_acc(h.get('acc_down'))} downward (gap "
                             f"{fmt_num(100 * gap, 1) + ' points' if isinstance(gap, (int, float)) else 'n/a'}); "
                             "no headline test.")
                continue
            rd = reading(summary, m, c, alpha)  # the gap with what it means: floor, use of the examples, rule
            lines.append(rd["sentence"])
            if rd["rule_sentence"]:
                learned.append(rd["rule_sentence"])
        inter = next((r for r in recs if r.get("model") == m and r.get("term") == "upward:explicit"), None)
        if inter is not None and identical.get(m):
            lines.append(f"{m}: the change of the gap when the concept is stated: no variation to compare (every "
                         "prompt pair was answered alike in both conditions).")
        elif inter is not None:
            lines.append(f"{m}: {sentence(inter, alpha, records, who=False, reasons=False)}")
    if isinstance(k, int) and k < 5:
        caveats.append(f"with {plural(k, 'threshold')} the results are about {'this threshold' if k == 1 else 'these thresholds'} "
                       "only; a claim about thresholds in general needs more of them (the sign-flip test cannot reach "
                       "p < .05 below 5)")
    compared = [r for r in records if not (identical.get(r.get("model")) and r.get("term") in ("upward:explicit",
                                                                                              "explicit"))]
    caveats += [n for n in summary.get("_notes", []) if "R with lme4 not found" in n] + fit_caveats(compared)
    sizes = [h.get("n") for m in models for h in model_block(summary, m).get("conditions", {}).values()]
    sizes = [n for n in sizes if isinstance(n, int) and n >= 2]
    if sizes:  # the design deals upward and downward concepts half and half
        caveats.append(power_sentence(min(sizes) // 2, min(sizes) // 2, "upward", "downward", alpha,
                                      clusters="threshold" if isinstance(k, int) and k > 1 else ""))
    lines += learned  # what was learned instead, from the rule analysis
    lines += [f"{line}." for line in option_mass.sentences(summary, CONDITION_NAMES, "Yes and No")]
    lines += comparison_lines(recs, records, alpha)
    lines += [f"{line}." for line in d.get("not_compared") or []]
    lines += robustness.sentences(summary, alpha)  # does the gap survive how the question is asked (prompt variants)?
    lines += prediction.sentences(summary)  # the gap a prompt nobody tried would show
    lines = lines or ["No model has both an upward and a downward concept at a threshold: no gap to test."]
    text = paragraph("Is upward monotonicity learned better than downward?", design, lines + note_lines(summary, alpha),
                     caveats)
    if models_applies(summary) and len(model_names(summary)) > 1:  # the models side by side
        text = text.rstrip("\n") + "\n\n" + models_markdown(summary, alpha) + "\n"
    return text

