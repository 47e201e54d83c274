"""A table as LaTeX for a paper (``tables/<name>.tex``): a fragment to ``\\input`` that compiles with pdflatex and the
packages every TeX installation has (booktabs, longtable, array; Debian's ``texlive-latex-base`` and
``texlive-latex-recommended``).

Valid rows come first: a row whose ``valid`` is False follows them with its estimates left out, and the caption says
so; p-values read as the report writes them (``< .001``, ``.032``); a test is named in words. Every text is escaped (``_``, ``%``, ``&``, ``#``, ``$``, braces, backslash, ``~``, ``^``; the symbols the tables use,
such as − × α ′ ≥, as their LaTeX); columns get human labels (``p_holm`` → ``p (holm)``); a table of more than
``MAX_COLUMNS`` columns is split into parts that each repeat its naming columns, so that each fits the width of a page;
a long one (more than ``LONG_ROWS`` rows) is a ``longtable`` that breaks across pages. The widest text (a note) wraps
in a column of fixed width until the table fits. A row index (a table written with ``index``) becomes columns. The CSV
beside it keeps every column at full precision.
"""
from __future__ import annotations

import math
import re
import unicodedata

import pandas as pd

MAX_COLUMNS = 8  # columns per part, the repeated naming columns included
LONG_ROWS = 40  # a table of more rows than this breaks across pages (longtable)
PAGE_LINES = 56  # and so does one whose wrapped rows take more lines of small type than a page holds
BUDGET = 92  # characters of footnote-size type across a page's text width (6.5 in)
PACKAGES = ("booktabs", "longtable", "array")  # what a document that \input-s the tables needs

_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_\allowbreak{}",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
            ">": r"\textgreater{}", "|": r"\textbar{}"}
_SYMBOLS = {"−": "$-$", "×": r"$\times$", "α": r"$\alpha$", "β": r"$\beta$", "χ": r"$\chi$", "Δ": r"$\Delta$",
            "′": "$'$", "≥": r"$\geq$", "≤": r"$\leq$", "±": r"$\pm$", "→": r"$\to$", "–": "--", "—": "---",
            "…": r"\dots{}", "✓": "yes", "✗": "no", "·": r"$\cdot$", "≈": r"$\approx$", "²": r"$^2$", "’": "'",
            "‘": "`", "“": "``", "”": "''", "°": r"\textdegree{}", "μ": r"$\mu$", "σ": r"$\sigma$",
            "¹": "$^1$", "³": "$^3$", "¼": r"\textonequarter{}", "½": r"\textonehalf{}", "¾": r"\textthreequarters{}"}
LABELS = {"n": "$n$", "k": "$k$", "p": "$p$", "se": "SE", "ci_low": "95\\% CI low", "ci_high": "95\\% CI high",
          "acc_up": "Acc.\\ up", "acc_down": "Acc.\\ down", "or_mh": "OR (MH)", "odds_ratio": "OR",
          "or_ci_low": "OR CI low", "or_ci_high": "OR CI high", "df": "df", "log_or_mean": "Mean log OR",
          "gap_ci_low": "Gap CI low (bootstrap)", "gap_ci_high": "Gap CI high (bootstrap)", "d_prime": "$d'$",
          "yes_rate": "Yes rate", "tpr": "Hit rate", "tnr": "CR rate", "n_thresholds": "Thresholds", "ppl": "PPL",
          "log_ppl": "log PPL", "dif": "DIF"}
_P = re.compile(r"^p_(?P<what>.+)$|^(?P<what2>.+)_p$")
P_FORMAT = "p"  # a column's format that writes p-values as the report does
_COUNTS = re.compile(r"^(n|k|df|n_.*|.*_count)$")  # numbers an invalid row keeps (the estimates go)
_CI = re.compile(r"^(?P<base>.+)_ci_(?P<side>low|high)$")


def escape(text) -> str:
    """Text as LaTeX that prints it: special characters escaped, known symbols as their LaTeX, a letter outside
    Latin-1 without its accents where that keeps its meaning (``_plain``), any other character named by its code point
    (visible, never a compile error; ``labels.latex_unset`` says which a label has)."""
    out = []
    for ch in str(text):
        if ch in _SPECIAL:
            out.append(_SPECIAL[ch])
        elif ch in _SYMBOLS:
            out.append(_SYMBOLS[ch])
        elif ord(ch) < 128 or (0xC0 <= ord(ch) <= 0xFF and ch not in "×÷"):
            out.append(ch if ch.isprintable() else " ")
        else:
            out.append(_plain(ch))
    return "".join(out)


_KEEPS_MEANING = (None, "<compat>", "<font>", "<noBreak>", "<wide>", "<narrow>", "<small>", "<square>")


def _plain(ch: str) -> str:
    """A character outside Latin-1 as text pdflatex sets: its letter without accents (``ǅ`` → ``DZ``, ``ﬁ`` → ``fi``)
    where that keeps its meaning, else its code point: a superscript, subscript or fraction (``³``, ``½``) never loses
    its form to bare digits, and a letter of another script (Han, Arabic, …) is named, never dropped."""
    tag = unicodedata.decomposition(ch).split(" ")[0] if unicodedata.decomposition(ch) else None
    tag = tag if tag and tag.startswith("<") else None
    decomposed = unicodedata.normalize("NFKD", ch)
    kept = [c for c in decomposed if not unicodedata.combining(c)]
    if tag in _KEEPS_MEANING and kept and all(ord(c) < 128 or c in _SYMBOLS for c in kept) and (
            tag is not None or decomposed != ch):
        return "".join(escape(c) for c in kept)
    return f"[U+{ord(ch):04X}]"


def label(column) -> str:
    """A column's human label, as LaTeX: ``p_holm`` → ``$p$ (holm)``, ``acc_up`` → ``Acc.\\ up``, ``n_pairs`` →
    ``N pairs``."""
    name = " ".join(str(c) for c in column if str(c)) if isinstance(column, tuple) else str(column)
    if name in LABELS:
        return LABELS[name]
    p = _P.match(name)
    if p:
        what = (p["what"] or p["what2"]).replace("_", " ")
        return f"$p$ ({escape(what)})"
    ci = _CI.match(name)
    if ci:
        return f"{label(ci['base'])} CI {ci['side']}"
    words = name.replace("_", " ").strip()
    return escape(words[:1].upper() + words[1:])


def _cell(x, float_format: str) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)) or x is pd.NA or x is pd.NaT:
        return "--"
    if float_format == P_FORMAT and isinstance(x, (int, float)) and not isinstance(x, bool):
        from ._words import fmt_p_cell

        return escape(fmt_p_cell(x) or "--")  # as the report writes it: < .001, .032, > .999
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return escape(float_format % x) if math.isfinite(x) else escape(str(x))
    return escape(x)


def _numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def table(df: pd.DataFrame, float_format: str = "%.3f", index: bool = False, caption: str | None = None, *,
          columns: list | None = None, ci: bool = False, decimals: str | None = None, keys: int = 2,
          max_columns: int = MAX_COLUMNS, formats: dict | None = None) -> str:
    """The LaTeX of ``df`` (see the module's docstring): one tabular per part of at most ``max_columns`` columns.

    For a paper's table: ``columns`` keeps those columns (the rest stay in the CSV; a comment names them); ``ci``
    prints an estimate and its 95% CI in one cell (``1.23 [0.45, 2.34]``: ``x`` with ``x_ci_low``/``x_ci_high``,
    ``estimate`` with ``ci_low``/``ci_high``, ``odds_ratio`` with ``or_ci_low``/``or_ci_high``); ``decimals="auto"``
    prints each column of numbers with the fewest decimals (up to ``float_format``'s) that show every value whole
    (``33.3``, never ``33.300``); ``formats``: a column's own format (``%.3g`` for odds ratios); ``keys``: the
    leading columns of words a part repeats."""
    if index:
        df = df.reset_index()
    df = df.copy()
    if isinstance(df.columns, pd.MultiIndex):
        df.columns = [" ".join(str(c) for c in col if str(c)) for col in df.columns]
    left: list = []
    if columns is not None:
        left = [c for c in df.columns if c not in columns]
        df = df[[c for c in columns if c in df.columns]]
    if "test" in df.columns:  # a procedure by its name in words, not its id (the CSV keeps the id)
        from ._method_names import SHORT_METHODS

        df["test"] = df["test"].map(lambda t: SHORT_METHODS.get(t, t) if isinstance(t, str) else t)
    formats = {**_formats(df, float_format, decimals), **(formats or {})}
    formats.update({c: P_FORMAT for c in df.columns if (str(c) == "p" or _P.match(str(c))) and _numeric(df[c])})
    df, invalid = _valid_first(df)
    if invalid:
        said = (f"{invalid} row{'s' * (invalid > 1)} marked Valid: no (last) could not be estimated on this design: "
                "their estimates are left out (the CSV keeps them)")
        caption = f"{caption}; {said}" if caption else said
    numbers: set = set()
    if ci:
        df, numbers = _ci_cells(df, formats)
    cols = list(df.columns)
    keys_ = []
    for c in cols[:keys]:  # the naming columns: leading words, repeated in every part
        if _numeric(df[c]) or c in numbers or len(cols) <= max_columns:
            break
        keys_.append(c)
    keys = keys_
    rest = [c for c in cols if c not in keys]
    width = max_columns - len(keys)
    n_parts = max(1, math.ceil(len(rest) / width))
    size = math.ceil(len(rest) / n_parts) if rest else 0
    parts = [keys + rest[i * size:(i + 1) * size] for i in range(n_parts)]
    out = [f"% {len(df)} rows; {len(cols)} columns" + (f", in {n_parts} parts of at most {max_columns}" if n_parts > 1
                                                      else "") + f"; needs \\usepackage{{{','.join(PACKAGES)}}}"
           + (f"\n% in the CSV only: {', '.join(map(str, left))}" if left else "")]
    for i, part in enumerate(parts):
        note = f"part {i + 1} of {n_parts}" if n_parts > 1 else ""
        out.append(_tabular(df[part], formats, "; ".join(x for x in (caption, note) if x) or None, numbers))
    return "\n\\medskip\n\n".join(out[1:]).join([out[0] + "\n", "\n"])


def _valid_first(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """A table with a ``valid`` column: the valid rows first, the invalid ones after them with their estimates, CIs
    and p blanked (counts kept); how many are invalid."""
    if "valid" not in df.columns or not pd.api.types.is_bool_dtype(df["valid"]) or df["valid"].all():
        return df, 0
    bad = ~df["valid"].astype(bool)
    out = pd.concat([df[~bad], df[bad]], ignore_index=True)
    gone = [c for c in out.columns if _numeric(out[c]) and not _COUNTS.match(str(c))]
    out.loc[len(out) - int(bad.sum()):, gone] = math.nan
    return out, int(bad.sum())


def _formats(df: pd.DataFrame, float_format: str, decimals: str | None) -> dict:
    """Each column's number format: ``float_format``, or (``decimals="auto"``) the fewest decimals up to its own that
    print every value of the column whole."""
    out = {c: float_format for c in df.columns}
    most = re.fullmatch(r"%\.(\d+)f", float_format)
    if decimals != "auto" or not most:
        return out
    for c in df.columns:
        if _numeric(df[c]) and not pd.api.types.is_integer_dtype(df[c]):
            v = df[c].dropna().astype(float)
            v = v[v.map(math.isfinite)]
            d = next((d for d in range(int(most[1]) + 1) if ((v - v.round(d)).abs() < 1e-9).all()), int(most[1]))
            out[c] = f"%.{max(d, 1)}f"
    return out


_CI_PAIRS = {"estimate": ("ci_low", "ci_high"), "accuracy": ("ci_low", "ci_high"),
             "odds_ratio": ("or_ci_low", "or_ci_high")}


def _ci_cells(df: pd.DataFrame, formats: dict) -> tuple[pd.DataFrame, set]:
    """An estimate and its CI bounds as one cell, ``x [low, high]`` (the bounds' columns dropped), named by the
    estimate's column; the set of such columns (numbers, though written as text)."""
    df = df.copy()
    merged = set()
    for c in list(df.columns):
        low, high = _CI_PAIRS.get(c, (f"{c}_ci_low", f"{c}_ci_high"))
        if low in df.columns and high in df.columns and _numeric(df[c]):
            f = formats[c]
            df[c] = [_cell(x, f) + (f" [{_cell(lo, f)}, {_cell(hi, f)}]" if all(
                isinstance(v, (int, float)) and math.isfinite(v) for v in (lo, hi)) else "")
                for x, lo, hi in zip(df[c], df[low], df[high])]
            df = df.drop(columns=[low, high])
            merged.add(c)
    return df, merged


def _tabular(df: pd.DataFrame, formats, caption: str | None, numbers: set = frozenset()) -> str:
    formats = formats if isinstance(formats, dict) else {c: formats for c in df.columns}
    spec = _columns(df, numbers)
    head = " & ".join(_stacked(label(c) + (" [95\\% CI]" if c in numbers else "")) for c in df.columns) + r" \\"
    wrapped = {c for c, s in zip(df.columns, spec) if s.startswith(">")}
    rows = [" & ".join(v if c in numbers else breakable(_cell(v.item() if hasattr(v, "item") else v, formats[c]))
                       if c in wrapped else _cell(v.item() if hasattr(v, "item") else v, formats[c])
                       for c, v in zip(df.columns, r)) + r" \\"
            for r in df.itertuples(index=False, name=None)]
    long = len(rows) > LONG_ROWS or _lines(df, spec) > PAGE_LINES  # too tall for one page: it breaks across pages
    env = "longtable" if long else "tabular"
    lines = [f"\\par\\noindent{{\\footnotesize {escape(caption)}}}\\par"] if caption else []
    lines += ["{\\footnotesize", "\\setlength{\\tabcolsep}{3pt}", f"\\begin{{{env}}}{{{''.join(spec)}}}",
              "\\toprule", head, "\\midrule"]
    if long:
        lines += ["\\endhead", "\\bottomrule", "\\endfoot"]
    lines += rows + ([] if long else ["\\bottomrule"]) + [f"\\end{{{env}}}", "}"]
    return "\n".join(lines)


def _lines(df: pd.DataFrame, spec: list[str]) -> int:
    """About how many lines of small type the table's rows take, a wrapped cell taking as many as its width needs."""
    widths = {i: float(m[1]) * BUDGET for i, sp in enumerate(spec) if (m := re.search(r"p\{([\d.]+)\\textwidth", sp))}
    return sum(max([1] + [math.ceil(len(str(row[i])) / max(w, 1)) for i, w in widths.items()])
               for row in df.itertuples(index=False, name=None))


def breakable(text: str) -> str:
    """A wrapped cell's text that may also break after a dot, colon, slash or hyphen (a long name without spaces)."""
    return re.sub(r"(?<=[A-Za-z0-9])([.:/-])(?=[A-Za-z0-9])", r"\1\\allowbreak{}", text)


def _columns(df: pd.DataFrame, numbers: set = frozenset()) -> list[str]:
    """Each column's alignment: numbers right, words left; the widest text columns wrap in a fixed width until the
    table fits the text width (about ``BUDGET`` characters of the small type, less the space between columns)."""
    width = {c: max([len(str(v)) if isinstance(v, str) else len(_cell(v, "%.3f")) for v in df[c]]
                    + [max(len(w) for w in str(c).split("_")) + 1]) for c in df.columns}
    wrap: dict = {}
    budget = BUDGET - 1.5 * df.shape[1]
    while sum(width.values()) > budget:
        text = [c for c in df.columns if not _numeric(df[c]) and c not in numbers and c not in wrap and width[c] > 10]
        if not text:
            break
        c = max(text, key=width.get)
        width[c] = wrap[c] = max(10, width[c] - (sum(width.values()) - budget))
    return ["r" if _numeric(df[c]) or c in numbers else f">{{\\raggedright\\arraybackslash}}p{{{wrap[c] / BUDGET:.2f}\\textwidth}}"
            if c in wrap else "l" for c in df.columns]


def _stacked(head: str) -> str:
    """A header of several words on two lines (a nested tabular: no package needed), so it is no wider than its
    numbers."""
    words = head.split(" ")
    if len(head) <= 10 or len(words) < 2 or "$" in head and head.count("$") % 2:
        return head
    cut = min(range(1, len(words)), key=lambda i: abs(len(" ".join(words[:i])) - len(" ".join(words[i:]))))
    top, bottom = " ".join(words[:cut]), " ".join(words[cut:])
    if top.count("$") % 2:  # never break inside a formula
        return head
    gap = "{}" if bottom.startswith("[") else ""  # ``\\[`` would read the bracket as a length
    return f"\\begin{{tabular}}[b]{{@{{}}c@{{}}}}{top}\\\\{gap}{bottom}\\end{{tabular}}"
