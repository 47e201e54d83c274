"""The name a model goes by in words (its ``label``): given by a model file or derived from the model and adapter,
printed by the analysis while the score files keep their slug, never part of a score's identity, and refused when two
models would go by one name (sweep, score notebook, analysis), each refusal naming both files."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from nbutils import labels, model_files, paths, runstore, score_settings, studies
from nbutils.score_settings import ScoreSettings, derived_label, identity
from nbutils.studies.monotonicity.scores import load_scores
from simulated_runs import simulated_run

CONTROL = paths.repo_root() / "outputs" / "samples" / "control"
CONTROL_FILE = paths.repo_root() / "params" / "models" / "smollm2-135m-upward-control.yaml"
SLUG = "smollm2-135m-instruct.smollm2-135m-upward-control-e56ef6f3"


def test_a_label_is_derived_readably_from_the_model_the_adapter_and_what_the_file_name_marks():
    assert derived_label("smollm2-135m-instruct") == "SmolLM2-135M-Instruct"  # the embedded model's hub name
    assert derived_label("smollm2-135m-instruct", "adapters/smollm2-135m-upward-control/", SLUG) == (
        "SmolLM2-135M-Instruct + smollm2-135m-upward-control")
    assert derived_label("smollm2-135m-instruct", None, "smollm2-135m-instruct.8bit") == "SmolLM2-135M-Instruct (8bit)"
    assert derived_label("allenai/OLMo-2-1124-13B-Instruct") == "OLMo-2-1124-13B-Instruct"
    for tail, marks in (("-s0.5", " (strength 0.5)"), ("-s0.25.8bit", " (strength 0.25, 8bit)"), ("-s0", " (strength 0)"),
                        (".limit-3", " (limit-3)")):  # an adapter at another strength is named by it, decimals whole
        assert derived_label("smollm2-135m-instruct", "adapters/smollm2-135m-upward-control", SLUG + tail) == (
            "SmolLM2-135M-Instruct + smollm2-135m-upward-control" + marks)
    assert model_files.label_of(yaml.safe_load(CONTROL_FILE.read_text())) == "SmolLM2-135M + upward control"


@pytest.mark.parametrize("bad", ["", "  ", "two\nlines", "tab\there", "x" * 81, 3, ["a"], "bell\x07"])
def test_a_label_that_is_not_one_short_line_of_text_is_refused_naming_the_parameter(bad):
    with pytest.raises(ValueError, match=r"^label: must be one line of text"):
        ScoreSettings(label=bad)


def test_a_label_is_not_part_of_the_score_identity():
    spec = studies.get("monotonicity").spec
    a, b = ScoreSettings(label="one name"), ScoreSettings(label="another")
    assert a.slug == b.slug and identity(a, spec, "sha") == identity(b, spec, "sha")
    assert "label" not in score_settings.IDENTITY_KEYS


def test_the_analysis_prints_labels_and_keeps_the_slug_beside_them(tmp_path):
    run = simulated_run(tmp_path, {"zeta": lambda p: p["monotonicity"] == "upward", "alpha": lambda p: p["label"]},
                        labels={"zeta": "Zeta <b>model</b> & co"})
    df = load_scores(run)
    assert set(df["model"]) == {"Zeta <b>model</b> & co", "alpha"}  # a sidecar without one: derived
    assert df.attrs["slugs"] == {"Zeta <b>model</b> & co": "zeta", "alpha": "alpha"}
    assert (df.loc[df["model"] == "alpha", "slug"] == "alpha").all()
    from nbutils import items
    from nbutils.report import items_html

    html = str(items_html(items.items(run), "intro", []))  # user text in HTML: escaped
    assert "Zeta &lt;b&gt;model&lt;/b&gt; &amp; co" in html and "<b>model</b>" not in html


def test_two_score_files_with_one_label_are_refused_naming_both(tmp_path):
    run = simulated_run(tmp_path, {"a": lambda p: p["label"], "b": lambda p: p["label"]},
                        labels={"a": "Same", "b": "Same"})
    with pytest.raises(ValueError, match=r"^label: .*scores/a\.json and .*scores/b\.json both go by 'Same'"):
        load_scores(run)


def test_the_score_notebook_refuses_a_label_another_model_of_the_run_goes_by(tmp_path):
    run = simulated_run(tmp_path, {"a": lambda p: p["label"]}, labels={"a": "Mine"})
    runstore.check_label_free(run, "Mine", "a")  # the model's own files
    runstore.check_label_free(run, "Other", "b")
    with pytest.raises(ValueError, match=r"^label: .*scores/a\.json already goes by 'Mine', the label of the model "
                                         r"scored now as b"):
        runstore.check_label_free(run, "Mine", "b")


def test_the_sweep_refuses_two_model_files_with_one_label_before_anything_runs(tmp_path):
    from nbutils.sweep import run_sweep

    files = []
    for name in ("one", "two"):
        f = tmp_path / f"{name}.yaml"
        f.write_text("model: smollm2-135m-instruct\nlabel: The model\n" + ("quantization: 8bit\n" if name == "two" else ""))
        files.append(str(f))
    with pytest.raises(ValueError, match=r"^label: .*one\.yaml and .*two\.yaml both go by 'The model'"):
        run_sweep(None, str(tmp_path / "run"), "params/monotonicity/datasets/control.yaml", files)
    assert not (tmp_path / "run").exists(), "refused before anything is generated"


def test_a_changed_label_is_written_to_the_sidecar_without_scoring_again(tmp_path):
    """The sweep's skip of a model already scored: a new label replaces the sidecar's, the scores stay as written."""
    from nbutils.sweep._sweep import _relabel

    run = tmp_path / "control"
    shutil.copytree(CONTROL, run)
    spec = studies.get("monotonicity").spec
    p = {**studies.get("monotonicity").score_defaults,
         **model_files.resolve_params(yaml.safe_load(CONTROL_FILE.read_text()), CONTROL_FILE), "device": "cpu",
         "dtype": "float32", "label": "The control, renamed"}
    parquet = (run / "scores" / f"{SLUG}.parquet").read_bytes()
    assert runstore.is_done(run, spec, p), "a label is not what was scored"
    _relabel(run, spec, p)
    assert json.loads((run / "scores" / f"{SLUG}.json").read_text())["label"] == "The control, renamed"
    assert (run / "scores" / f"{SLUG}.parquet").read_bytes() == parquet and runstore.is_done(run, spec, p)
    assert "The control, renamed" in set(load_scores(run)["model"])


def test_two_labels_derived_alike_go_by_their_slugs_and_a_given_one_alike_is_refused(tmp_path):
    """Two checkpoints named alike in different folders derive one label: the results name them by their slugs."""
    assert labels.distinct({"a.yaml": ("ckpt", False, "ckpt-1a"), "b.yaml": ("ckpt", False, "ckpt-2b"),
                            "c.yaml": ("C", True, "c")}) == {"a.yaml": "ckpt-1a", "b.yaml": "ckpt-2b", "c.yaml": "C"}
    with pytest.raises(ValueError, match="a.yaml and c.yaml both go by 'A'"):
        labels.distinct({"a.yaml": ("A", False, "a"), "b.yaml": ("B", True, "b"), "c.yaml": ("A", True, "c")})
    run = simulated_run(tmp_path, {"a": lambda p: p["label"], "b": lambda p: p["label"]})  # both derive ...
    slugs = []
    for name in ("a", "b"):  # two checkpoints of one name in two folders, each score file named for its own
        folder = tmp_path / name / "checkpoint-100"
        folder.mkdir(parents=True)
        slugs.append(paths.model_slug(str(folder)))
        side = run / "scores" / f"{name}.json"
        side.write_text(json.dumps(dict(json.loads(side.read_text()), model=str(folder))))
        for ext in (".json", ".parquet"):
            side.with_suffix(ext).rename(side.parent / f"{slugs[-1]}{ext}")
    assert set(load_scores(run)["model"]) == set(slugs) and slugs[0] != slugs[1]
    runstore.check_label_free(run, "checkpoint-100", "c", given=False)  # ... so a third derived alike is not refused
    with pytest.raises(ValueError, match="already goes by 'checkpoint-100'"):
        runstore.check_label_free(run, "checkpoint-100", "c", given=True)
