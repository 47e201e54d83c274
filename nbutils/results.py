"""The results in words: a paragraph built from ``summary.json``'s records, in APA style, for the analysis notebooks
and ``{run}/results.md``.

Every study's analysis puts its inferential results in ``summary["records"]`` (``nbutils.stats.record``); a study
names which of them are its headline and how to say its design. A record that cannot be estimated on the design
(``valid`` False) is said to be "not estimable" with its reason, never with numbers.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

ALPHA = 0.05


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt_p(p) -> str:
    """APA p: ``p < .001``, ``p = .032``, ``p > .999``; no leading zero."""
    if not _finite(p):
        return "p not available"
    if p < 0.001:
        return "p < .001"
    if p > 0.999:
        return "p > .999"
    return "p = " + f"{p:.3f}".lstrip("0")


def fmt_num(x, digits: int = 2, sig: int = 2) -> str:
    """A number for prose: fixed digits (scientific, with ``sig`` significant digits, only from 10,000 up), never
    ``-0.00``."""
    if not _finite(x):
        return "n/a"
    if abs(x) >= 1e4:
        return f"{x:.{sig}g}"
    out = f"{x:.{digits}f}"
    return out[1:] if out.startswith("-") and float(out) == 0 else out


def fmt_ci(lo, hi, digits: int = 2) -> str:
    """``95% CI [lo, hi]``, or nothing when the record has no interval."""
    return f"95% CI [{fmt_num(lo, digits)}, {fmt_num(hi, digits)}]" if _finite(lo) and _finite(hi) else ""


def reason(record: dict) -> str:
    """Why a record cannot be read: the part of its note after the description (which comes first)."""
    parts = [p.strip() for p in str(record.get("note") or "").split(";") if p.strip()]
    return parts[-1] if len(parts) > 1 else (parts[0] if parts else "not estimable on this design")


def phrase(record: dict, *, estimate_name: str = "estimate", odds_ratio: bool = False, digits: int = 2) -> str:
    """One record in APA style: ``OR = 1.85, 95% CI [1.10, 3.12], p = .021``; a record with ``valid`` False is
    ``not estimable (reason)``. ``odds_ratio`` shows a log odds ratio record on the odds-ratio scale."""
    if not record.get("valid", True) or not _finite(record.get("estimate")):
        return f"not estimable ({reason(record)})"
    est, lo, hi = record.get("estimate"), record.get("ci_low"), record.get("ci_high")
    name = estimate_name
    if odds_ratio:
        name = "OR"
        est = math.exp(est)
        lo, hi = (math.exp(lo), math.exp(hi)) if _finite(lo) and _finite(hi) else (None, None)
    bits = [f"{name} = {fmt_num(est, digits)}", fmt_ci(lo, hi, digits)]
    if _finite(record.get("p")):
        bits.append(fmt_p(record["p"]))
    return ", ".join(b for b in bits if b)


def meaning(record: dict, effect: str, alpha: float = ALPHA) -> str:
    """One plain sentence: is there evidence for ``effect`` at ``alpha``?"""
    if not record.get("valid", True) or not _finite(record.get("estimate")):
        return f"This design cannot say whether {effect}."
    p = record.get("p")
    if _finite(p) and p < alpha:
        return f"At α = {alpha:g} the data are evidence that {effect}."
    return f"At α = {alpha:g} the data give no evidence that {effect} (which is not evidence that it does not)."


def headline_records(summary: dict, select: Callable[[dict], bool] | None = None) -> list[dict]:
    """The records a study calls its headline (``headline`` True unless ``select`` says otherwise)."""
    recs = summary.get("records") or []
    return [r for r in recs if (select(r) if select else r.get("headline"))]


def paragraph(title: str, design: str, lines: Iterable[str], caveats: Iterable[str] = ()) -> str:
    """The Markdown the notebooks show and results.md holds: a heading, the design, one line per finding, caveats."""
    out = [f"**{title}**", "", design.strip(), ""]
    out += [f"- {line}" for line in lines]
    cav = [c for c in dict.fromkeys(caveats) if c]
    if cav:
        out += ["", "*Caveats:* " + " ".join(c if c.endswith(".") else c + "." for c in cav)]
    return "\n".join(out).strip() + "\n"


def generic_text(summary: dict, title: str, design: str, select: Callable[[dict], bool], effect: Callable[[dict], str],
                 *, odds_ratio: bool = False, estimate_name: str = "estimate") -> str:
    """A study's paragraph from its headline records: per record the test, its APA phrase and one sentence."""
    recs = headline_records(summary, select)
    lines = []
    for r in recs:
        who = " · ".join(str(r[k]) for k in ("model", "condition") if r.get(k))
        lines.append(f"{who + ': ' if who else ''}{r['test']} of {r['term']}: "
                     f"{phrase(r, odds_ratio=odds_ratio, estimate_name=estimate_name)}. {meaning(r, effect(r))}")
    if not lines:
        lines = ["No headline test could be computed on this run."]
    caveats = [reason(r) for r in recs if not r.get("valid", True)]
    return paragraph(title, design, lines, caveats)
