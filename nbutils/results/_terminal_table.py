"""The results as a compact table for a terminal, read from a run's ``summary.json``: one row per model × condition
of the headline tests, with upward and downward accuracy and their gap where the study has them, the estimate with
its 95% CI on the scale people read (an odds ratio, not its log) and the p. What the sweep and ``nbutils run`` print
first once an analysis is done, as lm-evaluation-harness ends with its table; the results in words follow it."""
from __future__ import annotations

import json
import math
from pathlib import Path

from .. import paths
from ..records import Summary
from ._words import fmt_num, fmt_p, fmt_ratio

CONDITION_NAMES = {"concept_learning": "concept learning", "explicit": "concept stated"}


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _pct(x) -> str:
    return f"{100 * x:.1f}%" if _finite(x) else "-"


def _estimate(entry: dict) -> str:
    """``1.50 [0.87, 2.59]`` (an odds ratio from its log), ``-0.11 [-0.25, 0.03]``; ``not estimable`` where the test
    is not valid: an invalid test shows no number."""
    if not entry.get("valid") or not _finite(entry.get("estimate")):
        return "not estimable"
    scale = entry.get("scale")
    if scale == "log_odds_ratio":
        est, lo, hi = (math.exp(entry[k]) if _finite(entry.get(k)) else None
                       for k in ("estimate", "ci_low", "ci_high"))
        f = fmt_ratio
    elif scale in ("proportion", "points"):  # proportions, as the words give them: percent, percentage points
        est, lo, hi = (entry.get(k) for k in ("estimate", "ci_low", "ci_high"))
        f = (lambda v: f"{100 * v:.1f}%") if scale == "proportion" else (lambda v: f"{100 * v:+.1f} pts")
    else:
        est, lo, hi, f = entry.get("estimate"), entry.get("ci_low"), entry.get("ci_high"), fmt_num
    ci = f" [{f(lo)}, {f(hi)}]" if _finite(lo) and _finite(hi) else ""
    return f"{f(est)}{ci}"


def _p(entry: dict) -> str:
    if not entry.get("valid") or not _finite(entry.get("p")):
        return "-"
    return fmt_p(entry["p"]).removeprefix("p ").removeprefix("= ")


def rows(summary: dict) -> tuple[list[str], list[list[str]]]:
    """The table's header and rows from a summary: the headline entries of one model and one condition (a study
    without conditions: each model's headline tests, named by their term); comparisons of two models are left to the
    sentences. Accuracy columns only where the study reports them."""
    entries = [h for h in Summary(summary).headline if h.get("model")]
    per_condition = [h for h in entries if h.get("condition")]
    entries = per_condition or entries
    if not entries:
        return [], []
    symbols = {h.get("symbol") or "estimate" for h in entries}
    mixed = len(symbols) > 1  # each cell then names its own estimate
    symbol = "estimate" if mixed else symbols.pop()
    accuracy = any(_finite(h.get("acc_up")) for h in entries)

    def label(h: dict) -> str:
        return CONDITION_NAMES.get(h["condition"], str(h["condition"]).replace("_", " ")) if per_condition else \
            str(h.get("term") or h.get("test"))

    labels = [(h["model"], label(h)) for h in entries]
    named = len(set(labels)) < len(labels)  # two tests of one model and condition: each named by what it tests
    header = ["model", "condition" if per_condition and not named else "test"]
    header += ["acc up", "acc down", "gap"] if accuracy else []
    header += [f"{symbol} [95% CI]", "p"]
    out = []
    for h, (model, what) in zip(entries, labels):
        if labels.count((model, what)) > 1:
            what = str(h.get("what") or h.get("test"))
        row = [str(model), what]
        if accuracy:
            gap = h.get("gap")
            row += [_pct(h.get("acc_up")), _pct(h.get("acc_down")),
                    f"{100 * gap:+.1f} pts" if _finite(gap) else "-"]
        est = _estimate(h)
        row += [f"{h.get('symbol') or ''} {est}".strip() if mixed and est != "not estimable" else est, _p(h)]
        out.append(row)
    return header, out


def table_lines(summary: dict) -> list[str]:
    """The table as aligned text lines (numbers right-aligned), or [] when the summary has no headline entry."""
    header, body = rows(summary)
    if not header:
        return []
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    left = {0, 1}

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return [line(header), "  ".join("-" * w for w in widths), *map(line, body)]


def run_table_lines(run_dir) -> list[str]:
    """The table of a run's ``summary.json`` ([] without one, or with one of another layout: the words still say
    what the analysis found)."""
    path = paths.summary_path(Path(run_dir))
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return table_lines(summary) if isinstance(summary, dict) else []


def opening(words: list[str], table: list[str]) -> list[str]:
    """What a terminal shows first once an analysis is done: the results' title, the table, then the findings in
    words (``words``: the title, then one line per finding and caveat, as ``report.headline`` reads them)."""
    if not words:
        return table
    return [words[0], *([""] + table + [""] if table else []), *words[1:]]
