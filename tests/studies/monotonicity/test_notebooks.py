"""Papermill smoke run of the study's notebooks on small parameters with the real embedded model, and the check
that the monotonicity study's prompts and scores equal recorded ones (data/ci_prompts.json, data/ci_scores.csv)."""
from __future__ import annotations

import hashlib
import json

import nbformat
import pandas as pd
import pytest
import yaml
from pathlib import Path

from nbutils import artifacts
from nbutils.paths import repo_root
from nbutils import studies
from nbutils.studies.monotonicity.dataset import generate_prompts
from nbutils.sweep import execute, run_sweep

ROOT = repo_root()
NOTEBOOKS = studies.get("monotonicity").notebooks
DATA = Path(__file__).parent / "data"
pytestmark = pytest.mark.notebooks


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    run = tmp_path_factory.mktemp("ci-sweep")
    report = run_sweep(ROOT / "params" / "ci.yaml", run_dir=str(run))
    return run, report


def test_sweep_runs_generate_score_analyze(swept):
    run, report = swept
    assert report.scored == ["smollm2-135m-instruct"] and not report.failed and report.analyzed
    assert sorted(p.name for p in (run / "notebooks").iterdir()) == [
        "01_generate.ipynb", "03_analyze.ipynb", "score__smollm2-135m-instruct.ipynb"]
    for nb in (run / "notebooks").iterdir():
        executed = nbformat.read(nb, as_version=4)
        assert any(c.get("outputs") for c in executed.cells if c.cell_type == "code"), nb.name


def test_real_model_scores_and_metadata(swept):
    run, _ = swept
    prompts = pd.read_parquet(run / "prompts.parquet")
    scores = pd.read_parquet(run / "scores" / "smollm2-135m-instruct.parquet")
    meta = json.loads((run / "scores" / "smollm2-135m-instruct.json").read_text())
    assert len(prompts) == 4 * 2 * 4 and len(scores) == len(prompts)
    assert scores["logp_yes"].between(-50, 0).all() and scores["logp_no"].between(-50, 0).all()
    assert meta["used_chat_template"] and meta["answer_strings"] == ["Yes", "No"] and meta["single_forward_pass"]
    assert meta["revision"].startswith("gguf-sha256:") and meta["prompts_sha256"] == artifacts.sha256_file(run / "prompts.parquet")
    assert meta["versions"]["torch"] and meta["prompts_per_second"] > 0


def test_same_parameters_give_the_recorded_prompts():
    """The CI dataset's recorded content hash is reproduced exactly."""
    before = json.loads((DATA / "ci_prompts.json").read_text())
    df = generate_prompts(**before["dataset_params"])
    assert list(df.columns) == before["columns"] and len(df) == before["rows"]
    assert {c: str(t) for c, t in df.dtypes.items()} == before["dtypes"]
    canon = json.dumps(df.astype(str).to_dict("records"), sort_keys=True).encode()
    assert hashlib.sha256(canon).hexdigest() == before["content_sha256"]


def test_same_model_gives_the_recorded_scores(swept):
    """Embedded-model log-probs of the CI dataset equal the recorded ones within 1e-4."""
    run, _ = swept
    before = pd.read_csv(DATA / "ci_scores.csv")
    now = pd.read_parquet(run / "scores" / "smollm2-135m-instruct.parquet")
    both = before.merge(now, on="prompt_id", suffixes=("_before", ""), validate="one_to_one")
    assert len(both) == len(before) == 32
    for col in ("logp_yes", "logp_no"):
        assert (both[col] - both[f"{col}_before"]).abs().max() < 1e-4, col


def test_analysis_outputs(swept):
    run, _ = swept
    for name in ("accuracy", "appendix_b", "gap_by_threshold", "gap_pooled", "mixed_model", "mcnemar",
                 "signal_detection", "difficulty", "calibration", "rules", "best_rule", "mirror_test"):
        assert (run / "tables" / f"{name}.csv").stat().st_size > 0, name
    for name in ("accuracy_by_threshold", "gap_forest", "difficulty_curves", "rule_agreement"):
        assert (run / "figures" / f"{name}.png").stat().st_size > 10_000, name
        assert (run / "figures" / f"{name}.pdf").exists()
    appendix = pd.read_csv(run / "tables" / "appendix_b.csv")
    assert set(appendix["row"]) == {"[more than p]", "[less than p]"} and {"1/3", "1/2"} <= set(appendix.columns)
    summary = json.loads((run / "summary.json").read_text())
    conds = summary["smollm2-135m-instruct"]["conditions"]
    assert set(conds) == {"concept_learning", "explicit"}
    assert all(-1 <= c["gap"] <= 1 and 0 <= c["p_cmh"] <= 1 for c in conds.values())


def test_rerun_skips_and_a_failing_model_does_not_stop_the_others(swept, tmp_path):
    run, _ = swept
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"model": "no-such-org/no-such-model"}))
    report = run_sweep(ROOT / "params" / "ci.yaml", run_dir=str(run),
                       models=[str(bad), str(ROOT / "params" / "models" / "smollm2-135m-instruct.yaml")])
    assert report.skipped == ["smollm2-135m-instruct"]
    assert list(report.failed) == ["no-such-org--no-such-model"] and "model:" in report.failed["no-such-org--no-such-model"]
    assert report.analyzed
    assert any("FAILED" in line for line in report.lines())


def test_generate_notebook_reports_bad_parameters(tmp_path):
    import papermill as pm

    with pytest.raises(pm.PapermillExecutionError, match="n_examples: must be even"):
        execute(NOTEBOOKS["generate"], tmp_path / "out.ipynb",
                {"run_dir": str(tmp_path), "concepts": ["more than 1/2"], "n_examples": 7, "prompts_per_concept": 4})
    assert not (tmp_path / "prompts.parquet").exists()


def test_committed_notebooks_are_clean_and_parameterized():
    paths = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").rglob("*.ipynb"))
    registered = {nb for s in studies.REGISTRY.values() for nb in s.notebooks.values()} | set(studies.RUN_ANALYSES.values())
    assert set(paths) == registered  # every one registered: a study's steps or an analysis of any run (cues)
    assert set(NOTEBOOKS.values()) <= set(paths)
    for rel in paths:
        nb = nbformat.read(ROOT / rel, as_version=4)
        assert nb.metadata["kernelspec"]["name"] == "python3"
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), f"{rel} has outputs"
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, rel
        assert "colab.research.google.com/github/" in nb.cells[0].source and rel in nb.cells[0].source
        assert not any("def " in c.source for c in nb.cells if c.cell_type == "code"), "no functions in notebooks"


def test_environment_file_installs_this_package():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    pip = next(d for d in env["dependencies"] if isinstance(d, dict))["pip"]
    assert any(line.startswith("-e") and ".[test]" in line for line in pip)
    assert any(str(d).startswith("python") for d in env["dependencies"]) and "pip" in env["dependencies"]


def test_embedded_model_second_load_is_fast(swept):
    """The GGUF is dequantized once (by the sweep above) and cached; a later load from the cache takes < 5 s.

    Measured in a fresh process, split into Python's import of torch/transformers (paid by any loader, several
    seconds on this machine) and the model load itself.
    """
    import subprocess
    import sys

    from nbutils.engine.models import cache_dir

    script = (
        "import time; t0 = time.perf_counter()\n"
        "import torch, transformers\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM\n"
        "from nbutils.engine.models import load_model\n"
        "t1 = time.perf_counter(); lm = load_model('smollm2-135m-instruct', device='cpu'); t2 = time.perf_counter()\n"
        "print('RESULT', t1 - t0, t2 - t1, lm.meta['dequantized_cache'])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "de-quantizing GGUF" not in out.stderr, "the cached copy is used, not the GGUF again"
    _, imports, load, cache = next(line for line in out.stdout.splitlines() if line.startswith("RESULT")).split()
    print(f"imports {float(imports):.1f} s, load {float(load):.2f} s")
    assert float(load) < 5.0, load
    assert cache.startswith(str(cache_dir()))


def test_sweep_skip_check_respects_precision(swept):
    from nbutils.engine.runs import is_done

    run, _ = swept
    spec = studies.get("monotonicity").spec

    def already_scored(r, params):
        return is_done(r, spec, params)

    assert already_scored(run, {"model": "smollm2-135m-instruct", "quantization": "none", "dtype": "auto"})
    assert already_scored(run, {"model": "smollm2-135m-instruct", "dtype": "float32"})
    assert not already_scored(run, {"model": "smollm2-135m-instruct", "dtype": "bfloat16"})
    assert not already_scored(run, {"model": "smollm2-135m-instruct", "limit": 2})
    assert not already_scored(run, {"model": "another-model"})
