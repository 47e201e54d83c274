"""The answer options' probability mass: per model and condition from the score files' ``option_mass``, into the
summary, and said in words exactly where the options hold less than half of the next-token probability."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nbutils.studies.common import option_mass
from nbutils.studies.monotonicity.results import CONDITION_NAMES


def scores(masses: dict) -> pd.DataFrame:
    rows = [{"model": m, "condition": c, "option_mass": v} for (m, c), vs in masses.items() for v in vs]
    return pd.DataFrame(rows)


def test_the_table_summarises_each_model_and_condition_and_is_empty_without_the_column():
    s = scores({("a", "concept_learning"): [0.2, 0.4, 0.9, np.nan], ("a", "explicit"): [0.99, 0.98]})
    t = option_mass.table(s).set_index(["model", "condition"])
    assert t.loc[("a", "concept_learning"), "n"] == 3 and np.isclose(t.loc[("a", "concept_learning"), "mean"], 0.5)
    assert np.isclose(t.loc[("a", "concept_learning"), "share_below_half"], 2 / 3)
    assert t.loc[("a", "explicit"), "median"] == 0.985
    assert option_mass.table(s.drop(columns="option_mass")).empty
    assert option_mass.table(s.assign(option_mass=np.nan)).empty


def test_a_sentence_says_the_share_exactly_where_the_mean_is_below_one_half():
    rng = np.random.default_rng(7)
    for _ in range(300):
        cells = [(str(rng.choice(["m1", "m2"])), str(rng.choice(["concept_learning", "explicit"])),
                  list(rng.beta(*rng.uniform(0.2, 3, 2), size=rng.integers(1, 30)))) for _ in range(rng.integers(1, 5))]
        check_sentences(cells)


def check_sentences(cells):
    masses = {(m, c): v for m, c, v in cells}
    summary = {"models": {}}
    table = option_mass.table(scores(masses))
    option_mass.add_blocks(summary["models"], table)
    lines = option_mass.sentences(summary, CONDITION_NAMES, "Yes and No")
    expected = {(r.model, r.condition) for r in table.itertuples() if round(r.mean, 4) < option_mass.LOW}
    assert len(lines) == len(expected)
    for line in lines:
        model, where = line.split(":")[0].split(", ")
        cond = {v: k for k, v in CONDITION_NAMES.items()}[where]
        row = table.set_index(["model", "condition"]).loc[(model, cond)]
        share = int(re.search(r"hold only (\d+)% of the next-token probability", line)[1])
        assert share == round(100 * round(row["mean"], 4)) and f"of {int(row['n'])} prompts" in line
        assert " no " not in f" {line} " and "ignore" not in line
