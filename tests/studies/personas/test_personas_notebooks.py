"""Papermill smoke run of the persona study: generate → shared score notebook → analyze through the `study: personas`
sweep with the real embedded model, then checks on what the notebooks wrote (tables, records and the paragraph against a
recomputation from the score file with scipy and statsmodels); and the generate notebook's errors."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from nbutils import studies
from nbutils.paths import repo_root
from nbutils.stats import RECORD_KEYS
from nbutils.results._headline import short_reason
from nbutils.sweep._sweep import execute
from notebook_checks import assert_figure, assert_tables_compile, assert_tex_matches_csv, output_text, ran_clean

ROOT = repo_root()
NOTEBOOKS = studies.get("personas").notebooks
pytestmark = [pytest.mark.notebooks, pytest.mark.sweep("params/personas_ci.yaml")]  # `swept`: tests/conftest.py
MODEL = "smollm2-135m-instruct"


def test_sweep_runs_generate_score_analyze(swept):
    run, report = swept
    assert report.study == "personas" and report.scored == [MODEL] and report.analyzed and not report.failed
    assert sorted(p.name for p in (run / "notebooks").glob("*.ipynb")) == [
        "personas_01_generate.ipynb", "personas_03_analyze.ipynb", f"score__{MODEL}.ipynb"]
    data = pd.read_parquet(run / "personas.parquet")
    n, personas = len(data), data["persona_id"].nunique()
    generate = output_text(ran_clean(run / "notebooks" / "personas_01_generate.ipynb"))
    assert f"'rows': {n}," in generate and f"'n_personas': {personas}," in generate
    score = output_text(ran_clean(run / "notebooks" / f"score__{MODEL}.ipynb"))
    assert f"personas: {n} rows in {run / 'personas.parquet'}" in score and f"| {n}/{n} [" in score
    analyze = output_text(ran_clean(run / "notebooks" / "personas_03_analyze.ipynb"))
    assert (run / "results.md").read_text().strip() in analyze, "the notebook shows the paragraph results.md holds"


def test_scores_are_paired_and_each_letter_is_one_token(swept):
    run, _ = swept
    data = pd.read_parquet(run / "personas.parquet")
    scores = pd.read_parquet(run / "scores" / f"{MODEL}.parquet").merge(data, on="prompt_id")
    assert len(scores) == len(data) == 6 * (1 + 22 + 2 + 2)
    assert scores.groupby("persona_id")["question_id"].apply(frozenset).nunique() == 1  # every persona, same questions
    assert (scores["correct"] == (scores["choice"] == scores["gold"])).all()
    assert scores["logp_0"].between(-60, 0).all() and scores["logp_1"].between(-60, 0).all()
    meta = json.loads((run / "scores" / f"{MODEL}.json").read_text())
    # SmolLM2's chat template takes a system message, and each letter is one token: the argmax over the option
    # letters is what greedy decoding restricted to them would answer
    assert meta["system_in_user_turn"] is False and meta["single_forward_pass"] is True and meta["used_chat_template"]


def _correct(run) -> pd.DataFrame:
    """Questions × personas: was the highest-log-prob letter the gold one (recomputed from the raw log-probs)."""
    data = pd.read_parquet(run / "personas.parquet")
    scores = pd.read_parquet(run / "scores" / f"{MODEL}.parquet").merge(data, on="prompt_id")
    logp = scores[[c for c in scores.columns if c.startswith("logp_")]].to_numpy()
    letters = [tuple(o) for o in scores["scored"]]
    scores["answer"] = [opts[int(np.nanargmax(row[:len(opts)]))] for opts, row in zip(letters, logp)]
    scores["right"] = scores["answer"] == scores["gold"]
    return scores


def test_analysis_tables_equal_an_independent_recomputation(swept):
    """Every persona's overlap with the baseline, DIF, accuracy (Wilson CI from statsmodels), exact McNemar (a binomial
    test from scipy) with Holm (statsmodels), and the real-vs-null comparisons, recomputed from the score file alone."""
    from scipy.stats import binomtest
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.proportion import proportion_confint
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW

    run, _ = swept
    scores = _correct(run)
    right = scores.pivot(index="question_id", columns="persona_id", values="right").astype(bool)
    base = right["baseline"]
    kind = scores.drop_duplicates("persona_id").set_index("persona_id")["persona_kind"]

    acc = assert_tex_matches_csv(run / "tables" / "accuracy").set_index("persona_id")
    assert set(acc.index) == set(right.columns) and len(acc) == 27
    for pid, col in right.items():
        k, n = int(col.sum()), len(col)
        lo, hi = proportion_confint(k, n, method="wilson")
        chance = np.mean([1 / len(o) for o in scores.loc[scores["persona_id"] == pid, "scored"]])
        assert (acc.loc[pid, "n"], acc.loc[pid, "correct"]) == (n, k), pid
        assert acc.loc[pid, ["accuracy", "ci_low", "ci_high", "chance"]].tolist() == pytest.approx(
            [k / n, lo, hi, chance])

    dif = assert_tex_matches_csv(run / "tables" / "dif").set_index("persona_id")
    assert set(dif.index) == set(right.columns) - {"baseline"}
    expected = {}
    for pid in dif.index:
        c = right[pid]
        both, only_p, only_b = int((c & base).sum()), int((c & ~base).sum()), int((~c & base).sum())
        union = both + only_p + only_b
        d = both / union if union else np.nan
        p = binomtest(only_p, only_p + only_b, 0.5).pvalue if only_p + only_b else 1.0
        expected[pid] = d
        row = dif.loc[pid]
        assert (row["both"], row["only_persona"], row["only_baseline"], row["sym_diff"]) == (both, only_p, only_b,
                                                                                             only_p + only_b), pid
        assert row[["dif", "bias", "acc_persona", "acc_baseline", "acc_diff", "p_mcnemar"]].tolist() == pytest.approx(
            [d, 1 - d, c.mean(), base.mean(), c.mean() - base.mean(), p], nan_ok=True), pid
        assert bool(row["unstable"]) == (both < 10), pid  # the recorded minimum overlap, |Ci ∩ Cb| ≥ 10
    for _, g in dif.groupby("persona_kind"):
        assert g["p_holm"].tolist() == pytest.approx(multipletests(g["p_mcnemar"], method="holm")[1].tolist())

    null = assert_tex_matches_csv(run / "tables" / "null_comparison").set_index("null_kind")
    bias = {k: np.array([1 - expected[p] for p in dif.index if kind[p] == k])
            for k in ("real", "null_random", "null_word")}
    for k in ("null_random", "null_word"):
        x, y, row = bias["real"], bias[k], null.loc[k]
        assert (row["n_real"], row["n_null"]) == (len(x), len(y)) == (22, 2)
        assert row["estimate"] == pytest.approx(x.mean() - y.mean())
        if np.ptp(x) == 0 and np.ptp(y) == 0:
            assert not row["valid"] and np.isnan(row["p_welch"]) and "no variance" in row["note"]
        else:
            t, p, df = CompareMeans(DescrStatsW(x), DescrStatsW(y)).ttest_ind(usevar="unequal")
            lo, hi = CompareMeans(DescrStatsW(x), DescrStatsW(y)).tconfint_diff(usevar="unequal")
            assert row["valid"] and row[["t", "df", "p_welch", "ci_low", "ci_high"]].tolist() == pytest.approx(
                [t, df, p, lo, hi])
            assert 0 < row["p_permutation"] <= 1

    models = assert_tex_matches_csv(run / "tables" / "models").iloc[0]
    assert models["baseline_accuracy"] == pytest.approx(base.mean()) and models["n_questions"] == len(base)
    assert models["dif_real"] == pytest.approx(np.nanmean([expected[p] for p in dif.index if kind[p] == "real"]))
    assert models["n_unstable_real"] == int((dif.loc[[p for p in dif.index if kind[p] == "real"], "both"] < 10).sum())
    cats = assert_tex_matches_csv(run / "tables" / "categories")
    assert sorted(cats["category"]) == sorted(dif["category"].unique())
    assert cats.set_index("category")["n_personas"].to_dict() == dif.groupby("category").size().to_dict()
    regression = assert_tex_matches_csv(run / "tables" / "accuracy_vs_dif").iloc[0]
    assert regression["n_models"] == 1 and not regression["valid"], "one model: no regression across models"
    for name in ("accuracy_by_persona", "persona_bias", "accuracy_vs_bias"):
        assert_figure(run / "figures" / f"{name}.png")


def test_summary_records_and_the_paragraph_agree_with_the_recomputation(swept):
    """The records carry the recomputed numbers; the paragraph names the design's counts, says which comparisons
    could not be estimated and why, and calls a one-letter answerer a response bias only when every answer is that
    letter."""
    run, _ = swept
    scores = _correct(run)
    recs = pd.DataFrame(json.loads((run / "summary.json").read_text())["records"])
    assert set(RECORD_KEYS) <= set(recs.columns)
    accuracy = recs[recs["test"] == "accuracy"].set_index("term")
    per_persona = scores.groupby("persona_id")["right"].mean()
    assert len(accuracy) == 27 and accuracy["estimate"].to_dict() == pytest.approx(per_persona.to_dict())
    assert all(r.ci_low <= r.estimate <= r.ci_high for r in accuracy.itertuples())
    assert {"welch_real_vs_null_random", "permutation_real_vs_null_word", "dif", "mcnemar_vs_baseline"} <= set(
        recs["test"])
    null = pd.read_csv(run / "tables" / "null_comparison.csv").set_index("null_kind")

    words = (run / "results.md").read_text()
    n_questions, n_personas = scores["question_id"].nunique(), scores["persona_id"].nunique()
    assert f"1 model (SmolLM2-135M-Instruct); {n_questions} questions under {n_personas} personas" in words
    for k, who in (("null_random", "random"), ("null_word", "word")):
        welch = recs[recs["test"] == f"welch_real_vs_null_{who}"].iloc[0]
        assert bool(welch["valid"]) == bool(null.loc[k, "valid"])
        assert welch["estimate"] == pytest.approx(null.loc[k, "estimate"])
        line = next(l for l in words.splitlines() if f"real minus {who} null personas (Welch's t-test)" in l)
        if not welch["valid"]:
            assert "not estimable" in line and short_reason(null.loc[k, "note"]) in words.split("*Caveats:*")[1]  # why: once
        else:
            assert "not estimable" not in line and welch["p"] == pytest.approx(null.loc[k, "p_welch"])
    answers = scores["answer"].unique()
    if len(answers) == 1:
        assert f"answers '{answers[0]}' to every question: a pure response bias" in words
        share = (scores.drop_duplicates("question_id")["gold"] == answers[0]).mean()
        assert per_persona["baseline"] == pytest.approx(share), "accuracy is the share of questions whose gold is it"
    else:
        assert "to every question" not in words
    assert (pd.read_csv(run / "tables" / "dif.csv")["unstable"]).all()  # 6 questions: every ratio is flagged


def test_generate_notebook_reports_a_bad_parameter(tmp_path):
    import papermill as pm

    with pytest.raises(pm.PapermillExecutionError, match=r"template: must be a string with exactly one \{persona\}"):
        execute(NOTEBOOKS["generate"], tmp_path / "out.ipynb",
                {"run_dir": str(tmp_path / "run"), "n_questions": 2, "template": "You are someone."})
    assert not (tmp_path / "run" / "personas.parquet").exists()


def test_every_latex_table_the_sweep_wrote_compiles_and_fits_a_page(swept):
    """Each tables/*.tex compiles with pdflatex (escaped text, booktabs, at most 8 columns a part) and fits a page."""
    run, _ = swept
    assert assert_tables_compile(run)
