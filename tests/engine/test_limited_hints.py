"""A `limit` run says at its end that the analysis skips it; analysing a run that has only limited scores names the
fix (include_limited, or scoring without limit) instead of telling the user to run the score notebook again."""
from __future__ import annotations

import pytest

from nbutils import runstore, studies
from nbutils.engine import run as scoring

SPEC = studies.get("monotonicity").spec
SKIPPED = "the analysis skips limited scores unless include_limited is set"


@pytest.fixture
def run(tmp_path, tiny_run):
    for name in ("prompts.parquet", "prompts.json"):
        (tmp_path / name).write_bytes((tiny_run / name).read_bytes())
    return tmp_path


def test_a_limited_run_says_the_analysis_skips_it_and_a_full_run_does_not(run, lm, capsys):
    scoring.score_run(run, lm, SPEC, limit=2, progress=False)
    said = capsys.readouterr().out
    assert SKIPPED in said and "-p include_limited true" in said and ".limit-2.parquet" in said
    scoring.score_run(run, lm, SPEC, limit=2, progress=False)  # finished: returned as it is, and said again
    assert SKIPPED in capsys.readouterr().out
    scoring.score_run(run, lm, SPEC, progress=False)
    assert "include_limited" not in capsys.readouterr().out


def test_only_limited_scores_name_include_limited_not_the_score_notebook(run, lm):
    scoring.score_run(run, lm, SPEC, limit=2, progress=False)
    with pytest.raises(ValueError) as err:
        runstore.load_scores(run, SPEC)
    message = str(err.value)
    assert message.startswith("run_dir: no complete scores") and "run the score notebook first" not in message
    assert "only limited runs (limit=2)" in message and "include_limited: true" in message
    assert "-p include_limited true" in message and "score without limit" in message
    assert len(runstore.load_scores(run, SPEC, include_limited=True)) == 8, "the hint's fix works"


def test_no_scores_at_all_still_says_to_score_first(run):
    with pytest.raises(ValueError, match=r"^run_dir: no complete scores .*; run the score notebook first$"):
        runstore.load_scores(run, SPEC)


def test_a_limited_file_beside_a_full_one_is_noted_with_the_switch(run, lm):
    scoring.score_run(run, lm, SPEC, limit=2, progress=False)
    scoring.score_run(run, lm, SPEC, progress=False)
    notes = runstore.excluded_notes(runstore.load_scores(run, SPEC))
    assert any("a limited run (limit=2; include_limited: true analyses it)" in n for n in notes), notes
