"""Papermill smoke runs of the custom study: load → shared score notebook → analyze, through `study: custom` sweeps
with the real embedded model, and the load notebook's errors."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from nbutils import studies
from nbutils.paths import repo_root
from nbutils.sweep._sweep import execute, run_sweep
from notebook_checks import assert_figure, assert_tables_compile, assert_tex_matches_csv, output_text, ran_clean

ROOT = repo_root()
NOTEBOOKS = studies.get("custom").notebooks
pytestmark = [pytest.mark.notebooks, pytest.mark.sweep("params/custom_ci.yaml", limit=4)]  # `swept`: tests/conftest.py


def test_yes_no_sweep_runs_load_score_analyze(swept):
    run, report = swept
    assert report.study == "custom" and report.scored == ["smollm2-135m-instruct"] and report.analyzed and not report.failed
    assert sorted(p.name for p in (run / "notebooks").glob("*.ipynb")) == [
        "custom_01_load.ipynb", "custom_03_analyze.ipynb", "score__smollm2-135m-instruct.ipynb"]
    items = pd.read_parquet(run / "items.parquet")
    ran_clean(run / "notebooks" / "custom_01_load.ipynb")
    score = output_text(ran_clean(run / "notebooks" / "score__smollm2-135m-instruct.ipynb"))
    assert f"custom: {len(items)} rows in {run / 'items.parquet'}" in score and "| 12/12 [" in score, "4 rows per group"
    analyze = output_text(ran_clean(run / "notebooks" / "custom_03_analyze.ipynb"))
    assert (run / "results.md").read_text().strip() in analyze, "the notebook shows the paragraph results.md holds"


def test_limit_is_balanced_per_group_on_the_sorted_file(swept):
    run, _ = swept
    items = pd.read_parquet(run / "items.parquet")
    scores = pd.read_parquet(run / "scores" / "smollm2-135m-instruct.limit-4.parquet").merge(items, on="row_id")
    assert items["answer"].iloc[:14].eq("Yes").all()  # the file lists every Yes before every No
    counts = scores.groupby(["group", "answer"]).size().unstack()
    assert (counts.sum(axis=1) == 4).all() and (counts > 0).all().all()
    assert scores["logp_yes"].between(-50, 0).all() and scores["logp_no"].between(-50, 0).all()
    meta = json.loads((run / "scores" / "smollm2-135m-instruct.limit-4.json").read_text())
    assert meta["limit_by"] == ["group"] and meta["limit_strata"] == "answer" and meta["answer_strings"] == ["Yes", "No"]


def test_yes_no_analysis_outputs(swept):
    """The tables against a recomputation from the score file (the answer is the option with the higher log-prob):
    accuracy with Wilson CIs (statsmodels) and exact binomial tests against chance with Holm (scipy, statsmodels),
    how often each option was chosen, the group contrasts' Fisher tests; the paragraph's numbers and words."""
    from scipy.stats import binomtest, fisher_exact
    from statsmodels.stats.multitest import multipletests
    from statsmodels.stats.proportion import proportion_confint

    run, _ = swept
    items = pd.read_parquet(run / "items.parquet")
    scores = pd.read_parquet(run / "scores" / "smollm2-135m-instruct.limit-4.parquet").merge(items, on="row_id")
    scores["answered"] = np.where(scores["logp_yes"] > scores["logp_no"], "Yes", "No")
    scores["right"] = scores["answered"] == scores["answer"]
    groups = {g: d for g, d in scores.groupby("group")} | {"(all)": scores}
    acc = assert_tex_matches_csv(run / "tables" / "accuracy").set_index("group")
    assert set(acc.index) == set(groups) and set(acc["model"]) == {"SmolLM2-135M-Instruct (limit-4)"}
    for g, d in groups.items():
        k, n = int(d["right"].sum()), len(d)
        lo, hi = proportion_confint(k, n, method="wilson")
        assert (acc.loc[g, "n"], acc.loc[g, "n_correct"]) == (n, k), g
        assert acc.loc[g, ["accuracy", "ci_low", "ci_high", "chance", "p_binom"]].tolist() == pytest.approx(
            [k / n, lo, hi, 0.5, binomtest(k, n, 0.5).pvalue]), g
    per_group = acc.drop("(all)")
    assert per_group["p_holm"].tolist() == pytest.approx(multipletests(per_group["p_binom"], method="holm")[1].tolist())
    chosen = pd.read_csv(run / "tables" / "choice_distribution.csv").set_index(["group", "option"])
    for g, d in groups.items():
        for option in ("Yes", "No"):
            assert chosen.loc[(g, option), "n_chosen"] == (d["answered"] == option).sum(), (g, option)
            assert chosen.loc[(g, option), "n_gold"] == (d["answer"] == option).sum(), (g, option)
    contrasts = assert_tex_matches_csv(run / "tables" / "contrasts")
    assert len(contrasts) == 3, "every pair of the 3 groups"
    for r in contrasts.itertuples():
        a, b = groups[r.group_a]["right"], groups[r.group_b]["right"]
        table = [[a.sum(), len(a) - a.sum()], [b.sum(), len(b) - b.sum()]]
        assert r.diff == pytest.approx(a.mean() - b.mean()) and r.p == pytest.approx(fisher_exact(table).pvalue)
    per_item = pd.read_csv(run / "tables" / "per_item.csv")
    assert len(per_item) == len(scores) and set(per_item["row_id"]) == set(scores["row_id"])
    for name in ("response_bias", "signal_detection", "margin_by_answer", "monotonicity_accuracy"):
        table = pd.read_csv(run / "tables" / f"{name}.csv")
        assert set(groups) - {"(all)"} <= set(table["group"] if "group" in table else table["concept"]), name
    for name in ("clustered_model", "monotonicity_gap"):
        assert len(assert_tex_matches_csv(run / "tables" / name)) > 0, name
    appendix = pd.read_csv(run / "tables" / "monotonicity_appendix_b.csv").set_index("row")  # accuracy in percent
    for concept, row in (("more than 1/2", "[more than p]"), ("less than 1/2", "[less than p]"),
                         ("more than 1/3", "[more than p]")):
        assert appendix.loc[row, concept.split()[-1]] == pytest.approx(100 * groups[concept]["right"].mean()), concept
    assert len(pd.read_csv(run / "tables" / "monotonicity_mixed_model.csv")) > 0
    for name in ("accuracy_by_group", "choice_distribution", "margin_by_answer"):
        assert_figure(run / "figures" / f"{name}.png")
    summary = json.loads((run / "summary.json").read_text())
    records = {r["group"]: r for r in summary["records"] if r["test"] == "accuracy_vs_chance"}
    assert set(records) == {"more than 1/2", "less than 1/2", "more than 1/3", "(all)"}
    for g, r in records.items():
        assert r["estimate"] == pytest.approx(acc.loc[g, "accuracy"]) and r["ci_low"] <= r["estimate"] <= r["ci_high"]
    assert any(r["test"] == "monotonicity_gap" for r in summary["records"])
    words = (run / "results.md").read_text()
    assert f"{len(scores)} prompts in {len(groups) - 1} groups" in words
    for g, d in groups.items():
        who = "all prompts" if g == "(all)" else f"group '{g}'"
        line = next(l for l in words.splitlines() if f"accuracy on {who} differs from chance" in l)
        assert f"accuracy = {100 * d['right'].mean():.1f}%" in line, g
        p = acc.loc[g, "p_holm"] if g != "(all)" else acc.loc[g, "p_binom"]
        assert line.split(" — ")[1].startswith("no evidence at α = .05" if p >= 0.05 else "accuracy"), g
    answers = scores["answered"].unique()
    assert (f"answers '{answers[0]}' to every prompt: a pure response bias" in words) == (len(answers) == 1)


def test_multiple_choice_sweep_scores_letters(tmp_path):
    report = run_sweep(ROOT / "params" / "custom_mc_ci.yaml", run_dir=str(tmp_path))
    assert report.analyzed and not report.failed
    scores = pd.read_parquet(tmp_path / "scores" / "smollm2-135m-instruct.parquet")
    assert [c for c in scores.columns if c.startswith("logp_")] == ["logp_a", "logp_b", "logp_c"] and len(scores) == 12
    acc = pd.read_csv(tmp_path / "tables" / "accuracy.csv")
    assert acc["chance"].eq(1 / 3).all() and set(acc["group"]) == {"geography", "arithmetic", "(all)"}


def test_load_notebook_reports_a_bad_file(tmp_path):
    import papermill as pm

    bad = tmp_path / "bad.csv"
    bad.write_text("prompt,answer\nIs it?,Yes\nIs it not?,Maybe\n")
    with pytest.raises(pm.PapermillExecutionError, match=r"row 2 \(line 3\) \(column 'answer'\): answers 'Maybe'"):
        execute(NOTEBOOKS["generate"], tmp_path / "out.ipynb",
                {"run_dir": str(tmp_path / "run"), "data_file": str(bad), "columns": {}, "group_by": []})
    assert not (tmp_path / "run" / "items.parquet").exists()


def test_every_latex_table_the_sweep_wrote_compiles_and_fits_a_page(swept):
    """Each tables/*.tex compiles with pdflatex (escaped text, booktabs, at most 8 columns a part) and fits a page."""
    run, _ = swept
    assert assert_tables_compile(run)
