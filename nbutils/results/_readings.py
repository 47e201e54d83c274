"""What a quantifier study's headline means, per model and condition, read from ``summary.json``: one of seven
readings, each with its one sentence. A reading claims only what a test shows.

- ``learned``: the gap is significant and the answers follow the labels' direction (twin prompts: label-flipped
  twins; without them, the score test of the examples' labels, each direction leaning toward its gold answer):
  "upward concepts were learned better than downward ones";
- ``mirror``: the gap is significant and the answers move with the examples' threshold but read every concept as
  "more than" it (threshold-shifted twins; without them, the score test leaning toward the upward gold and away
  from the downward one): the papers' signature;
- ``prior``: the gap is significant and every use of the examples is *excluded* beyond an equivalence margin (twin
  prompts only: a test that fails to reject never shows this);
- ``undetermined``: the gap is significant but the data cannot say where it comes from: the sentence says which test
  found no evidence, the power it had against a learner and a mirror learner, and the prompts that would decide;
- ``below_floor``: no significant gap, and accuracy is not above what a responder with no information gets, either
  at the floor (its CI excludes accuracies ``FLOOR_MARGIN`` above chance) or at its edge: no conclusion about a bias
  can be drawn;
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

from ..records import Summary, as_record, model_block
from ..stats import can_reject
from ._words import (ALPHA, SHORT_METHODS, is_finite, on_scale, claim_of, fmt_alpha, fmt_ci, fmt_num, fmt_p, fmt_ratio,
                     odds_ratio_scale, phrase, verdict)

READINGS = ("learned", "mirror", "prior", "undetermined", "below_floor", "no_evidence", "no_valid_test")
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
    return f"{100 * x:.1f}%" if is_finite(x) else "n/a"


def _points(x) -> str:
    return f"{fmt_num(100 * x, 1)} points" if is_finite(x) else "n/a"


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
    est, lo, hi, _ = on_scale(m, claim_of(m))  # on the odds-ratio scale
    if not is_finite(est):
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
           "p_chance": mt.get("p_down_above_chance") if mt else None,
           "down_best_mirror": sum(r.get("best_rule") == "mirror" for r in down), "n_down": len(down),
           "up_best_true": sum(r.get("best_rule") == "true_concept" for r in up), "n_up": len(up)}
    rules = [str(r.get("best_rule")) for r in best if r.get("best_rule")]
    if rules:
        top = max(dict.fromkeys(rules), key=rules.count)
        out.update(most_common_rule=top, most_common_count=rules.count(top), n_concepts=len(rules))
    # a mirror is claimed only beyond chance: coin-flip downward answers agree with the mirror half the time, more
    # than a model that is right on upward concepts agrees with theirs, and that is no sign of a mirror
    out["answers_as_mirror"] = bool(is_finite(out["p"]) and out["p"] < ALPHA and is_finite(out["mirror_down"])
                                    and is_finite(out["mirror_up"]) and out["mirror_down"] > out["mirror_up"]
                                    and is_finite(out["p_chance"]) and out["p_chance"] < ALPHA)
    return out


def rule_sentence(model, condition, rule: dict | None, alpha: float = ALPHA) -> str:
    """What was learned, in one sentence, from the rule analysis: whether downward concepts were answered as their
    mirror, and which rules fit the concepts best."""
    if not rule:
        return ""
    where = CONDITION_NAMES.get(condition, condition)
    bits = []
    if is_finite(rule.get("mirror_down")) and is_finite(rule.get("mirror_up")):
        if rule["answers_as_mirror"]:
            bits.append(f"downward concepts were answered as their upward mirror ({_pct(rule['mirror_down'])} vs "
                        f"{_pct(rule['mirror_up'])} mirror agreement, {fmt_p(rule.get('p'), alpha)}, exact stratified "
                        f"test; beyond chance, {fmt_p(rule.get('p_chance'), alpha)})")
        elif is_finite(rule.get("p_chance")) and rule["p_chance"] >= alpha and is_finite(rule.get("p")) \
                and rule["p"] < alpha and rule["mirror_down"] > rule["mirror_up"]:
            bits.append(f"downward concepts agree with their upward mirror more often than upward ones with theirs "
                        f"({_pct(rule['mirror_down'])} vs {_pct(rule['mirror_up'])}, {fmt_p(rule.get('p'), alpha)}), "
                        f"but no more than answers given independently of the mirror would "
                        f"({fmt_p(rule.get('p_chance'), alpha)}, Fisher's exact test): no evidence of a mirror")
        else:
            bits.append(f"no evidence that downward concepts were answered as their mirror more than upward ones "
                        f"({_pct(rule['mirror_down'])} vs {_pct(rule['mirror_up'])} mirror agreement, "
                        f"{fmt_p(rule.get('p'), alpha)}, exact stratified test)")
    if rule.get("n_down") and (rule["down_best_mirror"] or rule["up_best_true"]):
        bits.append(f"the mirror fits {rule['down_best_mirror']} of {rule['n_down']} downward concepts best and the "
                    f"true concept {rule['up_best_true']} of {rule['n_up']} upward ones")
    elif rule.get("most_common_rule"):
        bits.append(f"the rule that fits most concepts best is "
                    f"{RULE_WORDS.get(rule['most_common_rule'], repr(rule['most_common_rule']))} "
                    f"({rule['most_common_count']} of {rule['n_concepts']})")
    return f"{model}, {where}, what was learned: {'; '.join(bits)}." if bits else ""


def _floor_words(fl: dict, alpha: float) -> str:
    ci = fmt_ci(100 * fl["ci_low"], 100 * fl["ci_high"], 1, unit="%") if is_finite(fl.get("ci_low")) else ""
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
    if d is not None and is_finite(d.get("estimate")) and is_finite(gap) and d.get("valid", True):
        # disagreement: opposite non-zero signs, or one significant and the other not (a zero gap beside a small d′
        # gap is no disagreement)
        same_sign = not (d["estimate"] * gap < 0)
        v_acc = verdict(rec, alpha) if rec else "invalid"
        v_d = verdict(d, alpha)
        sig_differs = can_reject(d, alpha) and (v_acc in ("more", "less")) != (v_d in ("more", "less"))
        if not same_sign or sig_differs:
            out.append(f"the signal-detection gap disagrees: d′ gap = {fmt_num(d['estimate'])}, "
                       f"{fmt_p(d.get('p'), alpha)} (sign-flip test), response bias factored out")
    return out


FLOOR_MARGIN = 0.10  # "at the floor": the floor's 95% CI lies below chance + 10 points; "at its edge" otherwise


def floor_state(fl: dict | None, alpha: float = ALPHA) -> str | None:
    """``above`` (significantly above chance), ``below`` (not above, and the 95% CI excludes accuracies more than
    ``FLOOR_MARGIN`` above chance: the data place the model at the floor), ``edge`` (neither: the data cannot say
    whether it can do the task), or None where the floor was not tested."""
    if not fl or not (is_finite(fl.get("p")) or isinstance(fl.get("above"), bool)):
        return None
    above = fl["above"] if isinstance(fl.get("above"), bool) else fl["p"] < alpha  # the analysis's own call first
    if above:
        return "above"
    hi, chance = fl.get("ci_high"), fl.get("chance")
    return "below" if is_finite(hi) and is_finite(chance) and hi < chance + FLOOR_MARGIN else "edge"


def _floor_phrase(state: str) -> str:
    return "below the task floor" if state == "below" else "at the edge of the task floor"


def _net(r: dict | None, alpha: float) -> str:
    """``net +25.0 points of 60 pairs follow, 95% CI [+12.1, +37.9], p < .001``: one twin component in words."""
    if not r or not is_finite(r.get("estimate")):
        return "n/a"
    ci = fmt_ci(100 * r["ci_low"], 100 * r["ci_high"], 1) if is_finite(r.get("ci_low")) else ""
    return (f"net {100 * r['estimate']:+.1f} points of {r['n']} pairs{', ' + ci if ci else ''}, "
            f"{fmt_p(r.get('p'), alpha)}")


def _equivalent(r: dict | None, margin: float) -> bool:
    """The 90% CI of a twin component lies within ± ``margin``: a use of that size or more is excluded (TOST)."""
    return bool(r and is_finite(r.get("ci90_low")) and is_finite(r.get("ci90_high"))
                and r["ci90_low"] > -margin and r["ci90_high"] < margin)


def _prior_part(tw: dict, alpha: float) -> str:
    """``; 25.3 points of the gap (95% CI …) ride on answers that did not move with the threshold``: the part of the gap
    a prior on the query carries, where its test finds one."""
    pr = tw.get("prior") or {}
    if not (is_finite(pr.get("estimate")) and is_finite(pr.get("p")) and pr["p"] < alpha):
        return ""
    ci = fmt_ci(100 * pr["ci_low"], 100 * pr["ci_high"], 1) if is_finite(pr.get("ci_low")) else ""
    return (f"; {100 * pr['estimate']:+.1f} points of the gap ({ci + ', ' if ci else ''}{fmt_p(pr['p'], alpha)}) ride "
            "on answers that did not move with the examples' threshold: a prior on the query")


def twin_evidence(tw: dict, alpha: float = ALPHA) -> dict:
    """What the twin prompts say of where the answers come from: ``kind`` (``learned``: they follow the labels'
    direction; ``mirror``: they move with the examples' threshold read as "more than" but not with the labels;
    ``prior``: every use of the examples is excluded beyond the equivalence margin; ``undetermined``: none of these
    shown) and ``text``, the clause that says it with its tests."""
    labels, thr = tw.get("labels"), tw.get("threshold") or {}
    up, down, both = thr.get("upward"), thr.get("downward"), thr.get("both")
    power = tw.get("power") or {}
    margin = power.get("margin", 0.15)
    sig = (lambda r, key="p": bool(r and is_finite(r.get(key)) and r[key] < alpha))
    uses_labels = sig(labels) and labels["estimate"] > 0
    upward_reading = bool(both and sig(both, "upward_reading_p") and both.get("upward_reading", 0) > 0)
    lab = f"label-flipped twins: {_net(labels, alpha)}" if labels else ""
    prior = _prior_part(tw, alpha)
    if uses_labels:
        return {"kind": "learned", "text": f"the answers follow the labels' direction ({lab}, exact McNemar test)"
                                           + prior}
    if upward_reading:
        return {"kind": "mirror",
                "text": ("the answers move with the examples' threshold but read every concept as \"more than\" it "
                         f"(threshold-shifted twins, net {100 * both['upward_reading']:+.1f} points of {both['n']} "
                         f"pairs move that way, one-sided exact McNemar {fmt_p(both['upward_reading_p'], alpha)}; "
                         f"upward {_net(up, alpha)}, downward {_net(down, alpha)}), with no evidence of following "
                         f"the labels' direction ({lab})" + prior)}
    comps = [labels, up, down]
    if all(_equivalent(r, margin) for r in comps) and labels and up and down:
        return {"kind": "prior",
                "text": (f"every use of the examples is excluded beyond ±{100 * margin:.0f} points (90% CIs of the "
                         f"label-flipped twins, {_net(labels, alpha)}, and of the threshold-shifted twins, upward "
                         f"{_net(up, alpha)}, downward {_net(down, alpha)}): the answers do not use the examples")}
    nl, nt, need = power.get("n_label_pairs"), power.get("n_threshold_pairs"), power.get("prompts_needed")
    pw = (f"; with {nl} label-flipped and {nt} threshold-shifted pairs the twin tests had "
          f"{100 * power.get('learner', 0):.0f}% power against a learner and {100 * power.get('mirror', 0):.0f}% "
          f"against a mirror learner right {100 * power.get('reference_accuracy', 0.65):.0f}% of the time"
          + (f"; {need} concept-learning prompts with twins give 80% against both" if isinstance(need, int) else "")
          ) if isinstance(nl, int) else ""
    if sig(both):
        what = ("the answers move with the examples' threshold, but neither as the concept's own direction shown by "
                f"the labels ({lab}) nor as the mirror")
    else:
        what = (f"no evidence that the answers follow the labels' direction ({lab}) or the examples' threshold "
                f"(threshold-shifted twins, {fmt_p(both.get('p') if both else None, alpha)}), and neither use is "
                f"excluded")
    return {"kind": "undetermined", "text": what + prior + pw}


def score_evidence(uses: dict | None, stated: bool, design: dict | None, alpha: float = ALPHA) -> dict:
    """What the score test of the examples' (or the statement's) labels says without twin prompts: ``learned`` where
    the answers lean toward every direction's gold answer beyond the query, ``mirror`` where they lean toward the
    upward gold and away from the downward one, else ``undetermined`` (a test that cannot reject never shows that
    the answers ignore the examples). ``design``: the power twin prompts would have at this size (the analysis's
    ``twin_design`` block)."""
    what = "the stated concept" if stated else "the examples"
    if uses is None or uses.get("uses") is None:
        why = (uses or {}).get("note") or "it was not computed"
        return {"kind": "undetermined", "text": f"the examples test could not run ({why})"}
    p = fmt_p(uses.get("p"), alpha)
    if uses["uses"]:
        su, sd = uses.get("score_upward"), uses.get("score_downward")
        if not stated and is_finite(su) and is_finite(sd) and su > 0 > sd:
            return {"kind": "mirror", "text": f"the answers use {what} beyond the query (score test, {p}), toward the "
                                              "gold answer for upward concepts and away from it for downward ones: "
                                              "the mirror's pattern"}
        return {"kind": "learned", "text": f"the answers use {what} beyond the query (score test, {p})"}
    text = f"the score test finds no evidence that the answers use {what} beyond the query ({p}), which does not " \
           "show that they ignore it"
    if not stated and design and is_finite(design.get("learner")) and is_finite(design.get("mirror")):
        need = design.get("prompts_needed")
        text += (f"; twin prompts (twins: [label_flip, threshold_shift]) would tell a learner, a mirror and a prior "
                 f"apart: on these prompts ({design.get('n_label_pairs')} label-flipped and "
                 f"{design.get('n_threshold_pairs')} threshold-shifted pairs) they would have "
                 f"{100 * design['learner']:.0f}% power against a learner and {100 * design['mirror']:.0f}% against a "
                 f"mirror learner right {100 * design.get('reference_accuracy', 0.65):.0f}% of the time"
                 + (f"; {need} concept-learning prompts give 80% against both" if isinstance(need, int) else ""))
    return {"kind": "undetermined", "text": text}


def _gap_shown(summary: dict, block: dict, cond: dict, rec: dict, v: str, stated: bool, accs: str, method: str,
               alpha: float) -> tuple[str, str, dict]:
    """A significant gap: which direction, and what its evidence says about where it comes from (the twins' or the
    scores' evidence: learned, the mirror, a prior, or undetermined)."""
    better, worse = ("upward", "downward") if v == "more" else ("downward", "upward")
    nums = phrase(rec, alpha) + method + _marginal_beside(summary, rec, alpha)
    tw = cond.get("twins")
    if tw and (tw.get("labels") or tw.get("threshold")):
        evidence = twin_evidence(tw, alpha)
    else:
        evidence = score_evidence(cond.get("uses_examples"), stated, cond.get("twin_design"), alpha)
    kind = evidence["kind"]
    short = f"{_pct(cond.get('acc_up'))} vs {_pct(cond.get('acc_down'))}"
    if kind == "learned":
        verb = "answered" if stated else "learned"
        text = f"{better} concepts were {verb} better than {worse} ones ({accs}; {nums}): {evidence['text']}"
    elif kind == "mirror":
        text = (f"{better} concepts were answered right more often ({short}; {nums}), and the answers show "
                f"the mirror: {evidence['text']}")
    elif kind == "prior":
        text = (f"{better} concepts were answered right more often ({short}; {nums}), from a prior on the query: "
                f"{evidence['text']}")
    else:
        text = (f"{better} concepts were answered right more often ({short}; {nums}), but where the gap comes "
                f"from is undetermined: {evidence['text']}")
    overall = (block.get("overall") or {}).get("floor")
    if kind == "learned" and floor_state(overall, alpha) in ("below", "edge"):
        text += (f"; over both directions its accuracy is {'at chance' if floor_state(overall, alpha) == 'below' else 'not shown above chance'} "
                 f"({_floor_words(overall, alpha)})")
    return kind, text, evidence


def _gap_not_shown(block: dict, cond: dict, stated: bool, accs: str, method: str, rec: dict,
                   alpha: float) -> tuple[str, str]:
    """A gap that is not significant: at or below the task floor (no conclusion about a bias), a large gap the
    thresholds disagree on, or no evidence of a gap."""
    floor = cond.get("floor")
    state = floor_state(floor, alpha)
    nums = phrase(rec, alpha)
    n = cond.get("n")
    big = is_finite(cond.get("gap")) and isinstance(n, int) and n >= 4 and \
        abs(cond["gap"]) >= detectable_gap(n // 2, n // 2, alpha)
    if state in ("below", "edge") and not big:
        kind = "below_floor"
        also = ""
        other = ((block.get("conditions") or {}).get("explicit") or {}).get("floor")
        if not stated and other and floor_state(other, alpha) in ("below", "edge"):
            also = f" (with the concept stated: {_pct(other.get('accuracy'))})"
        text = (f"{_floor_phrase(state)}, {_floor_words(floor, alpha)}{also}, so no conclusion about a bias "
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
    return kind, text


def reading(summary: dict, model, condition, alpha: float = ALPHA) -> dict:
    """The reading of ``model``'s gap in ``condition`` with its facts (floor, uses_examples, twins, rule, constant)
    and its sentence."""
    block = model_block(summary, model)
    cond = (block.get("conditions") or {}).get(condition) or {}
    rec = headline_record(summary, model, condition)
    floor, uses, const = cond.get("floor"), cond.get("uses_examples"), cond.get("constant")
    tw = cond.get("twins")
    rule = rule_block(summary, model, condition)
    v = verdict(rec, alpha) if rec is not None else "invalid"
    where = CONDITION_NAMES.get(condition, condition)
    stated = condition == "explicit"
    state = floor_state(floor, alpha)
    accs = f"{_pct(cond.get('acc_up'))} upward vs {_pct(cond.get('acc_down'))} downward correct"
    method = f", {SHORT_METHODS.get(rec.get('test'), rec.get('test'))}" if rec is not None else ""
    if rec is not None and rec.get("fallback_for"):
        method += f" standing in for the {SHORT_METHODS.get(rec['fallback_for'], rec['fallback_for']).split(',')[0]}"
    evidence = None
    if v == "invalid":
        kind = "no_valid_test"
        counts = _per_threshold(cond)
        text = (f"no valid test of the gap is available for this design (see the caveats); the data show {accs} "
                f"(gap {_points(cond.get('gap'))})" + (f"; correct per threshold, upward vs downward: {counts}"
                                                        if counts else ""))
    elif v in ("more", "less"):
        kind, text, evidence = _gap_shown(summary, block, cond, rec, v, stated, accs, method, alpha)
    else:
        kind, text = _gap_not_shown(block, cond, stated, accs, method, rec, alpha)
    copy = (tw or {}).get("copy")
    if copy and is_finite(copy.get("p")) and copy["p"] >= alpha:
        text += (f"; no evidence that it copies the label it was just shown ({_pct(copy.get('estimate'))} right on "
                 f"{copy.get('n')} copy probes, {fmt_p(copy['p'], alpha)}): without that, no use of the examples in "
                 "any sense is shown")
    caveats = _caveats(summary, model, condition, cond, rec, alpha)
    sentence = f"{model}, {where}: {text}" + (f" ({'; '.join(caveats)})" if caveats else "") + "."
    return {"reading": kind, "floor": floor, "floor_state": state, "uses_examples": uses, "twins": tw,
            "evidence": evidence, "rule": rule, "constant": const,
            "sentence": sentence, "rule_sentence": rule_sentence(model, condition, rule, alpha)}


def has_readings(summary: dict) -> bool:
    """True for a summary whose models carry the facts a reading needs (a quantifier study's analysis)."""
    return any("floor" in c for m in Summary(summary).models.values() if isinstance(m, dict)
               for c in (m.get("conditions") or {}).values() if isinstance(c, dict))
