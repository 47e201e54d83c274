"""Every analysis of a run has one shape (``nbutils.analysis_run``): the steps in one order, precision sensitivity the
same in every study (compared with the study's headline where it has one, a note where it cannot compare), and
``use_r`` with one default and one meaning wherever a study fits a model in R."""
from __future__ import annotations

import inspect
import shutil

import numpy as np
import pandas as pd
import pytest

from nbutils import analysis_run, artifacts, parameters, paths, records, runstore, studies
from nbutils.analyses.cues import analysis as cues
from nbutils.studies.custom import analysis as custom
from nbutils.studies.monotonicity import analysis as monotonicity
from nbutils.studies.negation import analysis as negation
from nbutils.studies.personas import analysis as personas

ANALYSES = {"monotonicity": monotonicity, "negation": negation, "personas": personas, "custom": custom, "cues": cues}
SAMPLES = paths.repo_root() / "outputs" / "samples"


def scores_at_two_precisions() -> pd.DataFrame:
    """Model ``m`` scored in float32 and 8-bit (its 8-bit decisions flip on the closest calls), ``solo`` once."""
    rng = np.random.default_rng(0)
    margin = rng.normal(0, 1.5, 40)
    frames = []
    for stem, m in (("m", margin), ("m.8bit", margin + rng.normal(0, 0.3, 40)), ("solo", margin)):
        choice = np.where(m > 0, "Yes", "No")
        frames.append(pd.DataFrame({"model": stem, "row_id": np.arange(40), "margin": m, "choice": choice,
                                    "correct": choice == np.where(np.arange(40) % 2, "Yes", "No")}))
    df = pd.concat(frames, ignore_index=True)
    df.attrs["precision"] = {"m": {"model": "m", "precision": "float32"}, "m.8bit": {"model": "m", "precision": "8bit"},
                             "solo": {"model": "solo", "precision": "float32"}}
    return df


def fake_steps(calls: list, **kw) -> analysis_run.Steps:
    def compute(scores, run_dir, params):
        calls.append(("compute", sorted(scores["model"].unique()), params))
        a = artifacts.Analysis(scores)
        a.notes.append("computed")
        return a

    return analysis_run.Steps(
        load=lambda run_dir, include_limited, params: calls.append(("load", include_limited)) or
        scores_at_two_precisions(),
        compute=compute, write=lambda a, run_dir, variants: calls.append(("write", variants is not None)),
        check=lambda params: calls.append(("check", params)), **kw)


def test_the_steps_run_in_one_order_and_a_bad_parameter_stops_before_anything_is_removed(tmp_path):
    calls: list = []
    done = tmp_path / "summary.json"
    done.write_text("{}")

    def refuse(params):
        raise ValueError("n_boot: must be an integer ≥ 1, got 0")

    steps = fake_steps(calls, id_column="row_id")
    with pytest.raises(ValueError, match="^n_boot"):
        analysis_run.run(tmp_path, analysis_run.Steps(steps.load, steps.compute, steps.write, check=refuse,
                                                      id_column="row_id"), n_boot=0)
    assert done.exists() and calls == []
    a = analysis_run.run(tmp_path, steps, include_limited=True, n_boot=5)
    assert not done.exists(), "the run's earlier results are removed first"
    assert [c[0] for c in calls] == ["check", "load", "compute", "write"]
    assert calls[0] == ("check", {"n_boot": 5}) and calls[1] == ("load", True)
    assert calls[2][1] == ["m", "solo"], "the main analysis sees each model once, at its most exact precision"
    assert calls[3] == ("write", True)
    assert a.notes[0] == "computed" and "m was scored at several precisions" in a.notes[1]
    assert a.summary["_notes"] == a.notes


def test_precision_sensitivity_compares_with_the_headline_or_says_why_not(tmp_path):
    calls: list = []
    head = analysis_run.run(tmp_path, fake_steps(calls, id_column="row_id",
                                                 headline=lambda d, params: {"estimate": d["correct"].mean(), "p": 0.5}))
    table = head.tables["precision"]
    assert list(table["precision"]) == ["8bit"] and table["headline"].notna().all()
    assert {r["test"] for r in head.summary["records"]} == {"precision_agreement", "precision_mcnemar_exact"}
    assert not [n for n in head.notes if "no one headline" in n]
    plain = analysis_run.run(tmp_path, fake_steps(calls, id_column="row_id", no_headline="no one headline here"))
    assert "headline" not in plain.tables["precision"] and plain.summary["records"]
    assert "precision sensitivity: no one headline here" in plain.notes
    none = analysis_run.run(tmp_path, fake_steps(calls, cannot_compare="sentences have no decision"))
    assert "precision" not in none.tables and calls[-2][1] == ["m", "m.8bit", "solo"]
    assert none.notes[1] == ("precision sensitivity: m was scored at several precisions (m, m.8bit); sentences have "
                             "no decision")


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_every_analysis_runs_through_the_skeleton_and_says_how_it_compares_precisions(name):
    module = ANALYSES[name]
    steps = module.STEPS
    assert isinstance(steps, analysis_run.Steps)
    assert "analysis_run.run(" in inspect.getsource(module.analyze_run)
    if steps.id_column is None:
        assert steps.cannot_compare, f"{name}: a study that cannot compare precisions says why in a note"
    else:
        assert steps.headline is not None or steps.no_headline, f"{name}: says why no headline is compared"


def test_use_r_has_one_default_and_one_meaning_in_every_study_that_fits_in_r():
    fits_in_r = {"monotonicity", "negation", "custom"}
    for name, module in ANALYSES.items():
        param = inspect.signature(module.analyze_run).parameters.get("use_r")
        assert (param is not None) == (name in fits_in_r), name
        if param is None:
            continue
        assert param.default is True and param.annotation in (bool, "bool"), name
        assert parameters.declared(studies.get(name).notebooks["analyze"])["use_r"] == ("bool", True), name
        with pytest.raises(ValueError, match=r"^use_r: must be true or false"):
            module.STEPS.check({"n_boot": 100, "use_r": None, "rules_k": None})


def test_the_personas_headline_at_one_precision_is_the_headline_of_the_analysis(tmp_path):
    run = tmp_path / "personas"
    shutil.copytree(SAMPLES / "personas", run)
    a = personas.analyze_run(run, n_resamples=99)
    scores = runstore.load_scores(run, studies.get("personas").spec)
    h = personas.headline(scores, {"min_overlap": 10, "n_resamples": 99, "seed": 0, "alternative": "two-sided"})
    welch = next(r for r in a.summary["records"] if r["test"].startswith("welch_real_vs_"))
    keys = ("estimate", "ci_low", "ci_high", "p")
    assert [records.number(h[k]) for k in keys] == pytest.approx([welch[k] for k in keys])
