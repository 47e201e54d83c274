"""Papermill smoke run of cue profiling: a `cues:` sweep block on the custom study's Yes/No example, scored with the
real embedded model, then notebooks/cues/01_profile.ipynb on the run; and the notebook run again by hand."""
from __future__ import annotations

import json

import nbformat
import pandas as pd
import pytest

from nbutils import artifacts, studies
from nbutils.analyses.cues.results import results_text
from nbutils.paths import repo_root
from nbutils.sweep import execute

ROOT = repo_root()
pytestmark = [pytest.mark.notebooks, pytest.mark.sweep("params/cues_ci.yaml")]  # `swept`: tests/conftest.py


def test_the_sweep_profiles_cues_after_the_analysis(swept):
    run, report = swept
    assert report.analyzed and report.extra == ["cues"] and not report.failed
    executed = nbformat.read(run / "notebooks" / "cues_01_profile.ipynb", as_version=4)
    assert any(c.get("outputs") for c in executed.cells if c.cell_type == "code")
    cues = pd.read_csv(run / "tables" / "cues.csv")
    assert {"feature", "label", "count_train", "count_test", "mse", "jsd", "cueness", "lmi", "pmi"} <= set(cues.columns)
    # every ranked feature with both labels, rows in rank order (so cueness never rises down the table)
    assert cues.groupby("feature")["label"].agg(lambda s: sorted(s) == ["No", "Yes"]).all()
    assert cues["rank"].is_monotonic_increasing and cues["cueness"].is_monotonic_decreasing
    top = cues.drop_duplicates("feature")
    assert top["rank"].tolist() == sorted(top["rank"]) and top["cueness"].is_monotonic_decreasing
    acc = pd.read_csv(run / "tables" / "cue_accuracy_test.csv")
    dist = pd.read_csv(run / "tables" / "cue_distribution_test.csv")
    assert set(acc["model"]) == {"smollm2-135m-instruct"} and len(acc) == len(dist) == min(5, len(top))
    assert acc["p_holm"].dropna().ge(acc["p"].dropna()).all()
    assert (run / "figures" / "cues_top.png").stat().st_size > 5_000
    summary = json.loads((run / "summary.json").read_text())
    tests = {r["test"] for r in summary["records"]}
    assert {"cue_discovery", "cue_accuracy_test", "cue_distribution_test", "cue_used"} <= tests
    assert "accuracy_vs_chance" in tests  # the custom study's own records are kept
    assert summary["cues"]["study"] == "custom" and summary["cues"]["n_instances"] == 24
    words = (run / "cues_results.md").read_text()  # the profile's paragraph, beside the study's own results.md
    assert words == results_text(summary) and "24 classification instances" in words
    assert f"`{top['feature'].iloc[0]}` → {top['cue_label'].iloc[0]}" in words
    assert "Cue profile" not in (run / "results.md").read_text()  # the study's own paragraph is left alone


def test_rerunning_the_notebook_replaces_the_cue_records(swept):
    run, _ = swept
    before = json.loads((run / "summary.json").read_text())["records"]
    nb = studies.RUN_ANALYSES["cues"]
    execute(nb, run / "notebooks" / "01_profile_again.ipynb", {"run_dir": str(run), "top_k": 3, "min_count": 2})
    after = json.loads((run / "summary.json").read_text())["records"]
    assert len([r for r in after if r["test"] == "cue_discovery"]) == 3
    assert [r for r in after if not r["test"].startswith("cue_")] == [r for r in before if not r["test"].startswith("cue_")]


def test_a_run_without_labels_is_refused(tmp_path):
    """A custom run whose dataset has no gold answers: refused before any score file is read."""
    from nbutils.studies.custom import dataset

    example = artifacts.read_yaml((ROOT / "params/custom/datasets/example_yesno.yaml").read_text(), "example_yesno")
    items = dataset.load_items(ROOT / example["data_file"], example["columns"], group_by=example["group_by"])
    run = tmp_path / "run"
    dataset.write_items(items.assign(answer=None, answer_text=None, answer_raw=None), run, {"answers": "removed"})
    with pytest.raises(Exception, match=r"run_dir: \S*items\.parquet has no gold answers; cue profiling needs labels"):
        execute(studies.RUN_ANALYSES["cues"], tmp_path / "out.ipynb", {"run_dir": str(run)})
    assert not (run / "tables").exists() and not (run / "summary.json").exists()
