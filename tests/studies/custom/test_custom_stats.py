"""The custom study's statistics on constructed score tables whose answers are known."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from nbutils.stats import RECORD_KEYS, holm
from nbutils.studies.custom import analysis, stats
from notebook_checks import assert_figure, assert_tex_matches_csv


def frame(acc: dict[str, float], n_items: int = 40, options=("Yes", "No"), paired: bool = True, seed: int = 0,
          yes_bias: float = 0.0) -> pd.DataFrame:
    """A scores frame: each group answers a share ``acc[group]`` of its items correctly (deterministic counts)."""
    rng = np.random.default_rng(seed)
    rows = []
    for g, a in acc.items():
        n_right = int(round(a * n_items))
        right = rng.permutation([True] * n_right + [False] * (n_items - n_right))
        for i in range(n_items):
            gold = options[i % len(options)]
            wrong = [o for o in options if o != gold]
            choice = gold if right[i] else wrong[0]
            if yes_bias and rng.random() < yes_bias:
                choice = options[0]
            margin = 1.0 if choice == options[0] else -1.0
            rows.append({"model": "m", "row_id": f"{g}::{i}", "item_id": f"i{i}" if paired else f"{g}{i}", "group": g,
                         "row": len(rows) + 1, "answer": gold, "answer_text": gold, "choice": choice,
                         "choice_norm_token": choice, "choice_norm_char": choice, "correct": choice == gold,
                         "correct_norm_token": choice == gold, "correct_norm_char": choice == gold,
                         "margin": margin + rng.normal(0, 0.1), "scored": json.dumps(list(options)),
                         "n_options": len(options), "prompt": f"p{i}"})
    return pd.DataFrame(rows)


def test_accuracy_against_chance_matches_scipy():
    df = frame({"a": 0.9, "b": 0.5}, options=("A", "B", "C", "D"))
    acc = stats.accuracy_by_group(df).set_index("group")
    assert acc.loc["a", "n_correct"] == 36 and acc.loc["a", "chance"] == 0.25
    assert acc.loc["a", "p_binom"] == pytest.approx(sps.binomtest(36, 40, 0.25).pvalue)
    assert acc.loc["b", "p_binom"] == pytest.approx(sps.binomtest(20, 40, 0.25).pvalue)
    np.testing.assert_allclose(acc.loc[["a", "b"], "p_holm"], holm(acc.loc[["a", "b"], "p_binom"]))
    assert acc.loc["(all)", "n"] == 80 and np.isnan(acc.loc["(all)", "p_holm"])
    assert acc.loc["a", "ci_low"] < 0.9 < acc.loc["a", "ci_high"]


def test_contrasts_use_mcnemar_for_shared_items_and_fisher_otherwise():
    paired = stats.pairwise_contrasts(frame({"a": 0.9, "b": 0.3, "c": 0.85}))
    assert set(paired["test"]) == {"mcnemar_exact"}
    ab = paired[(paired.group_a == "a") & (paired.group_b == "b")].iloc[0]
    assert ab["diff"] == pytest.approx(0.6) and ab["p_holm"] < 0.001 and ab["ci_low"] > 0
    ac = paired[(paired.group_a == "a") & (paired.group_b == "c")].iloc[0]
    assert ac["p_holm"] > 0.05
    indep = stats.pairwise_contrasts(frame({"a": 0.9, "b": 0.3}, paired=False))
    row = indep.iloc[0]
    assert row["test"] == "fisher_exact"
    assert row["p"] == pytest.approx(sps.fisher_exact([[36, 4], [12, 28]]).pvalue)


def test_clustered_model_finds_a_real_group_effect_and_not_a_null_one():
    df = frame({"a": 0.85, "b": 0.25})
    assert stats.items_repeat(df) and not stats.items_repeat(frame({"a": 0.8, "b": 0.3}, paired=False))
    t = stats.clustered_model(df)
    gee = t[t["test"] == "gee_logit"].iloc[0]
    assert gee["estimate"] < 0 and gee["p"] < 0.001 and gee["ci_high"] < 0
    assert t[t["test"] == "cochran_q"]["p"].iloc[0] < 0.001
    null = stats.clustered_model(frame({"a": 0.6, "b": 0.6}, seed=3))
    assert null[null["test"] == "gee_wald"]["p"].iloc[0] > 0.05


def test_response_bias_and_signal_detection():
    biased = frame({"a": 0.5}, yes_bias=1.0)  # always Yes
    dist = stats.choice_distribution(biased)
    assert dist.set_index("option").loc["Yes", "share_chosen"] == 1.0
    rb = stats.response_bias(dist).iloc[0]
    assert rb["test"] == "binomial" and rb["p"] < 1e-6 and rb["most_chosen"] == "Yes"
    sdt = stats.signal_detection(biased).iloc[0]
    assert sdt["hit_rate"] == 1 and sdt["false_alarm_rate"] == 1 and sdt["criterion"] < -1
    good = stats.signal_detection(frame({"a": 1.0})).iloc[0]
    assert good["d_prime"] == pytest.approx(2 * sps.norm.ppf(20.5 / 21)) and abs(good["criterion"]) < 1e-9
    assert stats.signal_detection(frame({"a": 0.5}, options=("A", "B", "C"))).empty
    mc = stats.response_bias(stats.choice_distribution(frame({"a": 0.5}, options=("A", "B", "C")))).iloc[0]
    assert mc["test"] == "chi2_gof"


def test_margin_by_answer_and_separation():
    df = frame({"a": 1.0})
    m = stats.margin_by_answer(df).set_index("answer")
    assert m.loc["Yes", "mean_margin"] > 0.8 and m.loc["No", "mean_margin"] < -0.8
    assert stats.margin_separation(df).iloc[0]["auc"] == 1.0


def test_compute_writes_summary_records_with_the_agreed_fields(tmp_path):
    df = frame({"more than 1/2": 0.8, "less than 1/2": 0.4})
    df["concept"] = df["group"]
    df["pred_yes"] = df["choice"] == "Yes"
    df["label"] = df["answer"] == "Yes"
    a = analysis.compute(df, n_boot=100)
    recs = a.summary["records"]
    # the records the results in words report are marked as the headline (summary.json's headline, the report)
    assert all(set(r) - {"headline"} == set(RECORD_KEYS) | {"model", "group", "hypothesis"} for r in recs)
    assert any(r.get("headline") for r in recs)
    assert all({"what", "scale", "null", "sided", "more", "less"} <= set(r["hypothesis"]) for r in recs)
    assert all(r["term"] == r["group"] for r in recs)
    tests = {r["test"] for r in recs}
    assert {"accuracy_vs_chance", "group_contrast", "gee_logit", "d_prime", "margin_auc", "monotonicity_gap"} <= tests
    assert "monotonicity_gap of" not in a.text and "accuracy_vs_chance of" not in a.text and "(s)" not in a.text
    gap = next(r for r in recs if r["test"] == "monotonicity_gap")
    assert gap["estimate"] == pytest.approx(0.4)
    assert {"monotonicity_accuracy", "monotonicity_appendix_b", "monotonicity_mixed_model"} <= set(a.tables)
    analysis.write(a, tmp_path)
    written = json.loads((tmp_path / "summary.json").read_text())["records"]
    key = [(r["test"], r["term"], r["estimate"]) for r in recs]
    assert [(r["test"], r["term"], r["estimate"]) for r in written] == key
    table = assert_tex_matches_csv(tmp_path / "tables" / "accuracy")
    assert table.set_index("group")["accuracy"].to_dict() == pytest.approx(
        a.tables["accuracy"].set_index("group")["accuracy"].to_dict())
    assert_figure(tmp_path / "figures" / "accuracy_by_group.png")


def test_concepts_the_parser_rejects_skip_study_one_with_a_note():
    df = frame({"x": 0.5, "y": 0.5})
    df["concept"] = df["group"]
    df["pred_yes"] = df["choice"] == "Yes"
    tables, notes = analysis.monotonicity_tables(df)
    assert tables == {} and "not concepts like" in notes[0]
    tables, notes = analysis.monotonicity_tables(frame({"a": 0.5}, options=("A", "B", "C")).assign(concept="more than 1/2"))
    assert tables == {} and "needs Yes/No answers" in notes[0]


def test_margin_figure_is_the_same_on_every_run_and_leaves_the_random_state_alone():
    """The strip plot's jitter is seeded: two runs of the analysis draw the same figure, and numpy's global random
    state is what it was before the figure."""
    import hashlib
    import io

    import matplotlib
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    from nbutils.studies.custom.plots import margin_by_answer

    matplotlib.use("Agg")
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"model": ["m"] * 40, "group": ["a", "b"] * 20, "margin": rng.normal(size=40),
                       "answer": ["Yes", "No", "No", "Yes"] * 10})

    def digest() -> str:
        fig = margin_by_answer(df)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        return hashlib.sha256(buf.getvalue()).hexdigest()

    np.random.seed(5)
    expected_next = np.random.rand()
    np.random.seed(5)
    first = digest()
    assert np.random.rand() == expected_next, "the figure drew from the caller's random state"
    np.random.seed(123)
    assert digest() == first, "the jitter differs between runs"
