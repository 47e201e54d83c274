"""CSV cells a spreadsheet would run as formulas, guarded when a run's table is written and unguarded when it is read
back (``nbutils.artifacts.write_table`` and ``read_table``)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

# OWASP's list for CSV injection: a text cell starting with one of these gets GUARD in front in a CSV (and so does one
# starting with GUARD, so that read_table can take it off again)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
GUARD = "'"


def _guard(v):
    """``v`` with GUARD in front when it is text a spreadsheet would run (a number written as text is left)."""
    try:
        number = isinstance(v, str) and v == v.strip() and float(v) is not None  # "-0.25": a spreadsheet reads a number
    except ValueError:
        number = False
    return GUARD + v if isinstance(v, str) and v.startswith((*FORMULA_START, GUARD)) and not number else v


def _unguard(v):
    return v[1:] if isinstance(v, str) and v.startswith(GUARD) else v


def _map_text(df: pd.DataFrame, fn) -> pd.DataFrame:
    """``fn`` applied to every cell of ``df``'s text columns and to its text column names and row labels."""
    def text(dtype) -> bool:
        return dtype == object or isinstance(dtype, (pd.StringDtype, pd.CategoricalDtype))

    def labels(index: pd.Index) -> pd.Index:
        if isinstance(index, pd.MultiIndex):
            return pd.MultiIndex.from_tuples([tuple(map(fn, t)) for t in index], names=index.names)
        return pd.Index([fn(v) for v in index], name=index.name) if text(index.dtype) else index

    out = df.copy()
    for i in range(out.shape[1]):
        if text(out.iloc[:, i].dtype):
            out.isetitem(i, out.iloc[:, i].map(fn))
    out.columns, out.index = labels(out.columns), labels(out.index)
    return out


def spreadsheet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell, column name and row label a spreadsheet would run as a formula (it starts with
    ``=``, ``+``, ``-``, ``@``, a tab or a carriage return, and is not a number written as text such as ``-0.25``)
    prefixed with a single quote, and one that starts with a quote given a second; all else is left as it is."""
    return _map_text(df, _guard)


def read_table(path: str | Path, **kwargs) -> pd.DataFrame:
    """A run's CSV table as the data it was written: ``pd.read_csv(path, **kwargs)``, ``spreadsheet_safe`` undone."""
    return _map_text(pd.read_csv(path, **kwargs), _unguard)
