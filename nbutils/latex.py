"""A table as LaTeX for a paper (``tables/<name>.tex``): a fragment to ``\\input`` that compiles with pdflatex and the
packages every TeX installation has (booktabs, longtable, array; Debian's ``texlive-latex-base`` and
``texlive-latex-recommended``).

Every text is escaped (``_``, ``%``, ``&``, ``#``, ``$``, braces, backslash, ``~``, ``^``; the symbols the tables use,
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
BUDGET = 92  # characters of footnote-size type across a page's text width (6.5 in)
PACKAGES = ("booktabs", "longtable", "array")  # what a document that \input-s the tables needs

_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_\allowbreak{}",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
            ">": r"\textgreater{}", "|": r"\textbar{}"}
_SYMBOLS = {"−": "$-$", "×": r"$\times$", "α": r"$\alpha$", "β": r"$\beta$", "χ": r"$\chi$", "Δ": r"$\Delta$",
            "′": "$'$", "≥": r"$\geq$", "≤": r"$\leq$", "±": r"$\pm$", "→": r"$\to$", "–": "--", "—": "---",
            "…": r"\dots{}", "✓": "yes", "✗": "no", "·": r"$\cdot$", "≈": r"$\approx$", "²": r"$^2$", "’": "'",
            "‘": "`", "“": "``", "”": "''", "°": r"\textdegree{}", "μ": r"$\mu$", "σ": r"$\sigma$"}
LABELS = {"n": "$n$", "k": "$k$", "p": "$p$", "se": "SE", "ci_low": "95\\% CI low", "ci_high": "95\\% CI high",
          "acc_up": "Acc.\\ up", "acc_down": "Acc.\\ down", "or_mh": "OR (MH)", "odds_ratio": "OR",
          "or_ci_low": "OR CI low", "or_ci_high": "OR CI high", "df": "df", "log_or_mean": "Mean log OR",
          "gap_ci_low": "Gap CI low (bootstrap)", "gap_ci_high": "Gap CI high (bootstrap)", "d_prime": "$d'$",
          "yes_rate": "Yes rate", "tpr": "Hit rate", "tnr": "CR rate", "n_thresholds": "Thresholds", "ppl": "PPL",
          "log_ppl": "log PPL", "dif": "DIF"}
_P = re.compile(r"^p_(?P<what>.+)$|^(?P<what2>.+)_p$")
_CI = re.compile(r"^(?P<base>.+)_ci_(?P<side>low|high)$")


def escape(text) -> str:
    """Text as LaTeX that prints it: special characters escaped, known symbols as their LaTeX, any other character
    outside Latin-1 named by its code point (visible, never a compile error)."""
    out = []
    for ch in str(text):
        if ch in _SPECIAL:
            out.append(_SPECIAL[ch])
        elif ch in _SYMBOLS:
            out.append(_SYMBOLS[ch])
        elif ord(ch) < 128 or (0xC0 <= ord(ch) <= 0xFF and ch not in "×÷"):
            out.append(ch if ch.isprintable() else " ")
        else:
            plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
            out.append(escape(plain) if plain else f"[U+{ord(ch):04X}]")
    return "".join(out)


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
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return escape(float_format % x) if math.isfinite(x) else escape(str(x))
    return escape(x)


def _numeric(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def table(df: pd.DataFrame, float_format: str = "%.3f", index: bool = False, caption: str | None = None) -> str:
    """The LaTeX of ``df`` (see the module's docstring): one tabular per part of at most ``MAX_COLUMNS`` columns."""
    if index:
        df = df.reset_index()
    df = df.copy()
    if isinstance(df.columns, pd.MultiIndex):
        df.columns = [" ".join(str(c) for c in col if str(c)) for col in df.columns]
    cols = list(df.columns)
    keys = []
    for c in cols[:2]:  # the naming columns: leading words, repeated in every part
        if _numeric(df[c]) or len(cols) <= MAX_COLUMNS:
            break
        keys.append(c)
    rest = [c for c in cols if c not in keys]
    width = MAX_COLUMNS - len(keys)
    n_parts = max(1, math.ceil(len(rest) / width))
    size = math.ceil(len(rest) / n_parts) if rest else 0
    parts = [keys + rest[i * size:(i + 1) * size] for i in range(n_parts)]
    out = [f"% {len(df)} rows; {len(cols)} columns" + (f", in {n_parts} parts of at most {MAX_COLUMNS}" if n_parts > 1
                                                      else "") + f"; needs \\usepackage{{{','.join(PACKAGES)}}}"]
    for i, part in enumerate(parts):
        note = f"part {i + 1} of {n_parts}" if n_parts > 1 else ""
        out.append(_tabular(df[part], float_format, "; ".join(x for x in (caption, note) if x) or None))
    return "\n\\medskip\n\n".join(out[1:]).join([out[0] + "\n", "\n"])


def _tabular(df: pd.DataFrame, float_format: str, caption: str | None) -> str:
    spec = _columns(df)
    head = " & ".join(_stacked(label(c)) for c in df.columns) + r" \\"
    rows = [" & ".join(_cell(v.item() if hasattr(v, "item") else v, float_format) for v in r) + r" \\"
            for r in df.itertuples(index=False, name=None)]
    long = len(rows) > LONG_ROWS
    env = "longtable" if long else "tabular"
    lines = [f"\\par\\noindent{{\\footnotesize {escape(caption)}}}\\par"] if caption else []
    lines += ["{\\footnotesize", "\\setlength{\\tabcolsep}{3pt}", f"\\begin{{{env}}}{{{''.join(spec)}}}",
              "\\toprule", head, "\\midrule"]
    if long:
        lines += ["\\endhead", "\\bottomrule", "\\endfoot"]
    lines += rows + ([] if long else ["\\bottomrule"]) + [f"\\end{{{env}}}", "}"]
    return "\n".join(lines)


def _columns(df: pd.DataFrame) -> list[str]:
    """Each column's alignment: numbers right, words left; the widest text columns wrap in a fixed width until the
    table fits the text width (about ``BUDGET`` characters of the small type, less the space between columns)."""
    width = {c: max([len(str(v)) if isinstance(v, str) else len(_cell(v, "%.3f")) for v in df[c]]
                    + [max(len(w) for w in str(c).split("_")) + 1]) for c in df.columns}
    wrap: dict = {}
    budget = BUDGET - 1.5 * df.shape[1]
    while sum(width.values()) > budget:
        text = [c for c in df.columns if not _numeric(df[c]) and c not in wrap and width[c] > 10]
        if not text:
            break
        c = max(text, key=width.get)
        width[c] = wrap[c] = max(10, width[c] - (sum(width.values()) - budget))
    return ["r" if _numeric(df[c]) else f">{{\\raggedright\\arraybackslash}}p{{{wrap[c] / BUDGET:.2f}\\textwidth}}"
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
    return f"\\begin{{tabular}}[b]{{@{{}}c@{{}}}}{top}\\\\{bottom}\\end{{tabular}}"
