"""The sample runs that ship in outputs/samples/<study>/ (scripts/make_sample.sh) are what the current code makes: the
monotonicity sample's dataset is the demo dataset generated again, byte for byte, and a few of its rows scored again by
the embedded model give the same choices and margins; every sample's scores belong to its dataset; every sample's
analysis and the cue profile run in a real base install (a venv without PyTorch); and an analysis pointed at a run
without scores names the sample to use (in Colab, uses it)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

from pathlib import Path

import pandas as pd
import pytest
import yaml

from nbutils import artifacts, paths, runstore, samples, studies
from nbutils.studies.monotonicity.dataset import generate_prompts, write_prompts

ROOT = paths.repo_root()
SAMPLES = ROOT / "outputs" / "samples"
SAMPLE = SAMPLES / "monotonicity"
STUDIES = ("monotonicity", "negation", "personas", "custom")
SLUG = "smollm2-135m-instruct"
SPEC = studies.get("monotonicity").spec
REMAKE = "run `bash scripts/make_sample.sh` and commit outputs/samples/"
MARGIN_TOL = 1e-4  # float32 on the CPU: thread counts and kernels move log-probabilities by about 1e-6


def test_the_sample_dataset_is_the_demo_dataset_generated_now(tmp_path):
    params = yaml.safe_load((ROOT / "params" / "monotonicity" / "datasets" / "demo.yaml").read_text())
    recorded = artifacts.read_json(paths.sidecar(SAMPLE / "prompts.parquet"))
    assert recorded["parameters"] == params, f"the sample was made from other parameters than demo.yaml; {REMAKE}"
    now = generate_prompts(**params)
    sample = pd.read_parquet(SAMPLE / "prompts.parquet")
    variant_columns = [c for c in ("template", "phrase", "answer_words") if c not in sample]  # added since it was made
    assert variant_columns in ([], ["template", "phrase", "answer_words"]), REMAKE
    for column, default in zip(variant_columns, ("paper", "desired_quantity", "yes_no")):
        assert (now[column] == default).all(), column  # the papers' wording on every row: the prompts are the sample's
    now = now.drop(columns=variant_columns)
    pd.testing.assert_frame_equal(sample, now, obj=f"sample prompts ({REMAKE})")
    made = write_prompts(now, tmp_path, params)
    versions = {k: (recorded["versions"].get(k), made["versions"].get(k)) for k in ("pandas", "pyarrow")}
    assert made["sha256"] == recorded["sha256"] == artifacts.sha256_file(SAMPLE / "prompts.parquet"), (
        f"same rows, other bytes (pandas, pyarrow: sample, now = {versions}); {REMAKE}")


@pytest.mark.parametrize("study", STUDIES)
def test_each_sample_is_a_small_complete_run_of_its_study(study):
    """The score file is complete, made on the CPU in float32 from the whole dataset, tied to the sample's dataset by
    sha256 and read back by the analysis unchanged; the sample is well under 1 MB and its README says what it is."""
    sample, record = SAMPLES / study, studies.get(study)
    dataset = paths.dataset_path(sample, record.dataset_file)
    side = artifacts.read_json(paths.sidecar(paths.score_file(sample, SLUG)))
    assert side["complete"] and side["dtype"] == "float32" and side["device"] == "cpu" and side["limit"] is None
    assert side["dataset_sha256"] == artifacts.sha256_file(dataset)
    scores = runstore.load_scores(sample, record.spec)
    assert len(scores) == len(pd.read_parquet(dataset)) == side["n_rows"]
    if study == "monotonicity":
        assert len(scores) == 120 and scores["threshold"].nunique() == 5
    shipped = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "."], cwd=sample,
                             capture_output=True, text=True, check=True).stdout.split()  # what an analysis adds is ignored
    files = [sample / f for f in shipped if (sample / f).is_file()]
    assert sorted(p.relative_to(sample).as_posix() for p in files) == sorted(
        ["README.md", dataset.name, paths.sidecar(dataset).name, f"scores/{SLUG}.parquet", f"scores/{SLUG}.json"]), (
        "only the dataset, the scores, their sidecars and the README ship")
    assert sum(p.stat().st_size for p in files) < 300_000
    readme = (sample / "README.md").read_text()
    assert f"outputs/samples/{study}" in readme and record.notebooks["analyze"] in readme


# the dataset parameter file each sample is made from (scripts/make_sample.sh)
MADE_FROM = {"monotonicity": "params/monotonicity/datasets/demo.yaml", "negation": "params/negation/datasets/ci.yaml",
             "personas": "params/personas/datasets/ci.yaml", "custom": "params/custom/datasets/example_yesno.yaml"}


@pytest.mark.parametrize("study", STUDIES)
def test_each_sample_is_made_from_the_parameter_file_make_sample_names(study):
    script = (ROOT / "scripts" / "make_sample.sh").read_text()
    assert f"{study}) echo \"{MADE_FROM[study]} " in script
    record = studies.get(study)
    recorded = artifacts.read_json(paths.sidecar(paths.dataset_path(SAMPLES / study, record.dataset_file)))["parameters"]
    wanted = yaml.safe_load((ROOT / MADE_FROM[study]).read_text())
    assert {k: recorded.get(k) for k in wanted} == wanted, f"the {study} sample was made from other parameters; {REMAKE}"


def test_an_analysis_without_scores_names_the_sample_and_colab_uses_a_copy(tmp_path, monkeypatch, capsys):
    empty = tmp_path / "run"
    for study in (*STUDIES, "cues"):
        sample = samples.sample_dir(study)
        copy = paths.sample_copy(Path(sample).name)
        with pytest.raises(ValueError) as err:
            samples.run_dir_or_sample(empty, study, scored=study != "cues")
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"run_dir: {empty} has no dataset")
        assert f"`cp -r {sample} {copy}`, then set run_dir = {copy!r}" in message
        assert (ROOT / sample / "scores" / f"{SLUG}.json").is_file(), sample
    dataset_only = tmp_path / "generated"
    dataset_only.mkdir()
    shutil.copy2(SAMPLE / "prompts.parquet", dataset_only / "prompts.parquet")
    with pytest.raises(ValueError, match=r"has no scores: score it first, or analyse a copy of the sample run .*"
                                         r"cp -r outputs/samples/monotonicity outputs/monotonicity_sample"):
        samples.run_dir_or_sample(dataset_only, "monotonicity")
    assert samples.run_dir_or_sample(dataset_only, "cues", scored=False) == dataset_only  # cues profile datasets
    with pytest.raises(ValueError, match=r"is a sample run that ships with the suite"):  # read-only
        samples.run_dir_or_sample(SAMPLE, "monotonicity")
    root = tmp_path / "root"  # Colab's copies are written under the project root: a copy of the samples here
    shutil.copytree(SAMPLES, root / "outputs" / "samples",
                    ignore=shutil.ignore_patterns("tables", "figures", "notebooks"))
    monkeypatch.setenv(paths.ROOT_ENV, str(root))
    monkeypatch.setitem(sys.modules, "google.colab", sys.modules[__name__])  # as in a Colab runtime
    capsys.readouterr()
    assert samples.run_dir_or_sample("outputs/demo-not-here", "negation") == "outputs/negation_sample"
    assert capsys.readouterr().out == ("outputs/demo-not-here has no dataset: analysing a copy of the sample run "
                                       "outputs/samples/negation, outputs/negation_sample, instead (Colab)\n")
    assert (root / "outputs" / "negation_sample" / "scores" / f"{SLUG}.parquet").is_file()
    assert samples.run_dir_or_sample(empty, "cues", scored=False) == "outputs/monotonicity_sample"


@pytest.mark.notebooks
def test_twenty_sample_rows_scored_again_give_the_same_choices_and_margins(tmp_path):
    """One prompt of each concept and condition (a limit run of the real scoring loop) scored now by the embedded
    model on the CPU in float32, as make_sample.sh scores them."""
    from nbutils.engine.models import load_model
    from nbutils.engine.run import score_run

    run = tmp_path / "run"
    run.mkdir()
    for name in ("prompts.parquet", "prompts.json"):
        (run / name).write_bytes((SAMPLE / name).read_bytes())
    lm = load_model(SLUG, quantization="none", dtype="float32", device="cpu", rescore_margin=0.0)
    now, _ = score_run(run, lm, SPEC, limit=1, progress=False)  # 1 prompt of each concept and condition
    before = pd.read_parquet(paths.score_file(SAMPLE, SLUG))
    both = now.merge(before, on="prompt_id", suffixes=("", "_sample"), validate="one_to_one")
    assert len(both) == len(now) == 20
    assert (both["margin"] - both["margin_sample"]).abs().max() < MARGIN_TOL, REMAKE
    clear = both["margin_sample"].abs() > MARGIN_TOL
    assert clear.all() and (both["choice"] == both["choice_sample"]).all(), REMAKE


@pytest.mark.notebooks
def test_a_base_install_analyses_but_loading_a_model_says_to_install_the_score_extra(base_venv):
    """Every module but the engine imports without the scoring packages; the engine says which extra to install."""
    python, env = base_venv

    script = (
        "import importlib, pkgutil, sys, nbutils\n"
        "mods = [m.name for m in pkgutil.walk_packages(nbutils.__path__, 'nbutils.')\n"
        "        if not m.name.startswith(('nbutils.engine', 'nbutils._bundled'))]\n"
        "for m in mods: importlib.import_module(m)\n"
        "assert not [m for m in sys.modules if m.partition('.')[0] in ('torch', 'transformers')]\n"
        "print('imported', len(mods))\n"
        "try:\n"
        "    import nbutils.engine.models\n"
        "except ImportError as err:\n"
        "    print('ENGINE', err)\n"
    )
    out = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=300, env=env, cwd=python.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split("imported ")[1].split()[0]) > 20
    engine = next(line for line in out.stdout.splitlines() if line.startswith("ENGINE"))
    assert 'pip install "llm-bias-probes[score]"' in engine and "torch" in engine


def test_pyproject_keeps_the_scoring_packages_in_the_score_extra():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    scoring = {"torch", "transformers", "accelerate", "gguf", "bitsandbytes"}

    def names(reqs):
        return {r.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip().lower() for r in reqs}

    assert not names(project["dependencies"]) & scoring, "the base install is analysis only: no scoring packages"
    assert names(project["optional-dependencies"]["score"]) >= scoring
    assert {"papermill", "statsmodels", "pandas", "jinja2", "bleach", "mistune"} <= names(project["dependencies"])
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "ipywidgets" in names(project["optional-dependencies"]["notebook"]), "the scoring bar as a widget"
    assert "EXTRAS=score,notebook,test,docs" in setup and '-e ".[$EXTRAS]"' in setup


ANALYSE = {"monotonicity": ["-p", "n_boot", "200"], "negation": [], "personas": ["-p", "n_resamples", "999"],
           "custom": ["-p", "n_boot", "200"]}


@pytest.mark.notebooks
def test_every_sample_and_the_cue_profile_are_analysed_in_a_base_install(base_venv, tmp_path):
    """In a venv with the package and its base requirements only (``import torch`` fails there), from a folder
    outside the repository: each study's analysis on a copy of its sample, the cue profile on the monotonicity sample,
    and the report; the accuracies of the monotonicity summary are those of the sample's score file."""
    python, env = base_venv
    nbutils_cmd = python.parent / "nbutils"
    torch = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True, env=env)
    assert torch.returncode != 0 and "No module named 'torch'" in torch.stderr
    work = tmp_path / "work"
    shutil.copytree(SAMPLES, work / "outputs" / "samples", ignore=shutil.ignore_patterns(  # what an analysis added
        "notebooks", "tables", "figures", "logs", "summary.json", "results.md", "cues_results.md", "report.html"))

    def nbutils(*args):
        done = subprocess.run([nbutils_cmd, *args], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"nbutils {args}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    for study in STUDIES:  # the samples are read-only: a copy of each is analysed, as the docs say
        shutil.copytree(work / "outputs" / "samples" / study, work / "outputs" / f"{study}_sample")
    nbutils("run", "notebooks/cues/01_profile.ipynb", str(work / "cues.ipynb"), "-p", "run_dir",
            "outputs/monotonicity_sample", "-p", "top_k", "5")
    run = work / "outputs" / "monotonicity_sample"
    assert paths.cues_results_path(run).is_file()
    for study in STUDIES:
        run = work / "outputs" / f"{study}_sample"
        nbutils("run", studies.get(study).notebooks["analyze"], "-p", "run_dir", f"outputs/{study}_sample",
                *ANALYSE[study])
        summary = json.loads(paths.summary_path(run).read_text())
        assert summary["records"] and SLUG in json.dumps(summary), study  # the sample's model, tested
    run = work / "outputs" / "monotonicity_sample"
    summary = json.loads(paths.summary_path(run).read_text())["models"]["SmolLM2-135M-Instruct"]
    scores = pd.read_parquet(paths.score_file(run, SLUG)).merge(pd.read_parquet(run / "prompts.parquet"),
                                                                  on="prompt_id", suffixes=("", "_prompt"))
    for condition, headline in summary["conditions"].items():
        rows = scores[scores["condition"] == condition]
        up = rows[rows["concept"].str.startswith("more than")]["correct"].mean()
        down = rows[rows["concept"].str.startswith("less than")]["correct"].mean()
        assert headline["acc_up"] == pytest.approx(up) and headline["acc_down"] == pytest.approx(down), condition
    assert "report → " in nbutils("report", "outputs/monotonicity_sample")
    assert paths.report_path(run).stat().st_size > 50_000


def test_no_shipped_sample_file_carries_a_machine_path():
    """A sample is read on other machines: its sidecars and notes name files by their names (the embedded model's
    cache folder too), and say the precision the weights came in."""
    import re

    shipped = [p for p in (paths.repo_root() / "outputs").rglob("*") if p.is_file() and p.suffix in (".json", ".md")
               and "samples" in p.parts]
    assert shipped
    machine = re.compile(r"(?<![\w.])/(root|home|tmp|work|Users|mnt|scratch|var)/")
    assert not [str(p) for p in shipped if machine.search(p.read_text(errors="replace"))]
    from nbutils.engine.loading.embedded import source_precision

    for sidecar in (paths.repo_root() / "outputs" / "samples").glob("*/scores/*.json"):
        side = json.loads(sidecar.read_text())  # every sample is scored by an embedded model, from its GGUF
        assert side["source_precision"] == source_precision(side["model_file"]), sidecar
        assert side["source_precision"].endswith(", dequantized to float32") and "file" not in side["source_precision"]


def test_the_qwen_sample_is_its_study_dataset_scored_whole_as_plain_text():
    """The real-model sample: the dataset of params/monotonicity/datasets/qwen.yaml generated now, byte for byte, and
    one complete score file of it by the embedded Qwen2.5-Coder-0.5B-Instruct, its pinned GGUF, the prompt as plain
    text, on the CPU's fast path with close calls re-scored in float32; 400 prompts per condition at five thresholds."""
    from nbutils.score_settings import EMBEDDED, QWEN05_MODEL

    sample = SAMPLES / "qwen"
    params = yaml.safe_load((ROOT / "params" / "monotonicity" / "datasets" / "qwen.yaml").read_text())
    assert artifacts.read_json(paths.sidecar(sample / "prompts.parquet"))["parameters"] == params
    pd.testing.assert_frame_equal(pd.read_parquet(sample / "prompts.parquet"), generate_prompts(**params))
    side = artifacts.read_json(paths.sidecar(paths.score_file(sample, QWEN05_MODEL)))
    assert side["complete"] and side["limit"] is None and side["n_rows"] == 800 and side["device"] == "cpu"
    assert side["dataset_sha256"] == artifacts.sha256_file(sample / "prompts.parquet")
    assert side["model_file_sha256"] == EMBEDDED[QWEN05_MODEL].sha256 and side["used_chat_template"] is False
    assert side["dtype"] == "bfloat16" and side["rescore_margin_used"] > 0 and len(side["rescored_ids"]) >= 8
    scores = runstore.load_scores(sample, SPEC)
    assert scores.groupby("condition").size().to_dict() == {"concept_learning": 400, "explicit": 400}
    assert scores["threshold"].nunique() == 5 and scores["option_mass"].min() > 0.9
