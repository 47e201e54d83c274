"""Papermill smoke runs of the custom study: load → shared score notebook → analyze, through `study: custom` sweeps
with the real embedded model, and the load notebook's errors."""
from __future__ import annotations

import json

import nbformat
import pandas as pd
import pytest

from nbutils import studies
from nbutils.paths import repo_root
from nbutils.sweep import execute, run_sweep

ROOT = repo_root()
NOTEBOOKS = studies.get("custom").notebooks
pytestmark = [pytest.mark.notebooks, pytest.mark.sweep("params/custom_ci.yaml", limit=4)]  # `swept`: tests/conftest.py


def test_yes_no_sweep_runs_load_score_analyze(swept):
    run, report = swept
    assert report.study == "custom" and report.scored == ["smollm2-135m-instruct"] and report.analyzed and not report.failed
    assert sorted(p.name for p in (run / "notebooks").glob("*.ipynb")) == [
        "custom_01_load.ipynb", "custom_03_analyze.ipynb", "score__smollm2-135m-instruct.ipynb"]
    for nb in (run / "notebooks").glob("*.ipynb"):
        executed = nbformat.read(nb, as_version=4)
        assert any(c.get("outputs") for c in executed.cells if c.cell_type == "code"), nb.name


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
    run, _ = swept
    for name in ("accuracy", "choice_distribution", "response_bias", "signal_detection", "contrasts", "clustered_model",
                 "margin_by_answer", "per_item", "monotonicity_accuracy", "monotonicity_appendix_b", "monotonicity_gap",
                 "monotonicity_mixed_model"):
        assert (run / "tables" / f"{name}.csv").stat().st_size > 0, name
    assert (run / "tables" / "accuracy.tex").exists()
    for name in ("accuracy_by_group", "choice_distribution", "margin_by_answer"):
        assert (run / "figures" / f"{name}.png").stat().st_size > 10_000 and (run / "figures" / f"{name}.pdf").exists()
    summary = json.loads((run / "summary.json").read_text())
    acc = [r for r in summary["records"] if r["test"] == "accuracy_vs_chance"]
    assert {r["group"] for r in acc} == {"more than 1/2", "less than 1/2", "more than 1/3", "(all)"}
    assert all(0 <= r["estimate"] <= 1 and r["ci_low"] <= r["estimate"] <= r["ci_high"] for r in acc)
    assert any(r["test"] == "monotonicity_gap" for r in summary["records"])


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
