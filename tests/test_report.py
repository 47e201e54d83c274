"""``python -m nbutils report RUN_DIR``: what goes into report.html, in which order, and the errors that say what to run.

The report of a real sweep, opened in a browser, is checked in tests/studies/monotonicity/test_notebooks.py; the sample
run's in tests/test_sample.py. Here the executed analysis is a small notebook written by the test, so every rule is
seen at once."""
from __future__ import annotations

import shutil

import nbformat
import pytest
from bs4 import BeautifulSoup

from nbutils import paths, studies
from nbutils.__main__ import main
from nbutils.report import write_report

SAMPLE = paths.repo_root() / "outputs" / "samples" / "monotonicity"
ANALYZE = studies.get("monotonicity").notebooks["analyze"]
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


@pytest.fixture()
def run(tmp_path):
    """A run holding the sample's dataset and scores (no analysis yet)."""
    dst = tmp_path / "run"
    shutil.copytree(SAMPLE, dst, ignore=shutil.ignore_patterns("notebooks", "tables", "figures", "*.md", "*.html"))
    return dst


def executed(run, cells) -> None:
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["papermill"] = {"start_time": "2999-01-01T00:00:00+00:00"}
    out = paths.executed_notebook(run, ANALYZE)
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)


def code(source: str, *outputs):
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = list(outputs)
    return cell


def test_report_shows_the_results_first_then_text_tables_and_figures_without_code(run):
    md = nbformat.v4.new_markdown_cell
    executed(run, [
        md("# 3 · Analyze\n\n[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://x)\n\nWhat it does."),
        code("import secret_module"),
        md("## Accuracy"),
        code("compute_everything()",
             nbformat.v4.new_output("stream", name="stderr", text="UserWarning: noisy\n"),
             nbformat.v4.new_output("stream", name="stdout", text="one threshold: no clustered inference\n"),
             nbformat.v4.new_output("execute_result", {"text/plain": "['tables/a.csv']"}, execution_count=1)),
        code("table", nbformat.v4.new_output("execute_result", {"text/html": "<table><tr><td>0.667</td></tr></table>",
                                                                 "text/plain": "0.667"}, execution_count=2)),
        code("show_figure()", nbformat.v4.new_output("display_data", {"image/png": PNG, "text/plain": "<Image>"})),
        md("## Results in words"),
        code("results_text(summary)", nbformat.v4.new_output("display_data", {"text/markdown": "The gap was **0.123**."})),
        md("## Last section"),
    ])
    page = write_report(run)
    assert page == run / "report.html"
    soup = BeautifulSoup(page.read_text(), "html.parser")
    text = " ".join(soup.get_text(" ").split())
    assert [h.get_text().strip("¶ ") for h in soup.find_all("h2")] == ["Results in words", "Accuracy", "Last section"]
    assert "The gap was 0.123" in text and "0.667" in text and "one threshold: no clustered inference" in text
    assert soup.find("img")["src"] == f"data:image/png;base64,{PNG}"
    for hidden in ("secret_module", "compute_everything", "results_text", "UserWarning", "tables/a.csv", "colab-badge"):
        assert hidden not in page.read_text(), hidden
    assert "<script" not in page.read_text() and "http" not in str(soup.find_all(["img", "link"]))
    assert f"Run {run}" in text and "score files smollm2-135m-instruct" in text and "Warning" not in text


def test_a_score_file_written_after_the_analysis_is_a_warning_in_the_report(run):
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze")])
    nb = nbformat.read(paths.executed_notebook(run, ANALYZE), as_version=4)
    nb.metadata["papermill"]["start_time"] = "2000-01-01T00:00:00+00:00"
    nbformat.write(nb, paths.executed_notebook(run, ANALYZE))
    text = BeautifulSoup(write_report(run).read_text(), "html.parser").get_text(" ")
    assert "score files written after this analysis ran (smollm2-135m-instruct)" in " ".join(text.split())


def test_a_run_without_an_executed_analysis_is_told_what_to_run(run, capsys):
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"python -m nbutils run {ANALYZE} -p run_dir {run}" in err and "03_analyze.ipynb is missing" in err
    assert not (run / "report.html").exists()


def test_an_analysis_that_stopped_with_an_error_is_not_reported(run):
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze"),
                   code("analyze()", nbformat.v4.new_output("error", ename="ValueError", evalue="n_boot: must be ≥ 1",
                                                           traceback=[]))])
    with pytest.raises(ValueError, match=r"stopped with an error \(ValueError: n_boot: must be ≥ 1\).*nbutils run"):
        write_report(run)
    assert not (run / "report.html").exists()


def test_a_folder_that_is_no_run_is_an_error_naming_it(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "run_dir:" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2
    assert "holds no study's dataset" in capsys.readouterr().err
