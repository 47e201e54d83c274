"""The cue profile's results in words, from the ``cues`` entry and the cue records of the run's ``summary.json``.

The profile shares ``summary.json`` with the study whose run it reads, so its paragraph is a file of its own,
``{run}/cues_results.md``, beside the study's ``results.md``.
"""
from __future__ import annotations

import re

from ...results import fmt_alpha, fmt_num, fmt_p, headline_records, paragraph, plural, sentence

from ...stats import ALPHA, claim

TOP_SHOWN = 3  # cues named in the discovery line


def accuracy_claim(feature) -> dict:
    """What a cue accuracy test's estimate means in words (``nbutils.stats.claim``)."""
    return claim(f"accuracy with `{feature}` minus without it", f"prompts with `{feature}` were answered better",
                 f"prompts with `{feature}` were answered worse", f"accuracy differs with and without `{feature}`",
                 scale="points")


def _records(summary: dict, test: str) -> list[dict]:
    return headline_records(summary, lambda r: r.get("test") == test)


def results_text(summary: dict) -> str:
    """Design (instances, split, features tested), which features skew the labels (cueness, Holm p), and per model
    whether it uses the top cues: the accuracy test (Δ accuracy with and without the feature, 95% CI, p) and the
    distribution test, with one plain sentence each and the caveats of a small split."""
    c = summary.get("cues") or {}
    alpha = c.get("alpha", ALPHA)
    found = _records(summary, "cue_discovery")
    design = (f"Cue profile (ICQ; Huang and Zhu) of the {c.get('study', '?')} run: {c.get('n_instances', '?')} "
              f"{c.get('mode', '')} instances split into {c.get('n_train', '?')} for finding cues and "
              f"{c.get('n_test', '?')} for testing them; {c.get('n_features', '?')} features occur at least "
              f"{c.get('min_count', '?')} times in both splits; the top {len(found)} by cueness are probed.").replace("  ", " ")
    lines, caveats = [], []
    if not found:
        lines.append("No feature occurs often enough in both splits to be ranked, so there is no cue to test.")
        return paragraph("Do surface features of the prompts predict the label, and does the model use them?",
                         design, lines, ["a larger dataset or a lower `min_count` gives the profile features to rank"])
    sig = [r for r in found if r.get("significant")]
    named = "; ".join(f"`{r['term']}` → {r.get('cue_label', '?')} "
                      f"(cueness {fmt_num(r.get('estimate'))}, Holm {fmt_p(r.get('p_holm'), alpha)})"
                      for r in found[:TOP_SHOWN])
    lines.append(f"Strongest cues: {named}. {len(sig)} of the top {len(found)} skew the labels at α = {fmt_alpha(alpha)} "
                 f"after Holm correction over all {c.get('n_features', '?')} features"
                 + (": the dataset itself carries cues a model could exploit." if sig else
                    ": no evidence that the labels follow a surface feature in this dataset."))
    acc, dist = _records(summary, "cue_accuracy_test"), _records(summary, "cue_distribution_test")
    used = _records(summary, "cue_used")
    for m in dict.fromkeys(r.get("condition") for r in acc + dist):
        a = [r for r in acc if r.get("condition") == m]
        best = min((r for r in a if r.get("valid") and r.get("p") is not None), key=lambda r: r["p"], default=None)
        n_used = sum(1 for r in used if r.get("condition") == m and r.get("estimate"))
        n_flag_acc = sum(1 for r in a if r.get("flag"))
        n_flag_dist = sum(1 for r in dist if r.get("condition") == m and r.get("flag"))
        line = (f"{m}: {n_used} of the top {plural(len(found), 'cue')} flagged as used by both tests "
                f"({n_flag_acc} by the accuracy test, {n_flag_dist} by the distribution test, Holm at α = {fmt_alpha(alpha)})")
        if best is not None:
            shown = {**best, "p": best.get("p_holm"),
                     "hypothesis": best.get("hypothesis") or accuracy_claim(best.get("term"))}
            words = sentence(shown, alpha, who=False).replace("95% CI", "unadjusted 95% CI", 1)
            line += "; the clearest accuracy difference, " + re.sub(r"\bp ([=<>≥])", r"Holm-adjusted p \1", words, 1)
        elif not n_used:
            line += "."
        line += (" The model's answers follow surface features of the prompt here, not only the task." if n_used else
                 " No evidence that the model relies on these cues (a small test split can miss a cue it uses).")
        lines.append(line)
        bad = [r for r in a if not r.get("valid")]
        if bad:
            caveats.append(f"{m}: {plural(len(bad), 'cue')} never or always present in the test split "
                           "cannot be tested")
    if not (acc or dist):
        lines.append("The run has no scores, so whether a model uses these cues is not tested.")
    n_test = c.get("n_test")
    if isinstance(n_test, int) and n_test < 200:
        caveats.append(f"the test split has {n_test} instances: only large effects can reach significance, and a "
                       "non-significant cue may still be used")
    return paragraph("Do surface features of the prompts predict the label, and does the model use them?", design,
                     lines, caveats)

