"""Precision sensitivity: each number against an independent computation, and the McNemar test calibrated under the null."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.inter_rater import cohens_kappa as sm_kappa
from statsmodels.stats.proportion import proportion_confint

from nbutils import paths, runstore
from nbutils.stats import _precision as precision


def _frame(seed=0, n=60):
    rng = np.random.default_rng(seed)
    exact = rng.normal(0, 1.5, n)
    rows = []
    for label, noise in (("float32", 0.0), ("8bit", 0.2), ("4bit", 0.8)):
        m = exact + rng.normal(0, noise, n) if noise else exact
        gold = np.where(np.arange(n) % 2 == 0, "Yes", "No")
        choice = np.where(m > 0, "Yes", "No")
        rows.append(pd.DataFrame({"model": "m", "precision": label, "row_id": np.arange(n), "margin": m,
                                  "choice": choice, "correct": choice == gold}))
    one = rows[0].assign(model="solo")  # a model at one precision: no comparison
    return pd.concat(rows + [one], ignore_index=True)


def test_every_number_equals_an_independent_recount():
    df = _frame()
    table, recs = precision.compare(df, "row_id", headline=lambda d: {"estimate": d["correct"].mean(), "p": 0.5})
    assert list(table["precision"]) == ["8bit", "4bit"] and set(table["reference"]) == {"float32"}
    assert set(table["model"]) == {"m"}, "a model scored at one precision gives no row"
    ref = df[(df.model == "m") & (df.precision == "float32")].set_index("row_id")
    for r in table.itertuples():
        o = df[(df.model == "m") & (df.precision == r.precision)].set_index("row_id")
        same = ref["choice"] == o["choice"]
        assert r.agree == same.sum() and r.n == len(ref)
        lo, hi = proportion_confint(same.sum(), len(same), method="wilson")
        assert (r.agreement_ci_low, r.agreement_ci_high) == pytest.approx((lo, hi))
        cats = ["No", "Yes"]
        tab = pd.crosstab(pd.Categorical(ref["choice"], cats), pd.Categorical(o["choice"], cats), dropna=False)
        assert r.kappa == pytest.approx(sm_kappa(tab.to_numpy()).kappa)
        assert r.max_abs_dmargin == pytest.approx((o["margin"] - ref["margin"]).abs().max())
        close = ref["margin"].abs() < precision.CLOSE_CALL
        assert r.n_close == close.sum() and r.flipped_close == (~same[close]).sum()
        b = int((ref["correct"] & ~o["correct"]).sum())
        c = int((~ref["correct"] & o["correct"]).sum())
        assert (r.mcnemar_reference_only, r.mcnemar_other_only) == (b, c)
        expected_p = sps.binomtest(b, b + c, 0.5).pvalue if b + c else 1.0
        assert r.mcnemar_p == pytest.approx(expected_p)
        assert r.accuracy_change == pytest.approx(o["correct"].mean() - ref["correct"].mean())
        assert r.headline == pytest.approx(o["correct"].mean()) and r.headline_reference == pytest.approx(ref["correct"].mean())
    assert {x["test"] for x in recs} == {"precision_agreement", "precision_mcnemar_exact"} and len(recs) == 4
    assert table.loc[table.precision == "4bit", "agreement"].item() < table.loc[table.precision == "8bit", "agreement"].item()


def test_without_gold_the_mcnemar_test_says_it_cannot_be_estimated():
    df = _frame().drop(columns="correct")
    table, recs = precision.compare(df, "row_id")
    mc = [r for r in recs if r["test"] == "precision_mcnemar_exact"]
    assert mc and all(not r["valid"] and r["p"] is None and "not estimable" in r["note"] for r in mc)
    assert table["mcnemar_p"].isna().all()


def _as_loaded(df):
    """``df`` as ``runstore.load_scores`` gives it: one model name per score file, what each file holds in attrs."""
    stem = df["model"] + df["precision"].map(lambda p: "" if p == "float32" else f".{p}")
    out = df.drop(columns="precision").assign(model=stem).reset_index(drop=True)
    out.attrs["precision"] = {t: {"model": m, "precision": p} for t, m, p in zip(stem, df["model"], df["precision"])}
    return out


def test_main_precision_keeps_the_most_exact_of_each_model():
    df = _frame()
    main, variants, notes = runstore.split_precisions(_as_loaded(df))
    assert set(main["model"]) == {"m", "solo"}, "each model's most exact file (float32) is the main one"
    assert set(zip(variants.model, variants.precision)) == {("m", "float32"), ("m", "8bit"), ("m", "4bit")}
    assert len(notes) == 1 and "m was scored at several precisions" in notes[0]
    only_low = df[df.precision == "4bit"]
    main, variants, _ = runstore.split_precisions(_as_loaded(only_low))
    assert set(main["model"]) == {"m.4bit"} and len(main) == len(only_low) and variants is None, \
        "a model scored only in 4-bit keeps its 4-bit rows"


def test_file_tags_come_from_the_parameters_as_set():
    assert paths.precision_tag("auto", "auto") is None and paths.precision_tag("none", "auto") is None
    assert paths.precision_tag("8bit", "auto") == "8bit" and paths.precision_tag("4bit", "float32") == "4bit"
    assert paths.precision_tag("none", "float32") is None and paths.precision_tag("none", "bfloat16") == "bfloat16"
    assert precision.precision_label({"quantization": "8bit", "dtype": "float32"}) == "8bit"
    assert precision.precision_label({"quantization": "none", "dtype": "bfloat16"}) == "bfloat16"


def test_exact_mcnemar_holds_its_level_under_the_null():
    """Two precisions that differ only by chance (each discordant pair equally likely either way): the exact test
    rejects at most 5% of the time (it is conservative), checked on 2,000 simulated comparisons of 40 rows."""
    rng = np.random.default_rng(7)
    reps, n = 2000, 40
    rejections = 0
    for _ in range(reps):
        ref = rng.random(n) < 0.7
        flip = rng.random(n) < 0.15
        other = np.where(flip, ~ref, ref)
        swap = rng.random(n) < 0.5  # which of the pair is called the reference: symmetric under the null
        a, b = np.where(swap, other, ref), np.where(swap, ref, other)
        rejections += precision.mcnemar_exact(a, b)[2] < 0.05
    rate = rejections / reps
    hi = proportion_confint(rejections, reps, method="wilson")[1]
    assert rate <= 0.05 or hi >= 0.05 and rate < 0.06, rate
    assert rate > 0.005, "the test still rejects sometimes (it is not stuck at p = 1)"
