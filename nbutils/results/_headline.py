"""A run's headline, for scripts and for the first screen of its report: one entry per headline test (model and
condition), why the tests that are not estimable are not (said once, for the caveats), and what gap a design could
detect.

``summary.json``'s top-level ``headline`` (written by ``nbutils.analysis.write_analysis``) is ``entries(summary)``:
per headline record (``nbutils.results.headline_records``: a fallback stands in for the test it replaces) the test,
its estimate and 95% CI on the record's own scale (``scale`` says which: a log odds ratio, a proportion…), p, valid,
n, the verdict and the sentence of the results in words; and, where the study recorded them per model and condition,
the accuracies upward and downward and their gap. ``generic_text`` is the paragraph of a study whose headline
sentences need nothing of their own (negation, personas, custom prompts).
"""
from __future__ import annotations

import re
from typing import Callable, Iterable

from ._readings import detectable_gap, has_readings, reading
from ..records import Summary, as_record
from ._words import (ALPHA, METHODS, method_words, why_unreadable, claim_of, fmt_alpha, headline_records, note_lines,
                     paragraph, phrase, sentence, verdict)

DESCRIPTIVES = ("acc_up", "acc_down", "gap")  # what a study records per model and condition beside its headline test


def who(r: dict, default: str = "the model") -> str:
    """Whom a record is about: its model, or the two models a comparison sets side by side (``a vs b``)."""
    t = as_record(r)
    return t.model or " vs ".join(map(str, t.extra.get("models") or [])) or default


def _key(r: dict) -> tuple:
    t = as_record(r)
    return t.model, tuple(t.extra.get("models") or ()), t.condition, t.term, t.test


def entries(summary: dict, alpha: float = ALPHA) -> list[dict]:
    """The headline tests of ``summary`` for scripts: one dict per model (or pair of models compared), condition and
    term."""
    view = Summary(summary)
    records = view.records
    readings = has_readings(summary)
    out = []
    for r in headline_records(summary):
        h, t = claim_of(r), as_record(r)
        cond = (view.model_block(t.model).get("conditions") or {}).get(t.condition) or {}
        counts = (t.extra[k] for k in ("n", "n_prompts") if isinstance(t.extra.get(k), int))  # n_prompts: compared
        n = next(counts, cond.get("n"))
        models = t.extra.get("models")
        entry = {"model": t.model, **({"models": models} if models else {}), "condition": t.condition, "term": t.term,
                 "test": t.test, "method": method_words(r), "what": h.get("what"), "scale": h.get("scale"),
                 "symbol": h.get("symbol"), "estimate": t.estimate, "ci_low": t.ci_low, "ci_high": t.ci_high,
                 "p": t.p, "valid": not why_unreadable(r, h, alpha), "n": n,
                 "fallback_for": t.extra.get("fallback_for"), "verdict": verdict(r, alpha),
                 "sentence": sentence(r, alpha, records, reasons=False)}
        entry.update({k: cond[k] for k in DESCRIPTIVES if k in cond})
        if readings and t.term == "upward" and not models and t.model is not None:
            # what the gap means: the task floor, whether the answers use the examples, the rule followed instead
            rd = reading(summary, t.model, t.condition, alpha)
            entry.update({k: rd[k] for k in ("reading", "floor", "floor_state", "uses_examples", "twins", "evidence",
                                             "rule", "constant")}, sentence=rd["sentence"])
        out.append(entry)
    return out


_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _merged(reasons: list[str]) -> str:
    """Reasons that differ only in their numbers, said once with each varying number as a range (``3.4–5.2``)."""
    if len(set(reasons)) == 1:
        return reasons[0]
    values = [[float(x) for x in _NUMBER.findall(r)] for r in reasons]
    parts = _NUMBER.split(reasons[0])
    out = parts[0]
    for i, rest in enumerate(parts[1:]):
        col = [v[i] for v in values]
        lo, hi = min(col), max(col)
        digits = len(_NUMBER.findall(reasons[0])[i].partition(".")[2])
        out += (f"{lo:.{digits}f}" if lo == hi else f"{lo:.{digits}f}–{hi:.{digits}f}") + rest
    return out


_SHORT_REASONS = (  # a fit problem's reason (``nbutils.stats.fit_problems``) in a few words, for a caveat
    (re.compile(r"log odds ratio is [-\d.]+|separation of the groups"), "the data separate the groups"),
    (re.compile(r"orders of magnitude|do not locate"), "the 95% CI is too wide to locate the effect"),
    (re.compile(r"random effect's SD is [\d.]+ on the logit scale, implausibly large"), "a random effect's SD explodes"),
    (re.compile(r"at its boundary of 0"), "a random effect's SD is 0 (a singular fit)"),
    (re.compile(r"singular Hessian"), "a singular fit"),
    (re.compile(r"answered alike|no variation"), "no variation to compare: the answers are alike where the test looks"),
)
NO_VARIATION = _SHORT_REASONS[-1][1]  # a cause, not a failure of the test: whatever else the fit shows follows from it


def short_reason(why: str) -> str:
    """Why a test is not estimable in a few words: the kinds of problem its reason names (separation, a CI too wide
    to locate the effect…), or its first clause; the numbers stay in the tables and summary.json."""
    kinds = [words for pattern, words in _SHORT_REASONS if pattern.search(why)]
    if NO_VARIATION in kinds:  # said alone, as the sentence and the table say it
        return NO_VARIATION
    if kinds:
        return "; ".join(dict.fromkeys(kinds))
    first = re.split(r"[:;,(]", why, maxsplit=1)[0].strip()
    return " ".join(first.split()[:14])


def fit_caveats(records: Iterable[dict], select: Callable[[dict], bool] | None = None) -> list[str]:
    """Why the headline tests that cannot be read (and the ones a fallback stands in for) are not, once per test and
    kind of reason, in a few plain words (at most 40 a caveat; the full reason is the record's ``note``): ``The
    binomial GLMM is not estimable for m (2 tests): the data separate the groups.``"""
    records = list(records)
    typed = [as_record(r) for r in records]
    replaced = {(f.extra["fallback_for"], who(f), f.condition) for f in typed if f.extra.get("fallback_for")}
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for r, t in zip(records, typed):
        asked = (select(r) if select else t.headline) or (t.test, who(t), t.condition) in replaced
        why = why_unreadable(r, claim_of(r), ALPHA) if asked else None
        if why:
            key = (method_words(r).partition(", ")[0], short_reason(why))
            groups.setdefault(key, []).append((who(r), claim_of(r).get("what", "")))
    out = []
    for (name, why), found in groups.items():
        models: dict[str, int] = {}
        for model, _what in found:
            models[model] = models.get(model, 0) + 1
        if len(models) > 3:
            where = f"{len(models)} models ({sum(models.values())} tests)"
        else:
            where = " and ".join(f"{m}{f' ({n} tests)' if n > 1 else ''}" for m, n in models.items())
        out.append(f"The {name} is not estimable for {where}: {why} (details: summary.json)")
    return out


def power_sentence(n_a: int, n_b: int, what_a: str, what_b: str, alpha: float = ALPHA, *, clusters: str = "") -> str:
    """One sentence on what a design could detect, stated as the approximation it is."""
    gap = 100 * detectable_gap(n_a, n_b, alpha)
    optimistic = f", ignoring clustering by {clusters}, so optimistic" if clusters else ""
    return (f"Power, approximately: with {n_a} {what_a} and {n_b} {what_b} prompts per model and condition, a gap of "
            f"about {gap:.0f} points is found 4 times in 5 at α = {fmt_alpha(alpha)} (normal approximation"
            f"{optimistic}).")


def test_name(test: str) -> str:
    """A test's name in words, short (``binomial GLMM``), for a table cell."""
    return METHODS.get(test, str(test).replace("_", " "))


# what a gap means (``nbutils.results``), in a few words for the report's first table
READING_WORDS = {"learned": "learned from the examples", "mirror": "the examples' threshold read as \"more than\"",
                 "prior": "no use of the examples (shown by twins)", "undetermined": "a gap of undetermined source",
                 "below_floor": "below the task floor: no conclusion", "no_evidence": "no evidence of a gap",
                 "no_valid_test": "no valid test"}


def reading_words(kind, floor_state=None) -> str:
    """A reading in a few words; a model not shown above the floor whose CI reaches past its edge is said to be at
    the edge, as its sentence says (``_readings.floor_state``)."""
    if kind == "below_floor" and floor_state == "edge":
        return "at the edge of the task floor: no conclusion"
    return READING_WORDS.get(kind, "")


def table_rows(summary: dict, alpha: float = ALPHA) -> list[dict]:
    """The headline tests as the first table of a report: per model and what is tested, the accuracies upward and
    downward and their gap where the study records them, the estimate with its 95% CI (printed as the sentences print
    it), p and the test's name; a test that is not estimable says so."""
    by_key = {_key(e): e for e in entries(summary, alpha)}
    rows = []
    for r in headline_records(summary):
        e = by_key.get(_key(r), {})
        why = "" if e.get("valid") else short_reason(why_unreadable(r, claim_of(r), alpha) or str(r.get("note") or ""))
        numbers = phrase(r, alpha) if e.get("valid") else "no variation to compare" if why == NO_VARIATION \
            else "not estimable (see the caveats)"
        estimate, _, p = numbers.partition(", p ")
        if estimate.startswith("p "):  # a test without an estimate: its p only
            estimate, p = "", estimate[2:]
        t = as_record(r)
        name = method_words(r).split(",")[0]  # the procedure in words (a test named by a prefix too), never its id
        if t.extra.get("fallback_for"):
            name += f" (standing in for the {test_name(t.extra['fallback_for']).split(',')[0]})"
        pct = (lambda x: f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "")
        gap = e.get("gap")
        rows.append({"model": who(r, ""), "what": e.get("what") or "", "acc_up": pct(e.get("acc_up")),
                     "acc_down": pct(e.get("acc_down")),
                     "gap": f"{100 * gap:+.1f} pp" if isinstance(gap, (int, float)) else "",
                     "estimate": estimate.replace(", 95% CI", ","), "p": p.removeprefix("= "), "test": name,
                     "reading": reading_words(e.get("reading"), e.get("floor_state")),
                     "verdict": e.get("verdict"), "_order": (t.condition is None, not e.get("valid"))})
    rows.sort(key=lambda x: x.pop("_order"))  # stable: the tests per condition first, the ones not estimable last
    return rows


def generic_text(summary: dict, title: str, design: str, select: Callable[[dict], bool], *,
                 alpha: float = ALPHA, caveats: Iterable[str] = (), extra: Iterable[str] = ()) -> str:
    """A study's paragraph from its headline records (one sentence each, from the sentence engine), the study's own
    findings beside them (``extra``: what the headline means, what else was found, its power), the notes of
    ``summary.json`` in words, and the caveats of the records that are not estimable."""
    recs = headline_records(summary, select)
    for r in recs:  # the records the paragraph reports are the run's headline (summary.json, the report's table)
        r["headline"] = True
    view = Summary(summary)
    lines = [sentence(r, alpha, view.records, reasons=False) for r in recs]
    if not lines:
        lines = ["No headline test could be computed on this run."]
    lines += [*extra, *note_lines(summary, alpha)]
    return paragraph(title, design, lines, [*caveats, *fit_caveats(view.records, select)])
