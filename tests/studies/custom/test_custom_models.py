"""Models compared on the same items (``nbutils.studies.custom.models``): the direction of every record's words, and
the test's calibration by simulation: with no difference between two models it rejects at most as often as a 5% test
may; a model whose log-odds of a right answer exceed the other's by the step from 55% to 70% is found most of the
time on 300 items."""
from __future__ import annotations

import numpy as np
import pandas as pd

from nbutils.studies.custom import models
from nbutils.studies.custom.stats import paired_accuracy


def paired(rng, n: int, acc_a: float, acc_b: float, groups=("g1", "g2", "g3")) -> pd.DataFrame:
    """Two models' right-or-wrong answers to ``n`` items whose difficulty varies (a shared logit per item)."""
    ease = rng.normal(0, 1.5, n)
    rows = []
    for model, acc in (("A", acc_a), ("B", acc_b)):
        shift = np.log(acc / (1 - acc))
        right = rng.random(n) < 1 / (1 + np.exp(-(ease + shift)))
        rows.append(pd.DataFrame({"model": model, "item_id": np.arange(n).astype(str),
                                  "group": [groups[i % len(groups)] for i in range(n)], "correct": right}))
    return pd.concat(rows, ignore_index=True)


def test_the_words_follow_the_sign_and_name_the_compared_model_first():
    rng = np.random.default_rng(1)
    t = models.compare(paired(rng, 300, 0.5, 0.75), ["A", "B"])
    overall = t[t["group"] == "(all)"].iloc[0]
    assert (overall["first"], overall["second"]) == ("B", "A") and overall["diff"] > 0
    recs = models.records(t)
    top = next(r for r in recs if r["group"] == "(all)")
    assert top["models"] == ["B", "A"] and "B answered more items right than A" in top["hypothesis"]["more"]
    assert top["ci_low"] < top["estimate"] < top["ci_high"]
    assert [r["group"] for r in recs][0] == "(all)"  # the overall comparison first, then each group
    groups = t[t["group"] != "(all)"]
    assert (groups["p_holm"] >= groups["p"]).all() and np.isnan(overall["p_holm"])


def test_no_difference_rejects_at_most_at_the_level_and_a_real_one_is_found():
    """The paired test every comparison row runs (``stats.paired_accuracy``), on simulated pairs of models."""
    rng = np.random.default_rng(7)

    def p(n, a, b):
        d = paired(rng, n, a, b, groups=("all",))
        return paired_accuracy(d.loc[d["model"] == "B", "correct"].reset_index(drop=True),
                               d.loc[d["model"] == "A", "correct"].reset_index(drop=True))["p"]

    rate = np.mean([p(200, 0.6, 0.6) < 0.05 for _ in range(400)])
    assert rate <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 400), rate  # the exact test is conservative: at most 5% + MC error
    power = np.mean([p(300, 0.55, 0.70) < 0.05 for _ in range(100)])
    assert power >= 0.8, power
