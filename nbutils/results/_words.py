"""The results in words: one sentence engine that turns a ``summary.json`` record into an APA-style sentence, for the
analysis notebooks, ``{run}/results.md`` and the report.

A record (``nbutils.stats.record``) declares what its words need in its ``hypothesis`` (``nbutils.stats.claim``):
what the estimate is, its scale (log odds shown as an odds ratio, a proportion shown in percent against chance, a
difference in percentage points, a plain number), the null value, the sidedness of its test, and what a value above
or below the null means in words. The engine then

- says where the data point: a significant two-sided result below the null is said in the words for "below"
  ("downward concepts were learned better than upward ones: OR = 0.04, 95% CI [0.01, 0.18], p < .001"), never in
  the words of the hypothesis; a one-sided test whose estimate lies on the other side is never evidence;
- prints p so that the number and the verdict agree at α (more digits, or ``p < .05``, where three digits would
  round onto α), and refuses a p outside [0, 1];
- prints odds ratios with significant digits where two decimals would show 0.00, and a significant estimate with
  more digits where two would show the null value itself;
- says "not estimable (reason)" with no numbers for a record that is not ``valid``;
- renders a headline that stands in for a degenerate one (``fallback_for``: the test name of the invalid record)
  normally and says which test it replaces and why.
"""
from __future__ import annotations

import math
import re
from typing import Callable, Iterable

from ..stats import ALPHA  # noqa: F401 - the level a test is read at, for callers
from ._method_names import METHOD_PREFIXES, METHODS, SHORT_METHODS, SHORT_PREFIXES  # noqa: F401 - for callers
from ..records import Summary, as_record


def short_method(record: dict) -> str:
    """The record's procedure in at most six words (``GEE by threshold``), its sidedness where one-sided."""
    test = str(record.get("test", ""))
    side = claim_of(record).get("sided")
    sided = ", one-sided" if side in ("greater", "less") else ""
    for prefix, words in SHORT_PREFIXES.items():
        if test.startswith(prefix):
            return words + sided
    return SHORT_METHODS.get(test, " ".join(test.replace("_", " ").split()[:6])) + sided


def is_finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def plural(n, one: str, many: str | None = None) -> str:
    """``1 model``, ``3 models``, ``2 classes`` (``many`` where adding an s is wrong); ``? models`` when unknown."""
    word = one if n == 1 else (many or one + "s")
    return f"{n:,} {word}" if isinstance(n, int) and not isinstance(n, bool) else f"{n if n is not None else '?'} {word}"


def _p_ok(p) -> bool:
    """A p-value that is a probability: finite, in [0, 1], and not −0.0 (a sign a computation went wrong)."""
    return is_finite(p) and 0 <= p <= 1 and math.copysign(1.0, p) > 0


def fmt_p(p, alpha: float = ALPHA) -> str:
    """APA p (``p < .001``, ``p = .032``, ``p > .999``; no leading zero), printed so that the printed number is on
    the same side of ``alpha`` as p itself: ``p = .0496`` (not ``.050``) and ``p < .05`` where even six digits would
    round onto α. Missing p: ``p not available``; a p outside [0, 1] (or −0.0) raises ValueError."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "p not available"
    if not _p_ok(p):
        raise ValueError(f"p: must be a probability in [0, 1], got {p!r}")
    below = p < alpha
    if p < 0.001 and alpha > 0.001:
        return "p < .001"
    if p > 0.999 and alpha <= 0.999:
        return "p > .999"
    for digits in range(3, 7):
        shown = round(p, digits)
        if (shown < alpha) == below and not (shown == 0 and p > 0):
            return "p = " + f"{p:.{digits}f}".lstrip("0")
    return f"p < {fmt_alpha(alpha)}" if below else f"p ≥ {fmt_alpha(alpha)}"


def fmt_p_cell(p) -> str:
    """A p-value for a table cell: APA without the ``p =`` (``< .001``, ``.032``, ``> .999``); blank when missing;
    a value that is not a probability says so instead of passing for one."""
    if not is_finite(p):
        return ""
    try:
        return fmt_p(p)[2:].removeprefix("= ")
    except ValueError:
        return f"not a p ({p!r})"

def fmt_alpha(alpha: float) -> str:
    """α without the leading zero: ``.05``."""
    return f"{alpha:g}".lstrip("0") if alpha < 1 else f"{alpha:g}"


def fmt_num(x, digits: int = 2, sig: int = 2) -> str:
    """A number for prose: fixed digits (scientific, with ``sig`` significant digits, from 10,000 up), never
    ``-0.00``."""
    if not is_finite(x):
        return "n/a"
    if abs(x) >= 1e4:
        return f"{x:.{sig}g}"
    out = f"{x:.{digits}f}"
    return out[1:] if out.startswith("-") and float(out) == 0 else out


def fmt_ratio(x, digits: int = 2) -> str:
    """An odds ratio: two decimals, or two significant digits where two decimals would round to 0.00 (a ratio is
    never 0); scientific from 10,000 up."""
    if not is_finite(x):
        return "n/a"
    if 0 < abs(x) < 10 ** -digits:
        return f"{x:.2g}"
    return fmt_num(x, digits)


def fmt_ci(lo, hi, digits: int = 2, fmt: Callable | None = None, unit: str = "") -> str:
    """``95% CI [lo, hi]``, or nothing when the record has no interval."""
    f = fmt or (lambda v: fmt_num(v, digits))
    return f"95% CI [{f(lo)}{unit}, {f(hi)}{unit}]" if is_finite(lo) and is_finite(hi) else ""


def reason(record: dict) -> str:
    """Why a record cannot be read: the part of its note after the description (which comes first)."""
    parts = [p.strip() for p in str(record.get("note") or "").split(";") if p.strip()]
    return parts[-1] if len(parts) > 1 else (parts[0] if parts else "no reason recorded")


# ---------------------------------------------------------------- what a record declares

def claim_of(record: dict) -> dict:
    """The record's declared hypothesis (``nbutils.stats.claim``), or a neutral two-sided one for a record made
    without it: a plain number against 0."""
    h = record.get("hypothesis")
    if isinstance(h, dict):
        return h
    term = str(record.get("term") or "")
    what = f"the estimate for {term!r}" if term and term != "(none)" else "the estimate"
    return {"what": what, "symbol": "estimate", "scale": "number", "null": 0.0, "sided": "two-sided",
            "more": "the estimate is above 0", "less": "the estimate is below 0", "differ": "the estimate differs from 0"}


def on_scale(record: dict, h: dict):
    """(estimate, ci_low, ci_high, null) on the scale the reader sees (odds ratios, percent, points)."""
    est, lo, hi = (record.get(k) for k in ("estimate", "ci_low", "ci_high"))
    null = h.get("null", 0.0)
    scale = h.get("scale", "number")
    if scale == "log_odds_ratio":
        def ex(v):
            return (math.exp(v) if v < 709.78 else math.inf) if is_finite(v) else None
        return ex(est), ex(lo), ex(hi), math.exp(null)
    if scale in ("proportion", "points"):
        sc = (lambda v: 100 * v if is_finite(v) else None)
        return sc(est), sc(lo), sc(hi), 100 * null
    return est, lo, hi, null


def _formatter(scale: str):
    if scale == "log_odds_ratio":
        return fmt_ratio
    return fmt_num


def _fmt_distinct(x: float, null: float, fmt: Callable, digits: int) -> str:
    """``x`` with as many digits (up to 6) as it takes not to print as the null value when it is not the null."""
    d = digits
    while d < 6 and x != null and fmt(x, d) == fmt(null, d):
        d += 1
    if x != null and fmt(x, d) == fmt(null, d):  # closer to the null than six places: significant digits
        return next(f"{x:.{k}g}" for k in range(2, 18) if float(f"{x:.{k}g}") != null)
    return fmt(x, d)


def _ci_digits(lo: float, hi: float, null: float, fmt: Callable, digits: int) -> int:
    """The digits (up to 6) a significant result's interval needs so that no bound that is not the null prints as
    the null: ``[1.004, 1.82]``, never ``[1.00, 1.82]`` beside ``p < .05``."""
    d = digits
    while d < 6 and any(b != null and fmt(b, d) == fmt(null, d) for b in (lo, hi)):
        d += 1
    return d


def why_unreadable(record: dict, h: dict, alpha: float) -> str | None:
    """Why the record's numbers cannot be printed, or None."""
    if not record.get("valid", True):
        return reason(record)
    p = record.get("p")
    if p is not None and not (isinstance(p, float) and math.isnan(p)) and not _p_ok(p):
        return f"its p-value {p!r} is not a probability"
    if not is_finite(record.get("estimate")):
        if h.get("sided") == "none" and is_finite(p):
            return None  # a test without an estimate (Breslow–Day): its p is its result
        return "no estimate"
    est, lo, hi, _ = on_scale(record, h)
    if not is_finite(est) or est == 0 and h.get("scale") == "log_odds_ratio":
        return "the odds ratio is too large or too small to print"
    if (is_finite(record.get("ci_low")) and is_finite(record.get("ci_high"))
            and not record["ci_low"] <= record["estimate"] <= record["ci_high"]):
        return "its confidence interval does not contain its estimate"
    sided, null, e = h.get("sided", "two-sided"), h.get("null", 0.0), record["estimate"]
    if is_finite(p) and p < alpha and sided != "none" and (
            e == null or (sided == "greater" and e < null) or (sided == "less" and e > null)):
        # a significant p whose estimate sits on the null or on the side its test does not look at: the p and the
        # estimate come from different places, and no sentence can say both
        return f"its p-value is below α but its estimate is {'at' if e == null else 'on the other side of'} the null"
    return None


def phrase(record: dict, alpha: float = ALPHA, digits: int = 2) -> str:
    """A record's numbers in APA style, on its declared scale: ``OR = 1.85, 95% CI [1.10, 3.12], p = .021``,
    ``accuracy = 66.7%, 95% CI […], p = .002``; a record that cannot be read is ``not estimable (reason)``."""
    h = claim_of(record)
    why = why_unreadable(record, h, alpha)
    if why:
        return f"not estimable ({why})"
    scale = h.get("scale", "number")
    est, lo, hi, null = on_scale(record, h)
    if not is_finite(est):  # a test without an estimate: its p only
        return fmt_p(record.get("p"), alpha)
    fmt = _formatter(scale)
    if scale in ("proportion", "points"):
        digits = 1
    # where the words claim a side, the estimate never prints as the null value itself (OR = 1.00 beside "upward
    # concepts were learned better"); elsewhere the null is what a near-null estimate should look like
    claims_side = found(record, alpha)
    text = _fmt_distinct(est, null, fmt, digits) if claims_side else fmt(est, digits)
    unit = "%" if scale == "proportion" else (" points" if scale == "points" else "")
    ci_unit = "%" if scale == "proportion" else ""
    symbol = h.get("symbol", "estimate")
    if scale == "log_odds_ratio" and symbol == "OR":  # which odds ratio: conditional on a random effect, or marginal
        symbol = f"{odds_ratio_scale(record)} OR"
    bits = [f"{symbol} = {text}{unit}"]
    if is_finite(lo) and is_finite(hi):
        ci_digits = _ci_digits(lo, hi, null, fmt, digits) if claims_side else digits
        bits.append(fmt_ci(lo, hi, fmt=lambda v: fmt(v, ci_digits), unit=ci_unit))
    p = record.get("p")
    if is_finite(p):
        bits.append(fmt_p(p, alpha))
    return ", ".join(bits)


def odds_ratio_scale(record: dict) -> str:
    """``conditional`` for an odds ratio conditional on a random effect (a GLMM's), ``marginal`` otherwise (GEE,
    Firth, Mantel–Haenszel, sign-flip)."""
    return "conditional" if str(record.get("test", "")).startswith("glmm") else "marginal"


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def method_words(record: dict) -> str:
    test = str(record.get("test", ""))
    side = claim_of(record).get("sided")
    sided = f", {side}" if side in ("greater", "less") else ""
    for prefix, words in METHOD_PREFIXES.items():
        if test.startswith(prefix):
            return words + sided
    return METHODS.get(test, test.replace("_", " ")) + sided


def verdict(record: dict, alpha: float = ALPHA) -> str:
    """What the record says at ``alpha``, from its estimate's side of the null and its test's sidedness:
    ``"more"``, ``"less"`` (evidence, in that direction), ``"none"`` (no evidence), ``"descriptive"`` (no test),
    ``"invalid"`` (not estimable), ``"effect"`` (evidence, for a test without a direction)."""
    h = claim_of(record)
    if why_unreadable(record, h, alpha):
        return "invalid"
    p = record.get("p")
    if not is_finite(p):
        return "descriptive"
    est, null = record["estimate"], h.get("null", 0.0)
    sided = h.get("sided", "two-sided")
    if p >= alpha:
        return "none"
    if sided == "none":
        return "effect"
    return "more" if est > null else "less"  # why_unreadable has ruled out the null and the side a test ignores


EVIDENCE = ("more", "less", "effect")  # the verdicts that are a finding


def found(record: dict, alpha: float = ALPHA) -> bool:
    """Whether the record is a finding at ``alpha`` (the one rule the report and ``nbutils runs`` share): valid,
    significant, and for a one-sided test its estimate on the side the test looks at (``verdict`` in ``EVIDENCE``)."""
    return verdict(record, alpha) in EVIDENCE


def sentence(record: dict, alpha: float = ALPHA, records: Iterable[dict] = (), *, who: bool = True,
             reasons: bool = True) -> str:
    """One record in words: the verdict in the words of the side the data point to, then the numbers, then what
    was tested and how. ``records`` (the run's other records) let a fallback headline name why the test it stands
    in for is not estimable; ``who=False`` leaves out the model and condition (a line that names them already).
    ``reasons=False``: a record that is not estimable, and the test a fallback stands in for, say so in one clause
    and leave why to the caveats (``fit_caveats``), so that a headline sentence stays short enough to paste."""
    h = claim_of(record)
    names = " · ".join(str(record[k]).replace("_", " ") if k == "condition" else str(record[k])
                       for k in ("model", "condition") if record.get(k)) if who else ""
    lead = f"{names} — " if names else ""
    what = h.get("what", "the estimate")
    method = method_words(record) if reasons else short_method(record)
    fallback = record.get("fallback_for")
    if fallback and not reasons:
        method += f", standing in for the {SHORT_METHODS.get(fallback, fallback).split(',')[0]}"
    v = verdict(record, alpha)
    if v == "invalid":
        numbers = phrase(record, alpha) if reasons else "not estimable (why: see the caveats)"
        if re.search(r"no variation to compare|answered alike", str(why_unreadable(record, h, alpha) or "")):
            numbers = "no variation to compare"  # the truth, not a failure of the test
        out = f"{lead}{what} ({method}): {numbers}."
    else:
        numbers = phrase(record, alpha)
        if v in ("more", "less"):
            out = f"{lead}{h.get(v)}: {numbers} ({what}; {method})."
        elif v == "effect":
            out = f"{lead}{h.get('differ')}: {numbers} ({what}; {method})."
        elif v == "descriptive":
            out = f"{lead}{what}: {numbers} ({method}; no test)."
        else:
            out = f"{lead}no evidence at α = {fmt_alpha(alpha)} that {_none_words(record, h)}: {numbers} ({method})."
    if fallback and reasons:
        out += " " + fallback_words(record, fallback, records)
    return out


def _none_words(record: dict, h: dict) -> str:
    sided = h.get("sided", "two-sided")
    if sided == "greater":
        return h.get("more")
    if sided == "less":
        return h.get("less")
    return h.get("differ")


def fallback_words(record: dict, fallback_test: str, records: Iterable[dict] = ()) -> str:
    """``It stands in for the headline test (binomial GLMM, …), which is not estimable here (reason).``"""
    same = [r for r in records if r.get("test") == fallback_test and not r.get("valid", True)
            and all(r.get(k) == record.get(k) for k in ("model", "models", "condition") if record.get(k) is not None)]
    name = METHODS.get(fallback_test, fallback_test.replace("_", " "))
    why = f" ({reason(same[0])})" if same else ""
    return f"It stands in for the headline test ({name}), which is not estimable here{why}."


# ---------------------------------------------------------------- paragraphs

def headline_records(summary: dict, select: Callable[[dict], bool] | None = None) -> list[dict]:
    """The records a study calls its headline (``headline`` True unless ``select`` says otherwise), less an invalid
    one that a fallback among them stands in for (the fallback's sentence says why it is not estimable)."""
    recs = Summary(summary).records
    return replaced_dropped([r for r in recs if (select(r) if select else as_record(r).headline)])


def replaced_dropped(recs: list[dict]) -> list[dict]:
    """``recs`` without the invalid records a fallback among them names in ``fallback_for`` (same model, or pair of
    models compared, and condition)."""
    typed = [as_record(r) for r in recs]
    fallbacks = [f for f in typed if f.extra.get("fallback_for")]
    where = (lambda t: (t.model, t.extra.get("models"), t.condition))  # the same model (or pair) and condition
    return [r for r, t in zip(recs, typed) if t.valid or not any(
        f.extra["fallback_for"] == t.test and where(f) == where(t) for f in fallbacks)]


def _sentence_case(c: str) -> str:
    c = c.strip()
    return c if c.endswith((".", "!", "?")) else c + "."


def paragraph(title: str, design: str, lines: Iterable[str], caveats: Iterable[str] = ()) -> str:
    """The Markdown the notebooks show and results.md holds: a heading, the design, one line per finding, caveats
    (one list item each, so a caveat ending in a parenthesis cannot run into the next)."""
    out = [f"**{title}**", "", design.strip(), ""]
    out += [f"- {line}" for line in lines]
    cav = [_sentence_case(c) for c in dict.fromkeys(caveats) if c and c.strip()]
    if cav:
        out += ["", "*Caveats:*", ""] + [f"- {c}" for c in cav]
    return "\n".join(out).strip() + "\n"


_BIAS = re.compile(r"^(?P<model>.+?): (?:answers|chooses) (?P<answer>.+?) (?:to|for) every (?P<what>prompt|question)")


def note_lines(summary: dict, alpha: float = ALPHA) -> list[str]:
    """What ``summary.json`` knows beyond the tests, in words: a model that gives one answer to every prompt (pure
    response bias), a model that answered every pair identically in both conditions, and whether scoring in lower
    precision changed the answers (the ``precision_*`` records)."""
    view, lines = Summary(summary), []
    for n in view.notes:
        m = _BIAS.match(str(n))
        if m and ("response bias" in n or "letter bias" in n):
            lines.append(f"{m['model']} answers {m['answer']} to every {m['what']}: a pure response bias, so its "
                         f"accuracy is the share of {m['what']}s whose answer is {m['answer']}, not a sign that it "
                         "does the task.")
    for m, same in (view.design.get("identical_conditions") or {}).items():
        if same:
            lines.append(f"{m} answered every prompt pair identically in both conditions, so the paired comparisons "
                         "(McNemar, the change of the gap) have nothing to compare: this is what the data are, not an "
                         "error.")
    recs = view.records
    for r in recs:
        if as_record(r).test == "precision_agreement":
            lines.append(_precision_agreement(r))
        elif as_record(r).test == "precision_mcnemar_exact":
            lines.append(sentence(r, alpha, recs))
    return lines


def _precision_agreement(r: dict) -> str:
    t = as_record(r)
    term = t.term
    if not t.valid or not is_finite(t.estimate):
        return f"Precision, {term}: agreement not estimable ({reason(r)})."
    est, lo, hi = t.estimate, t.ci_low, t.ci_high
    n = t.extra.get("n")
    ci = fmt_ci(100 * lo, 100 * hi, 1, unit="%") if is_finite(lo) and is_finite(hi) else ""
    return (f"Precision, {term}: the same answer on {fmt_num(100 * est, 1)}% of "
            f"{plural(n, 'prompt') if isinstance(n, int) else 'the prompts'}" + (f" ({ci})" if ci else "") + ".")
