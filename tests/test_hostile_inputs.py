"""Hostile inputs: every user-causable mistake gives one clear error that names the parameter or file, before any
model loads where that is possible, and leaves every file that already existed exactly as it was."""
from __future__ import annotations

import json
import os
import socket
import shutil

import pandas as pd
import pytest
import yaml

from nbutils.analysis import _run as analysis_run
from nbutils import artifacts, paths, runstore, studies
from nbutils.engine import models, run as scoring
from nbutils.studies.monotonicity import dataset as mono
from nbutils.studies.negation import dataset as neg
from nbutils.sweep import check_parameters
from nbutils.score_settings import ScoreSettings
from nbutils.sweep._sweep import run_lock, run_sweep

ROOT = paths.repo_root()
SPEC = studies.get("monotonicity").spec
NSPEC = studies.get("negation").spec
GOOD = dict(concepts=["more than 1/2", "less than 1/2"], conditions=["concept_learning", "explicit"],
            prompts_per_concept=4, n_examples=6, seed=0)


@pytest.fixture()
def run(tmp_path):
    """A run directory with a prompts file and a finished score file (as a researcher would have)."""
    r = tmp_path / "run"
    mono.write_prompts(mono.generate_prompts(**GOOD), r, GOOD)
    scores = paths.score_file(r, "some-model")
    scores.parent.mkdir(parents=True)
    artifacts.write_parquet(pd.DataFrame({"prompt_id": ["x"], "logp_yes": [-1.0]}), scores)
    artifacts.write_json({"complete": True, "model": "some-model", "dataset_sha256": "0" * 64, "scorer": "choices",
                          "dataset_file": "prompts.parquet", "id_column": "prompt_id"}, paths.sidecar(scores))
    return r


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): artifacts.sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def refused(run_dir, fn, match, exc=ValueError):
    """``fn()`` raises ``exc`` matching ``match`` and no file under ``run_dir`` changed, appeared or vanished."""
    before = snapshot(run_dir)
    with pytest.raises(exc, match=match):
        fn()
    assert snapshot(run_dir) == before


def yaml_file(tmp_path, name, data) -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return str(p)


# ---------------------------------------------------------------- dataset parameters (study 1)

@pytest.mark.parametrize("change, match", [
    (dict(concepts=["around 1/2"]), "^concepts:"),
    (dict(concepts=["more than 3/2"]), "^concepts?:"),
    (dict(concepts=["more than 99"]), r"^concepts: 'more than 99' has 1 positive"),
    (dict(concepts="more than 1/2"), "^concepts:"),
    (dict(concepts=["more than 1/2", "more than 1/2"]), "^concepts: duplicates"),
    (dict(conditions=["implicit"]), "^conditions:"),
    (dict(prompts_per_concept=5), "^prompts_per_concept: must be even"),
    (dict(prompts_per_concept=0), "^prompts_per_concept:"),
    (dict(n_examples=7), "^n_examples: must be even"),
    (dict(n_examples=6000), r"^n_examples: 6000 needs"),
    (dict(seed=-1), "^seed:"),
    (dict(seed=1.5), "^seed:"),
    (dict(seed=2**64), r"^seed: must be an integer from 0 to 9223372036854775807"),
    (dict(concepts=["more than 2/4", "more than 1/2", "less than 1/2"]),
     r"^concepts: 'more than 2/4' and 'more than 1/2' are the same concept \(threshold 1/2\)"),
    (dict(concepts=["more than 2/4", "less than 1/2"]),
     r"^concepts: 'more than 2/4' and 'less than 1/2' write one threshold two ways \('2/4', '1/2'\)"),
])
def test_bad_dataset_parameters(run, change, match):
    refused(run, lambda: mono.write_prompts(mono.generate_prompts(**{**GOOD, **change}), run, {**GOOD, **change}), match)


def test_other_parameters_into_an_existing_run_are_refused(run):
    other = {**GOOD, "seed": 1}
    refused(run, lambda: mono.write_prompts(mono.generate_prompts(**other), run, other), "^run_dir: .*other parameters",
            artifacts.OverwriteError)


def test_bad_warn_tokens(run):
    refused(run, lambda: mono.warn_if_long(mono.generate_prompts(**GOOD), 0), "^warn_tokens:")


# ---------------------------------------------------------------- run parameters, before any model loads

@pytest.mark.parametrize("bad, match", [
    (dict(batch_size=-2), "^batch_size:"), (dict(limit="all"), "^limit:"), (dict(limit_seed=-1), "^limit_seed:"),
    (dict(checkpoint_every=0), "^checkpoint_every:"), (dict(shard_index=1, num_shards=1), "^shard_index:"),
    (dict(pll_variant="word"), "^pll_variant:"), (dict(chat_template="yes"), "^chat_template:"),
    (dict(masked="no"), "^masked:"), (dict(spec=SPEC, masked=True), "^masked: answer choices need a causal LM"),
    (dict(spec=NSPEC, rescore_margin=0.5), "^rescore_margin: applies to answer choices only"),
])
def test_bad_run_parameters(run, bad, match):
    spec = bad.pop("spec", None)
    refused(run, lambda: ScoreSettings.from_params(spec, **bad), match)


def test_a_dataset_edited_after_it_was_written_is_refused_before_scoring(run):
    p = paths.prompts_path(run)
    df = pd.read_parquet(p)
    artifacts.write_parquet(df.assign(label=~df["label"]), p)
    refused(run, lambda: runstore.read_dataset(run, SPEC), r"^run_dir: .*prompts.parquet does not match the sha256")


def test_no_dataset_names_the_notebook_that_makes_it(tmp_path):
    tmp_path.joinpath("empty").mkdir()
    refused(tmp_path / "empty", lambda: runstore.read_dataset(tmp_path / "empty", NSPEC),
            r"^run_dir: no dataset at .*stimuli.parquet; run notebooks/negation/01_stimuli.ipynb")


def test_prompts_longer_than_the_window_are_an_error(run, tiny_model_dir):
    lm = models.load_model(str(tiny_model_dir), device="cpu")
    lm.model.config.max_position_embeddings = 100
    refused(run, lambda: scoring.score_run(run, lm, SPEC, progress=False),
            r"^context: 16 of 16 inputs are longer than the model's window of 100 tokens \(longest: '.*', \d+ tokens\)")


# ---------------------------------------------------------------- model parameters

@pytest.mark.parametrize("kwargs, match", [
    (dict(dtype="fp8"), "^dtype:"), (dict(device="gpu"), "^device:"), (dict(quantization="2bit"), "^quantization:"),
    (dict(threads=-1), "^threads:"), (dict(rescore_margin="wide"), "^rescore_margin:"),
])
def test_bad_model_parameters(run, tiny_model_dir, kwargs, match):
    refused(run, lambda: models.load_model(str(tiny_model_dir), **kwargs), match)


# ---------------------------------------------------------------- sweep and notebook parameters

def test_unknown_sweep_key(run, tmp_path):
    f = yaml_file(tmp_path, "s.yaml", {"run_dir": str(run), "dataset": "x", "models": ["y"], "n_boot": 5})
    refused(run, lambda: run_sweep(f), r"^sweep: .*unknown keys \['n_boot'\]")


def test_typo_in_a_dataset_parameter_is_an_error_not_a_default(run, tmp_path):
    ds = yaml_file(tmp_path, "d.yaml", {"concepts": ["more than 1/2"], "prompts_per_concep": 4})
    f = yaml_file(tmp_path, "s.yaml", {"run_dir": str(run), "dataset": ds,
                                       "models": [str(ROOT / "params/models/smollm2-135m-instruct.yaml")]})
    refused(run, lambda: run_sweep(f), r"^dataset .*d.yaml: unknown parameter\(s\) \['prompts_per_concep'\]")


def test_typo_in_the_analyze_block(run, tmp_path):
    f = yaml_file(tmp_path, "s.yaml", {"run_dir": str(run), "dataset": str(ROOT / "params/monotonicity/datasets/ci.yaml"),
                                       "models": [str(ROOT / "params/models/smollm2-135m-instruct.yaml")],
                                       "analyze": {"nboot": 50}})
    refused(run, lambda: run_sweep(f), r"^analyze block of .*: unknown parameter\(s\) \['nboot'\]")


def test_typo_in_a_model_file_and_a_model_file_without_a_model(run, tmp_path):
    ds = str(ROOT / "params/monotonicity/datasets/ci.yaml")
    typo = yaml_file(tmp_path, "m.yaml", {"model": "smollm2-135m-instruct", "quantisation": "4bit"})
    refused(run, lambda: run_sweep(None, str(run), ds, [typo]), r"^model .*m.yaml: unknown parameter\(s\) \['quantisation'\]")
    none = yaml_file(tmp_path, "n.yaml", {"dtype": "float32"})
    refused(run, lambda: run_sweep(None, str(run), ds, [none]), "^model: .*n.yaml does not name a `model`")


def test_a_sweep_file_that_is_not_yaml_and_an_unknown_study(run, tmp_path):
    p = tmp_path / "broken.yaml"
    p.write_text("run_dir: [unclosed\n")
    refused(run, lambda: run_sweep(p), "^sweep: .*broken.yaml is not valid YAML")
    f = yaml_file(tmp_path, "s.yaml", {"study": "personality", "run_dir": str(run), "dataset": "x", "models": ["y"]})
    refused(run, lambda: run_sweep(f), r"^study: must be one of \[")


def test_a_key_given_twice_is_refused_in_every_yaml_the_suite_reads(run, tmp_path):
    """PyYAML keeps the last of two equal keys without a word: a second ``run_dir`` would send the analysis to another
    run. Sweep, dataset and model files, ``-f`` parameter files and ``-p`` values all refuse it, naming key and lines."""
    from nbutils.__main__ import main

    ds, model = ROOT / "params/monotonicity/datasets/ci.yaml", ROOT / "params/models/smollm2-135m-instruct.yaml"
    sweep = tmp_path / "twice.yaml"
    sweep.write_text(f"run_dir: {run}\ndataset: {ds}\nmodels: [{model}]\nrun_dir: {tmp_path / 'other'}\n")
    refused(run, lambda: run_sweep(sweep), r"^sweep: .*twice.yaml: key 'run_dir' is given twice \(lines 1 and 4\)")
    assert not (tmp_path / "other").exists()
    d = tmp_path / "d.yaml"
    d.write_text("concepts: [more than 1/2]\nanalyze:\n  n_boot: 5\n  n_boot: 50\n")
    refused(run, lambda: run_sweep(None, str(run), str(d), [str(model)]), r"^dataset: .*d.yaml: key 'n_boot' is given twice \(lines 3 and 4\)")
    m = tmp_path / "m.yaml"
    m.write_text("model: smollm2-135m-instruct\ndtype: float32\ndtype: bfloat16\n")
    refused(run, lambda: run_sweep(None, str(run), str(ds), [str(m)]), r"^model: .*m.yaml: key 'dtype' is given twice")
    before = snapshot(run)
    assert main(["run", "notebooks/monotonicity/01_generate.ipynb", "-f", str(m)]) == 2
    assert main(["run", "notebooks/monotonicity/01_generate.ipynb", "-p", "run_dir", str(run),
                 "-p", "concepts", "{a: 1, a: 2}"]) == 2
    assert snapshot(run) == before
    assert artifacts.read_yaml("a: {b: 1}\nc: [1, 2]\n", "x") == {"a": {"b": 1}, "c": [1, 2]}, "nested keys may repeat across mappings"


def test_a_tab_in_yaml_keeps_the_line_and_column_and_says_tab(run, tmp_path):
    p = tmp_path / "tabbed.yaml"
    p.write_text("run_dir: x\nmodels:\n\t- a.yaml\n")
    refused(run, lambda: run_sweep(p), r"^sweep: .*tabbed.yaml is not valid YAML \(.* at line 3, column 1; YAML allows no "
                                       r"tabs for indentation: use spaces\)")
    folder = tmp_path / "a-folder.yaml"
    folder.mkdir()
    refused(run, lambda: run_sweep(folder), r"^sweep: .*a-folder.yaml is not a file")


def test_a_run_dir_that_is_a_file_a_truncated_sidecar_and_an_oversized_dataset(run, tmp_path):
    f = tmp_path / "not-a-folder"
    f.write_text("x")
    ds, model = ROOT / "params/monotonicity/datasets/ci.yaml", ROOT / "params/models/smollm2-135m-instruct.yaml"
    refused(run, lambda: run_sweep(None, str(f), str(ds), [str(model)]), r"^run_dir: .*not-a-folder is a file; give a folder")
    side = tmp_path / "cut.json"
    side.write_text('{"complete": true, "model": "m')
    with pytest.raises(ValueError, match=r"cut.json is not valid JSON \(Unterminated string .* at line 1, column \d+\): "
                                         "it was cut short or edited"):
        artifacts.read_json(side)
    refused(run, lambda: mono.generate_prompts(**dict(GOOD, prompts_per_concept=10**8)),
            r"^prompts_per_concept: 100000000 gives 400,000,000 prompts \(2 concepts × 2 conditions\), about "
            r"1,200.0 GB of text before scoring; at most 2,000,000")


def test_float16_on_a_cpu_is_said_to_be_slow(tiny_model_dir, capsys):
    models.load_model(str(tiny_model_dir), device="cpu", dtype="float16", rescore_margin=0)
    assert "dtype: float16 on a CPU is slow" in capsys.readouterr().out


def test_a_single_notebook_run_checks_its_parameters_first(run):
    from nbutils.__main__ import main

    before = snapshot(run)
    code = main(["run", "notebooks/monotonicity/01_generate.ipynb", "-p", "run_dir", str(run), "-p", "prompts_per_concep", "4"])
    assert code == 2 and snapshot(run) == before
    refused(run, lambda: check_parameters("notebooks/score.ipynb", {"modle": "x"}, "-p"), r"^-p: unknown parameter\(s\) \['modle'\]")


def test_a_run_directory_in_use_fails_fast_naming_its_holder(run):
    paths.lock_path(run).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": "now"}))

    def second():
        with run_lock(run):
            pass

    refused(run, second, rf"^run_dir: .* is in use by pid {os.getpid()} on ", RuntimeError)


def test_a_stale_lock_of_a_dead_process_is_taken_over(run, capsys):
    paths.lock_path(run).write_text(json.dumps({"pid": 2**22 + 12345, "host": socket.gethostname(), "started": "then",
                                                "command": "nbutils sweep params/demo.yaml"}))
    with run_lock(run) as lock:
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    out = capsys.readouterr().out
    assert "taking over a stale lock" in out and "nbutils sweep params/demo.yaml" in out
    assert not paths.lock_path(run).exists()


# ---------------------------------------------------------------- user stimulus files (negation)

@pytest.mark.parametrize("content, match", [
    ("item_id,context,form,sentence\nr1,consistent,affirmative,Caf\xe9\n".encode("latin-1"), "is not UTF-8 text"),
    (b"", "is empty"),
    (b"item_id,context,form,sentence\n", "has a header but no stimuli"),
    (b"item_id,context,form,sentence\n ,consistent,affirmative,A b.\n", "has a blank item_id"),
    (b"item_id,context,sentence\nr1,consistent,A b.\n", r"lacks columns \['form'\]"),
    (b"item_id,context,form,sentence\nr1,neutral,affirmative,A b.\n", "row 2 has context='neutral'"),
])
def test_bad_stimulus_files_name_the_file(run, tmp_path, content, match):
    p = tmp_path / "stim.csv"
    p.write_bytes(content)
    refused(run, lambda: neg.build_stimuli(str(p)), rf"^stimuli_csv: .*{match}")


def test_missing_stimulus_file_and_bad_structures(run, tmp_path):
    refused(run, lambda: neg.build_stimuli(str(tmp_path / "nope.csv")), "^stimuli_csv: .*does not exist")
    refused(run, lambda: neg.build_stimuli(structures=["since"]), "^structures:")
    refused(run, lambda: neg.build_stimuli(max_roots=0), "^max_roots:")


# ---------------------------------------------------------------- analysis

def test_analysis_with_no_usable_scores_says_why(run):
    from nbutils.studies.monotonicity.analysis import analyze_run

    refused(run, lambda: analyze_run(run), r"^run_dir: no complete scores of the current dataset .*some-model.json: stale")


# ---------------------------------------------------------------- score files and shards, trusted no more than datasets

@pytest.fixture(scope="module")
def scored(tmp_path_factory, tiny_model_dir):
    """A run scored whole and in two shards by the tiny model (float32): the files a researcher would have."""
    r = tmp_path_factory.mktemp("scored") / "run"
    mono.write_prompts(mono.generate_prompts(**GOOD), r, GOOD)
    lm = models.load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    scoring.score_run(r, lm, SPEC, progress=False)
    for i in range(2):
        scoring.score_run(r, lm, SPEC, progress=False, shard_index=i, num_shards=2)
    return r, paths.model_slug(str(tiny_model_dir))


def _copy(src, tmp_path):
    import shutil

    dst = tmp_path / "run"
    shutil.copytree(src, dst)
    return dst


def _rewrite(path, df, keep_sha=False):
    """Overwrite a score file by hand; the sidecar keeps its recorded sha256, or forgets it (an older file)."""
    artifacts.write_parquet(df, path)
    if not keep_sha:
        side = artifacts.read_json(paths.sidecar(path))
        side.pop("scores_sha256", None)
        artifacts.write_json(side, paths.sidecar(path))


def _shard(run, slug, i):
    return paths.score_file(run, slug, None, i, 2)


def test_a_shard_missing_a_row_or_replaced_by_another_is_not_merged(scored, tmp_path):
    src, slug = scored
    run = _copy(src, tmp_path / "a")
    s0 = pd.read_parquet(_shard(run, slug, 0))
    _rewrite(_shard(run, slug, 0), s0.iloc[1:])
    refused(run, lambda: runstore.merge_shards(run, slug, overwrite=True), r"^slug: the shards of .* together miss 1 of the 16 planned rows")
    run = _copy(src, tmp_path / "b")
    _shard(run, slug, 1).write_bytes(_shard(run, slug, 0).read_bytes())  # shard 1's file replaced by shard 0's
    refused(run, lambda: runstore.merge_shards(run, slug, overwrite=True), r"^slug: shard .*shard-1-of-2.parquet changed after it was written")
    _rewrite(_shard(run, slug, 1), s0)  # shard 1 holding shard 0's rows, its sidecar without a sha256
    refused(run, lambda: runstore.merge_shards(run, slug, overwrite=True), r"repeat 8 row id\(s\)")


def test_shards_of_two_splits_are_named(scored, tmp_path, tiny_model_dir):
    src, slug = scored
    run = _copy(src, tmp_path)
    side = artifacts.read_json(paths.sidecar(_shard(run, slug, 1)))
    odd = paths.score_file(run, slug, None, 2, 3)
    odd.write_bytes(_shard(run, slug, 1).read_bytes())
    artifacts.write_json(dict(side, num_shards=3, shard_index=2), paths.sidecar(odd))
    refused(run, lambda: runstore.merge_shards(run, slug), r"^slug: .* has shards of 2 different splits \(-of-2: .*; -of-3: ")


def test_a_merged_run_is_not_told_to_merge_again(scored, tmp_path):
    src, slug = scored
    run = _copy(src, tmp_path)
    for f in paths.scores_dir(run).glob(f"{slug}.parquet"):
        f.unlink()
        paths.sidecar(f).unlink()
    df, meta = runstore.merge_shards(run, slug)
    assert meta["scores_sha256"] == artifacts.sha256_file(paths.score_file(run, slug))
    scores = runstore.load_scores(run, SPEC)
    assert len(scores) == 16 and runstore.excluded_notes(scores) == []


@pytest.mark.parametrize("edit, note", [
    (lambda d: d.iloc[1:], "changed after it was written"),  # a row deleted, sidecar intact
    (lambda d: d.rename(columns={"correct": "ok"}), "changed after it was written"),
])
def test_an_edited_score_file_is_excluded_with_its_name(scored, tmp_path, edit, note):
    src, slug = scored
    run = _copy(src, tmp_path)
    path = paths.score_file(run, slug)
    _rewrite(path, edit(pd.read_parquet(path)), keep_sha=True)
    refused(run, lambda: runstore.load_scores(run, SPEC), rf"^run_dir: no complete scores .*{slug}.json: edited \(.*{note}")


@pytest.mark.parametrize("edit, note", [
    (lambda d: d.iloc[:2], r"its rows miss 14 of the 16 planned rows"),  # a "complete" file of 2 rows
    (lambda d: pd.concat([d, d.iloc[:1]]), r"its rows repeat 1 row id"),
    (lambda d: d.assign(prompt_id=d["prompt_id"].where(d.index > 0, "no-such-id")), r"hold 1 id\(s\) that are not planned"),
    (lambda d: d.assign(logp_yes=d["logp_yes"].where(d["choice"] == "Yes", 0.0),  # the option not chosen edited to 0.0
                        logp_no=d["logp_no"].where(d["choice"] == "No", 0.0)), r"'choice' is not the option with the highest"),
    (lambda d: d.assign(margin=d["margin"] + 0.5), r"'margin' disagrees with its log-probs"),
    (lambda d: d.drop(columns="correct"), r"has no 'correct' column"),
    (lambda d: d.assign(logp_no=d["logp_no"].where(d.index != 3, float("nan"))),  # a float16 overflow, say
     r"its log-probabilities are NaN or inf on 1 row\(s\) \(first: '.+'\); score that model again"),
])
def test_an_older_score_file_is_checked_by_its_rows(scored, tmp_path, edit, note):
    """A file whose sidecar has no sha256 (written before sidecars recorded one) is checked row by row."""
    src, slug = scored
    run = _copy(src, tmp_path)
    path = paths.score_file(run, slug)
    _rewrite(path, edit(pd.read_parquet(path)))
    refused(run, lambda: runstore.load_scores(run, SPEC), rf"{slug}.json: edited \(.*{note}")


def test_an_edited_file_beside_a_good_one_is_left_out_with_a_note(scored, tmp_path):
    src, slug = scored
    run = _copy(src, tmp_path)
    path = paths.score_file(run, slug)
    other = paths.score_file(run, "other-model")
    other.write_bytes(path.read_bytes())
    artifacts.write_json(artifacts.read_json(paths.sidecar(path)), paths.sidecar(other))
    _rewrite(other, pd.read_parquet(other).iloc[2:], keep_sha=True)
    scores = runstore.load_scores(run, SPEC)
    assert set(scores["slug"]) == {slug} and scores["model"].nunique() == 1
    assert any(n.startswith("not analysed: other-model.json is not as written: other-model.parquet changed after")
               for n in runstore.excluded_notes(scores))


def test_a_semicolon_csv_and_a_bad_batch_size_say_what_they_are(run, tmp_path):
    from nbutils.studies.common.prompt_files import read_table

    p = tmp_path / "items.csv"
    p.write_text("prompt;answer\nIs 3 > 2?;Yes\n")
    refused(run, lambda: read_table(str(p)), r"^data_file: items.csv line 1 has no commas but semicolons")
    refused(run, lambda: ScoreSettings(batch_size=0), r"^batch_size: must be 'auto' or an integer")


def test_an_edited_prompt_file_is_named_on_reload_and_in_the_analysis(tmp_path):
    from nbutils.studies.custom import analysis, dataset

    src = tmp_path / "items.csv"
    src.write_text("prompt,answer\nIs 3 > 2?,Yes\nIs 2 > 3?,No\n")
    params = dict(data_file=str(src), columns={}, choices=["Yes", "No"], option_format="text", group_by=[],
                  system=None, shuffle_options=False, seed=0)
    r = tmp_path / "run"
    dataset.write_items(dataset.load_items(**params), r, dataset.parameters(**params))
    assert analysis.source_notes(r) == []
    src.write_text("prompt,answer\nIs 3 > 2?,Yes\nIs 2 > 3?,Yes\n")
    refused(r, lambda: dataset.write_items(dataset.load_items(**params), r, dataset.parameters(**params)),
            r"^run_dir: .*items.parquet already holds a dataset made with other parameters \(data_file changed since "
            r"the dataset was made \(its sha256 differs\)\)", artifacts.OverwriteError)
    assert analysis.source_notes(r) and "changed after it was loaded" in analysis.source_notes(r)[0]


# ---------------------------------------------------------------- run directories nothing can redirect

GENERATE = "notebooks/monotonicity/01_generate.ipynb"
ANALYZE = "notebooks/monotonicity/03_analyze.ipynb"


def _cli(argv, capsys) -> tuple[int, str]:
    from nbutils.__main__ import main

    code = main(argv)
    return code, capsys.readouterr().err


@pytest.fixture()
def no_notebook_runs(monkeypatch):
    """The papermill runner replaced by a recorder (``notebooks.execute``, which `nbutils run` calls, and the sweep's
    own reference to it): what would have been executed, without a kernel."""
    from nbutils.sweep import _papermill as notebooks, _sweep as sweep

    calls = []

    def record(nb, out, params, kernel=None):
        calls.append((nb, out, params))

    monkeypatch.setattr(notebooks, "execute", record)
    monkeypatch.setattr(sweep, "execute", record)
    return calls


def test_a_str_parameter_keeps_what_was_typed(tmp_path, no_notebook_runs, capsys):
    """`#` would start a YAML comment and `x: 1` would be a mapping: a parameter declared str takes the text."""
    from nbutils.__main__ import _cli_params

    assert _cli_params(GENERATE, [("run_dir", "outputs/run #2"), ("seed", "3")]) == {"run_dir": "outputs/run #2",
                                                                                      "seed": 3}
    assert _cli_params(GENERATE, [("run_dir", "x: 1")]) == {"run_dir": "x: 1"}
    assert _cli_params(GENERATE, [("run_dir", "'quoted: text'")]) == {"run_dir": "quoted: text"}
    target = tmp_path / "run #2"
    code, err = _cli(["run", GENERATE, "-p", "run_dir", str(target)], capsys)
    assert code == 0, err
    (nb, out, params), = no_notebook_runs
    assert params["run_dir"] == str(target) and out == target / "notebooks" / "monotonicity_01_generate.ipynb"


def test_a_parameter_declared_as_a_union_takes_each_of_its_types(tmp_path):
    import nbformat

    from nbutils.__main__ import _cli_params

    union = tmp_path / "union.ipynb"  # a notebook whose parameter takes True, False or None
    cell = nbformat.v4.new_code_cell("from typing import Optional\n\nuse_r: Optional[bool] = None  # None: the host")
    cell.metadata["tags"] = ["parameters"]
    kernel = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    nbformat.write(nbformat.v4.new_notebook(cells=[cell], metadata=kernel), union)
    union = str(union)
    for value, parsed in (("false", False), ("null", None)):
        params = _cli_params(union, [("use_r", value)])
        assert params == {"use_r": parsed}
        check_parameters(union, params, "-p")
    with pytest.raises(ValueError, match=r"^use_r: -p: must be Optional\[bool\]"):
        check_parameters(union, _cli_params(union, [("use_r", "[1]")]), "-p")

    for value, parsed in (("all", "all"), ("[paper, list]", ["paper", "list"])):
        params = _cli_params(GENERATE, [("templates", value)])
        assert params == {"templates": parsed}
        check_parameters(GENERATE, params, "-p")


@pytest.mark.parametrize("notebook, name, value, match", [
    ("notebooks/custom/01_load.ipynb", "choices", "[Yes, No]",
     r"^choices: -p: must be a list of texts .*got a list \[True, False\]; YAML reads an unquoted .* quote each word"),
    (GENERATE, "prompts_per_concept", "yes", r"^prompts_per_concept: -p: must be int .*got a boolean True"),
    (GENERATE, "concepts", "{more than 1/2: 1}", r"^concepts: -p: must be list .*got a mapping"),
    ("notebooks/score.ipynb", "overwrite", "~", r"^overwrite: -p: must be bool .*got null None"),
    ("notebooks/score.ipynb", "batch_size", "on", r"^batch_size: -p: must not be a boolean \(its default is 'auto'\)"),
    (GENERATE, "templates", "on", r"^templates: -p: must be Union\[list, str\] .*got a boolean True"),
])
def test_a_value_yaml_turned_into_another_type_is_refused_with_a_hint(run, notebook, name, value, match, capsys):
    from nbutils.__main__ import _cli_params

    refused(run, lambda: check_parameters(notebook, _cli_params(notebook, [(name, value)]), "-p"), match)
    before = snapshot(run)
    code, err = _cli(["run", notebook, "-p", "run_dir", str(run), "-p", name, value], capsys)
    assert code == 2 and f"error: {name}: -p:" in err and snapshot(run) == before


def test_an_empty_run_dir_or_the_project_root_is_refused_saying_where_it_resolves(tmp_path, monkeypatch, capsys,
                                                                                 no_notebook_runs):
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    for typed in ('""', "''", " "):
        code, err = _cli(["run", GENERATE, "-p", "run_dir", typed], capsys)
        assert code == 2 and "run_dir: must be a non-empty path" in err and str(tmp_path) in err, err
    code, err = _cli(["run", GENERATE, "-p", "run_dir", "."], capsys)
    assert code == 2 and f"resolves to {tmp_path.resolve()}, the project root" in err
    with pytest.raises(ValueError, match="^run_dir: must be a non-empty path"):
        paths.check_run_dir("")
    with pytest.raises(ValueError, match="^run_dir: .* resolves to .*, the project root"):  # in a notebook, too
        mono.write_prompts(mono.generate_prompts(**GOOD), "", GOOD)
    assert not no_notebook_runs and list(tmp_path.iterdir()) == []


@pytest.fixture()
def live_holder(run):
    """The run's lock held by another live process (a sweep scoring it), as its lock file records it."""
    import subprocess

    proc = subprocess.Popen(["sleep", "60"])
    paths.lock_path(run).write_text(json.dumps({"pid": proc.pid, "host": socket.gethostname(), "token": "abc",
                                                "command": "nbutils sweep params/demo.yaml", "started": "2026-01-01"}))
    yield proc
    proc.kill()
    proc.wait()


def _writers(run):
    from nbutils.report import write_report
    from nbutils.studies.monotonicity.analysis import analyze_run

    return {
        "generate": lambda: mono.write_prompts(mono.generate_prompts(**{**GOOD, "seed": 1}), run, {**GOOD, "seed": 1},
                                               overwrite=True),
        "score": lambda: scoring.score_run(run, None, SPEC),  # refused before the model is touched
        "merge": lambda: runstore.merge_shards(run, "some-model"),
        "analyze": lambda: analysis_run.write_analysis(analysis_run.Analysis(pd.DataFrame()), run, {}),
        "analyze_run": lambda: analyze_run(run, use_r=False),
        "report": lambda: write_report(run, "monotonicity"),
    }


@pytest.mark.parametrize("writer", ["generate", "score", "merge", "analyze", "report"])
def test_every_writer_is_refused_while_another_process_holds_the_run(run, live_holder, writer):
    if writer == "report":  # the report needs an executed analysis to get as far as writing
        nb = paths.executed_notebook(run, ANALYZE)
        nb.parent.mkdir(parents=True)
        nb.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    refused(run, _writers(run)[writer],
            rf"^run_dir: .* is in use by pid {live_holder.pid} on .* \(command: nbutils sweep params/demo.yaml\) "
            r"since 2026-01-01", RuntimeError)


def test_nbutils_run_on_a_run_a_sweep_holds_is_refused_before_it_starts(run, live_holder, no_notebook_runs, capsys):
    before = snapshot(run)
    code, err = _cli(["run", GENERATE, "-p", "run_dir", str(run), "-p", "overwrite", "true"], capsys)
    assert code == 2 and f"in use by pid {live_holder.pid}" in err and "nbutils sweep params/demo.yaml" in err
    assert snapshot(run) == before and not no_notebook_runs


def test_the_kernels_a_lock_holder_starts_write_under_its_lock(run):
    """A notebook the holder runs (a child process inheriting the lock's token) writes; an outsider is refused."""
    import subprocess
    import sys

    code = ("import sys; from nbutils.studies.monotonicity import dataset as d; p = dict(concepts=['more than 1/2', "
            "'less than 1/2'], conditions=['concept_learning', 'explicit'], prompts_per_concept=4, n_examples=6, "
            "seed=2); d.write_prompts(d.generate_prompts(**p), sys.argv[1], p, overwrite=True)")
    env = {k: v for k, v in os.environ.items() if k != "NBUTILS_RUN_LOCKS"}
    env["PYTHONPATH"] = str(ROOT)
    with run_lock(run):
        inside = subprocess.run([sys.executable, "-c", code, str(run)], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                                capture_output=True, text=True)
        outside = subprocess.run([sys.executable, "-c", code, str(run)], env=env, capture_output=True, text=True)
    assert inside.returncode == 0, inside.stderr
    assert outside.returncode != 0 and f"is in use by pid {os.getpid()}" in outside.stderr
    assert artifacts.read_json(paths.sidecar(paths.prompts_path(run)))["parameters"]["seed"] == 2
    assert not paths.lock_path(run).exists()


def test_a_sweep_whose_dataset_changes_under_it_stops_and_does_not_analyse(tmp_path, monkeypatch):
    from nbutils.sweep import _sweep as sweep

    run_dir = tmp_path / "run"
    steps = []

    def fake_execute(nb, out, params, kernel=None):
        steps.append(nb)
        if nb == GENERATE:
            mono.write_prompts(mono.generate_prompts(**GOOD), params["run_dir"], GOOD)
        elif nb == "notebooks/score.ipynb":  # meanwhile, the dataset is replaced (another writer, or by hand)
            other = {**GOOD, "seed": 9}
            mono.write_prompts(mono.generate_prompts(**other), params["run_dir"], other, overwrite=True)

    monkeypatch.setattr(sweep, "execute", fake_execute)
    ds = yaml_file(tmp_path, "ds.yaml", GOOD)
    models = [yaml_file(tmp_path, f"m{i}.yaml", {"model": f"org/model-{i}"}) for i in range(3)]
    with pytest.raises(sweep.SweepFailed, match=r"prompts.parquet changed while the sweep ran .*nothing more was "
                                                r"scored or analysed"):
        run_sweep(run_dir=str(run_dir), dataset=ds, models=models)
    assert steps == [GENERATE, "notebooks/score.ipynb"] and not paths.lock_path(run_dir).exists()


def test_a_kernel_that_dies_before_its_handshake_is_started_again_and_other_errors_are_not(run, monkeypatch):
    """Two kernels started at once on one host can pick the same port: the loser dies before running a cell, and
    the notebook is started again; an error from a cell that ran is not retried."""
    import nbformat
    import papermill as pm

    from nbutils.sweep import _papermill as notebooks

    calls = []

    def flaky(src, out, **kw):
        calls.append(out)
        if len(calls) == 1:
            raise RuntimeError(notebooks.KERNEL_DIED_AT_START)
        nbformat.write(nbformat.v4.new_notebook(), out)

    monkeypatch.setattr(pm, "execute_notebook", flaky)
    monkeypatch.setattr(notebooks.time, "sleep", lambda s: None)
    out = paths.executed_notebook(run, ANALYZE)
    notebooks.execute(ANALYZE, out, {"run_dir": str(run)})
    assert len(calls) == 2 and json.loads(out.read_text())["nbformat"] == 4
    calls.clear()

    def always_dies(src, out, **kw):
        calls.append(out)
        raise RuntimeError(notebooks.KERNEL_DIED_AT_START)

    monkeypatch.setattr(pm, "execute_notebook", always_dies)
    with pytest.raises(RuntimeError, match=notebooks.KERNEL_DIED_AT_START):
        notebooks.execute(ANALYZE, out, {"run_dir": str(run)})
    assert len(calls) == notebooks.KERNEL_STARTS, "it gives up after a few starts"
    calls.clear()

    def cell_error(src, out, **kw):
        calls.append(out)
        raise RuntimeError("a cell failed")

    monkeypatch.setattr(pm, "execute_notebook", cell_error)
    with pytest.raises(RuntimeError, match="a cell failed"):
        notebooks.execute(ANALYZE, out, {"run_dir": str(run)})
    assert len(calls) == 1


def test_an_executed_notebook_replaces_a_planted_link_instead_of_writing_through_it(run, tmp_path, monkeypatch):
    import nbformat
    import papermill as pm

    from nbutils.sweep._papermill import execute

    def fake_papermill(src, out, **kw):  # papermill writes the executed copy to the path it is given
        nbformat.write(nbformat.v4.new_notebook(), out)

    monkeypatch.setattr(pm, "execute_notebook", fake_papermill)
    victim = tmp_path / "victim.ipynb"
    victim.write_text("keep me")
    out = paths.executed_notebook(run, ANALYZE)
    out.parent.mkdir(parents=True)
    out.symlink_to(victim)
    execute(ANALYZE, out, {"run_dir": str(run)})
    assert victim.read_text() == "keep me" and not out.is_symlink() and json.loads(out.read_text())["nbformat"] == 4
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # the mode open() would give, not a temporary file's 0600
    log = paths.kernel_log(out)
    log.unlink()
    log.symlink_to(victim)
    with pytest.raises(ValueError, match="^kernel log: cannot open .*symbolic link"):
        execute(ANALYZE, out, {"run_dir": str(run)})
    assert victim.read_text() == "keep me"


def test_a_linked_folder_inside_the_run_is_not_written_through(run, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    paths.tables_dir(run).symlink_to(elsewhere, target_is_directory=True)
    a = analysis_run.Analysis(pd.DataFrame(), tables={"t": pd.DataFrame({"x": [1]})})
    refused(run, lambda: analysis_run.write_analysis(a, run, {}), r"^run_dir: .*tables is a symbolic link")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("slug", ["../../../elsewhere/x", "/tmp/x", "..", "a\\b", ""])
def test_a_slug_must_be_a_plain_name(run, tmp_path, slug, capsys):
    refused(run, lambda: runstore.merge_shards(run, slug), r"^slug: must be a plain file name")
    refused(run, lambda: paths.score_file(run, slug), r"^slug: must be a plain file name")
    before = snapshot(run)
    code, err = _cli(["merge", str(run), slug], capsys)
    assert code == 2 and "slug: must be a plain file name" in err and snapshot(run) == before


def test_the_output_notebook_may_not_be_a_run_file_or_the_source(run, no_notebook_runs, capsys):
    scores = paths.score_file(run, "some-model")
    for output, match in [(scores, "is not a notebook file"), (paths.sidecar(scores), "is not a notebook file"),
                          (ROOT / GENERATE, "is the notebook being run"),
                          (ROOT / ANALYZE, "under the suite's notebooks/ folder")]:
        before = snapshot(run), artifacts.sha256_file(ROOT / GENERATE)
        code, err = _cli(["run", GENERATE, str(output), "-p", "run_dir", str(run)], capsys)
        assert code == 2 and match in err, err
        assert (snapshot(run), artifacts.sha256_file(ROOT / GENERATE)) == before
    assert not no_notebook_runs


@pytest.mark.parametrize("params, match", [
    ({"n_boot": -5}, r"^n_boot: .*must be an integer ≥ 1, got -5"),
    ({"n_boot": 0}, r"^n_boot: .*must be an integer ≥ 1"),
    ({"rules_k": 0}, r"^rules_k: .*must be an integer ≥ 1 or null"),
])
def test_numbers_are_checked_with_their_range_before_the_work_starts(run, params, match):
    from nbutils.studies.monotonicity.analysis import MonotonicityParams, analyze_run

    refused(run, lambda: check_parameters(ANALYZE, params, "-p", record=MonotonicityParams), match)
    refused(run, lambda: analyze_run(run, **params), match.replace(".*must", "must").replace(" or null", ""))


@pytest.mark.parametrize("notebook, params, match", [
    ("notebooks/personas/03_analyze.ipynb", {"n_resamples": 5}, r"^n_resamples: .*≥ 99"),
    ("notebooks/cues/01_profile.ipynb", {"top_k": 0}, r"^top_k: .*≥ 1"),
    ("notebooks/cues/01_profile.ipynb", {"alpha": 1.5}, r"^alpha: .*strictly between 0 and 1"),
    ("notebooks/score.ipynb", {"limit": -1}, r"^limit: .*≥ 1 or null"),
    ("notebooks/personas/01_generate.ipynb", {"logic_share": 2}, r"^logic_share: .*from 0 to 1"),
])
def test_other_numeric_parameters_are_checked_with_their_range(run, notebook, params, match):
    from nbutils import studies

    record = studies.params_of_notebook(notebook)  # an analysis notebook's: its parameter record, as `run` passes it
    refused(run, lambda: check_parameters(notebook, params, "-p", record=record), match)


def test_rules_k_defaults_to_what_the_dataset_allows():
    import numpy as np

    from nbutils.studies.common import rules

    assert check_parameters(ANALYZE, {"rules_k": None}, "-p") is None
    from nbutils.sweep import _parameters as parameters
    assert parameters.declared(ANALYZE)["rules_k"][1] is None
    four = mono.generate_prompts(["more than 1/2", "less than 1/2"], prompts_per_concept=4, n_examples=4)
    scores = four.assign(model="m", pred_yes=np.arange(len(four)) % 2 == 0)
    table, _ = rules.rule_tables(scores)  # the default fits a dataset of 4 examples per prompt
    assert not table.empty
    with pytest.raises(ValueError, match=r"^rules_k: the knn_majority rule needs an integer 1 ≤ k ≤ 4"):
        rules.rule_tables(scores, k=5)


def test_executor_slurm_without_slurm_is_refused_before_anything_is_generated(tmp_path, monkeypatch, no_notebook_runs):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    ds = yaml_file(tmp_path, "ds.yaml", GOOD)
    model = yaml_file(tmp_path, "m.yaml", {"model": "org/model"})
    with pytest.raises(Exception, match=r"executor: .*slurm needs a SLURM cluster.*no sbatch or srun.*"
                                        r"executor: submitit-local"):
        run_sweep(run_dir=str(tmp_path / "run"), dataset=ds, models=[model], executor="slurm")
    assert not no_notebook_runs and not paths.prompts_path(tmp_path / "run").exists()


def test_merging_names_the_shards_that_are_there(run):
    for i in range(2):
        artifacts.write_json({"num_shards": 2, "shard_index": i}, paths.sidecar(paths.score_file(run, "m", 1, i, 2)))
    refused(run, lambda: runstore.merge_shards(run, "m"),
            r"^slug: no shards named m.shard-\*-of-\*.json under .*; the run holds m.limit-1.shard-0-of-2.json, "
            r"m.limit-1.shard-1-of-2.json; these are shards of a limited run: pass --limit 1")
    refused(run, lambda: runstore.merge_shards(run, "other"), r"^slug: no shards named other.shard.*the run holds m\.")


def test_a_full_disk_names_the_file_and_leaves_the_old_one(run, monkeypatch):
    import errno

    summary = paths.summary_path(run)
    artifacts.write_json({"old": True}, summary)

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    a = analysis_run.Analysis(pd.DataFrame(), tables={"accuracy": pd.DataFrame({"x": [1]})})
    before = snapshot(run)
    with pytest.raises(artifacts.DiskFullError, match=r"no space left on the device while writing .*tables/accuracy.csv "
                       r"\(.* MiB free there now\); the file it would replace is unchanged"):
        analysis_run.write_analysis(a, run, {})
    # the analysis's earlier results are gone rather than left looking like this one's; nothing else changed
    assert not summary.exists() and snapshot(run) == {k: v for k, v in before.items() if k != "summary.json"}
    artifacts.write_json({"old": True}, summary)
    monkeypatch.undo()
    monkeypatch.setattr(pd.DataFrame, "to_parquet", lambda self, *a, **k: (_ for _ in ()).throw(
        OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")))  # pyarrow's way
    refused(run, lambda: artifacts.write_parquet(pd.DataFrame({"x": [1]}), paths.score_file(run, "some-model")),
            r"no space left on the device while writing .*scores/some-model.parquet", artifacts.DiskFullError)
    monkeypatch.setattr(artifacts.json, "dumps", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(OSError, match="full"):  # not a write: json.dumps failing is not the disk
        artifacts.write_json({"new": True}, summary)
    assert artifacts.read_json(summary) == {"old": True}


# ---------------------------------------------------------------- colab-links: nothing refused is half-written

@pytest.fixture()
def fork(tmp_path, monkeypatch):
    """A copy of the checkout's notebooks, README, docs and mkdocs.yml that `colab-links` rewrites."""
    import shutil

    fork = tmp_path / "fork"
    shutil.copytree(ROOT / "notebooks", fork / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(ROOT / "docs", fork / "docs", ignore=shutil.ignore_patterns("img"))
    for name in ("README.md", "mkdocs.yml"):
        shutil.copy2(ROOT / name, fork / name)
    monkeypatch.setattr(paths, "repo_root", lambda: fork)
    return fork


@pytest.mark.parametrize("option, value, match", [
    ("--branch", 'x"y', "branch: must be a git branch name"), ("--branch", "dev/x?y=1#frag", "branch:"),
    ("--branch", "a..b", "branch:"), ("--branch", "-x", "branch:"), ("--branch", "x.lock", "branch:"),
    ("--branch", "dev/", "branch:"), ("--branch", "a b", "branch:"), ("--branch", "", "branch:"),
    ("--repository", "../..", "repository: must be owner/name"), ("--repository", "a/b/c", "repository:"),
    ("--repository", "-owner/x", "repository:"), ("--repository", "owner/..", "repository:"),
    ("--repository", "o" * 40 + "/x", "repository:"), ("--repository", "owner/a\"b", "repository:"),
    ("--repository", "owner/name.git", "repository:"),
])
def test_colab_links_refuses_a_bad_repository_or_branch_and_writes_nothing(fork, option, value, match, capsys):
    before = snapshot(fork)
    code, err = _cli(["colab-links", f"{option}={value}"], capsys)
    assert code == 2 and match in err and repr(value) in err, err
    assert snapshot(fork) == before


def test_colab_links_keeps_every_notebook_a_notebook_and_can_point_back(fork, capsys):
    import nbformat

    before = snapshot(fork)
    assert _cli(["colab-links", "--repository", "some-one/probes.fork", "--branch", "dev/x_1.2"], capsys)[0] == 0
    for nb in fork.joinpath("notebooks").rglob("*.ipynb"):
        cells = nbformat.read(nb, as_version=4).cells
        assert colab_links(cells[0].source) == [("some-one/probes.fork", "dev/x_1.2", nb.relative_to(fork).as_posix())]
    assert _cli(["colab-links"], capsys)[0] == 0
    assert snapshot(fork) == before


def colab_links(text):
    from nbutils import colab

    return colab.badge_links(text)


def test_colab_links_does_not_follow_a_link_out_of_the_repository(fork, tmp_path, capsys):
    outside = tmp_path / "elsewhere.md"
    outside.write_text((ROOT / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    (fork / "docs" / "linked.md").symlink_to(outside)
    before, kept = snapshot(fork), outside.read_text(encoding="utf-8")
    code, err = _cli(["colab-links", "--repository", "someone/fork"], capsys)
    assert code == 2 and "linked.md is a symbolic link to" in err and "outside the repository" in err, err
    assert snapshot(fork) == before and outside.read_text(encoding="utf-8") == kept


# ---------------------------------------------------------------- numbers are finite, options checked, nothing twice

SCORE = "notebooks/score.ipynb"


@pytest.mark.parametrize("notebook, name, value", [
    (SCORE, "rescore_margin", ".nan"), (SCORE, "rescore_margin", ".inf"), (SCORE, "rescore_margin", ".NaN"),
    ("notebooks/personas/01_generate.ipynb", "logic_share", ".nan"),
    ("notebooks/cues/01_profile.ipynb", "alpha", ".Inf"),
])
def test_nan_and_infinity_are_refused_by_name(run, notebook, name, value, no_notebook_runs, capsys):
    before = snapshot(run)
    code, err = _cli(["run", notebook, "-p", "run_dir", str(run), "-p", name, value], capsys)
    assert code == 2 and f"error: {name}: -p: must be a finite number, got " in err, err
    f = run.parent / "params.yaml"
    f.write_text(f"{name}: {value}\n")
    code, err = _cli(["run", notebook, "-f", str(f), "-p", "run_dir", str(run)], capsys)
    assert code == 2 and f"error: {name}: " in err and "must be a finite number" in err, err
    assert snapshot(run) == before and not no_notebook_runs


def test_nan_in_a_sweep_file_and_in_the_settings_is_refused(run, tmp_path):
    from nbutils import score_settings

    model = tmp_path / "m.yaml"
    model.write_text("model: org/m\nrescore_margin: .nan\n")
    ds = yaml_file(tmp_path, "ds.yaml", GOOD)
    refused(run, lambda: run_sweep(run_dir=str(run), dataset=ds, models=[str(model)]),
            r"^rescore_margin: model .*m.yaml: must be a finite number, got nan")
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"^rescore_margin: must be 'auto' \(calibrated\) or a finite number"):
            score_settings.check_rescore_margin(bad)


def test_a_parameter_given_twice_with_p_is_refused(run, no_notebook_runs, capsys):
    before = snapshot(run)
    code, err = _cli(["run", GENERATE, "-p", "run_dir", str(run), "-p", "seed", "1", "-p", "seed", "2"], capsys)
    assert code == 2 and "error: seed: -p gives it 2 times ('1', '2'); give it once" in err, err
    assert snapshot(run) == before and not no_notebook_runs


@pytest.mark.parametrize("option", ["--run-dir", "--dataset", "--study", "--model"])
def test_an_empty_sweep_option_is_refused_not_replaced_by_the_file(tmp_path, monkeypatch, option, no_notebook_runs,
                                                                   capsys):
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    f = yaml_file(tmp_path, "s.yaml", {"run_dir": "outputs/r", "dataset": yaml_file(tmp_path, "ds.yaml", GOOD),
                                       "models": [yaml_file(tmp_path, "m.yaml", {"model": "org/m"})]})
    code, err = _cli(["sweep", f, f"{option}="], capsys)
    assert code == 2 and ("run_dir: must be a non-empty path" if option == "--run-dir"
                          else f"{option}: must not be empty") in err, err
    assert not no_notebook_runs and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("argv", [["sweep", "params/demo.yaml", "--limit", "-1"], ["sweep", "params/demo.yaml",
                                  "--limit", "0"], ["sweep", "params/demo.yaml", "--n-boot", "0"],
                                  ["merge", "outputs/x", "m", "--limit", "-1"],
                                  ["merge", "outputs/x", "m", "--limit=x"]])
def test_every_number_option_is_range_checked(argv, capsys):
    from nbutils.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and "must be an integer ≥ 1" in capsys.readouterr().err


def test_merge_and_the_sweep_check_their_limit_when_called_from_python(run, tmp_path):
    refused(run, lambda: runstore.merge_shards(run, "m", limit=-1), r"^limit: must be an integer ≥ 1, got -1")
    refused(run, lambda: run_sweep(run_dir=str(run), dataset="x", models=["y"], limit=0), r"^--limit: must be")


def test_a_boolean_for_a_number_suggests_a_number(run, no_notebook_runs, capsys):
    code, err = _cli(["run", ANALYZE, "-p", "run_dir", str(run), "-p", "n_boot", "true"], capsys)
    assert code == 2 and "give a number, e.g. -p n_boot 2000 (its default)" in err and '"Yes"' not in err, err
    code, err = _cli(["run", SCORE, "-p", "run_dir", str(run), "-p", "batch_size", "on"], capsys)
    assert code == 2 and "give a value such as its default, -p batch_size auto" in err, err


# ---------------------------------------------------------------- errors that say what is wrong and what to do

@pytest.mark.parametrize("plant, found", [
    (lambda lock: lock.mkdir(), "is a folder"),
    (lambda lock: lock.write_text("garbage\x00"), "is a file of 8 bytes that is not a lock record"),
    (lambda lock: lock.write_text('{"pid": "x"}'), "is a file of 12 bytes that is not a lock record"),
    (lambda lock: lock.write_text(""), "is an empty file"),
    (lambda lock: lock.symlink_to(lock.parent / "gone"), r"is a symbolic link to .*gone \(which does not exist\)"),
])
def test_a_lock_that_is_not_a_lock_record_is_named_with_what_is_there(run, plant, found, capsys):
    lock = paths.lock_path(run)
    plant(lock)
    refused(run, _writers(run)["merge"], rf"^run_dir: the lock {lock} {found}.*remove it \(rm -r '{lock}'\)",
            RuntimeError)
    code, err = _cli(["merge", str(run), "some-model"], capsys)
    assert code == 2 and "None" not in err and str(lock) in err, err


def test_a_file_or_a_name_too_long_as_run_dir_is_said_in_words(run, tmp_path, capsys):
    a_file = run / "notes.txt"
    a_file.write_text("mine")
    code, err = _cli(["merge", str(a_file), "some-model"], capsys)
    assert code == 2 and f"run_dir: {a_file} is a file; give a folder" in err and "Errno" not in err, err
    long = tmp_path / ("r" * 300)
    code, err = _cli(["merge", str(long), "some-model"], capsys)
    assert code == 2 and "run_dir: the name 'rrrr" in err and "300 bytes long" in err and "Errno" not in err, err
    with pytest.raises(ValueError, match="300 bytes long; this file system allows 255"):
        mono.write_prompts(mono.generate_prompts(**GOOD), long, GOOD)
    assert a_file.read_text() == "mine" and not list(tmp_path.glob("rrr*"))


@pytest.mark.parametrize("model, said", [
    ("/no/such/model", "no such folder /no/such/model"), ("./models/mine", "no such folder"),
    ("a/b/c", "no such folder"), (__file__, "is a file, not a model folder"), ("/", "holds no config.json"),
])
def test_a_missing_local_model_is_no_such_folder_before_the_hub_is_asked(run, model, said):
    from nbutils.engine.settings import EngineSettings

    refused(run, lambda: models.load_model(model), rf"^model: .*{said}")
    with pytest.raises(ValueError, match=rf"^model: .*{said}"):
        EngineSettings(model=model)


def test_a_report_on_a_cut_off_analysis_names_the_file_and_says_it_did_not_finish(run, capsys):
    from nbutils.report import ReportError, write_report

    nb = paths.executed_notebook(run, ANALYZE)
    nb.parent.mkdir(parents=True)
    nb.write_text('{"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Resu')  # the disk filled up
    refused(run, lambda: write_report(run, "monotonicity"), rf"^report: {nb} is not a whole notebook .*cut short.*"
            r"the analysis did not finish; run `python -m nbutils run notebooks/monotonicity/03_analyze.ipynb",
            ReportError)
    code, err = _cli(["report", str(run)], capsys)
    assert code == 2 and str(nb) in err and "did not finish" in err, err


# ---------------------------------------------------------------- text from a user's file cannot run in a spreadsheet

HOSTILE_GROUPS = ("=HYPERLINK(\"http://x\",\"y\")", "@SUM(1+1)", "+1+1", "-2+3", "\tcmd", "'quoted")


def _formula_cells(folder) -> list[str]:
    """Every CSV cell under ``folder`` a spreadsheet would run as a formula: text that starts with = + - @ tab or CR
    and is not a number."""
    import csv

    bad = []
    for f in sorted(folder.rglob("*.csv")):
        for row in csv.reader(f.open(encoding="utf-8", newline="")):
            for cell in row:
                try:
                    float(cell)
                except ValueError:
                    if cell.startswith(artifacts.FORMULA_START):
                        bad.append(f"{f.name}: {cell!r}")
    return bad


def test_a_table_with_formula_text_is_written_safe_and_reads_back_the_same(tmp_path):
    df = pd.DataFrame({"group": list(HOSTILE_GROUPS), "n": range(6), "diff": [-1.5, 2.0, -0.25, 0.0, -3.0, 1.0],
                       "note": ["a", None, "-", "=", "-0.25", "@"]})  # "-0.25": a number written as text
    wide = df.set_index("group")[["diff"]].T  # group values as column names, as a pivot makes them
    artifacts.write_table(df, tmp_path / "t")
    artifacts.write_table(wide, tmp_path / "w", index=True)
    assert _formula_cells(tmp_path) == []
    text = (tmp_path / "t.csv").read_text(encoding="utf-8")
    assert "-1.5" in text and "'-" in text and "'-0.25" not in text and "'+1+1" in text  # numbers stay, formulas quoted
    pd.testing.assert_frame_equal(artifacts.read_table(tmp_path / "t.csv"), df)
    back = artifacts.read_table(tmp_path / "w.csv", index_col=0)
    assert list(back.columns) == list(HOSTILE_GROUPS) and back.to_numpy().tolist() == wide.to_numpy().tolist()


def test_a_custom_analysis_of_groups_named_like_formulas_writes_no_formula(tmp_path):
    import numpy as np

    from nbutils.studies.custom import analysis

    rng = np.random.default_rng(0)
    rows = []
    for g in HOSTILE_GROUPS:
        for i in range(12):
            gold, choice = ("Yes", "No")[i % 2], ("Yes", "No")[rng.integers(2)]
            rows.append({"model": "m", "row_id": f"{g}::{i}", "item_id": f"i{i}", "group": g, "row": len(rows) + 1,
                         "answer": gold, "answer_text": gold, "choice": choice, "choice_norm_token": choice,
                         "choice_norm_char": choice, "correct": choice == gold, "correct_norm_token": choice == gold,
                         "correct_norm_char": choice == gold, "margin": rng.normal(), "n_options": 2,
                         "scored": json.dumps(["Yes", "No"]), "prompt": f"p{i}"})
    a = analysis.compute(pd.DataFrame(rows), n_boot=20)
    run_dir = tmp_path / "run"
    analysis.write(a, run_dir)
    written = sorted(paths.tables_dir(run_dir).glob("*.csv"))
    assert written and _formula_cells(paths.tables_dir(run_dir)) == []
    groups = [artifacts.read_table(f) for f in written if "group" in artifacts.read_table(f, nrows=0).columns]
    assert groups and all(set(HOSTILE_GROUPS) <= set(t["group"]) for t in groups[:1])  # read back as they were
    assert not [g for t in groups for g in t["group"].dropna() if g not in HOSTILE_GROUPS and g.startswith("'")]


# ---------------------------------------------------------------- the shipped samples are not a workspace

SAMPLE_RUN = "outputs/samples/monotonicity"


def test_nothing_is_generated_scored_merged_analysed_or_reported_into_a_sample(no_notebook_runs, capsys):
    sample = ROOT / SAMPLE_RUN
    before = snapshot(sample)
    copy = r"work on a copy: `cp -r outputs/samples/monotonicity outputs/monotonicity_sample`"
    for writer in _writers(sample).values():
        with pytest.raises(ValueError, match=rf"^run_dir: .*monotonicity is a sample run that ships .*{copy}"):
            writer()
    for argv in (["run", GENERATE, "-p", "run_dir", SAMPLE_RUN, "-p", "overwrite", "true"],
                 ["run", ANALYZE, "-p", "run_dir", SAMPLE_RUN], ["run", SCORE, "-p", "run_dir", f"{SAMPLE_RUN}/."],
                 ["sweep", "params/demo.yaml", "--run-dir", f"{SAMPLE_RUN}/scores"], ["merge", SAMPLE_RUN, "m"],
                 ["report", SAMPLE_RUN]):
        code, err = _cli(argv, capsys)
        assert code == 2 and "is a sample run that ships with the suite" in err and "cp -r" in err, (argv, err)
    assert snapshot(sample) == before and not no_notebook_runs


def test_an_analysis_pointed_at_a_sample_names_the_copy_and_colab_analyses_a_copy(tmp_path, monkeypatch, capsys):
    import shutil
    import sys

    from nbutils import samples

    with pytest.raises(ValueError, match=r"is a sample run .* `cp -r outputs/samples/negation "
                                         r"outputs/negation_sample`"):
        samples.run_dir_or_sample("outputs/samples/negation", "negation")
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    shutil.copytree(ROOT / "outputs/samples/negation", tmp_path / "outputs/samples/negation")
    monkeypatch.setitem(sys.modules, "google.colab", sys.modules[__name__])  # as in a Colab runtime
    before = snapshot(tmp_path / "outputs/samples")
    assert samples.run_dir_or_sample("outputs/samples/negation", "negation") == "outputs/negation_sample"
    assert samples.run_dir_or_sample("outputs/nothing-here", "negation") == "outputs/negation_sample"  # reused
    copied = snapshot(tmp_path / "outputs/negation_sample")
    assert copied == {k.removeprefix("negation/"): v for k, v in before.items() if k != "negation/README.md"}
    assert snapshot(tmp_path / "outputs/samples") == before


def test_an_output_notebook_in_a_run_is_only_the_steps_own_record(run, tmp_path, no_notebook_runs, capsys):
    generated = paths.executed_notebook(run, GENERATE)
    generated.parent.mkdir(parents=True)
    generated.write_text("how the dataset was made")
    other = tmp_path / "other"
    for notebook, output, run_dir in [(ANALYZE, generated, run), (GENERATE, generated.parent / "mine.ipynb", run),
                                      (ANALYZE, paths.executed_notebook(run, ANALYZE), other)]:  # another run's record
        before = snapshot(run)
        code, err = _cli(["run", notebook, str(output), "-p", "run_dir", str(run_dir)], capsys)
        assert code == 2 and "is among the executed notebooks of the run" in err, (output, err)
        assert snapshot(run) == before
    assert not no_notebook_runs
    code, err = _cli(["run", GENERATE, str(generated), "-p", "run_dir", str(run)], capsys)  # its own record: fine
    assert code == 0, err
    code, err = _cli(["run", GENERATE, str(tmp_path / "elsewhere.ipynb"), "-p", "run_dir", str(run)], capsys)
    assert code == 0, err


# ---------------------------------------------------------------- more entry points: sweep files, notebooks, hints

@pytest.mark.parametrize("key, value, match", [
    ("models", "params/models/smollm2-135m-instruct.yaml", r"`models` must be a list of model parameter files"),
    ("models", [1, 2], r"`models` must be a list"), ("analyze", [1], r"`analyze` must be a mapping"),
    ("dataset", ["a", "b"], r"`dataset` must be a text"), ("run_dir", 5, r"`run_dir` must be a text"),
])
def test_a_sweep_file_value_of_the_wrong_kind_is_named(run, tmp_path, key, value, match):
    cfg = {"run_dir": str(run), "dataset": yaml_file(tmp_path, "ds.yaml", GOOD),
           "models": [yaml_file(tmp_path, "m.yaml", {"model": "org/m"})], key: value}
    refused(run, lambda: run_sweep(yaml_file(tmp_path, "s.yaml", cfg)), rf"^sweep: .*s.yaml: {match}")


def test_a_file_that_is_not_a_notebook_is_named(run, tmp_path, no_notebook_runs, capsys):
    cut = tmp_path / "cut.ipynb"
    cut.write_text('{"cells": [')
    for notebook, said in ((ROOT / "README.md", "is not a notebook file (.ipynb)"),
                           (cut, "cannot be read as a notebook")):
        code, err = _cli(["run", str(notebook), "-p", "run_dir", str(run)], capsys)
        assert code == 2 and f"notebook: {notebook} {said}" in err, err
    assert not no_notebook_runs


@pytest.mark.parametrize("notebook, name, value, said", [
    (GENERATE, "seed", "1e3", "YAML reads '1e3' as text, not a number .*: write it as -p seed 1000"),
    ("notebooks/personas/01_generate.ipynb", "logic_share", "1e-1", "write it as -p logic_share 0.1"),
    (ANALYZE, "n_boot", "2.5", "give a whole number, e.g. -p n_boot 2"),
    (SCORE, "model", "../no/such/model", "model: -p: .*|model: no such folder"),
])
def test_numbers_yaml_reads_as_text_and_missing_model_folders_are_said_before_a_kernel_starts(
        run, notebook, name, value, said, no_notebook_runs, capsys):
    import re

    code, err = _cli(["run", notebook, "-p", "run_dir", str(run), "-p", name, value], capsys)
    assert code == 2 and re.search(said, err), err
    assert not no_notebook_runs


def test_merge_into_a_missing_run_creates_nothing(tmp_path, capsys):
    code, err = _cli(["merge", str(tmp_path / "nowhere"), "m"], capsys)
    assert code == 2 and "run_dir: " in err and "does not exist" in err and list(tmp_path.iterdir()) == []


def test_a_parameter_file_or_prompt_file_in_another_encoding_is_named(run, tmp_path, capsys):
    from nbutils.studies.custom import dataset as custom

    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"seed: 1\nnote: caf\xe9\n")
    code, err = _cli(["run", GENERATE, "-f", str(latin), "-p", "run_dir", str(run)], capsys)
    assert code == 2 and f"-f: {latin} is not UTF-8 text (byte 0xe9 on line 2); save it as UTF-8" in err, err
    utf16 = tmp_path / "p.csv"
    utf16.write_bytes("prompt,answer\nIs 3 > 2?,Yes\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"^data_file: p.csv is saved as UTF-16 .*save the file as UTF-8"):
        custom.load_items(utf16)


@pytest.mark.parametrize("settings, match", [
    ({"dtype": "fp8"}, r"^dtype: must be one of .*fp8.*model file .*m\.yaml; nothing was generated"),
    ({"shard_index": 3, "num_shards": 2}, r"^shard_index: must be < num_shards \(2\), got 3 .*m\.yaml"),
    ({"quantization": "4bit", "adapter": "adapters/smollm2-135m-upward-control"}, r"^adapter: a LoRA is merged"),
    ({"chat_template": "sometimes"}, r"^chat_template: must be one of"),
])
def test_a_sweep_checks_every_model_files_settings_before_it_generates(run, tmp_path, settings, match,
                                                                       no_notebook_runs):
    """Every model file is checked as its score notebook would check it, before the dataset is generated: the good
    model first in the list does not start the sweep, and the whole check takes milliseconds."""
    import time

    good = yaml_file(tmp_path, "good.yaml", {"model": "smollm2-135m-instruct"})
    cfg = {"run_dir": str(run), "dataset": yaml_file(tmp_path, "ds.yaml", GOOD),
           "models": [good, yaml_file(tmp_path, "m.yaml", {"model": "smollm2-135m-instruct", **settings})]}
    t0 = time.perf_counter()
    refused(run, lambda: run_sweep(yaml_file(tmp_path, "s.yaml", cfg)), match)
    assert time.perf_counter() - t0 < 2.0
    assert not no_notebook_runs


ANALYZE_BLOCKS = [  # (sweep file's study, its block, the error): every analysis record's ranges and names
    ("monotonicity", {"analyze": {"n_boot": 0}}, r"^n_boot: analyze block of .*s\.yaml: must be an integer ≥ 1, got 0$"),
    ("monotonicity", {"analyze": {"rules_k": 0}}, r"^rules_k: analyze block of .*s\.yaml: must be an integer ≥ 1"),
    ("monotonicity", {"analyze": {"use_r": "yes"}}, r"^use_r: analyze block of .*s\.yaml: must be bool"),
    ("monotonicity", {"analyze": {"n_boot": 10, "bootstraps": 5}},
     r"^analyze block of .*s\.yaml: unknown parameter\(s\) \['bootstraps'\] .*allowed: \['include_limited', 'n_boot'"),
    ("personas", {"analyze": {"n_resamples": 50}}, r"^n_resamples: analyze block of .*s\.yaml: must be an integer ≥ 99"),
    ("personas", {"analyze": {"alternative": "up"}},
     r"^alternative: analyze block of .*: must be one of \['two-sided', 'greater', 'less'\], got 'up'"),
    ("custom", {"analyze": {"n_boot": -1}}, r"^n_boot: analyze block of .*s\.yaml: must be an integer ≥ 1, got -1"),
    ("custom", {"cues": {"alpha": 2}}, r"^alpha: cues block of .*s\.yaml: must be a number strictly between 0 and 1, "
                                       r"got 2"),
    ("custom", {"cues": {"train_fraction": 1.0}}, r"^train_fraction: cues block of .*: must be a number strictly"),
    ("custom", {"cues": {"top_k": 0}}, r"^top_k: cues block of .*s\.yaml: must be an integer ≥ 1, got 0"),
    ("monotonicity", {"executor": "gpu"},
     r"^executor: .*s\.yaml: must be one of \['local', 'submitit-local', 'slurm'\], got 'gpu'"),
    ("monotonicity", {"executor": "submitit-local", "cluster": {"shards_per_model": 0}},
     r"^cluster\.shards_per_model: .*s\.yaml: must be .*, got 0"),
    ("monotonicity", {"cluster": {"gpus": 1}}, r"^cluster: .*s\.yaml: unknown key\(s\) \['gpus'\]; allowed: \["),
]
SWEEP_DATASETS = {"monotonicity": GOOD, "personas": {"n_questions": 2}, "custom": None}


@pytest.mark.parametrize("study, block, match", ANALYZE_BLOCKS)
def test_a_sweep_checks_its_analyze_cues_and_executor_blocks_before_anything_is_written(tmp_path, study, block, match,
                                                                                       no_notebook_runs):
    """A bad value in the analyze block (as the study's parameter record), a run analysis's block (the cue profile's
    record) or the executor and cluster blocks stops the sweep before the dataset is generated: the run folder is
    never made, no notebook runs, no lock is taken; the error names the key, the sweep file, the value and what is
    accepted. The whole check takes milliseconds."""
    import time

    ds = (str(ROOT / "params/custom/datasets/example_yesno.yaml") if SWEEP_DATASETS[study] is None
          else yaml_file(tmp_path, "ds.yaml", SWEEP_DATASETS[study]))
    run = tmp_path / "run"
    cfg = {"study": study, "run_dir": str(run), "dataset": ds,
           "models": [str(ROOT / "params/models/smollm2-135m-instruct.yaml")], **block}
    f = yaml_file(tmp_path, "s.yaml", cfg)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=match):
        run_sweep(f)
    assert time.perf_counter() - t0 < 2.0
    assert not run.exists() and not no_notebook_runs


def test_the_shipped_sweep_files_pass_the_whole_check_without_writing(tmp_path, no_notebook_runs):
    """Every shipped sweep file of a local study passes ``check_sweep`` (what `nbutils sweep` does before it writes),
    and the check writes nothing."""
    from nbutils.sweep import check_sweep

    for name in ("ci", "demo", "cues_ci", "custom_ci", "negation_ci", "personas_ci", "precision_ci"):
        plan = check_sweep(ROOT / "params" / f"{name}.yaml", run_dir=str(tmp_path / name))
        record = plan.record.analysis_params
        assert record.from_mapping(plan.analyze_params).as_dict().items() >= plan.analyze_params.items(), name
    assert list(tmp_path.iterdir()) == [] and not no_notebook_runs


# ---------------------------------------------------------------- the scoring call from Python

@pytest.mark.parametrize("change, match", [
    (dict(prompts=None), r"^prompts: a string or a list of strings, got NoneType None"),
    (dict(prompts=5), "^prompts: a string or a list of strings, got int 5"),
    (dict(prompts={"a": 1}), "^prompts: a string or a list of strings, got dict"),
    (dict(prompts=["a", None]), "^prompts: every prompt must be a string; prompt 1 is NoneType None"),
    (dict(options=None), "^options: a list of two or more answers"),
    (dict(options=5), "^options: a list of two or more answers .*, got int 5"),
    (dict(options={"Yes": 1, "No": 0}), "^options: a list of two or more answers .*, got dict"),
    (dict(options=[1, 2]), "^options: a list of two or more answers"),
    (dict(options=[["Yes", "No"], "x"]), "^options: .* mixes answers and lists of answers"),
    (dict(options=["Yes", None]), r"^options: each prompt needs two or more different answers \(strings\)"),
    (dict(gold=5), "^gold: one text, or a list of one text per prompt, got int 5"),
    (dict(gold=[None]), "^gold: .* value 0 is NoneType None"),
    (dict(system={"role": "x"}), r"^system: one text, or a list of one text \(or None\) per prompt, got dict"),
    (dict(progress="yes"), "^progress: True or False"),
    (dict(model=None), "^model: an embedded model's name, .* got NoneType None"),
    (dict(model=5), "^model: .* got int 5"),
    (dict(dtype=None), "^dtype: must be one of"), (dict(batch_size={"a": 1}), "^batch_size: must be"),
    (dict(adapter_scale=1e30), r"^adapter_scale: must be a number from 0 to 100"),
    (dict(adapter_scale=None), r"^adapter_scale: must be a number from 0 to 100"),
    (dict(max_length=512), "^max_length: not a scoring setting"),
])
def test_the_scoring_call_refuses_bad_arguments_by_name_before_a_model_loads(change, match, monkeypatch):
    from nbutils import probe

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    kwargs = dict(model="smollm2-135m-instruct", prompts=["Is it?"], options=["Yes", "No"], progress=False) | change
    with pytest.raises(ValueError, match=match):
        probe.score_choices(**kwargs)


def test_non_finite_scores_at_a_strength_above_one_name_adapter_scale_not_the_model():
    from nbutils.engine.settings import non_finite_message

    said = non_finite_message("float32", "none", 3, 8, "p1", adapter_scale=50.0)
    assert said.startswith("adapter_scale: 50.0: 3 of 8 rows") and "model folder" not in said
    assert non_finite_message("float32", "none", 3, 8, "p1").startswith("dtype: float32")
    assert non_finite_message("float32", "none", 3, 8, "p1", adapter_scale=0.5).startswith("dtype: float32")


# ---------------------------------------------------------------- the validation study's inputs

VALIDATION_SAMPLE = ROOT / "outputs" / "samples" / "validation"
LADDER, DECOY = "adapters/smollm2-135m-upward-control", "adapters/smollm2-135m-balanced-decoy"


def _validation_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("validation_script", ROOT / "scripts" / "validation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("change, match", [
    (dict(analyze={"n_bot": 50}), r"^analyze: \['n_bot'\] in .* is not passed to the seeds' analyses; the block takes "
                                  r"\['n_boot'\]"),
    (dict(analyze={"n_boot": -5}), r"^analyze: n_boot: must be an integer ≥ 1, got -5"),
    (dict(analyze=[1]), "^analyze: must be a mapping"),
    (dict(dataset="params/monotonicity/datasets/no-such.yaml"), r"^dataset: .*no-such.yaml does not exist"),
    (dict(seeds=[31, 2**64]), r"^seeds: must be a list of distinct integers from 0 to 9223372036854775807"),
    (dict(dataset="params/monotonicity/datasets/bad-concept.yaml"), r"^dataset: .*bad-concept.yaml: concepts: cannot "
                                                                    r"parse concept 'around 1/2'"),
    (dict(ladder="params/validation/upward-control-s0.yaml"), "^ladder: must be a list of model files"),
    (dict(ladder=5), "^ladder: must be a list of model files"),
    (dict(ladder=["params/validation/upward-control-s0.yaml", "params/models/smollm2-135m-instruct.yaml"]),
     "^ladder: params/models/smollm2-135m-instruct.yaml names no adapter"),
    (dict(ladder=["params/validation/upward-control-s0.5.yaml", "params/validation/upward-control-s0.5.yaml"]),
     "^ladder: .* and .* are both strength 0.5"),
    (dict(ladder=["params/validation/upward-control-s0.5.yaml", "params/models/smollm2-135m-balanced-decoy.yaml"]),
     "^ladder: .* names the adapter .*balanced-decoy"),
    (dict(decoy="params/models/smollm2-135m-upward-control.yaml"), "^decoy: .* must name an adapter other than"),
    (dict(decoy="params/models/no-such.yaml"), "^decoy: no model file"),
])
def test_every_validation_parameter_is_checked_before_anything_runs(tmp_path, change, match):
    script = _validation_script()
    if "bad-concept" in str(change.get("dataset")):  # a dataset file the generate notebook would refuse
        change = dict(change, dataset=yaml_file(tmp_path, "bad-concept.yaml", {"concepts": ["around 1/2"]}))
    cfg = dict(yaml.safe_load((ROOT / "params" / "validation.yaml").read_text()), run_root=str(tmp_path / "root"),
               **change)
    with pytest.raises(ValueError, match=match):
        script.read_params(yaml_file(tmp_path, "validation.yaml", cfg))
    assert not (tmp_path / "root").exists()


@pytest.fixture()
def validation_root(tmp_path):
    root = tmp_path / "validation"
    shutil.copytree(VALIDATION_SAMPLE, root, ignore=shutil.ignore_patterns("README.md"))
    return root


def _collect(root, ladder=LADDER, decoy=DECOY, seeds=None):
    from nbutils.studies.monotonicity import validation

    return validation.collect(root, ladder, decoy, None, seeds=seeds)


def test_the_validation_root_is_read_only_for_its_seeds_and_every_seed_is_checked_before_any_analysis(validation_root):
    stray = validation_root / "seed-99"  # an interrupted run's folder, left behind
    shutil.copytree(validation_root / "seed-31", stray)
    rows = _collect(validation_root, seeds=[31, 32, 33])
    assert sorted(rows["seed"].unique()) == [31, 32, 33]
    before = snapshot(validation_root)
    for kwargs, match in (
            (dict(ladder="adapters/smollm2-135m-upward-contrl"),  # a typo: no "no strength was found"
             r"^ladder_adapter: .*seed-31 holds no scores of 'adapters/smollm2-135m-upward-contrl'; its score files "
             r"record the adapters \['adapters/smollm2-135m-balanced-decoy', 'adapters/smollm2-135m-upward-control'\]"),
            (dict(decoy="adapters/no-decoy"), r"^decoy_adapter: .* holds no scores of 'adapters/no-decoy'"),
            (dict(seeds=[31, 34]), r"^seeds: .* holds no run of seed 34 .*; it holds \[31, 32, 33, 99\]"),
            (dict(seeds="31"), "^seeds: a list of distinct integers"), (dict(ladder=None), "^ladder_adapter: ")):
        with pytest.raises(ValueError, match=match):
            _collect(validation_root, **{"seeds": [31, 32, 33], **kwargs})
    assert snapshot(validation_root) == before


def test_a_strength_missing_from_a_seed_or_edited_in_a_sidecar_is_refused_naming_it(validation_root):
    seed32 = paths.scores_dir(validation_root / "seed-32")
    quarter = "smollm2-135m-instruct.smollm2-135m-upward-control-e56ef6f3-s0.25"
    for ext in (".json", ".parquet"):
        (seed32 / f"{quarter}{ext}").unlink()
    with pytest.raises(ValueError, match=r"^root: the ladder at strength 0.25 was scored in seed 31 and not in "
                                         r"seed 32"):
        _collect(validation_root)
    side = paths.scores_dir(validation_root / "seed-33") / f"{quarter}.json"
    side.write_text(json.dumps(dict(json.loads(side.read_text()), adapter_scale=0.3)))
    with pytest.raises(ValueError, match=rf"^root: .*{quarter}.json: its sidecar describes .* at strength 0.3"):
        _collect(validation_root, seeds=[31, 33])
    side.write_text(json.dumps(dict(json.loads(side.read_text()), adapter_scale="0.25")))
    with pytest.raises(ValueError, match=r"^root: .*: adapter_scale: must be null or a number in a score sidecar, "
                                         r"got '0.25'; score that model again"):
        _collect(validation_root, seeds=[31, 33])


def test_the_validation_words_hold_a_strength_seen_in_one_seed(validation_root):
    from nbutils.studies.monotonicity import validation

    rows = _collect(validation_root, seeds=[31])  # one prompt set: no interval across seeds, said, not a TypeError
    summary = validation.records(validation.table(rows), rows)
    words = validation.text(summary) + validation.markdown_table(summary)
    assert "(95% CI across seeds n/a to n/a)" in words


def test_the_sample_copy_takes_only_the_seeds_of_the_parameter_file(validation_root, tmp_path):
    script = _validation_script()
    shutil.copytree(validation_root / "seed-31", validation_root / "seed-99")  # left by another run
    script.make_sample(validation_root, tmp_path / "sample", [31, 32])
    assert sorted(p.name for p in (tmp_path / "sample").iterdir()) == ["seed-31", "seed-32"]
    with pytest.raises(ValueError, match="^--sample-only: .* holds no run of seed 34"):
        script.make_sample(validation_root, tmp_path / "other", [31, 34])
    assert not (tmp_path / "other").exists()
