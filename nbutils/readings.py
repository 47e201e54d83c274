"""What a quantifier study's headline means, per model and condition, read from ``summary.json``: one of five
readings, each with its one sentence.

- ``learned``: the gap is significant and the answers use the examples (or the stated concept): "upward concepts
  were learned better than downward ones";
- ``prior``: the gap is significant but the answers show no use of what the examples say beyond the query: the gap
  comes from a prior on the query, and the rule analysis says which rule the model follows instead;
- ``below_floor``: no significant gap, and accuracy is not above what a responder with no information gets: no
  conclusion about a bias can be drawn;
- ``no_evidence``: no significant gap from a model that is above the floor (a gap at least as large as the design
  finds 4 times in 5 is said as "not significant", never as "no evidence");
- ``no_valid_test``: no test that can reject at this design could be estimated: the sentence says what the data show
  (accuracies, correct answers per threshold) and that no valid test is available.

Beside every reading: a near-constant responder (one answer on 90% of a condition's prompts) gets its caveat, and the
signal-detection gap (d′) is said where it disagrees with the accuracy gap. An odds ratio says its scale: conditional
on the prompt pair (the GLMM) or marginal (GEE, Firth, Mantel–Haenszel), and a conditional one has the marginal one
beside it.
"""
from __future__ import annotations

import math

from .records import Summary, as_record, model_block
from .stats import can_reject
from .results import (ALPHA, SHORT_METHODS, _finite, _shown, claim_of, fmt_alpha, fmt_ci, fmt_num, fmt_p, fmt_ratio,
                      odds_ratio_scale, phrase, verdict)

READINGS = ("learned", "prior", "below_floor", "no_evidence", "no_valid_test")
MARGINAL_ORDER = ("gee_bias_reduced", "firth_plr", "cmh")  # where a marginal OR beside a conditional one comes from
RULE_WORDS = {"true_concept": "the true concept", "mirror": "the mirror", "always_yes": "always Yes",
              "always_no": "always No", "last_label": "the last example's label",
              "nearest_example": "the nearest example's label", "knn_majority": "the nearest examples' majority"}
CONDITION_NAMES = {"concept_learning": "concept learning", "explicit": "the concept stated"}


def detectable_gap(n_a: int, n_b: int, alpha: float = ALPHA, power: float = 0.8) -> float:
    """The difference of two proportions near 50% that a two-sided test at ``alpha`` finds with ``power``, with
    ``n_a`` and ``n_b`` independent observations (normal approximation), as a proportion."""
    from scipy.stats import norm

    return float((norm.ppf(1 - alpha / 2) + norm.ppf(power)) * math.sqrt(0.25 * (1 / n_a + 1 / n_b)))


def _pct(x) -> str:
    return f"{100 * x:.1f}%" if _finite(x) else "n/a"


def _points(x) -> str:
    return f"{fmt_num(100 * x, 1)} points" if _finite(x) else "n/a"


def _same(r: dict, model, condition, term="upward") -> bool:
    t = as_record(r)
    return t.model == model and t.condition == condition and t.term == term and not t.extra.get("models")


def headline_record(summary: dict, model, condition) -> dict | None:
    """The record that stands as the gap's headline for ``model`` and ``condition`` (a valid stand-in first)."""
    heads = [r for r in Summary(summary).records if as_record(r).headline and _same(r, model, condition)]
    valid = [r for r in heads if verdict(r) != "invalid"]
    return (valid or heads or [None])[0]


def marginal_record(summary: dict, model, condition) -> dict | None:
    """A valid marginal-OR record of the gap for ``model`` and ``condition``, the GEE's first."""
    recs = {as_record(r).test: r for r in Summary(summary).records if _same(r, model, condition)}
    for test in MARGINAL_ORDER:
        r = recs.get(test)
        if r is not None and verdict(r) != "invalid":
            return r
    return None


def _marginal_beside(summary: dict, rec: dict, alpha: float) -> str:
    """``; marginal OR = 19.8, 95% CI […] (GEE by threshold)`` beside a conditional OR, or nothing."""
    if odds_ratio_scale(rec) != "conditional":
        return ""
    m = marginal_record(summary, rec.get("model"), rec.get("condition"))
    if m is None:
        return ""
    est, lo, hi, _ = _shown(m, claim_of(m))  # on the odds-ratio scale
    if not _finite(est):
        return ""
    ci = fmt_ci(lo, hi, fmt=fmt_ratio)
    return f"; marginal OR = {fmt_ratio(est)}{', ' + ci if ci else ''}, {SHORT_METHODS.get(m['test'], m['test'])}"


def rule_block(summary: dict, model, condition) -> dict | None:
    """What the rule analysis says of ``model`` in ``condition``: mirror agreement on downward and upward concepts,
    its exact stratified p, and the best-fitting rule of each downward concept."""
    view = Summary(summary)
    mt = next((m for m in view.rules_mirror_test if m.get("model") == model and m.get("condition") == condition), None)
    best = [r for r in view.rules if r.get("model") == model and r.get("condition") == condition]
    if mt is None and not best:
        return None
    down = [r for r in best if str(r.get("concept", "")).startswith("less than")]
    up = [r for r in best if str(r.get("concept", "")).startswith("more than")]
    out = {"mirror_down": mt.get("mirror_agreement_down") if mt else None,
           "mirror_up": mt.get("mirror_agreement_up") if mt else None,
           "p": mt.get("p_exact_stratified") if mt else None,
           "down_best_mirror": sum(r.get("best_rule") == "mirror" for r in down), "n_down": len(down),
           "up_best_true": sum(r.get("best_rule") == "true_concept" for r in up), "n_up": len(up)}
    rules = [str(r.get("best_rule")) for r in best if r.get("best_rule")]
    if rules:
        top = max(dict.fromkeys(rules), key=rules.count)
        out.update(most_common_rule=top, most_common_count=rules.count(top), n_concepts=len(rules))
    out["answers_as_mirror"] = bool(_finite(out["p"]) and out["p"] < ALPHA and _finite(out["mirror_down"])
                                    and _finite(out["mirror_up"]) and out["mirror_down"] > out["mirror_up"])
    return out


def rule_sentence(model, condition, rule: dict | None, alpha: float = ALPHA) -> str:
    """What was learned, in one sentence, from the rule analysis: whether downward concepts were answered as their
    mirror, and which rules fit the concepts best."""
    if not rule:
        return ""
    where = CONDITION_NAMES.get(condition, condition)
    bits = []
    if _finite(rule.get("mirror_down")) and _finite(rule.get("mirror_up")):
        said = "were answered as their upward mirror" if rule["answers_as_mirror"] else \
            "were not answered as their mirror more than upward ones"
        bits.append(f"downward concepts {said} ({_pct(rule['mirror_down'])} vs {_pct(rule['mirror_up'])} mirror "
                    f"agreement, {fmt_p(rule.get('p'), alpha)}, exact stratified test)")
    if rule.get("n_down") and (rule["down_best_mirror"] or rule["up_best_true"]):
        bits.append(f"the mirror fits {rule['down_best_mirror']} of {rule['n_down']} downward concepts best and the "
                    f"true concept {rule['up_best_true']} of {rule['n_up']} upward ones")
    elif rule.get("most_common_rule"):
        bits.append(f"the rule that fits most concepts best is "
                    f"{RULE_WORDS.get(rule['most_common_rule'], repr(rule['most_common_rule']))} "
                    f"({rule['most_common_count']} of {rule['n_concepts']})")
    return f"{model}, {where}, what was learned: {'; '.join(bits)}." if bits else ""


def _floor_words(fl: dict, alpha: float) -> str:
    ci = fmt_ci(100 * fl["ci_low"], 100 * fl["ci_high"], 1, unit="%") if _finite(fl.get("ci_low")) else ""
    return (f"accuracy {_pct(fl.get('accuracy'))}{' (' + ci + ')' if ci else ''} against {_pct(fl.get('chance'))} "
            f"by chance, {fmt_p(fl.get('p'), alpha)} (one-sided binomial)")


def _per_threshold(cond: dict) -> str:
    cells = cond.get("per_threshold") or []
    return "; ".join(f"{c['threshold']}: {c['k_up']}/{c['n_up']} vs {c['k_down']}/{c['n_down']}" for c in cells)


def _caveats(summary: dict, model, condition, cond: dict, rec: dict | None, alpha: float) -> list[str]:
    out = []
    const = cond.get("constant")
    if const:
        out.append(f"caveat: it answered {const['answer']} to {const['count']} of {const['n']} prompts, so its "
                   f"accuracies mostly count the prompts whose answer is {const['answer']}")
    d = next((r for r in Summary(summary).records if as_record(r).test == "signflip_dprime_gap"
              and _same(r, model, condition)), None)
    gap = cond.get("gap")
    if d is not None and _finite(d.get("estimate")) and _finite(gap) and d.get("valid", True):
        same_sign = (d["estimate"] > 0) == (gap > 0) or d["estimate"] == 0 == gap
        v_acc = verdict(rec, alpha) if rec else "invalid"
        v_d = verdict(d, alpha)
        sig_differs = can_reject(d, alpha) and (v_acc in ("more", "less")) != (v_d in ("more", "less"))
        if not same_sign or sig_differs:
            out.append(f"the signal-detection gap disagrees: d′ gap = {fmt_num(d['estimate'])}, "
                       f"{fmt_p(d.get('p'), alpha)} (sign-flip test), response bias factored out")
    return out


def reading(summary: dict, model, condition, alpha: float = ALPHA) -> dict:
    """The reading of ``model``'s gap in ``condition`` with its facts (floor, uses_examples, rule, constant) and its
    sentence."""
    cond = (model_block(summary, model).get("conditions") or {}).get(condition) or {}
    rec = headline_record(summary, model, condition)
    floor, uses, const = cond.get("floor"), cond.get("uses_examples"), cond.get("constant")
    rule = rule_block(summary, model, condition)
    v = verdict(rec, alpha) if rec is not None else "invalid"
    where = CONDITION_NAMES.get(condition, condition)
    stated = condition == "explicit"
    accs = f"{_pct(cond.get('acc_up'))} upward vs {_pct(cond.get('acc_down'))} downward correct"
    method = f", {SHORT_METHODS.get(rec.get('test'), rec.get('test'))}" if rec is not None else ""
    if rec is not None and rec.get("fallback_for"):
        method += f" standing in for the {SHORT_METHODS.get(rec['fallback_for'], rec['fallback_for']).split(',')[0]}"
    if v == "invalid":
        kind = "no_valid_test"
        counts = _per_threshold(cond)
        text = (f"no valid test of the gap is available for this design (see the caveats); the data show {accs} "
                f"(gap {_points(cond.get('gap'))})" + (f"; correct per threshold, upward vs downward: {counts}"
                                                        if counts else ""))
    elif v in ("more", "less"):
        better, worse = ("upward", "downward") if v == "more" else ("downward", "upward")
        nums = phrase(rec, alpha) + method + _marginal_beside(summary, rec, alpha)
        if uses is not None and uses.get("uses") is False:
            kind = "prior"  # the query-only model's own test (``query_p``) is in the headline entry
            what = "the stated concept" if stated else "the examples"
            mirror = ""
            if rule and rule.get("answers_as_mirror") and v == "more":
                mirror = "; downward concepts are answered as their upward mirror"
            short = f"{_pct(cond.get('acc_up'))} vs {_pct(cond.get('acc_down'))}"
            text = (f"{better} concepts were answered right more often ({short}; {nums}), but the gap comes from a "
                    f"prior on the query, not from learning from {what} (score test, {fmt_p(uses.get('p'), alpha)})"
                    f"{mirror}")
        else:
            kind = "learned"
            verb = "answered" if stated else "learned"
            text = f"{better} concepts were {verb} better than {worse} ones ({accs}; {nums})"
    else:
        nums = phrase(rec, alpha)
        n = cond.get("n")
        big = _finite(cond.get("gap")) and isinstance(n, int) and n >= 4 and \
            abs(cond["gap"]) >= detectable_gap(n // 2, n // 2, alpha)
        if floor and floor.get("above") is False and not big:
            kind = "below_floor"
            also = ""
            other = ((model_block(summary, model).get("conditions") or {}).get("explicit") or {}).get("floor")
            if not stated and other and other.get("above") is False:
                also = f" (with the concept stated: {_pct(other.get('accuracy'))})"
            text = (f"below the task floor, {_floor_words(floor, alpha)}{also}, so no conclusion about a bias "
                    f"({_pct(cond.get('acc_up'))} upward vs {_pct(cond.get('acc_down'))} downward; {nums}{method})")
        elif big:
            kind = "no_evidence"
            text = (f"the observed gap, {_points(cond.get('gap'))} ({accs}), is not significant at "
                    f"α = {fmt_alpha(alpha)} ({nums}{method}): the thresholds disagree, so it is not established "
                    "for thresholds in general")
        else:
            kind = "no_evidence"
            verb = "answered" if stated else "learned"
            text = (f"no evidence at α = {fmt_alpha(alpha)} that upward and downward concepts are {verb} "
                    f"differently ({accs}; {nums}{method})")
    caveats = _caveats(summary, model, condition, cond, rec, alpha)
    sentence = f"{model}, {where}: {text}" + (f" ({'; '.join(caveats)})" if caveats else "") + "."
    return {"reading": kind, "floor": floor, "uses_examples": uses, "rule": rule, "constant": const,
            "sentence": sentence, "rule_sentence": rule_sentence(model, condition, rule, alpha)}


def has_readings(summary: dict) -> bool:
    """True for a summary whose models carry the facts a reading needs (a quantifier study's analysis)."""
    return any("floor" in c for m in Summary(summary).models.values() if isinstance(m, dict)
               for c in (m.get("conditions") or {}).values() if isinstance(c, dict))
