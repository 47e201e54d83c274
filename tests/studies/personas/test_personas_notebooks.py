"""Papermill smoke run of the persona study: generate → shared score notebook → analyze through the `study: personas`
sweep with the real embedded model, then checks on what the notebooks wrote; and the generate notebook's errors."""
from __future__ import annotations

import json

import nbformat
import numpy as np
import pandas as pd
import pytest

from nbutils import studies
from nbutils.paths import repo_root
from nbutils.stats import RECORD_KEYS
from nbutils.studies.personas import stats
from nbutils.sweep import execute

ROOT = repo_root()
NOTEBOOKS = studies.get("personas").notebooks
pytestmark = [pytest.mark.notebooks, pytest.mark.sweep("params/personas_ci.yaml")]  # `swept`: tests/conftest.py
MODEL = "smollm2-135m-instruct"


def test_sweep_runs_generate_score_analyze(swept):
    run, report = swept
    assert report.study == "personas" and report.scored == [MODEL] and report.analyzed and not report.failed
    assert sorted(p.name for p in (run / "notebooks").glob("*.ipynb")) == [
        "personas_01_generate.ipynb", "personas_03_analyze.ipynb", f"score__{MODEL}.ipynb"]
    for nb in (run / "notebooks").glob("*.ipynb"):
        executed = nbformat.read(nb, as_version=4)
        assert any(c.get("outputs") for c in executed.cells if c.cell_type == "code"), nb.name


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


def test_analysis_outputs_match_a_recomputation(swept):
    run, _ = swept
    for name in ("accuracy", "dif", "null_comparison", "categories", "models", "accuracy_vs_dif"):
        assert (run / "tables" / f"{name}.csv").stat().st_size > 0, name
        assert (run / "tables" / f"{name}.tex").exists(), name
    for name in ("accuracy_by_persona", "persona_bias", "accuracy_vs_bias"):
        assert (run / "figures" / f"{name}.png").stat().st_size > 10_000 and (run / "figures" / f"{name}.pdf").exists()
    summary = json.loads((run / "summary.json").read_text())
    recs = pd.DataFrame(summary["records"])
    assert set(RECORD_KEYS) <= set(recs.columns)
    data = pd.read_parquet(run / "personas.parquet")
    scores = pd.read_parquet(run / "scores" / f"{MODEL}.parquet").merge(data, on="prompt_id").set_index(
        ["persona_id", "question_id"])["correct"]
    dif = pd.read_csv(run / "tables" / "dif.csv").set_index("persona_id")
    for pid in ("woman", "null_random_00", "null_word_01"):
        if pid not in dif.index:
            continue
        ref = stats.dif_ratio(scores.loc[pid].sort_index(), scores.loc["baseline"].sort_index())
        assert dif.loc[pid, "both"] == ref["both"] and dif.loc[pid, "sym_diff"] == ref["sym_diff"]
        rec = recs[(recs["test"] == "dif") & (recs["term"] == pid)].iloc[0]
        assert rec["estimate"] is None or np.isnan(rec["estimate"]) or rec["estimate"] == pytest.approx(ref["dif"])
    acc = recs[recs["test"] == "accuracy"]
    assert len(acc) == 27 and all(r.ci_low <= r.estimate <= r.ci_high for r in acc.itertuples())
    assert {"welch_real_vs_null_random", "permutation_real_vs_null_word"} <= set(recs["test"])
    assert (pd.read_csv(run / "tables" / "dif.csv")["unstable"]).all()  # 6 questions: every ratio is flagged


def test_generate_notebook_reports_a_bad_parameter(tmp_path):
    import papermill as pm

    with pytest.raises(pm.PapermillExecutionError, match=r"template: must be a string with exactly one \{persona\}"):
        execute(NOTEBOOKS["generate"], tmp_path / "out.ipynb",
                {"run_dir": str(tmp_path / "run"), "n_questions": 2, "template": "You are someone."})
    assert not (tmp_path / "run" / "personas.parquet").exists()
