"""The study's figures drawn from tables the real statistics compute on simulated answers: distances in proportions
and in counts never share an axis, the rule heatmap keeps the rules that matter, the forest plot labels each interval
by what it is."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pandas as pd
import pytest

from nbutils.studies.common import quantifier_stats, rules
from nbutils.studies.monotonicity import plots, stats
from nbutils.studies.monotonicity.dataset import generate_prompts

CONCEPTS = ["more than 1/2", "less than 1/2", "more than 1/3", "less than 1/3", "more than 20", "less than 20"]


@pytest.fixture(scope="module")
def scores() -> pd.DataFrame:
    prompts = generate_prompts(CONCEPTS, prompts_per_concept=30, n_examples=20, seed=3)
    pred = np.random.default_rng(0).random(len(prompts)) < np.where(prompts["label"], 0.8, 0.3)
    return prompts.assign(model="sim", pred_yes=pred, correct=pred == prompts["label"].to_numpy(), margin=0.0)


def test_difficulty_panels_keep_proportions_and_counts_apart(scores):
    diff = stats.difficulty(scores)
    fig = plots.difficulty_curves(diff)
    assert fig.figure is fig  # analysis.write takes `.figure`
    kinds = {"proportional": [], "cardinal": []}
    for ax in fig.axes:
        found = [k for k in kinds if k in ax.get_title()]
        assert len(found) == 1, ax.get_title()
        kinds[found[0]].append(ax)
    assert len(kinds["proportional"]) == len(kinds["cardinal"]) == 2  # one panel per condition each
    proportional_max = diff.loc[diff["family"] == "proportional", "distance_mid"].max()
    for ax in kinds["proportional"]:
        assert ax.get_xlim()[0] == 0 and ax.get_xlim()[1] >= max(0.5, proportional_max) and "proportion" in ax.get_xlabel()
    cardinal_max = diff.loc[diff["family"] == "cardinal", "distance_mid"].max()
    for ax in kinds["cardinal"]:
        assert ax.get_xlim()[1] >= cardinal_max > 1 and "number of objects" in ax.get_xlabel()
    for ax in fig.axes:  # accuracy in percent, with each bin's count written beside it
        assert ax.get_ylim()[1] == 100 and "%" in fig.axes[0].get_ylabel()
    counts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert sorted(map(int, counts)) == sorted(diff["n"].tolist())


def test_small_bins_are_hollow(scores):
    diff = stats.difficulty(scores)
    fig = plots.difficulty_curves(diff, min_n=int(diff["n"].median()) + 1)
    hollow = sum(len(c.get_offsets()) for ax in fig.axes for c in ax.collections
                 if hasattr(c, "get_facecolors") and len(c.get_facecolors()) and (c.get_facecolors()[:, :3] == 1).all())
    assert hollow == int((diff["n"] < int(diff["n"].median()) + 1).sum()) > 0


def test_rule_heatmap_shows_named_rules_and_the_best_grid_rules(scores):
    rt, best = rules.rule_tables(scores, k=5)
    assert rt["rule"].nunique() > 40, "the full grid with cardinals is long"
    shown = plots.shown_rules(rt, best)
    named = list(rt.loc[rt["rule_kind"] != "grid", "rule"].unique())
    assert set(named) <= set(shown) and len(shown) <= len(named) + plots.MAX_GRID_RULES
    assert set(best["best_rule"]) <= set(shown)
    fig = plots.rule_agreement(rt, best)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == shown
    width, height = fig.get_size_inches() * 150  # the dpi figures are saved at
    assert height < 2000 and width < 1200, (width, height)


def test_forest_plot_labels_the_descriptive_and_the_inferential_interval(scores):
    gaps = quantifier_stats.pooled_gap(scores, n_boot=200, seed=0)
    fig = plots.gap_forest(gaps)
    right, left = fig.axes  # the inference first, the descriptive interval beside it
    assert "bootstrap" in left.get_xlabel() and "descriptive" in left.get_xlabel()
    assert "t(K−1)" in right.get_xlabel() and "inference" in right.get_xlabel()
    drawn = sorted(tuple(np.round(seg[:, 0], 9)) for c in right.collections for seg in c.get_segments()
                   if seg[0, 1] == seg[1, 1])  # the horizontal interval bars
    expected = sorted(tuple(np.round(v, 9)) for v in gaps[["log_or_ci_low", "log_or_ci_high"]].to_numpy())
    assert drawn == expected
    labels = " ".join(t.get_text() for t in right.get_yticklabels())
    assert all(f"K = {k} thresholds, sign-flip p = " in labels for k in gaps["n_thresholds"])
