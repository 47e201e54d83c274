"""summary.json has one documented, versioned layout: the summary of every shipped sample's analysis (and of the cue
profile added to it) validates against ``nbutils/schemas/summary.schema.json``; ``docs/run-directory.md`` names every
field the schema knows; a reader given a summary.json of an older layout (no ``schema_version``) says to run the
analysis again instead of failing on a missing key. The READMEs' figures of the samples are those analyses' numbers."""
from __future__ import annotations

import json
import shutil

import nbformat
import numpy as np
import pytest
from prose import says, text

from nbutils import artifacts, paths, records, studies
from nbutils.report import ReportError, _run_index as run_index, write_report
from nbutils.analyses.cues import analysis as cues
from nbutils.studies.custom import analysis as custom
from nbutils.studies.monotonicity import analysis as monotonicity
from nbutils.studies.negation import analysis as negation
from nbutils.studies.personas import analysis as personas
from nbutils.stats import record

jsonschema = pytest.importorskip("jsonschema")

ROOT = paths.repo_root()
SAMPLES = ROOT / "outputs" / "samples"
SCHEMA = json.loads((ROOT / "nbutils" / "schemas" / "summary.schema.json").read_text())
# each sample analysed as its notebook would, with fewer resamples and without R: the layout, not the numbers, is tested
CHEAP = {"monotonicity": {"n_boot": 100, "use_r": False}, "control": {"n_boot": 100, "use_r": False},
         "qwen": {"n_boot": 100, "use_r": False},
         "robustness": {"n_boot": 100, "use_r": False},
         "negation": {"use_r": False}, "personas": {"n_resamples": 99}, "custom": {"n_boot": 100, "use_r": False}}
ANALYSIS = {"monotonicity": monotonicity, "control": monotonicity, "qwen": monotonicity, "robustness": monotonicity, "negation": negation, "personas": personas,
            "custom": custom}
OLDER = "made by an older version of the suite"


def validator():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    return jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())


def errors(summary: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(summary)]


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """Each sample copied and analysed once for this module: sample → its run."""
    runs = {}

    def run_of(sample: str):
        if sample not in runs:
            runs[sample] = tmp_path_factory.mktemp("samples") / sample
            shutil.copytree(SAMPLES / sample, runs[sample])
            ANALYSIS[sample].analyze_run(runs[sample], **CHEAP[sample])
        return runs[sample]

    return run_of


@pytest.mark.parametrize("sample", sorted(CHEAP))
def test_the_summary_of_every_sample_validates_against_the_schema(sample, analysed):
    run = analysed(sample)
    summary = json.loads(paths.summary_path(run).read_text())
    assert summary["schema_version"] == records.SCHEMA_VERSION and not errors(summary), errors(summary)
    assert summary["records"] and all(set(records.RECORD_KEYS) <= set(r) for r in summary["records"])
    if sample in ("monotonicity", "custom"):  # the cue profile adds its records and block to the same file
        cues.analyze_run(run)
        summary = json.loads(paths.summary_path(run).read_text())
        assert summary["cues"] and any(r["test"] == "cue_discovery" for r in summary["records"])
        assert not errors(summary), errors(summary)


@pytest.mark.parametrize("sample", ["control", "custom"])
def test_readers_read_each_field_through_the_schema(sample, analysed):
    """``records.Summary``: each property reads a field of the schema, and the records read back as ``Record`` s are
    the ones written."""
    assert set(records.SUMMARY_FIELDS) == {n for n, v in vars(records.Summary).items() if isinstance(v, property)}
    assert set(records.SUMMARY_FIELDS.values()) <= set(SCHEMA["properties"])
    summary = artifacts.read_summary(paths.summary_path(analysed(sample)))
    view = records.Summary(summary)
    assert [r.to_json() for r in view.typed_records] == summary["records"]
    assert view.score_files == summary["inputs"]["score_files"] and view.notes == summary.get("_notes", [])
    empty = records.Summary({})
    assert (empty.records, empty.models, empty.design, empty.model_order, empty.notes, empty.score_files,
            empty.headline) == ([], {}, {}, [], [], None, [])


def test_the_schema_refuses_what_an_older_layout_or_a_stray_key_would_write():
    good = records.summary_json({"records": [record("cmh", "upward", 0.4, p=0.03, model="m")],
                                 "models": {"m": {"conditions": {}}}, "inputs": {"score_files": {}}})
    assert not errors(good)
    assert errors({k: v for k, v in good.items() if k != "schema_version"})  # an older file
    assert errors({**good, "m": {"conditions": {}}})  # a model's block beside records, not under models
    bad = json.loads(json.dumps(good))
    bad["records"][0]["p"] = 1.5
    assert errors(bad)
    del bad["records"][0]["valid"]
    assert any("'valid' is a required property" in e for e in errors(bad))


def test_a_record_is_typed_and_reads_as_the_flat_json_it_is_written_as():
    r = record("glmm_lrt", "upward", float("nan"), 0.2, p=0.01, model="m", headline=True, df=3, n_thresholds=5)
    assert isinstance(r, records.Record) and r.estimate is None and r.extra == {"df": 3, "n_thresholds": 5}
    assert r["model"] == "m" and r.get("df") == 3 and r.get("hypothesis") is None and "hypothesis" not in r
    r["fallback_for"] = "gee"
    r["valid"] = 0
    assert r.valid is False and r.to_json()["fallback_for"] == "gee"
    flat = r.to_json()
    assert list(flat)[:10] == list(records.RECORD_KEYS) and records.Record.from_json(flat).to_json() == flat
    with pytest.raises(KeyError, match="standard key"):
        del r["test"]


def old_summary(run) -> None:
    """The layout before schema_version: a model's block at the top level beside records."""
    artifacts.write_json({"smollm2-135m-instruct": {"conditions": {}}, "records": [], "inputs": {"score_files": {}}},
                         paths.summary_path(run))
    artifacts.write_text("**Is it?**\n\nDesign.\n", paths.results_path(run))


def test_a_reader_of_an_older_summary_says_to_run_the_analysis_again(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "monotonicity", run)
    old_summary(run)
    with pytest.raises(records.SummaryVersionError, match=rf"summary.json was {OLDER} \(without a schema_version; "
                                                          r"this version reads schema_version 2\): run the analysis again"):
        artifacts.read_summary(paths.summary_path(run))
    # nbutils runs: the run's line says so (the index of the other runs goes on)
    assert run_index.describe(run)["headline"] == f"summary.json {OLDER}: run the analysis again"
    # the cue profile, which adds to the study's summary.json, refuses to amend it
    with pytest.raises(ValueError, match=rf"{OLDER} .*run the analysis again"):
        cues.analyze_run(run, top_k=3)
    # the report: an executed analysis as papermill leaves it, then the old summary.json
    analyze = studies.get("monotonicity").notebooks["analyze"]
    cell = nbformat.v4.new_code_cell("1")
    cell.metadata["papermill"] = {"status": "completed", "exception": False}
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["papermill"] = {"start_time": "2999-01-01T00:00:00+00:00", "end_time": "2999-01-01T00:01:00+00:00",
                                "input_path": str(paths.resolve(analyze)), "exception": None}
    paths.executed_notebook(run, analyze).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, paths.executed_notebook(run, analyze))
    with pytest.raises(ReportError, match=rf"^report: .*summary.json was {OLDER} .*run the analysis again"):
        write_report(run)


def test_the_run_directory_document_names_every_field_of_the_schema():
    doc = (ROOT / "docs" / "run-directory.md").read_text()
    named = set(SCHEMA["properties"]) | set(SCHEMA["$defs"]["record"]["properties"]) | set(
        SCHEMA["$defs"]["hypothesis"]["properties"])
    missing = sorted(k for k in named if f"`{k}`" not in doc)
    assert not missing, f"docs/run-directory.md does not say what these summary.json fields are: {missing}"
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert "run-directory.md" in mkdocs


def _headline(summary: dict, model: str, condition: str) -> dict:
    return next(h for h in summary["headline"] if h["model"] == model and h["condition"] == condition
                and h["term"] == "upward")


def test_the_readmes_quote_the_samples_analyses(analysed):
    """The full captions of the two sample figures (docs/getting-started.md), their short forms in README.md and the
    control sample's README: accuracies, Wilson intervals, the headline's odds ratio, CI and p, from the analysed
    samples (the GEE: without R it is the headline, with R it stands in for the GLMM these separated data defeat, with
    the same numbers)."""
    from nbutils.stats import wilson

    readme, where = text("docs/getting-started.md"), "docs/getting-started.md"
    mono = json.loads(paths.summary_path(analysed("monotonicity")).read_text())
    per = mono["models"]["SmolLM2-135M-Instruct"]["conditions"]
    assert mono["models"]["SmolLM2-135M-Instruct"]["slug"] == mono["labels"]["SmolLM2-135M-Instruct"] == (
        "smollm2-135m-instruct"), "the label printed, the slug kept"
    assert per["concept_learning"]["acc_up"] == per["explicit"]["acc_up"], "in both conditions alike"
    half = per["concept_learning"]["n"] // 2
    up, down = round(per["concept_learning"]["acc_up"] * half), round(per["concept_learning"]["acc_down"] * half)
    (ul, uh), (dl, dh) = wilson(up, half), wilson(down, half)
    says(readme, '"more than p" is answered right in {} of {} prompts ({}%, Wilson 95% CI {}–{}%) and "less than p" in '
         "{} of {} ({}%, {}–{}%)", up, half, 100 * up / half, 100 * ul, 100 * uh, down, half, 100 * down / half,
         100 * dl, 100 * dh, where=where)
    short = text("README.md")
    qwen_readmes(analysed, readme, short)
    control = json.loads(paths.summary_path(analysed("control")).read_text())
    base, planted = sorted(control["models"], key=len)
    hb, hbs = _headline(control, base, "concept_learning"), _headline(control, base, "explicit")
    assert hb["reading"] == hbs["reading"] == "below_floor"
    fb, fbs = 100 * hb["floor"]["accuracy"], 100 * hbs["floor"]["accuracy"]
    says(readme, "is not above the task floor: {}% correct under concept learning (95% CI [{}%, {}%]) and {}% with the "
         "concept stated", fb, 100 * hb["floor"]["ci_low"], 100 * hb["floor"]["ci_high"], fbs, where=where)
    says(short, "is not above the task floor ({}%, {}% correct)", fb, fbs, where="README.md")
    cond = control["models"][planted]["conditions"]["concept_learning"]
    h, hs = _headline(control, planted, "concept_learning"), _headline(control, planted, "explicit")
    assert h["test"] == "gee_bias_reduced" and h["reading"] == "undetermined" and hs["reading"] == "below_floor"
    tw = h["twins"]
    lab, both = tw["labels"], tw["threshold"]["both"]
    numbers = [100 * cond["acc_up"], 100 * cond["acc_down"], *np.exp([h["estimate"], h["ci_low"], h["ci_high"]]), h["p"]]
    says(readme, "answers upward concepts right and downward ones wrong, {}% vs {}% (marginal OR = {}, 95% CI [{}, {}], "
         "p = {}; the GEE", *numbers, where=where)
    moved = both["follow"] + both["against"]
    says(readme, "flipping every label moved its answers by a net {} points (95% CI [{}, {}]), so they follow the "
         "labels' direction by no more than {} points, and moving the examples' threshold moved too few of {} answers "
         "to tell the mirror from a prior on the query (p = {})", 100 * lab["estimate"], 100 * lab["ci_low"],
         100 * lab["ci_high"], 100 * lab["ci_high"], both["n"], both["p"], where=where)
    says(short, "ones wrong, {}% vs {}% (marginal OR = {}, p = {})", numbers[0], numbers[1], numbers[2], numbers[5],
         where="README.md")
    sample_readme = text("outputs/samples/control/README.md")
    says(sample_readme, "gap ({}% upward vs {}% downward; marginal OR = {}, 95% CI [{}, {}], p = {})", *numbers,
         where="outputs/samples/control/README.md")
    says(sample_readme, "flipping every label moved the answers by a net {} points of {} pairs (95% CI [{}, {}]), so "
         "they follow the labels' direction by no more than {} points, and moving the examples' threshold moved {} of "
         "{} answers (exact test, p = {})", 100 * lab["estimate"], lab["n"], 100 * lab["ci_low"], 100 * lab["ci_high"],
         100 * lab["ci_high"], moved, both["n"], both["p"], where="outputs/samples/control/README.md")
    says(sample_readme, "so the reading is undetermined ({}% power against a mirror learner", 100 * tw["power"]["mirror"],
         where="outputs/samples/control/README.md")
    says(sample_readme, "The base model is below the task floor ({}% correct under concept learning)", fb,
         where="outputs/samples/control/README.md")
    comparison = {r["condition"]: r for r in control["records"] if r["test"] == "gee_models"}  # use_r False here
    assert all(r["models"] == [planted, base] for r in comparison.values()), "the control named first, as it is read"
    gee = comparison["concept_learning"]
    says(sample_readme, "the GEE by prompt without R: ratio of ORs = {}, 95% CI [{}, {}], p < .001); with the concept "
         "stated there is no evidence that the two gaps differ (p = {})", *np.exp([gee["estimate"], gee["ci_low"], gee["ci_high"]]),
         comparison["explicit"]["p"], where="outputs/samples/control/README.md")
    assert gee["p"] < 0.001 and f"the gap of {planted} exceeds {base}'s" in sample_readme.replace("\n", " ")


def qwen_readmes(analysed, full: str, short: str) -> None:
    """The Qwen sample's figure: its caption in README.md and docs/getting-started.md and its README quote the floor,
    the accuracies and the Mantel–Haenszel test of its analysis; the concept-learning gap is read as no evidence."""
    qwen = json.loads(paths.summary_path(analysed("qwen")).read_text())
    model = "Qwen2.5-Coder-0.5B-Instruct"
    per = qwen["models"][model]["conditions"]
    cl, st = per["concept_learning"], per["explicit"]
    h = _headline(qwen, model, "concept_learning")
    fl = h["floor"]
    assert h["reading"] == "no_evidence" and fl["above"] and cl["option_mass"]["mean"] > 0.99
    cmh = next(r for r in qwen["records"] if r["test"] == "cmh" and r["condition"] == "concept_learning")
    mh = [*np.exp([cmh["estimate"], cmh["ci_low"], cmh["ci_high"]]), cmh["p"]]
    says(short, "is just above the task floor ({}% correct) and answers \"more than p\" right in {}% of prompts and "
         "\"less than p\" in {}%: no evidence of the papers' upward gap", 100 * fl["accuracy"], 100 * cl["acc_up"],
         100 * cl["acc_down"], where="README.md")
    says(full, "{} of {} answers right ({}%, 95% CI [{}%, {}%]). \"More than p\" is answered right in {}% and \"less "
         "than p\" in {}% (Mantel–Haenszel OR = {}, 95% CI [{}, {}], CMH p = {}): no evidence of the papers' upward "
         "gap, if anything the other way; with the concept stated, {}% vs {}%", fl["accuracy"] * fl["n"], fl["n"],
         100 * fl["accuracy"], 100 * fl["ci_low"], 100 * fl["ci_high"], 100 * cl["acc_up"], 100 * cl["acc_down"], *mh,
         100 * st["acc_up"], 100 * st["acc_down"], where="docs/getting-started.md")
    sample = text("outputs/samples/qwen/README.md")
    says(sample, "(54.8% correct, 95% CI [{}%, {}%]) and shows no evidence of the papers' upward gap: \"more than p\" is "
         "answered right in {}% of prompts and \"less than p\" in {}% (Mantel–Haenszel OR = {}, 95% CI [{}, {}], CMH "
         "p = {}), if anything the other way. With the concept stated the downward concepts are answered better too "
         "({}% vs {}%)", 100 * fl["ci_low"], 100 * fl["ci_high"], 100 * cl["acc_up"], 100 * cl["acc_down"], *mh,
         100 * st["acc_up"], 100 * st["acc_down"], where="outputs/samples/qwen/README.md")
    says(sample, "just above the task floor under concept learning ({}% correct", 100 * fl["accuracy"],
         where="outputs/samples/qwen/README.md")
