"""The run handle: a run directory resolved once, its files named by ``paths`` once, a path wherever a run directory
is taken, and what a reader reads of it read once per handle."""
from __future__ import annotations

import os
import pickle
import shutil
from unittest import mock

from nbutils import paths
from nbutils.runstore import Run

SAMPLE = paths.repo_root() / "outputs" / "samples" / "monotonicity"


def test_a_run_is_resolved_once_and_names_each_file_as_paths_does(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ROOT_ENV, str(tmp_path))
    with mock.patch.object(paths, "resolve", wraps=paths.resolve) as resolve:
        run = Run("outputs/r")
        names = [run.summary_path, run.results_path, run.report_path, run.scores_dir, run.summary_path,
                 run.executed_notebook("notebooks/x.ipynb"), run.dataset_path("prompts.parquet"), run.scores_dir]
        assert resolve.call_count == 1 + 6, "the folder once, then each file's name once (a name asked again is kept)"
    assert run.dir == tmp_path / "outputs" / "r" and str(run) == str(run.dir) and os.fspath(run) == str(run.dir)
    assert names[:4] == [paths.summary_path(run.dir), paths.results_path(run.dir), paths.report_path(run.dir),
                         paths.scores_dir(run.dir)]
    assert names[5] == paths.executed_notebook(run.dir, "notebooks/x.ipynb")
    assert paths.check_run_dir(run) == run.dir and paths.scores_dir(run) == run.scores_dir, "a path for paths"
    assert Run.of(run) is run and Run(run).dir == run.dir and Run(run) is not run and Run(run) == run
    assert run / "scores" == run.dir / "scores" and not run.exists() and run.name == "r"
    again = pickle.loads(pickle.dumps(run))  # a cluster job's task carries it
    assert again == run and again.summary_path == run.summary_path


def test_what_a_handle_reads_is_read_once_and_a_new_handle_reads_again(tmp_path):
    shutil.copytree(SAMPLE, tmp_path / "run")
    run = Run(tmp_path / "run")
    files = run.analysable_score_files
    assert files and files == paths.analysable_score_files(run.dir)
    (tmp_path / "run" / "scores" / files[0].name).rename(tmp_path / "run" / "gone.parquet")
    assert run.analysable_score_files == files, "read once, when first asked for"
    assert len(Run(run).analysable_score_files) == len(files) - 1, "a handle of its own reads the folder now"
