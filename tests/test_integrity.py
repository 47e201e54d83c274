"""The integrity chain: regenerating sets old scores aside (listed, never mixed), a damaged dataset is rewritten,
and two sweeps on one run directory leave exactly one scorer running."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pandas as pd
import pytest

from nbutils import artifacts, paths, studies
from nbutils.engine import run as scoring
from nbutils.engine.models import load_model
from nbutils.studies.monotonicity import analysis
from nbutils.studies.monotonicity import dataset as mono

SPEC = studies.get("monotonicity").spec
A = dict(concepts=["more than 1/2", "less than 1/2"], conditions=["concept_learning", "explicit"],
         prompts_per_concept=4, n_examples=6, seed=0)


def test_regenerating_sets_the_old_scores_aside_and_analysis_lists_them(tmp_path, tiny_model_dir):
    run = tmp_path / "run"
    mono.write_prompts(mono.generate_prompts(**A), run, A)
    lm = load_model(str(tiny_model_dir), device="cpu")
    scoring.score_run(run, lm, SPEC, progress=False)
    slug = paths.model_slug(lm.meta["model"])
    old_scores = pd.read_parquet(paths.score_file(run, slug))
    b = dict(A, seed=1)  # same prompt ids, other content: the case that used to join old scores to new prompts
    new = mono.generate_prompts(**b)
    assert set(new["prompt_id"]) == set(old_scores["prompt_id"])
    mono.write_prompts(new, run, b, overwrite=True)
    assert not paths.score_file(run, slug).exists(), "no live score file of the old dataset"
    stale = list((paths.scores_dir(run) / ".stale").glob("*/*.parquet"))
    assert len(stale) == 1 and pd.read_parquet(stale[0]).equals(old_scores), "set aside, not deleted"
    with pytest.raises(ValueError, match=r"no complete scores of the current dataset .*stale"):
        analysis.analyze_run(run, n_boot=20)
    scoring.score_run(run, lm, SPEC, progress=False)
    result = analysis.analyze_run(run, n_boot=20)
    assert result.scores["model"].nunique() == 1
    assert any("not analysed: .stale/" in n and "earlier version of the dataset" in n for n in result.notes)
    assert any("earlier version" in n for n in artifacts.read_json(paths.summary_path(run))["_notes"])


def test_a_truncated_dataset_with_the_same_parameters_is_rewritten(tmp_path, capsys):
    run = tmp_path / "run"
    df = mono.generate_prompts(**A)
    meta = mono.write_prompts(df, run, A)
    p = paths.prompts_path(run)
    p.write_bytes(p.read_bytes()[:100])
    again = mono.write_prompts(df, run, A)
    assert artifacts.sha256_file(p) == meta["sha256"] == again["sha256"]
    assert "(truncated or edited); rewriting it" in capsys.readouterr().out
    assert pd.read_parquet(p).equals(df)


def test_files_get_the_users_umask(tmp_path):
    old = os.umask(0o022)
    try:
        f = artifacts.write_json({"a": 1}, tmp_path / "x.json")
    finally:
        os.umask(old)
    assert f.stat().st_mode & 0o777 == 0o644


@pytest.mark.notebooks
def test_two_sweeps_on_one_run_directory_leave_one_scorer(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "nbutils", "sweep", str(paths.repo_root() / "params" / "ci.yaml"), "--run-dir", str(run),
           "--limit", "1", "--n-boot", "20"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 60
    while time.time() < deadline and not paths.lock_path(run).exists():
        time.sleep(0.05)
    assert paths.lock_path(run).exists(), "the first sweep holds the lock"
    t0 = time.time()
    second = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 2 and time.time() - t0 < 30, "the second fails fast"
    assert f"is in use by pid {first.pid}" in second.stderr
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    scored = [line for line in out.splitlines() if line.startswith("[sweep] scored")]
    assert len(scored) == 1 and not paths.lock_path(run).exists()
    assert [p.name for p in paths.scores_dir(run).glob("*.parquet")] == ["smollm2-135m-instruct.limit-1.parquet"]
