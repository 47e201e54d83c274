"""Every analysis of a run has one shape (``nbutils.analysis``): the steps in one order, precision sensitivity the
same in every study (compared with the study's headline where it has one, a note where it cannot compare), and
``use_r`` with one default and one meaning wherever a study fits a model in R. Its parameters are one frozen record
per analysis (``nbutils.analysis``): checked once when built, defaults spelled once, the notebook's parameters
cell the same names and defaults."""
from __future__ import annotations

import dataclasses
import inspect
import shutil
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from nbutils.analysis import _params as analysis_params, _run as analysis_run
from nbutils import artifacts, paths, records, runstore, studies
from nbutils.sweep import _parameters as parameters
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


@dataclass(frozen=True)
class FakeParams(analysis_params.AnalysisParams):
    n_boot: int = analysis_params.n_boot_field()


def fake_steps(calls: list, **kw) -> analysis_run.Steps:
    def compute(scores, run_dir, params):
        calls.append(("compute", sorted(scores["model"].unique()), params))
        a = analysis_run.Analysis(scores)
        a.notes.append("computed")
        return a

    return analysis_run.Steps(
        params=FakeParams,
        load=lambda run_dir, params: calls.append(("load", params.include_limited)) or scores_at_two_precisions(),
        compute=compute, write=lambda a, run_dir, variants: calls.append(("write", variants is not None)), **kw)


def test_the_steps_run_in_one_order_and_a_bad_parameter_stops_before_anything_is_removed(tmp_path):
    calls: list = []
    done = tmp_path / "summary.json"
    done.write_text("{}")
    steps = fake_steps(calls, id_column="row_id")
    with pytest.raises(ValueError, match="^n_boot: must be an integer ≥ 1, got 0"):
        analysis_run.run(tmp_path, steps, FakeParams(n_boot=0))
    with pytest.raises(TypeError, match="^params: this analysis takes a FakeParams"):
        analysis_run.run(tmp_path, steps, {"n_boot": 5})
    assert done.exists() and calls == []
    a = analysis_run.run(tmp_path, steps, FakeParams.from_mapping({"include_limited": True, "n_boot": 5}))
    assert not done.exists(), "the run's earlier results are removed first"
    assert [c[0] for c in calls] == ["load", "compute", "write"]
    assert calls[0] == ("load", True) and calls[1][2] == FakeParams(include_limited=True, n_boot=5)
    assert calls[1][1] == ["m", "solo"], "the main analysis sees each model once, at its most exact precision"
    assert calls[2] == ("write", True)
    assert a.notes[0] == "computed" and "m was scored at several precisions" in a.notes[1]
    assert a.summary["_notes"] == a.notes


def test_precision_sensitivity_compares_with_the_headline_or_says_why_not(tmp_path):
    calls: list = []
    head = analysis_run.run(tmp_path, fake_steps(calls, id_column="row_id",
                                                 headline=lambda d, p: {"estimate": d["correct"].mean(), "p": 0.5}),
                            FakeParams())
    table = head.tables["precision"]
    assert list(table["precision"]) == ["8bit"] and table["headline"].notna().all()
    assert {r["test"] for r in head.summary["records"]} == {"precision_agreement", "precision_mcnemar_exact"}
    assert not [n for n in head.notes if "no one headline" in n]
    plain = analysis_run.run(tmp_path, fake_steps(calls, id_column="row_id", no_headline="no one headline here"),
                             FakeParams())
    assert "headline" not in plain.tables["precision"] and plain.summary["records"]
    assert "precision sensitivity: no one headline here" in plain.notes
    none = analysis_run.run(tmp_path, fake_steps(calls, cannot_compare="sentences have no decision"), FakeParams())
    assert "precision" not in none.tables and calls[-2][1] == ["m", "m.8bit", "solo"]
    assert none.notes[1] == ("precision sensitivity: m was scored at several precisions (m, m.8bit); sentences have "
                             "no decision")


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_every_analysis_runs_through_the_skeleton_and_says_how_it_compares_precisions(name):
    module = ANALYSES[name]
    steps = module.STEPS
    assert isinstance(steps, analysis_run.Steps)
    assert "run_analysis(" in inspect.getsource(module.analyze_run)
    record = studies.get(name).analysis_params if name in studies.REGISTRY else studies.run_analysis_params(name)
    assert steps.params is record, f"{name}: the steps take the record the registry names"
    if steps.id_column is None:
        assert steps.cannot_compare, f"{name}: a study that cannot compare precisions says why in a note"
    else:
        assert steps.headline is not None or steps.no_headline, f"{name}: says why no headline is compared"


def test_use_r_has_one_default_and_one_meaning_in_every_study_that_fits_in_r():
    fits_in_r = {"monotonicity", "negation", "custom"}
    for name, module in ANALYSES.items():
        fields = {f.name: f for f in dataclasses.fields(module.STEPS.params)}
        assert ("use_r" in fields) == (name in fits_in_r), name
        if name not in fits_in_r:
            continue
        assert fields["use_r"].default is True and fields["use_r"].type in (bool, "bool"), name
        assert parameters.declared(studies.get(name).notebooks["analyze"])["use_r"] == ("bool", True), name
        with pytest.raises(ValueError, match=r"^use_r: must be true or false \(true: R's fit"):
            module.analyze_run("never-read", use_r=None)


def _notebook_of(name: str) -> str:
    return studies.get(name).notebooks["analyze"] if name in studies.REGISTRY else studies.RUN_ANALYSES[name]


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_the_notebook_declares_the_records_parameters_with_its_defaults(name):
    """The analysis notebook's parameters cell (papermill needs its values written out) holds the record's fields and
    nothing else but ``run_dir`` (all of them but a ``seed`` nothing draws with: the negation study's), each with the
    record's default (a text's None written as "", which the record reads as None)."""
    record = ANALYSES[name].STEPS.params
    declared = parameters.declared(_notebook_of(name))
    assert set(record.names()) - (set(declared) - {"run_dir"}) <= ({"seed"} if name == "negation" else set()), name
    assert set(declared) - {"run_dir"} <= set(record.names()), name
    defaults = record()
    for field in set(declared) - {"run_dir"}:
        written = declared[field][1]
        assert (None if written == "" else written) == getattr(defaults, field), f"{name}: {field}"
    assert studies.params_of_notebook(_notebook_of(name)) is record


@pytest.mark.parametrize("values, match", [
    ({"n_boot": 0}, r"^n_boot: analyze block of s\.yaml: must be an integer ≥ 1, got 0$"),
    ({"n_boot": True}, r"^n_boot: .*must be an integer ≥ 1, got True"),
    ({"rules_k": 0}, r"^rules_k: .*must be an integer ≥ 1 or null, got 0"),
    ({"seed": -1}, r"^seed: .*must be an integer ≥ 0, got -1"),
    ({"include_limited": "yes"}, r"^include_limited: .*must be true or false"),
    ({"n_bot": 5}, r"^analyze block of s\.yaml: unknown parameter\(s\) \['n_bot'\]; accepted: \['include_limited', "
                   r"'n_boot', 'rules_k', 'seed', 'use_r'\]"),
])
def test_a_record_refuses_a_bad_value_naming_the_parameter_the_value_and_what_is_allowed(values, match):
    with pytest.raises(ValueError, match=match):
        monotonicity.MonotonicityParams.from_mapping(values, where="analyze block of s.yaml")


def test_the_records_read_a_notebooks_values_as_the_keywords_would():
    p = cues.CueParams.from_mapping({"study": "", "text_column": "", "top_k": np.int64(3), "alpha": 0.01})
    assert p.study is None and p.text_column is None and type(p.top_k) is int and p.alpha == 0.01
    for bad, match in [({"alpha": 2}, r"^alpha: must be a number strictly between 0 and 1, got 2"),
                       ({"alpha": float("nan")}, r"^alpha: must be a number strictly between 0 and 1"),
                       ({"train_fraction": 1}, r"^train_fraction: must be a number strictly between 0 and 1"),
                       ({"min_count": 0}, r"^min_count: must be an integer ≥ 1, got 0")]:
        with pytest.raises(ValueError, match=match):
            cues.CueParams.from_mapping(bad)
        with pytest.raises(ValueError, match=match):  # the cue profile checks them before it reads the run
            cues.analyze_run("never-read", **bad)
    with pytest.raises(ValueError, match=r"^alternative: must be one of \['two-sided', 'greater', 'less'\], got 'up'"):
        personas.PersonasParams(alternative="up")
    with pytest.raises(dataclasses.FrozenInstanceError):
        personas.PersonasParams().seed = 1
    with pytest.raises(TypeError, match="not both"):
        custom.CustomParams.of(custom.CustomParams(), {"n_boot": 5})


def test_the_personas_headline_at_one_precision_is_the_headline_of_the_analysis(tmp_path):
    run = tmp_path / "personas"
    shutil.copytree(SAMPLES / "personas", run)
    a = personas.analyze_run(run, n_resamples=99)
    scores = runstore.load_scores(run, studies.get("personas").spec)
    h = personas.headline(scores, personas.PersonasParams(n_resamples=99))
    welch = next(r for r in a.summary["records"] if r["test"].startswith("welch_real_vs_"))
    keys = ("estimate", "ci_low", "ci_high", "p")
    assert [records.number(h[k]) for k in keys] == pytest.approx([welch[k] for k in keys])
