"""Hostile inputs to the run index, the report's freshness, adapter paths and weights, and the error messages of the
commands a new user meets first: every case names the file or setting and the fix, and nothing reads as what it is
not (a damaged run as scored, a copied report as out of date, a forged line as a run)."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time

import pandas as pd
import pytest

from nbutils import adapters, artifacts, model_files, paths, studies
from nbutils.report import ReportError, _freshness as freshness, _run_index as run_index, write_report
from nbutils.__main__ import main
from nbutils.items import items
from nbutils.score_settings import ScoreSettings
from test_report import executed, code  # an executed analysis as papermill leaves it

ROOT = paths.repo_root()
SAMPLE = ROOT / "outputs" / "samples" / "monotonicity"
CONTROL = ROOT / "params" / "models" / "smollm2-135m-upward-control.yaml"
SPEC = studies.get("monotonicity").spec


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """A copy of the monotonicity sample with an executed analysis, its summary and its report."""
    run = tmp_path_factory.mktemp("reported") / "run"
    shutil.copytree(SAMPLE, run)
    executed(run, [code("1")])
    write_report(run)
    return run


@pytest.fixture()
def run(reported, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(reported, dst)
    return dst


def line_of(run) -> str:
    lines = run_index.index_lines(run.parent)
    assert len(lines) == 2, lines
    return lines[0] + "\n" + lines[1]


# ---------------------------------------------------------------- runs: safe names, damaged runs said

def test_control_characters_in_a_run_name_are_escaped_one_line_per_run(reported, tmp_path):
    for name in ("evil\x1b]0;PWNED\x07\x1b[31m", "two\nforged  [monotonicity]  1 items · x · report up to date"):
        top = tmp_path / "top"
        shutil.rmtree(top, ignore_errors=True)
        shutil.copytree(reported, top / name)
        lines = run_index.index_lines(top)
        assert len(lines) == 2 and not any(ch in "".join(lines) for ch in "\x1b\x07\n\r"), lines
        assert lines[0].startswith(run_index.escape(name) + "  [monotonicity]") and "\\x1b" in run_index.escape(name + "\x1b"), lines
    assert run_index.escape("a\\b\u202ec\x85") == "a\\\\b\\u202ec\\x85"
    missing = tmp_path / "no\x1b]0;PWNED\x07such"
    with pytest.raises(ValueError, match=r"^DIR: .*no\\x1b\]0;PWNED\\x07such is not a folder") as err:
        run_index.index_lines(missing)
    assert "\x1b" not in str(err.value)


@pytest.mark.parametrize("damage, reason", [
    (lambda r: (r / "summary.json").write_text('{"schema_version": 1, "rec'), "summary.json is not valid JSON"),
    (lambda r: ((r / "summary.json").unlink(), (r / "summary.json").mkdir()), "summary.json is a folder"),
    (lambda r: (r / "prompts.json").write_text("{"), "prompts.json is not valid JSON"),
])
def test_a_run_no_reader_can_open_is_listed_as_damaged_with_the_reason(run, damage, reason):
    damage(run)
    text = line_of(run)
    assert "report damaged" in text and reason in text and "not analysed" not in text, text


def test_nan_scores_are_damaged_not_scored(run):
    score = next(run.glob("scores/*.parquet"))
    df = pd.read_parquet(score)
    df.loc[0, [c for c in df.columns if c.startswith("logp")][0]] = float("nan")
    artifacts.write_parquet(df, score)  # the sidecar's sha256 updated too: a careful edit
    side = artifacts.read_json(paths.sidecar(score))
    artifacts.write_json(dict(side, scores_sha256=artifacts.sha256_file(score)), paths.sidecar(score))
    text = line_of(run)
    assert "report damaged" in text and f"{score.stem}.json: edited" in text and "NaN" in text, text
    assert "SmolLM2-135M-Instruct (damaged)" in text, text  # the model by its label


# ---------------------------------------------------------------- freshness by content, one rule for runs and report

def test_a_copy_stays_up_to_date_and_a_clock_cannot_wedge_it(run, tmp_path):
    assert "report up to date" in line_of(run)
    copy = tmp_path.parent / f"{tmp_path.name}-copy" / "run"
    shutil.copytree(run, copy)  # new mtimes, same contents
    os.utime(copy / "report.html", (1, 1))
    assert "report up to date" in line_of(copy)
    future = time.time() + 10 * 365 * 86400
    os.utime(run / "summary.json", (future, future))
    write_report(run)
    assert "report up to date" in line_of(run)
    summary = artifacts.read_json(run / "summary.json")
    artifacts.write_json(dict(summary, records=[]) | {"note": "other"}, run / "summary.json")
    assert "report made from another analysis" in line_of(run)


def test_runs_and_report_agree_on_an_analysis_run_outside_the_record(run):
    summary = artifacts.read_json(run / "summary.json")
    artifacts.write_json(dict(summary, analysed="3000-01-01T00:00:00+00:00"), run / "summary.json")
    assert "outside this run's record" in line_of(run)
    with pytest.raises(ReportError, match="outside this run's record"):
        write_report(run)


@pytest.mark.parametrize("value", ["yesterday", "2999-01-01T00:00:00", 5])
def test_a_tampered_analysed_time_names_the_file(run, value):
    summary = artifacts.read_json(run / "summary.json")
    artifacts.write_json(dict(summary, analysed=value), run / "summary.json")
    with pytest.raises(ReportError, match=r"summary\.json: its `analysed` time is .*not a time with its zone"):
        write_report(run)
    assert "damaged" in line_of(run) and "summary.json" in line_of(run)


def test_a_report_that_is_a_folder_and_a_stale_folder_that_is_a_file(run):
    (run / "report.html").unlink()
    (run / "report.html").mkdir()
    with pytest.raises(ReportError, match=r"report\.html is a folder.*rm -r"):
        write_report(run)
    (run / "scores" / ".stale").write_text("x")
    before = sorted(p.name for p in (run / "scores").iterdir())
    with pytest.raises(ValueError, match=r"scores/\.stale is a file.*move or remove"):
        artifacts.set_aside_scores(run)
    assert sorted(p.name for p in (run / "scores").iterdir()) == before


# ---------------------------------------------------------------- messages that name the file and the fix

def test_show_on_a_missing_folder_a_file_and_a_folder_without_a_run(tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    (tmp_path / "f.txt").write_text("x")
    for target, said in (("nope", "does not exist"), ("f.txt", "is a file"), ("plain", "holds no study's dataset")):
        with pytest.raises(ValueError, match=f"^run_dir: .*{target}.* {said}") as err:
            items(tmp_path / target)
        assert "study=" not in str(err.value)
        assert main(["show", str(tmp_path / target)]) == 2 and said in capsys.readouterr().err


@pytest.mark.parametrize("version, said", [("1", "not one this version of the suite reads"),
                                           (99, "not one this version of the suite reads"),
                                           (None, "older version")])
def test_a_schema_version_of_another_kind_is_not_called_older(tmp_path, version, said):
    from nbutils.records import SummaryVersionError

    path = tmp_path / "summary.json"
    artifacts.write_json({"schema_version": version} if version is not None else {}, path)
    with pytest.raises(SummaryVersionError, match=said) as err:
        artifacts.read_summary(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("field, value, said", [
    ("estimate", "0.5", "estimate: must be null or a number in a summary.json record, got '0.5'"),
    ("valid", "yes", "valid: must be true or false in a summary.json record, got 'yes'"),
    ("test", None, "test: must be a text in a summary.json record, got None"),
])
def test_a_record_of_the_wrong_kind_in_a_summary_is_named_in_the_records_one_phrasing(tmp_path, field, value, said):
    """A record read back from ``summary.json`` is checked field by field with the phrasing every record uses
    (``checks.must_be``), and the file is refused as edited."""
    from nbutils.records import SCHEMA_VERSION, SummaryVersionError

    path = tmp_path / "summary.json"
    rec = {"test": "binomial", "term": "accuracy", "estimate": 0.6, "p": 0.01, "valid": True, "note": "",
           "condition": None, field: value}
    artifacts.write_json({"schema_version": SCHEMA_VERSION, "records": [rec]}, path)
    with pytest.raises(SummaryVersionError, match=re.escape(said) + ".*the file was edited"):
        artifacts.read_summary(path)


def test_a_revision_no_model_can_honour_is_refused_naming_it(tiny_model_dir):
    with pytest.raises(ValueError, match="^revision: 'smollm2-135m-instruct' is an embedded model.*'deadbeef'"):
        ScoreSettings(model="smollm2-135m-instruct", revision="deadbeef")
    with pytest.raises(ValueError, match="^revision: .* is a local folder, which has no revisions.*'main'"):
        ScoreSettings(model=str(tiny_model_dir), revision="main")
    assert ScoreSettings(model=str(tiny_model_dir)).revision is None


def _adapter_copy(tmp_path) -> tuple:
    folder = tmp_path / "lora"
    shutil.copytree(ROOT / "adapters" / "smollm2-135m-upward-control", folder)
    return folder, folder / adapters.WEIGHTS[0]


def test_adapter_weights_are_checked_before_any_model_loads(tmp_path):
    folder, weights = _adapter_copy(tmp_path)
    assert adapters.check_weights(folder) == weights
    data = weights.read_bytes()
    for bad, said in ((data[:len(data) // 2], "not a whole safetensors file"), (data[:5], "not a whole safetensors"),
                      (b"\x10\x00\x00\x00\x00\x00\x00\x00" + b"not json at all!" + b"0" * 64, "damaged safetensors header"),
                      (b"\x80\x04\x95" + data[3:], "not a whole safetensors")):  # a pickle named .safetensors
        weights.write_bytes(bad)
        with pytest.raises(ValueError, match=f"^adapter: {weights}.*{said}.*again"):
            adapters.read_config(folder, str(folder))
    weights.unlink()
    (folder / "adapter_model.bin").write_bytes(b"\x80\x04\x95 a pickle")
    with pytest.raises(ValueError, match=r"^adapter: .*adapter_model\.bin is a pickled PyTorch file.*safe_serialization"):
        ScoreSettings(model="smollm2-135m-instruct", adapter=str(folder), quantization="none")


def test_slurm_local_checks_its_folder_and_ports_before_starting(tmp_path):
    script = ROOT / "scripts" / "slurm_local.sh"
    r = subprocess.run(["bash", str(script), "start"], env=dict(os.environ, SLURM_LOCAL_DIR=str(tmp_path / "a b")),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "SLURM_LOCAL_DIR" in r.stderr and "a b" in r.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, SLURM_LOCAL_DIR=str(tmp_path / "slurm"), SLURM_LOCAL_PORT=str(port)))
    assert r.returncode == 1 and f"port {port} is in use" in r.stderr and not (tmp_path / "slurm").exists()


# ---------------------------------------------------------------- one rule for a model file's paths

def test_the_control_adapter_resolves_the_same_from_any_folder(tmp_path, monkeypatch):
    params = yaml_params(CONTROL)
    seen = set()
    for cwd in (ROOT, tmp_path):
        monkeypatch.chdir(cwd)
        p = model_files.resolve_params(params, CONTROL)
        s = ScoreSettings.of_model_file(SPEC, p)
        seen.add((p["adapter"], s.slug, adapters.local_sha256(p["adapter"])))
    assert len(seen) == 1 and next(iter(seen))[2] is not None, seen


def yaml_params(path) -> dict:
    from nbutils.artifacts import load_yaml

    return load_yaml(path, None, "model")


def test_a_path_beside_the_model_file_comes_first_and_is_recorded_from_the_root(tmp_path, monkeypatch):
    inside = ROOT / "outputs" / f".test-model-files-{os.getpid()}"
    try:
        folder, _ = _adapter_copy(inside)
        mfile = inside / "m.yaml"
        mfile.write_text("model: smollm2-135m-instruct\nadapter: lora\n")
        monkeypatch.chdir(tmp_path)
        p = model_files.resolve_params(yaml_params(mfile), mfile)
        assert p["adapter"] == f"outputs/{inside.name}/lora" and adapters.local_folder(p["adapter"]) == folder
        assert model_files.resolve_params({"adapter": "owner/name"}, mfile)["adapter"] == "owner/name"
        (tmp_path / "data.csv").write_text("q,a\n")  # outside the project: recorded as an absolute path
        dfile = tmp_path / "d.yaml"
        assert model_files.resolve_params({"data_file": "data.csv"}, dfile)["data_file"] == str(tmp_path / "data.csv")
        assert model_files.resolve_params({"data_file": "params/x.csv"}, dfile)["data_file"] == "params/x.csv"
    finally:
        shutil.rmtree(inside, ignore_errors=True)


@pytest.fixture()
def lora_in_the_project(tiny_model_dir):
    """A LoRA adapter for the tiny model inside the project (so a model file names it from the project root), made
    with peft, removed afterwards; and a function writing other weights into the same folder."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    inside = ROOT / "outputs" / f".test-lora-{os.getpid()}"
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()

    def make(seed):
        torch.manual_seed(seed)
        cfg = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], init_lora_weights=False, lora_dropout=0.0)
        model = get_peft_model(base, cfg)
        model.save_pretrained(inside / "lora")
        model.unload()

    make(0)
    yield inside / "lora", make
    shutil.rmtree(inside, ignore_errors=True)


@pytest.mark.notebooks  # three sweeps of the tiny model through papermill: about 45 s
def test_a_sweep_from_outside_the_root_skips_what_it_scored_and_sets_aside_a_changed_adapter(
        tmp_path, monkeypatch, tiny_model_dir, lora_in_the_project, capsys):
    from nbutils.sweep import run_sweep

    lora, make = lora_in_the_project
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "d.yaml").write_text("concepts: ['more than 1/2', 'less than 1/2']\nconditions: [concept_learning, "
                                      "explicit]\nprompts_per_concept: 2\nn_examples: 4\nseed: 0\n")
    (elsewhere / "m.yaml").write_text(f"model: {tiny_model_dir}\nadapter: {lora.relative_to(ROOT).as_posix()}\n"
                                      "quantization: none\ndtype: float32\ndevice: cpu\nchat_template: never\n")
    (elsewhere / "s.yaml").write_text(f"study: monotonicity\nrun_dir: {tmp_path / 'run'}\ndataset: "
                                      f"{elsewhere / 'd.yaml'}\nmodels: [{elsewhere / 'm.yaml'}]\n"
                                      "analyze: {n_boot: 20, use_r: false}\n")
    monkeypatch.chdir(elsewhere)  # outside the project: its relative paths are still the project root's
    first = run_sweep(elsewhere / "s.yaml", limit=2)
    assert len(first.scored) == 1 and not first.failed, first.lines()
    slug = first.scored[0]
    side = artifacts.read_json(paths.sidecar(paths.score_file(tmp_path / "run", slug, 2)))
    assert side["adapter"] == lora.relative_to(ROOT).as_posix()
    assert side["adapter_sha256"] == artifacts.sha256_file(lora / adapters.WEIGHTS[0])
    again = run_sweep(elsewhere / "s.yaml", limit=2)
    assert again.skipped == [slug] and not again.scored and not again.failed, again.lines()
    make(1)  # other weights in the same folder
    changed = run_sweep(elsewhere / "s.yaml", limit=2)
    assert changed.scored == [slug] and not changed.failed, changed.lines()
    assert "scored before with other settings" in capsys.readouterr().out
    moved = paths.stale_sidecars(tmp_path / "run")
    assert [artifacts.read_json(p)["adapter_sha256"] for p in moved] == [side["adapter_sha256"]]


def test_a_tampered_start_time_of_the_analysis_names_it(run):
    summary = artifacts.read_json(run / "summary.json")
    artifacts.write_json(dict(summary, inputs={}), run / "summary.json")  # an analysis that recorded no score files
    nb = paths.executed_notebook(run, studies.get("monotonicity").notebooks["analyze"])
    doc = json.loads(nb.read_text())
    doc["metadata"]["papermill"]["start_time"] = "2999-01-01T00:00:00"  # no zone
    nb.write_text(json.dumps(doc))
    with pytest.raises(ReportError, match=r"notebooks says it started at '2999-01-01T00:00:00', not a time with its "
                                          r"zone.*run the analysis again"):
        write_report(run)


def test_runs_and_report_agree_without_an_executed_analysis_and_on_a_report_that_recorded_nothing(run):
    page = (run / "report.html").read_text()
    (run / "report.html").write_text(page.replace(freshness.MARK, "x"))  # a report made before reports recorded inputs
    os.utime(run / "report.html", (1, 1))
    assert "report older than the analysis" in line_of(run)
    os.utime(run / "report.html")
    assert "report up to date" in line_of(run)
    shutil.rmtree(run / "notebooks")
    assert "no executed analysis" in line_of(run)
    with pytest.raises(ReportError, match="has no executed analysis"):
        write_report(run)


# ---------------------------------------------------------------- degenerate multiverses

def _variants(correct_up: list[int], correct_down: list[int], n: int) -> "pd.DataFrame":
    """Scores of one model under templates t0, t1, …: ``n`` upward and ``n`` downward prompts each, the first
    ``correct_up[i]`` / ``correct_down[i]`` of them answered right."""
    import pandas as pd

    rows = [{"model": "m", "condition": "concept_learning", "template": f"t{i}", "monotonicity": mono,
             "correct": j < (up if mono == "upward" else down)}
            for i, (up, down) in enumerate(zip(correct_up, correct_down))
            for mono in ("upward", "downward") for j in range(n)]
    return pd.DataFrame(rows)


def _interval_lines(scores) -> tuple[list[dict], list[str]]:
    from nbutils.studies.monotonicity import prediction

    recs = prediction.records(prediction.table(scores, ["template"]))
    return recs, prediction.sentences({"records": recs})


def test_variants_that_agree_exactly_get_an_interval_as_wide_as_their_sampling_error():
    import numpy as np
    from scipy import stats as sps

    from nbutils.studies.monotonicity import prediction

    for up, down in (([12] * 4, [0] * 4), ([6] * 4, [6] * 4), ([40] * 3, [10] * 3)):
        n = 12 if up[0] <= 12 else 48
        recs, lines = _interval_lines(_variants(up, down, n))
        (r,) = recs
        gap, var = prediction.effects([n] * len(up), up, [n] * len(up), down)
        floor = sps.t.ppf(0.975, len(up) - 1) * np.sqrt(1 / (1 / var).sum())  # the pooled gap's own sampling error
        assert r["se"] == pytest.approx(np.sqrt(1 / (1 / var).sum()))
        mu = r["estimate"]  # the interval holds the pooled gap ± its sampling error, cut at ±100 points
        assert r["ci_low"] <= max(mu - floor, -1) + 1e-9 and r["ci_high"] >= min(mu + floor, 1) - 1e-9
        assert r["ci_high"] > r["ci_low"] and r["note"] == prediction.AGREE_NOTE
        lo, hi = prediction.pooled_ci(r)  # the pooled gap's own CI: its sampling error, cut at ±100 points
        assert (lo, hi) == pytest.approx((max(mu - floor, -1), min(mu + floor, 1))) and hi > lo
        (line,) = lines
        assert f"between {prediction._pts(r['ci_low'])} and {prediction._pts(r['ci_low'])} points" not in line
    # variants that differ keep the calibrated interval as it was: its SE is the Hartung–Knapp one
    recs, _ = _interval_lines(_variants([12, 11, 12, 10], [0, 1, 0, 2], 12))
    assert recs[0]["note"] != prediction.AGREE_NOTE


def test_a_prediction_interval_over_every_possible_gap_is_said_to_say_nothing():
    from nbutils.studies.monotonicity import prediction

    recs, lines = _interval_lines(_variants([4, 0, 4], [0, 4, 4], 4))  # 3 templates of 4 prompts, gaps +1, −1, 0
    (r,) = recs
    assert r["ci_low"] == -1 and r["ci_high"] == 1
    (line,) = lines
    assert "spans every gap there can be (−100 to 100 points)" in line and "say nothing" in line
    assert "would show a gap between" not in line
    recs, lines = _interval_lines(_variants([40, 38, 41, 39], [10, 12, 9, 11], 48))  # an informative one
    assert "would show a gap between" in lines[0] and "spans every gap" not in lines[0]


# ---------------------------------------------------------------- the GPU scripts on a machine without a GPU

def _no_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible here: the refusal is for machines without one")


def test_the_gpu_checks_refuse_without_a_gpu_before_writing_anything(tmp_path):
    """With no CUDA GPU, with a Python that has no PyTorch, with no such Python, and for an unknown step, every step
    exits 2 with one line saying why and writes nothing (no GPU-named result from a CPU)."""
    import sys

    _no_cuda()
    bare = tmp_path / "bare-python"  # a Python that cannot import torch (no site-packages)
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    out = tmp_path / "out"
    for python, step, said in ((sys.executable, "checks", "no CUDA GPU is visible"),
                               (str(bare), "scale", "cannot import torch"),
                               (str(tmp_path / "nope"), "resume", "no Python"),
                               (sys.executable, "bogus", "unknown step 'bogus'")):
        done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_checks.sh"), step, "smollm2-1.7b"], cwd=ROOT,
                              env=dict(os.environ, PYTHON=python, OUT=str(out)), capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, (step, done.stderr)
        assert not out.exists()


def test_the_gpu_benchmarks_refuse_a_cpu_unless_asked_for_a_dry_run(tmp_path, monkeypatch, capsys):
    """Each GPU benchmark takes its device from one check: ``auto`` without CUDA exits 2 naming the script and the dry
    run (``--device cpu``), before a model is built; ``cpu`` is the dry run."""
    import sys

    _no_cuda()
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_scale

    with pytest.raises(SystemExit) as stop:
        gpu_scale.gpu_device("auto", "gpu_checks.py")
    assert stop.value.code == 2 and "gpu_checks.py: no CUDA GPU is visible" in capsys.readouterr().err
    assert gpu_scale.gpu_device("cpu", "gpu_checks.py") == "cpu"
    for script in ("gpu_checks.py", "gpu_scale.py", "gpu_resume.py"):  # each script's device comes from that check
        assert f'gpu_device(args.device, "{script}")' in (ROOT / "benchmarks" / script).read_text()
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_resume.py"), "--out",
                           str(tmp_path / "x.json")], cwd=ROOT, env=dict(os.environ, HF_HUB_OFFLINE="1"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "gpu_resume.py: no CUDA GPU is visible" in done.stderr, done.stderr
    assert "--device cpu" in done.stderr and not (tmp_path / "x.json").exists()


# ---------------------------------------------------------------- show --disagree

CONTROL_RUN = ROOT / "outputs" / "samples" / "control"


@pytest.fixture(scope="module")
def paired():
    from nbutils.items import items as items_of

    df = items_of(CONTROL_RUN)
    return df, list(df.attrs["models"])


def test_disagree_on_two_models_with_no_item_in_common_says_so_not_full_agreement(paired):
    from nbutils.items import disagree

    df, (a, b) = paired
    ids = sorted(df["prompt_id"].unique())
    apart = df[((df["model"] == a) & df["prompt_id"].isin(ids[::2]))
               | ((df["model"] == b) & df["prompt_id"].isin(ids[1::2]))]
    apart.attrs = dict(df.attrs)
    with pytest.raises(ValueError, match=rf"^--disagree: .* share no scored item \({len(ids[::2])} and {len(ids[1::2])} "
                                         r"items scored\), so there is nothing to compare"):
        disagree(apart, a, b)


def test_disagree_with_wrong_or_closest_shows_both_models_answers_to_each_item(paired, capsys):
    from nbutils.items import disagree, select

    df, (a, b) = paired
    pairs = disagree(df, a, b)
    assert pairs.attrs["shared"] == df["prompt_id"].nunique()
    for kept, wrong in ((select(pairs, wrong=True), True), (select(pairs, closest=5), False),
                        (select(pairs, ["condition=explicit"], wrong=True), True)):
        assert len(kept) and len(kept) % 2 == 0 and list(kept["model"]) == [a, b] * (len(kept) // 2)
        assert (kept["prompt_id"].to_numpy()[::2] == kept["prompt_id"].to_numpy()[1::2]).all()
        if wrong:  # every item kept has a wrong answer, shown beside the other model's
            assert (~kept["correct"].astype(bool)).to_numpy().reshape(-1, 2).any(axis=1).all()
        else:
            assert 5 <= len(kept) <= 10
    wrong = select(pairs, wrong=True)  # the most confident wrong answer's item first
    assert wrong["margin"].abs().where(~wrong["correct"].astype(bool)).idxmax() in wrong.index[:2]
    with pytest.raises(ValueError, match="^--where: model= does not go with --disagree"):
        select(pairs, [f"model={a}"])
    assert main(["show", str(CONTROL_RUN), "--disagree", a, b, "--model", a]) == 2  # not "0 items of b scored"
    assert "--model: does not go with --disagree" in capsys.readouterr().err
    assert main(["show", str(CONTROL_RUN), "--disagree", a, b, "--wrong", "--limit", "4"]) == 0
    out = capsys.readouterr().out
    said = " ".join(out.split())
    n = df["prompt_id"].nunique()  # the sample's prompts and their twins, every one scored by both models
    assert f"items they answer differently (one of them or both wrong), of the {n} both answered" in said


# ---------------------------------------------------------------- a sidecar checked against the file it describes

@pytest.mark.parametrize("edit", [
    lambda meta: dict(meta, model="allenai/OLMo-2-1124-13B-Instruct"),  # another model's name in the sidecar
    lambda meta: dict(meta, adapter_scale=0.5),  # a strength edited: the file is named for full strength
    lambda meta: dict(meta, adapter=None, adapter_scale=None),  # the adapter taken out
    lambda meta: dict(meta, dtype_requested="bfloat16"),  # a precision the name does not carry
])
def test_a_sidecar_that_does_not_describe_its_file_is_left_out_with_its_name(tmp_path, edit):
    from nbutils.runstore import excluded_notes, load_scores

    run = tmp_path / "control"
    shutil.copytree(CONTROL_RUN, run)
    side = paths.scores_dir(run) / "smollm2-135m-instruct.smollm2-135m-upward-control-e56ef6f3.json"
    side.write_text(json.dumps(edit(json.loads(side.read_text()))))
    df = load_scores(run, SPEC)
    assert set(df["slug"]) == {"smollm2-135m-instruct"}, "its scores are not shown under the file's name"
    notes = " ".join(excluded_notes(df))
    assert side.name in notes and "its sidecar describes" in notes and "score the model again" in notes


def test_a_renamed_score_file_is_left_out_and_the_shipped_samples_all_match_their_names(tmp_path):
    from nbutils.runstore import load_scores, misnamed

    run = tmp_path / "control"
    shutil.copytree(CONTROL_RUN, run)
    for ext in (".parquet", ".json"):
        (paths.scores_dir(run) / f"smollm2-135m-instruct{ext}").rename(paths.scores_dir(run) / f"gpt-4{ext}")
    df = load_scores(run, SPEC)
    assert "gpt-4" not in set(df["slug"]) and "SmolLM2-135M-Instruct" not in set(df["model"])
    for side in (ROOT / "outputs" / "samples").rglob("scores/*.json"):  # every shipped score file is named for itself
        assert misnamed(side, json.loads(side.read_text())) is None, side


# ---------------------------------------------------------------- labels: display text, safe in every output

HOSTILE_LABELS = {"a": "<img src=x onerror=alert(1)> 中文", "b": r"$\foo$ *bold* | [x](javascript:alert(1))"}


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A two-model run whose labels hold HTML, a link, math with an unknown macro and letters pdflatex cannot set,
    analysed as any run is (few bootstrap draws, no R; the rule heatmap left out)."""
    import warnings

    import matplotlib.pyplot as plt

    from nbutils.studies.monotonicity import analysis, plots
    from simulated_runs import simulated_run

    run = simulated_run(tmp_path_factory.mktemp("labels"), {"a": lambda p: p["monotonicity"] == "upward",
                                                            "b": lambda p: p["label"]}, labels=HOSTILE_LABELS)
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        mp.setattr(plots, "rule_agreement", lambda *a, **k: plt.figure(figsize=(2, 2)))
        a = analysis.analyze_run(run, n_boot=20, use_r=False)
    return run, a, [str(w.message) for w in said]


def test_labels_are_markdown_text_in_results_and_the_notebook(labelled):
    import mistune

    run, a, _ = labelled
    text = paths.results_path(run).read_text()
    assert text == a.text  # the notebook shows the same Markdown
    html = mistune.html(text)  # as a renderer that passes raw HTML through (nbconvert, mkdocs) renders it
    assert "<img" not in html and 'href="javascript' not in html and "<em>bold</em>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt; 中文" in html and r"$\foo$ *bold* | [x](javascript:alert(1))" in (
        html.replace("&quot;", '"'))
    assert "\\$\\\\foo\\$" in text  # no math either
    from nbutils.report import headline

    assert any(line.startswith(HOSTILE_LABELS["a"] + ", concept learning") for line in headline(run))  # as typed


def test_a_label_pdflatex_cannot_set_is_said_when_the_tables_are_written_and_figures_draw_labels_as_text(labelled):
    run, a, said = labelled
    line = next(s for s in said if s.startswith("LaTeX tables: the model label"))
    assert "has CJK letters" in line and "[U+…]" in line
    assert line in json.loads(paths.summary_path(run).read_text())["_notes"]
    assert not any("Arabic" in s or r"$\foo$" in s for s in said if s.startswith("LaTeX tables"))
    from nbutils import labels  # letters the figures' fonts lack (here: the Han letters, with matplotlib's own fonts)
    drawn = [s for s in said if s.startswith("figures: the model label")]
    assert len(drawn) == bool(labels.figure_unset(HOSTILE_LABELS["a"])) and all("empty boxes" in s for s in drawn)
    assert (paths.figures_dir(run) / "forest_models.png").is_file()  # an unknown macro in a label: drawn, no error
    tex = (paths.tables_dir(run) / "models.tex").read_text()
    assert r"\textless{}img" in tex and "[U+4E2D][U+6587]" in tex and r"\$\textbackslash{}foo\$" in tex


def test_latex_keeps_fractions_and_superscripts_and_names_other_scripts():
    from nbutils import labels
    from nbutils.results import _latex as latex

    assert [latex.escape(x) for x in ("½", "x³", "ﬁ", "ǅ")] == [r"\textonehalf{}", "x$^3$", "fi", "Dz"]
    assert labels.latex_unset("نموذج מודל 模型 model") == ["Arabic", "CJK", "Hebrew"]
    assert labels.latex_unset("Modèle ½ x³") == []


@pytest.mark.parametrize("label, safe", [("- x", r"\- x"), ("1. first", r"1\. first"), ("# head", r"\# head"),
                                         ("a_b*c", r"a\_b\*c"), ("plain-name.v2 (8bit)", "plain-name.v2 (8bit)")])
def test_a_label_at_the_start_of_a_list_item_stays_text(label, safe):
    from nbutils import labels

    assert labels.markdown(label) == safe
    assert labels.markdown_text(f"- {label}, concept learning: x\n| {safe} |", [label]) == (
        f"- {safe}, concept learning: x\n| {safe} |")


def test_a_label_that_is_another_models_file_name_is_refused_and_show_never_guesses(tmp_path):
    from nbutils.items import model_named
    from nbutils.runstore import load_scores
    from simulated_runs import simulated_run

    run = simulated_run(tmp_path, {"a": lambda p: p["label"], "b": lambda p: p["label"]}, labels={"a": "b"})
    with pytest.raises(ValueError, match=r"^label: .*a.json goes by 'b', the file name of .*b.json's scores"):
        load_scores(run, SPEC)
    with pytest.raises(ValueError, match=r"^--model: 'b' is the label of one model and the score file of another"):
        model_named("b", ["b", "B"], {"b": "a", "B": "b"}, run, "--model")
    with pytest.raises(ValueError, match="with a letter or digit"):
        ScoreSettings(label="<<>>")
