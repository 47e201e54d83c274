"""Tables for reading in a notebook: the key columns first, rounded, p-values in APA style, nothing cut off.

``view(tables, "mixed_model", key=[...])`` shows a compact view of one analysis table; the full table, every column
at full precision, stays in ``{run}/tables/<name>.csv`` and the caption says so. The view is a pandas ``Styler``:
pandas is already here, its HTML renders the same in JupyterLab, Colab and the nbconvert report, and it is never
truncated with "…" the way a wide ``DataFrame`` is. (great-tables renders finer tables, but would be one more
dependency for the same columns.)

What the view does to the numbers, and only to the view:
- p-values (columns named ``p``, ``p_*`` or ``*_p``) read ``< .001``, ``.032``, ``> .999``;
- other numbers are rounded to ``digits`` places, never shown as ``-0.000``, and in scientific notation only from
  10,000 up, so one huge value does not turn a whole column into exponents;
- proportions (accuracy, shares, rates, agreement, chance, and the interval of a table whose estimate is one) read
  in percent, ``66.7%``, and differences of proportions (gap, diff, Δ accuracy) in percentage points, ``-12.3 pp``,
  the unit the results in words use; the CSV tables keep proportions;
- odds ratios never read 0.000: significant digits where the fixed places would round them to zero;
- missing values are blank (a combination that does not exist is not a number);
- a record that cannot be estimated on the design (``valid`` False) shows "not estimable (reason)" in place of its
  numbers;
- an empty table is a sentence saying why it is empty, not an empty frame.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import pandas as pd

from .paths import resolve, summary_path
from .results import fmt_num, fmt_p_cell, fmt_ratio, is_finite, reason

_P = re.compile(r"^(p|p_.*|.*_p|pvalue)$")
# the numbers of an inferential record: blank when it is not estimable
_COUNT = re.compile(r"^(n|k|n_.*|.*_count|count)$")  # counts, stored as floats when a cell is missing
_NUMBERS = ("estimate", "cell", "se", "ci_low", "ci_high", "statistic", "df", "p", "odds_ratio", "or_ci_low", "or_ci_high",
            "ci", "t", "stat", "se_delta")


# proportions, shown in percent; differences of proportions, shown in percentage points
_PROPORTION = re.compile(r"^(accuracy|acc_.*|.*_accuracy|accuracy_.*|share_.*|.*_share|yes_rate|tpr|tnr|chance|"
                         r"agreement|.*_agreement|mirror_agreement_.*)$")
_POINTS = re.compile(r"^(gap|diff|delta_acc|acc_diff|accuracy_change)$")
_OWN_CI = re.compile(r"^(?P<base>.+)_ci_(low|high)$")
_RATIO = re.compile(r"^(odds_ratio|or_mh|(or|or_mh|odds_ratio)_ci_(low|high))$")  # odds ratios: never 0.000


def unit_of(column: str, columns) -> str:
    """``%`` for a proportion column, ``pp`` for a difference of proportions, ``""`` otherwise; a bare ``ci_low`` /
    ``ci_high`` takes the unit of the table's estimate (its accuracy, agreement or difference) when it has one."""
    c = str(column)
    own = _OWN_CI.match(c)
    if own:
        c = own["base"]
    elif c in ("ci_low", "ci_high"):
        cols = [str(x) for x in columns]
        if "estimate" in cols or "odds_ratio" in cols or any(x.startswith("dprime") or x == "dif" for x in cols):
            return ""
        points = [x for x in cols if _POINTS.match(x)]
        if points:
            return "pp"
        return "%" if any(x in ("accuracy", "agreement") for x in cols) else ""
    if _POINTS.match(c):
        return "pp"
    return "%" if _PROPORTION.match(c) else ""


def _fmt_unit(x, unit: str) -> str:
    if not is_finite(x):
        return fmt_cell(x)
    return f"{fmt_num(100 * x, 1)}%" if unit == "%" else f"{fmt_num(100 * x, 1)} pp"


def fmt_cell(x, digits: int = 3) -> str:
    """A number for a table cell: ``digits`` places, scientific only from 10,000 up, never ``-0.000``; blank when
    missing."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if not is_finite(x):
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x)
    if isinstance(x, int) or digits == 0:
        return f"{x:.0f}"
    return fmt_num(x, digits, sig=3)


def _whole(s: pd.Series) -> bool:
    v = pd.to_numeric(s, errors="coerce").dropna()
    return bool(len(v)) and bool((v == v.round()).all())


def is_p_column(name: str) -> bool:
    return bool(_P.match(str(name)))


def compact(df: pd.DataFrame, key: list[str] | None = None, digits: int = 3) -> pd.DataFrame:
    """The view as text: ``key`` columns first (only those, when given), numbers formatted as the module says, and
    rows that cannot be estimated saying so instead of showing numbers."""
    if not isinstance(df.index, pd.RangeIndex):  # a table indexed by its labels: they are columns of the view
        df = df.reset_index()
    cols = [c for c in (key or list(df.columns)) if c in df.columns]
    out = pd.DataFrame(index=df.index)
    for c in cols:
        s = df[c]
        unit = unit_of(c, df.columns) if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s) else ""
        if is_p_column(c):
            out[c] = [fmt_p_cell(v) for v in s]
        elif unit:
            out[c] = [_fmt_unit(v.item() if hasattr(v, "item") else v, unit) for v in s]
        elif _RATIO.match(str(c)) and pd.api.types.is_numeric_dtype(s):
            out[c] = [fmt_ratio(v, digits) if is_finite(v) else fmt_cell(v) for v in (x.item() if hasattr(x, "item") else x
                                                                                    for x in s)]
        elif pd.api.types.is_integer_dtype(s) or (_COUNT.match(str(c)) and _whole(s)):
            out[c] = [fmt_cell(v, 0) for v in s]
        else:
            out[c] = [fmt_cell(v.item() if hasattr(v, "item") else v, digits) for v in s]
    if "valid" in df.columns:
        bad = ~df["valid"].fillna(False).astype(bool)
        numbers = [c for c in out.columns if c in _NUMBERS or is_p_column(c)]
        numbers.sort(key=lambda c: _NUMBERS.index(c) if c in _NUMBERS else len(_NUMBERS))
        if bad.any() and numbers:
            for i in df.index[bad]:
                out.loc[i, numbers] = ""
                out.loc[i, numbers[0]] = f"not estimable ({reason(df.loc[i].to_dict())})"
    return out.reset_index(drop=True)


def view(tables: dict, name: str, key: list[str] | None = None, *, empty: str | None = None, query: str | None = None,
         digits: int = 3, head: int | None = None, source: str | None = None):
    """A compact, styled view of ``tables[name]`` for a notebook, with a caption naming the full table's file.

    ``key``: the columns to show, in order (default: all). ``empty``: the sentence shown when the table is missing or
    has no rows (say why: "needs both conditions", …). ``query``: a pandas query selecting the rows to show.
    ``head``: show at most this many rows (the caption says how many there are). ``source``: where the full table is
    (default ``tables/<name>.csv``)."""
    from IPython.display import Markdown

    df = tables.get(name)
    if df is not None and query:
        df = df.query(query)
    if df is None or len(df) == 0:  # marked, so that a report leaves out a section with nothing else to show
        return Markdown(f"*{name}: {empty or 'no rows on this run'}*", metadata={"nbutils": "empty"})
    if not isinstance(df.index, pd.RangeIndex):  # its labels are columns of the view and of the column count
        df = df.reset_index()
    n = len(df)
    shown = compact(df if head is None else df.head(head), key, digits)
    hidden = len(df.columns) - len(shown.columns)
    caption = f"{name}: {n} row{'s' if n != 1 else ''}"
    if head is not None and n > head:
        caption += f", the first {head} shown"
    if hidden or (head is not None and n > head):
        caption += f"; the full table ({len(df.columns)} columns, full precision) is {source or f'tables/{name}.csv'}"
    numeric = [c for c in shown.columns
               if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]
    return (shown.style.format(escape="html")  # a value from the data (a group named "<b>…") reads as text
            .hide(axis="index").set_caption(caption)
            .set_table_styles([{"selector": "td, th", "props": "padding: 2px 8px;"},
                               {"selector": "th", "props": "white-space: nowrap;"},
                               {"selector": "caption", "props": "caption-side: bottom; text-align: left; "
                                                               "font-size: 0.85em; color: #555;"}])
            .set_properties(subset=numeric, **{"text-align": "right"})
            # long text (a reason, a note) wraps; names and numbers stay on one line
            .map(lambda x: "min-width: 16em; max-width: 30em; text-align: left;" if len(str(x)) > 40
                 else "white-space: nowrap;"))


def view_records(records: list[dict], key: list[str], query: str | None = None):
    """``view`` of ``summary.json``'s records (every inferential result): one row per test, the full records being
    in ``summary.json``."""
    return view({"records": pd.DataFrame(records)}, "records", key, query=query, source=summary_path(".").name)


def files_line(files, run_dir) -> str:
    """What an analysis wrote, in one line: ``28 files written in …/outputs/demo: results.md, summary.json, 8 in
    figures/, 18 in tables/``."""
    run = resolve(run_dir)
    rel = sorted(str(Path(f).relative_to(run)) if Path(f).is_relative_to(run) else str(f) for f in files)
    folders = Counter(r.split("/")[0] for r in rel if "/" in r)
    parts = [r for r in rel if "/" not in r] + [f"{n} in {d}/" for d, n in folders.items()]
    return f"{len(rel)} files written in {run}: {', '.join(parts)}"


# fit diagnostics (lme4's singular fits, a singular Hessian, separation, convergence): the results' caveats say what
# they mean for the findings, in words; summary.json keeps each one in ``_notes``
FIT_DIAGNOSTIC = re.compile(r"singular (fit|Hessian)|separation|converge", re.I)


def notes_line(notes) -> str:
    """An analysis's notes for its notebook, without the model-fit diagnostics (one line counts them and says where
    they are explained: the caveats of the results in words, and ``_notes`` in summary.json)."""
    notes = list(notes)
    fits = [n for n in notes if FIT_DIAGNOSTIC.search(n)]
    kept = [n for n in notes if n not in fits]
    if fits:
        kept.append(f"{len(fits)} model-fit diagnostic{'s' if len(fits) > 1 else ''}: what they mean is in the "
                    "caveats of the results in words; each is in summary.json (_notes)")
    return "\n".join(kept) or "no warnings"
