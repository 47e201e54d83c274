"""The notebooks' compact table views: key columns first, APA p-values, no -0.000 or exponent noise, blanks for
missing cells, "not estimable (why)" instead of numbers, a reason for an empty table, nothing cut off; and the cue
profile's results in words."""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbutils.analyses.cues.results import results_text
from nbutils.display import compact, fmt_cell, fmt_p_cell, view
from nbutils.stats import record


def test_cells_read_as_a_paper_would_print_them():
    assert [fmt_p_cell(p) for p in (0.0004, 0.0321, 0.99995, float("nan"))] == ["< .001", ".032", "> .999", ""]
    assert fmt_cell(-2.220446e-16) == "0.000" and fmt_cell(-0.0004) == "0.000" and fmt_cell(0.12345) == "0.123"
    assert fmt_cell(1.754916548e9) == "1.75e+09" and fmt_cell(float("nan")) == "" and fmt_cell(None) == ""
    assert fmt_cell(True) == "yes" and fmt_cell(7) == "7" and fmt_cell("upward") == "upward"


def test_key_columns_first_counts_whole_and_a_record_that_cannot_be_estimated_shows_no_numbers():
    df = pd.DataFrame([
        record("glmm_lrt", "upward", estimate=0.7, se=0.2, ci_low=0.3, ci_high=1.1, p=0.0004, model="m", n=96.0),
        record("gee_bias_reduced", "upward", estimate=-1.96e-16, se=2.2e-08, ci_low=-20.1, ci_high=20.1, p=1.0,
               valid=False, note="log odds ratio; needs at least 3 thresholds for clustered inference", model="m",
               n=np.nan),
    ])
    out = compact(df, key=["model", "test", "estimate", "ci_low", "ci_high", "p", "n"])
    assert list(out.columns) == ["model", "test", "estimate", "ci_low", "ci_high", "p", "n"]
    assert out.iloc[0].tolist() == ["m", "glmm_lrt", "0.700", "0.300", "1.100", "< .001", "96"]
    assert out.iloc[1].tolist() == ["m", "gee_bias_reduced",
                                    "not estimable (needs at least 3 thresholds for clustered inference)", "", "", "", ""]


def test_proportions_read_in_percent_and_differences_in_points_in_the_view_only():
    acc = pd.DataFrame({"model": ["m"], "group": ["g"], "n": [3], "accuracy": [2 / 3], "ci_low": [0.2077],
                        "ci_high": [0.9385], "chance": [0.5], "p_binom": [1.0]})
    assert compact(acc).iloc[0].tolist() == ["m", "g", "3", "66.7%", "20.8%", "93.8%", "50.0%", "> .999"]
    gap = pd.DataFrame({"acc_up": [0.21], "acc_down": [0.88], "gap": [-0.67], "gap_ci_low": [-0.9], "gap_ci_high": [-0.4],
                        "or_mh": [0.04]})
    assert compact(gap).iloc[0].tolist() == ["21.0%", "88.0%", "-67.0 pp", "-90.0 pp", "-40.0 pp", "0.040"]
    contrast = pd.DataFrame({"acc_a": [0.5], "acc_b": [0.25], "diff": [0.25], "ci_low": [0.01], "ci_high": [0.49]})
    assert compact(contrast).iloc[0].tolist() == ["50.0%", "25.0%", "25.0 pp", "1.0 pp", "49.0 pp"]
    logit = pd.DataFrame({"estimate": [0.7], "ci_low": [0.3], "ci_high": [1.1], "accuracy": [0.6]})
    assert compact(logit).iloc[0].tolist() == ["0.700", "0.300", "1.100", "60.0%"]
    assert fmt_p_cell(1.2) == "not a p (1.2)" and fmt_p_cell(-0.0) == "not a p (-0.0)"
    assert fmt_p_cell(0.0496) == ".0496"  # beside a star, never ".050"
    odds = pd.DataFrame({"odds_ratio": [1.0], "or_ci_low": [9.1e-4], "or_ci_high": [1099.95]})
    assert compact(odds).iloc[0].tolist() == ["1.000", "0.00091", "1099.950"]


def test_a_labelled_index_becomes_columns_and_a_missing_combination_is_blank():
    wide = pd.DataFrame({"1/3": [66.7, np.nan], "1/2": [50.0, 41.2]},
                        index=pd.MultiIndex.from_tuples([("m", "[more than p]"), ("m", "[less than p]")],
                                                        names=["model", "row"]))
    out = compact(wide, digits=1)
    assert list(out.columns) == ["model", "row", "1/3", "1/2"] and out["1/3"].tolist() == ["66.7", ""]


def test_the_view_names_the_full_table_and_an_empty_one_says_why():
    wide = pd.DataFrame({c: [0.5, 0.25] for c in "abcdefghijklmnopqrstuvwxyz"})
    html = view({"t": wide}, "t", key=["a", "z"]).to_html()
    assert "tables/t.csv" in html and "26 columns" in html and ">0.500<" in html and ">c<" not in html
    assert "…" not in view({"t": wide}, "t").to_html()  # every column, however many
    empty = view({"gap_difference": pd.DataFrame()}, "gap_difference", empty="needs both conditions")
    assert "needs both conditions" in empty.data and "gap_difference" in empty.data
    assert "no rows" in view({}, "mcnemar").data


def _cue_summary(n_used: int) -> dict:
    disc = [record("cue_discovery", f, estimate=c, p=p, p_holm=ph, significant=ph < 0.05, cue_label="Yes")
            for f, c, p, ph in (("word:more", 2.2, 0.001, 0.007), ("LENGTH:short", 0.25, 0.39, 1.0))]
    acc = [record("cue_accuracy_test", "word:more", estimate=0.25, ci_low=0.05, ci_high=0.41, p=0.012, p_holm=0.024,
                  condition="m", flag=True),
           record("cue_accuracy_test", "LENGTH:short", estimate=0.0, p=1.0, valid=False, condition="m",
                  note="acc(S_f) − acc(S_nf); no test instance has the feature")]
    used = [record("cue_used", "word:more", estimate=float(n_used > 0), condition="m")]
    return {"records": disc + acc + used,
            "cues": {"study": "custom", "mode": "classification", "n_instances": 400, "n_train": 200, "n_test": 200,
                     "n_features": 7, "min_count": 5, "top_k": 2, "alpha": 0.05}}


def test_the_cue_profile_in_words_names_the_cues_the_test_and_what_it_means():
    text = results_text(_cue_summary(1))
    assert "400 classification instances" in text and "200 for testing" in text and "7 features" in text
    assert "`word:more` → Yes (cueness 2.20, Holm p = .007)" in text and "1 of the top 2 skew the labels" in text
    assert "m: 1 of the top 2 cues flagged as used" in text
    assert ("prompts with `word:more` were answered better: difference = 25.0 points, unadjusted 95% CI [5.0, 41.0], "
            "Holm-adjusted p = .024 "
            "(accuracy with `word:more` minus without it; Newcombe CI, Fisher's exact test, Holm-adjusted p)") in text
    assert "follow surface features" in text and "cannot be tested" in text
    none = results_text(_cue_summary(0))
    assert "No evidence that the model relies on these cues" in none
    assert "no cue to test" in results_text({"cues": {"n_features": 0}, "records": []})
