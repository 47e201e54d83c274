"""A paper's table as LaTeX (``nbutils.results.table``): the valid rows first, an invalid row after them with its
estimates left out and the caption saying so; p-values as the report writes them; tests named in words."""
from __future__ import annotations

import math

import pandas as pd

from nbutils.results import _latex as latex
from nbutils.display import fmt_p_cell


def test_valid_rows_come_first_and_an_invalid_rows_estimates_are_left_out():
    df = pd.DataFrame({"model": ["a", "b", "c"], "test": ["glmm_lrt", "gee_bias_reduced", "glmm_lrt"],
                       "odds_ratio": [1.19e9, 1.5, 2.0], "or_ci_low": [7.4e5, 0.8, 1.1], "or_ci_high": [1.9e12, 2.6, 3.9],
                       "p": [0.0000001, 0.1094, 0.0004], "n": [120, 120, 120], "valid": [False, True, True]})
    tex = latex.table(df, ci=True, formats={"odds_ratio": "%.3g"})
    rows = [line for line in tex.splitlines() if line.endswith(r"\\") and "&" in line][1:]
    assert [r.split(" & ")[0] for r in rows] == ["b", "c", "a"], "valid rows first"
    assert rows[0].split(" & ")[1] == "GEE by threshold" and "glmm" not in tex, "tests named in words"
    assert rows[0].split(" & ")[3:5] == [fmt_p_cell(0.1094), "120"] and rows[1].split(" & ")[3] == r"\textless{} .001"
    assert rows[2].split(" & ")[2:5] == ["--", "--", "120"] and "1.19e+09" not in tex, "no number of an invalid row"
    assert "1 row marked Valid: no (last) could not be estimated" in tex
    same = latex.table(df.assign(valid=True), ci=True)
    assert "Valid: no" not in same and [r.split(" & ")[0] for r in same.splitlines() if r.startswith(("a &", "b &"))]
    assert math.isclose(df["odds_ratio"][0], 1.19e9), "the frame itself is left as it was"
