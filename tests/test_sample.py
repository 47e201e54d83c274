"""The sample run that ships in outputs/sample/ (scripts/make_sample.sh) is what the current code makes: its dataset is
the demo dataset generated again, byte for byte, and a few of its rows scored again by the embedded model give the same
choices and margins; and its analysis runs without PyTorch, as in a base (analysis-only) install."""
from __future__ import annotations

import json
import os
import sys

import pandas as pd
import pytest
import yaml

from nbutils import artifacts, paths, runstore, studies
from nbutils.studies.monotonicity.dataset import generate_prompts, write_prompts

ROOT = paths.repo_root()
SAMPLE = ROOT / "outputs" / "sample"
SLUG = "smollm2-135m-instruct"
SPEC = studies.get("monotonicity").spec
REMAKE = "run `bash scripts/make_sample.sh` and commit outputs/sample/"
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


def test_the_sample_scores_belong_to_its_dataset():
    """The score file is complete, tied to the sample's dataset by sha256 and read back by the analysis unchanged."""
    side = artifacts.read_json(paths.sidecar(paths.score_file(SAMPLE, SLUG)))
    assert side["complete"] and side["dtype"] == "float32" and side["device"] == "cpu" and side["limit"] is None
    assert side["dataset_sha256"] == artifacts.sha256_file(SAMPLE / "prompts.parquet")
    scores = runstore.load_scores(SAMPLE, SPEC)
    assert len(scores) == len(pd.read_parquet(SAMPLE / "prompts.parquet")) == side["n_rows"] == 96


@pytest.mark.notebooks
def test_sixteen_sample_rows_scored_again_give_the_same_choices_and_margins(tmp_path):
    """Four prompts of each concept and condition (a limit run of the real scoring loop) scored now by the embedded
    model on the CPU in float32, as make_sample.sh scores them."""
    from nbutils.engine.models import load_model
    from nbutils.engine.run import score_run

    run = tmp_path / "run"
    run.mkdir()
    for name in ("prompts.parquet", "prompts.json"):
        (run / name).write_bytes((SAMPLE / name).read_bytes())
    lm = load_model(SLUG, quantization="none", dtype="float32", device="cpu", rescore_margin=0.0)
    now, _ = score_run(run, lm, SPEC, limit=4, progress=False)  # 4 prompts of each concept and condition
    before = pd.read_parquet(paths.score_file(SAMPLE, SLUG))
    both = now.merge(before, on="prompt_id", suffixes=("", "_sample"), validate="one_to_one")
    assert len(both) == len(now) == 16
    assert (both["margin"] - both["margin_sample"]).abs().max() < MARGIN_TOL, REMAKE
    clear = both["margin_sample"].abs() > MARGIN_TOL
    assert clear.all() and (both["choice"] == both["choice_sample"]).all(), REMAKE


BLOCKER = '''import importlib.abc, os, sys

class _NoScoringPackages(importlib.abc.MetaPathFinder):
    """As if the score extra were not installed: torch, transformers, accelerate, gguf and bitsandbytes do not import."""
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in {"torch", "transformers", "accelerate", "gguf", "bitsandbytes"}:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: a base install)", name=name)

sys.meta_path.insert(0, _NoScoringPackages())
with open(os.environ["NO_SCORE_LOG"], "a") as f:
    f.write(f"{os.getpid()}\\n")
'''


@pytest.fixture()
def base_install(tmp_path, monkeypatch):
    """Python processes started from here (a kernel, ``python -c``) behave as a base install without the score extra:
    a sitecustomize on PYTHONPATH blocks its packages and logs each process it runs in."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    log = tmp_path / "blocked.log"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.setenv("NO_SCORE_LOG", str(log))
    return log


def test_a_base_install_analyses_but_loading_a_model_says_to_install_the_score_extra(base_install):
    """Every module but the engine imports without the scoring packages; the engine says which extra to install."""
    import subprocess

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
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(base_install.read_text().split()) == 1, "the subprocess ran with the scoring packages blocked"
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
    assert {"papermill", "statsmodels", "pandas", "nbconvert"} <= names(project["dependencies"])
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "EXTRAS=score,test,docs" in setup and '-e ".[$EXTRAS]"' in setup


@pytest.mark.notebooks
def test_the_sample_is_analysed_and_reported_without_the_scoring_packages(base_install, tmp_path):
    """03_analyze on a copy of the sample, in a kernel that cannot import torch or transformers (a base install), then
    the report: the accuracies of summary.json are those of the sample's score file."""
    import shutil

    from nbutils.report import write_report
    from nbutils.sweep import run_notebook

    run = tmp_path / "sample"
    shutil.copytree(SAMPLE, run)
    analyze = studies.get("monotonicity").notebooks["analyze"]
    run_notebook(analyze, None, {"run_dir": str(run), "n_boot": 200})
    assert len(set(base_install.read_text().split())) == 1, "the kernel ran with the scoring packages blocked"
    summary = json.loads(paths.summary_path(run).read_text())[SLUG]
    scores = pd.read_parquet(paths.score_file(run, SLUG)).merge(pd.read_parquet(run / "prompts.parquet"),
                                                                  on="prompt_id", suffixes=("", "_prompt"))
    for condition, headline in summary["conditions"].items():
        rows = scores[scores["condition"] == condition]
        up = rows[rows["concept"].str.startswith("more than")]["correct"].mean()
        down = rows[rows["concept"].str.startswith("less than")]["correct"].mean()
        assert headline["acc_up"] == pytest.approx(up) and headline["acc_down"] == pytest.approx(down), condition
    page = write_report(run)
    assert page == paths.report_path(run) and page.stat().st_size > 50_000
