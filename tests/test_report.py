"""``python -m nbutils report RUN_DIR``: what goes into report.html, in which order, the errors that say what to run, and
a page that is safe and fits a 1280-pixel window.

The report of a real sweep, opened in a browser, is checked in tests/studies/monotonicity/test_notebooks.py; the sample
run's in tests/test_sample.py. Here the executed analysis is mostly a small notebook written by the test, so every rule
is seen at once; the notebook-tier tests at the end run the real analyses (the sample's, and a custom prompt file
whose groups are HTML) and open their reports in headless Chromium."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import nbformat
import pandas as pd
import pytest
from bs4 import BeautifulSoup

from nbutils.analysis import _run as analysis_run
from nbutils import artifacts, paths, studies
from nbutils.__main__ import main
from nbutils.records import SCHEMA_VERSION
from nbutils.report import write_report
from nbutils.results import run_table_lines

SAMPLE = paths.repo_root() / "outputs" / "samples" / "monotonicity"
ANALYZE = studies.get("monotonicity").notebooks["analyze"]
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install "
                                                              "chromium): the report is checked as a browser renders it")
# hostile values a prompt file can carry as a group: each would run or load something if written into the page raw
HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(2)>",
           "<script>document.title='PWNED'</script>", "<img src=x onerror=\"document.body.dataset.pwned=1\">"]


@pytest.fixture()
def run(tmp_path):
    """A run holding the sample's dataset and scores (no analysis yet)."""
    dst = tmp_path / "run"
    shutil.copytree(SAMPLE, dst, ignore=shutil.ignore_patterns("notebooks", "tables", "figures", "*.md", "*.html"))
    return dst


def executed(run, cells, *, finished: bool = True, notebook: str = ANALYZE, results: bool = True) -> None:
    """An executed analysis as papermill leaves it (finished: every cell completed and an end time; else the cells
    from the last one on never ran, as after ``kill -9``), with the results files a finished analysis writes."""
    nb = nbformat.v4.new_notebook(cells=cells)
    code_cells = [c for c in cells if c.cell_type == "code"]
    for i, c in enumerate(code_cells):
        status = "completed" if finished or i < len(code_cells) - 1 else "running"
        c.metadata["papermill"] = {"status": status, "exception": False}
    nb.metadata["papermill"] = {"start_time": "2999-01-01T00:00:00+00:00", "input_path": str(paths.resolve(notebook)),
                                "end_time": "2999-01-01T00:01:00+00:00" if finished else None, "exception": None}
    out = paths.executed_notebook(run, notebook)
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    if results:
        artifacts.write_json({"schema_version": SCHEMA_VERSION, "records": [], "inputs": analysis_run.analysis_inputs(run)},
                             paths.summary_path(run))
        artifacts.write_text("**Is it?**\n\nDesign.\n\n- model: a finding.\n", paths.results_path(run))


def code(source: str, *outputs):
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = list(outputs)
    return cell


def text_of(page) -> str:
    return " ".join(BeautifulSoup(page.read_text(), "html.parser").get_text(" ").split())


def chromium_dom(page, measure: bool = False) -> BeautifulSoup:
    """The page's DOM after headless Chromium at 1280 px has loaded it. ``measure``: a copy of the page without its
    Content-Security-Policy and with a script that writes, into the DOM, the width of the window and of every table."""
    with tempfile.TemporaryDirectory() as d:
        target = page
        if measure:
            html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
            target = paths.Path(d) / "measured.html"
            target.write_text(html.replace("</body>", MEASURE + "</body>"))
        dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                              "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={d}/p",
                              "--window-size=1280,900", "--dump-dom", target.as_uri()],
                             capture_output=True, text=True, timeout=180, check=True).stdout
    return BeautifulSoup(dom, "html.parser")


MEASURE = """<script>
const w = document.documentElement.clientWidth;
const tables = [...document.querySelectorAll('table')].map(t => ({right: t.getBoundingClientRect().right,
  caption: (t.querySelector('caption') || t).textContent.slice(0, 60)}));
const long = [...document.querySelectorAll('td')].filter(td => td.textContent.length > 60)
  .map(td => td.getBoundingClientRect().width);
const pre = document.createElement('pre'); pre.id = 'measured';
pre.textContent = JSON.stringify({w, scroll: document.documentElement.scrollWidth, tables, long});
document.body.appendChild(pre);
</script>"""


def widths(page) -> dict:
    return json.loads(chromium_dom(page, measure=True).find(id="measured").get_text())


def assert_fits(page) -> None:
    """No table reaches past a 1280-pixel window, the page does not scroll sideways, and a long cell (a note) is at
    least 15 em wide."""
    m = widths(page)
    wide = [t["caption"] for t in m["tables"] if t["right"] > m["w"] + 0.5]
    assert m["tables"] and not wide, f"tables wider than the {m['w']} px page: {wide}"
    assert m["scroll"] <= m["w"], f"the page scrolls sideways ({m['scroll']} px in a {m['w']} px window)"
    assert all(w >= 180 for w in m["long"]), f"long cells squeezed: {sorted(m['long'])[:5]} px"


def only_the_item_browser_script(soup) -> None:
    """The page's scripts: none, or the item browser's one, inline, allowed by its sha256 and by nothing else."""
    from nbutils.report import ITEMS_SCRIPT, SCRIPT_HASH

    csp = soup.find("meta", attrs={"http-equiv": "Content-Security-Policy"})["content"]
    scripts = soup.find_all("script")
    assert "default-src 'none'" in csp and "unsafe" not in csp.split("script-src")[1].split(";")[0]
    if scripts:
        assert f"script-src '{SCRIPT_HASH}';" in csp, csp
        assert [(s.attrs, s.string) for s in scripts] == [({}, ITEMS_SCRIPT)], "a script that is not the browser's"
    else:
        assert "script-src 'none'" in csp


def assert_inert(page, hostile=HOSTILE) -> None:
    """Each hostile value reads as text; the page has no script but the item browser's (allowed by its hash), no
    element with an event handler, no image that is not embedded, and as Chromium opened it, nothing else ran."""
    html = page.read_text()
    soup = BeautifulSoup(html, "html.parser")
    only_the_item_browser_script(soup)
    assert not [t.name for t in soup.find_all(True) if any(a.lower().startswith("on") for a in t.attrs)]
    assert all(img["src"].startswith("data:image/") for img in soup.find_all("img"))
    text = " ".join(soup.get_text(" ").split())
    for value in hostile:
        assert value in text, f"{value} does not read as text"
    dom = chromium_dom(page)
    assert dom.title.get_text() != "PWNED" and not dom.body.get("data-pwned"), "a script ran"
    only_the_item_browser_script(dom)
    assert all(img["src"].startswith("data:image/") for img in dom.find_all("img"))


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
    # the finding first (the results in words of results.md), then the contents and the sections with content
    assert [h.get_text().strip("¶ ") for h in soup.find_all("h2")] == ["Contents", "How this analysis works",
                                                                       "Accuracy", "Items"]
    assert soup.select_one("section.finding").get_text(" ", strip=True).startswith("Is it? Design. model: a finding.")
    assert [a.get_text() for a in soup.select("nav.toc a")] == ["How this analysis works", "Accuracy", "Items"]
    assert "0.667" in text and "What it does." in text
    assert "one threshold: no clustered inference" not in text and "The gap was" not in text  # stdout; a 2nd copy
    assert soup.select_one("section.finding figure img")["src"] == f"data:image/png;base64,{PNG}"  # Figure 1
    for hidden in ("secret_module", "compute_everything", "results_text", "UserWarning", "tables/a.csv", "colab-badge"):
        assert hidden not in page.read_text(), hidden
    only_the_item_browser_script(soup)
    assert "http" not in str(soup.find_all(["img", "link"]))
    assert f"Run {run.name} " in text and str(run) not in page.read_text()  # no machine path
    assert "score files smollm2-135m-instruct" in text and "Warning" not in text
    assert soup.find("h1").get_text() == f"monotonicity: smollm2-135m-instruct · run {run.name}"  # no labels: files


def test_score_files_gone_changed_or_added_since_the_analysis_are_red_at_the_top(run, capsys):
    """The analysis records each score file's sha256 (summary.json ``inputs``); the report compares them with the run."""
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze")])
    scores = paths.scores_dir(run)
    shutil.copy(scores / "smollm2-135m-instruct.parquet", scores / "other.parquet")
    shutil.copy(scores / "smollm2-135m-instruct.json", scores / "other.json")
    assert main(["report", str(run)]) == 0
    assert "warning: score files written after this analysis ran (other.parquet)" in capsys.readouterr().err
    (scores / "other.parquet").unlink()
    (scores / "other.json").unlink()
    page = write_report(run)
    assert "Warning" not in text_of(page)  # as the analysis read it again
    with open(scores / "smollm2-135m-instruct.parquet", "ab") as f:
        f.write(b"\0")
    alerts = BeautifulSoup(write_report(run).read_text(), "html.parser").select("main > .alert")
    assert len(alerts) == 1 and "score files changed since this analysis read them (smollm2-135m-instruct.parquet" \
        in alerts[0].get_text()
    for f in scores.glob("smollm2-135m-instruct.*"):
        f.unlink()
    page = write_report(run)
    soup = BeautifulSoup(page.read_text(), "html.parser")
    first = soup.find("main").find(True)
    assert "alert" in first["class"] and "gone from" in first.get_text() and "smollm2-135m-instruct.parquet" \
        in first.get_text() and "run the analysis again" in first.get_text()
    assert "score files smollm2-135m-instruct" in text_of(page)  # the files the analysis read, not "none"


def test_an_analysis_that_recorded_no_checksums_is_compared_by_time(run):
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze")])
    nb = nbformat.read(paths.executed_notebook(run, ANALYZE), as_version=4)
    nb.metadata["papermill"]["start_time"] = "2000-01-01T00:00:00+00:00"
    nbformat.write(nb, paths.executed_notebook(run, ANALYZE))
    artifacts.write_json({"schema_version": SCHEMA_VERSION, "records": []}, paths.summary_path(run))
    assert "score files written after this analysis ran (smollm2-135m-instruct.parquet)" in text_of(write_report(run))
    for f in paths.scores_dir(run).glob("smollm2-135m-instruct.*"):
        f.unlink()
    assert "the run holds no score files now" in text_of(write_report(run))


def test_an_analysis_killed_on_its_way_is_refused(run, capsys):
    """What papermill leaves after ``kill -9``: no end time, the running cell never completed."""
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze"), code("analyze()"), code("view()")], finished=False)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "did not finish" in err and "1 cell(s) never completed" in err and f"nbutils run {ANALYZE}" in err
    assert not paths.report_path(run).exists()


def test_an_analysis_without_its_results_files_is_refused(run, capsys):
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze")], results=False)
    assert main(["report", str(run)]) == 2
    assert "has no summary.json or results.md: its analysis did not finish writing" in capsys.readouterr().err


def test_another_studys_report_is_refused_and_each_study_has_its_own_executed_analysis(run, capsys):
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze")])
    assert main(["report", str(run), "--study", "negation"]) == 2
    err = capsys.readouterr().err
    assert "is not a negation run (it has no stimuli.parquet; it holds the dataset of monotonicity)" in err
    assert not paths.report_path(run).exists()
    names = {s.name: paths.executed_notebook(run, s.notebooks["analyze"]).name for s in studies.REGISTRY.values()}
    assert names["monotonicity"] == "monotonicity_03_analyze.ipynb" and len(set(names.values())) == len(names)
    assert paths.executed_notebook(run, studies.SCORE_NOTEBOOK, "m").name == "score__m.ipynb"


def test_a_run_from_before_each_study_had_its_own_file_is_read_when_it_is_that_studys(run, capsys):
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze\n\nold run")])
    new = paths.executed_notebook(run, ANALYZE)
    legacy = paths.legacy_executed_notebook(run, ANALYZE)
    new.rename(legacy)
    assert legacy.name == "03_analyze.ipynb" and "old run" in text_of(write_report(run))
    nb = nbformat.read(legacy, as_version=4)
    nb.metadata["papermill"]["input_path"] = str(paths.resolve(studies.get("custom").notebooks["analyze"]))
    nbformat.write(nb, legacy)
    assert main(["report", str(run)]) == 2
    assert re.search(r"03_analyze.ipynb is the executed copy of \S*notebooks/custom/03_analyze.ipynb, not of "
                     r"notebooks/monotonicity/03_analyze.ipynb; run `python -m nbutils run", capsys.readouterr().err)


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


def test_data_in_every_kind_of_output_reads_as_text(run):
    """Markdown (a cell, and the results in words), a table from pandas and one from a Styler that did not escape, a
    printed line, an SVG with a script, a caption: every hostile value is text on the page, and nothing runs."""
    from nbutils.display import view

    md = nbformat.v4.new_markdown_cell
    frame = pd.DataFrame({"group": HOSTILE, "accuracy": [0.5] * 4})
    styled = view({"accuracy": frame}, "accuracy").to_html()
    raw = frame.style.set_caption(HOSTILE[0]).to_html()  # a Styler left to its default does not escape
    svg = '<svg xmlns="http://www.w3.org/2000/svg"><script>alert(3)</script></svg>'
    executed(run, [
        md("# Analyze " + HOSTILE[1]),
        md("## Results in words"),
        code("text", nbformat.v4.new_output("display_data", {"text/markdown": "- group " + " and ".join(HOSTILE)})),
        md("## Tables\n\nSee " + HOSTILE[0] + " and [link](javascript:alert(4))"),
        code("view", nbformat.v4.new_output("display_data", {"text/html": styled})),
        code("raw", nbformat.v4.new_output("display_data", {"text/html": raw})),
        code("plain", nbformat.v4.new_output("display_data", {"text/html": frame.to_html()})),
        code("print", nbformat.v4.new_output("stream", name="stdout", text=HOSTILE[2] + "\n")),
        code("svg", nbformat.v4.new_output("display_data", {"image/svg+xml": svg})),
    ])
    page = write_report(run)
    html = page.read_text()
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5 and "href=\"javascript" not in html
    assert_inert(page)


@needs_chromium
def test_the_inertness_check_sees_a_script_that_runs(tmp_path):
    """The browser check itself: a page without the report's safeguards that runs its script is caught."""
    page = tmp_path / "report.html"
    page.write_text("<html><head><title>t</title></head><body><script>document.title='PWNED'</script></body></html>")
    assert chromium_dom(page).title.get_text() == "PWNED"


@needs_chromium
def test_a_table_of_many_columns_and_long_notes_fits_the_page(run):
    """24 columns with long names and a long note per row: split into parts that each fit 1280 px, the naming
    columns repeated, the notes wrapped to a readable width."""
    from nbutils.display import view

    cols = {f"a_rather_long_column_name_{i}": [0.123456 * i, 1234.5] for i in range(20)}
    frame = pd.DataFrame({"model": ["smollm2-135m-instruct"] * 2, "condition": ["concept_learning", "explicit"],
                          **cols, "p_value": [0.5, 0.0001],
                          "note": ["singular fit: dropped (1 | noun) (SD estimated 0); " * 3] * 2})
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze"),
                   code("view", nbformat.v4.new_output("display_data", {"text/html": view({"t": frame}, "t").to_html()}))])
    page = write_report(run)
    soup = BeautifulSoup(page.read_text(), "html.parser")
    parts = soup.select("div.table table")
    assert len(parts) == 3 and all(p.find("th").get_text() == "model" for p in parts)
    assert "split into 3 parts" in parts[-1].find("caption").get_text()
    shown = [th.get_text() for p in parts for th in p.find("thead").find_all("th")]
    assert sorted(set(shown)) == sorted(frame.columns)
    assert_fits(page)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """A copy of the sample, analysed by ``python -m nbutils run`` of the real analysis notebook (R when installed)."""
    run = tmp_path_factory.mktemp("analysed") / "run"
    shutil.copytree(SAMPLE, run, ignore=shutil.ignore_patterns("*.html"))
    done = subprocess.run([sys.executable, "-m", "nbutils", "run", ANALYZE, "-p", "run_dir", str(run),
                           "-p", "n_boot", "200"], capture_output=True, text=True, timeout=600,
                          cwd=paths.repo_root(), env=_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return run, done


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(paths.repo_root()))


@pytest.mark.notebooks
def test_nbutils_run_of_an_analysis_prints_its_headline_and_writes_the_report(analysed):
    run, done = analysed
    out = done.stdout.splitlines()
    title = paths.results_path(run).read_text().splitlines()[0].strip("*")
    assert out[0] == f"executed → {paths.executed_notebook(run, ANALYZE)}" and out[1] == title
    assert any(line.startswith("SmolLM2-135M-Instruct, concept learning: ") for line in out)
    assert out[-2:] == [f"results in words → {paths.results_path(run)}", f"report → {paths.report_path(run)}"]
    assert not done.stderr.strip(), done.stderr
    summary = json.loads(paths.summary_path(run).read_text())
    assert set(summary["inputs"]["score_files"]) == {"smollm2-135m-instruct.parquet"}


@pytest.mark.notebooks
@needs_chromium
def test_the_real_analysis_report_fits_the_page(analysed):
    """Every table of the sample's report (gap_pooled, mixed_model and records among them) fits 1280 px."""
    run, _ = analysed
    assert_fits(paths.report_path(run))
    soup = BeautifulSoup(paths.report_path(run).read_text(), "html.parser")
    caps = " ".join(c.get_text() for c in soup.find_all("caption"))
    assert "mixed_model" in caps and "gap_pooled" in caps and "split into" in caps


@pytest.mark.notebooks
@needs_chromium
def test_the_real_report_leads_with_the_finding_and_prints_short(analysed, tmp_path):
    """The sample's page: its title names the study, the model and the run; the headline table (one row per model and
    what is tested), the results in words and Figure 1 come first, above the contents; long tables are folded; no
    printed output and no machine path; printed, at most 6 pages."""
    run, _ = analysed
    page = paths.report_path(run)
    html = page.read_text()
    soup = BeautifulSoup(html, "html.parser")
    assert soup.find("h1").get_text() == f"monotonicity: SmolLM2-135M-Instruct · run {run.name}"
    finding = soup.select_one("main > section.finding")
    assert finding.find_previous_sibling("nav") is None and finding.find_next_sibling("nav")["class"] == ["toc"]
    heads = [th.get_text() for th in finding.select("table.headline th")]
    assert heads == ["model", "what is tested", "accuracy upward", "accuracy downward", "gap", "estimate, 95% CI", "p",
                     "test", "what it means"]
    rows = [[td.get_text() for td in tr.find_all("td")] for tr in finding.select("table.headline tbody tr")]
    assert rows[0][:5] == ["SmolLM2-135M-Instruct", "the upward vs downward gap under concept learning", "60.0%",
                           "50.0%", "+10.0 pp"]
    assert finding.select_one("figure img") and "Figure 1" in finding.find("figcaption").get_text()
    # the demo's model is not above chance, its 95% CI reaching past the floor's edge: the table and the sentence say
    # it alike, with no conclusion about a bias
    assert rows[0][-1] == "at the edge of the task floor: no conclusion"
    assert "at the edge of the task floor" in finding.get_text() and "below the task floor" not in finding.get_text()
    assert str(run) not in html and str(paths.repo_root()) not in html and not soup.select("section.part pre")
    assert all(len(t.select("tbody > tr")) <= 8 or t.find_parent("details") for t in soup.find_all("table"))
    assert not [s["id"] for s in soup.select("section.part") if "Robustness" in s.get_text()[:200]]  # no variants
    pdf = tmp_path / "report.pdf"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}/p",
                    "--no-pdf-header-footer", f"--print-to-pdf={pdf}", page.as_uri()], capture_output=True,
                   timeout=180, check=True)
    pages = len(re.findall(rb"/Type\s*/Page\b", pdf.read_bytes()))
    assert 1 <= pages <= 6, f"the report prints to {pages} pages"


@pytest.mark.notebooks
@needs_chromium
def test_a_custom_study_whose_groups_are_html_gives_a_page_where_they_are_text(tmp_path, tiny_model_dir):
    """A prompt file with the groups <script>alert(1)</script> and <img src=x onerror=alert(2)>, scored by a tiny
    random model (the words on the page are what is tested, not the model), analysed by the custom study's notebook."""
    from nbutils.engine.models import load_model
    from nbutils.engine.run import score_run
    from nbutils.studies.custom import dataset
    from nbutils.sweep._papermill import execute

    rows = [{"question": f"There are 10 pens. Alice has {k} of the 10 pens. Does Alice have more than half?",
             "gold": "Yes" if k > 5 else "No", "id": f"s{k}", "group": g}
            for g in HOSTILE[:2] for k in (1, 2, 3, 4, 6, 7, 8, 9)]
    data = tmp_path / "hostile.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    kw = dict(columns={"prompt": "question", "answer": "gold", "item_id": "id"}, choices=["Yes", "No"],
              option_format="text", group_by=["group"], system=None, shuffle_options=False, seed=0)
    dataset.write_items(dataset.load_items(data, **kw), run, dataset.parameters(data_file=data, **kw))
    lm = load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1)
    score_run(run, lm, studies.get("custom").spec, progress=False)
    analyze = studies.get("custom").notebooks["analyze"]
    execute(analyze, paths.executed_notebook(run, analyze), {"run_dir": str(run), "n_boot": 50})
    page = write_report(run)
    assert page.read_text().count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5
    assert_inert(page, HOSTILE[:2])
    assert_fits(page)


def test_an_analysis_that_fails_on_its_way_leaves_no_results_that_look_complete(run, monkeypatch):
    """A full disk while the figures are written: summary.json, results.md and report.html of the analysis before are
    gone, none of this one's is written; when it succeeds, summary.json (written last) records the score files."""
    import errno

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def analysis():
        fig = plt.figure()
        return analysis_run.Analysis(scores=pd.DataFrame(), tables={"accuracy": pd.DataFrame({"a": [1]})},
                                  summary={"records": []}, text="**Is it?**\n"), {"accuracy": fig}

    for earlier in (paths.summary_path(run), paths.results_path(run), paths.report_path(run)):
        earlier.write_text("from the analysis before")

    def full(fig, stem):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(artifacts, "save_figure", full)
    a, figs = analysis()
    with pytest.raises(OSError, match="No space left"):
        analysis_run.write_analysis(a, run, figs)
    assert (paths.tables_dir(run) / "accuracy.csv").exists()
    assert not [p.name for p in (paths.summary_path(run), paths.results_path(run), paths.report_path(run)) if p.exists()]
    monkeypatch.undo()
    a, figs = analysis()
    files = analysis_run.write_analysis(a, run, figs)
    assert files[-2:] == [paths.results_path(run), paths.summary_path(run)]
    inputs = json.loads(paths.summary_path(run).read_text())["inputs"]
    assert inputs["score_files"] == {"smollm2-135m-instruct.parquet": artifacts.sha256_file(
        paths.scores_dir(run) / "smollm2-135m-instruct.parquet")}


def test_the_end_of_a_sweep_prints_the_headline_and_where_the_report_is(run):
    """What ``python -m nbutils sweep`` prints last (``SweepReport.lines``): the results' title, their table (from
    summary.json) and findings, as plain text, then the results file and the report, and what the sweep did last."""
    from nbutils.sweep._sweep import SweepReport

    executed(run, [nbformat.v4.new_markdown_cell("# Analyze")])
    artifacts.write_text("**Is upward learned better?**\n\n2 concepts at 5 thresholds.\n\n- m, concept learning: "
                         "**upward** better: OR = 2.10, p = .012.\n- m, explicit: no difference.\n\n*Caveats:* few.\n",
                         paths.results_path(run))
    entry = {"model": "m", "condition": "concept_learning", "term": "upward", "test": "gee_bias_reduced",
             "estimate": 0.7419, "ci_low": 0.1, "ci_high": 1.4, "p": 0.012, "valid": True, "verdict": "more",
             "sentence": "", "scale": "log_odds_ratio", "symbol": "OR", "acc_up": 0.7, "acc_down": 0.5, "gap": 0.2}
    artifacts.write_json({"schema_version": SCHEMA_VERSION, "records": [], "headline": [entry],
                          "inputs": analysis_run.analysis_inputs(run)}, paths.summary_path(run))
    write_report(run)
    lines = SweepReport(run, "monotonicity", scored=["m"], analyzed=True).lines()
    head = lines[:lines.index(f"results in words: {paths.results_path(run)}")]
    table = run_table_lines(run)
    assert table[0].split() == ["model", "condition", "acc", "up", "acc", "down", "gap", "OR", "[95%", "CI]", "p"]
    assert table[2].split() == ["m", "concept", "learning", "70.0%", "50.0%", "+20.0", "pts", "2.10", "[1.11,",
                                "4.06]", ".012"]
    assert head == ["Is upward learned better?", "", *table, "", "m, concept learning: upward better: OR = 2.10, "
                    "p = .012.", "m, explicit: no difference.", ""]
    tail = lines[len(head):]
    assert tail[:3] == [f"results in words: {paths.results_path(run)}", f"report: {paths.report_path(run)}", ""]
    assert tail[3:] == [f"study: monotonicity", f"run_dir: {run}", "scored: ['m']", "skipped (already scored): -",
                        "analyzed: True"], "what the sweep did comes last"
    assert "report" not in " ".join(SweepReport(run, "monotonicity", failed={"m": "OSError: x"}).lines())


@pytest.mark.parametrize("study", sorted(studies.REGISTRY))
def test_an_analysis_that_raises_mid_way_leaves_no_results_of_the_one_before(run, monkeypatch, study):
    """Every study's analysis removes the run's results files before it reads anything, so an exception on its way
    leaves none that could be taken for its own: monotonicity's fails in its statistics, the others on a run that holds
    monotonicity's dataset, not theirs."""
    import importlib

    for earlier in (paths.summary_path(run), paths.results_path(run), paths.report_path(run)):
        earlier.write_text("from the analysis before")
    module = importlib.import_module(f"nbutils.studies.{study}.analysis")

    def broken(*args, **kwargs):
        raise RuntimeError("mid-way")

    monkeypatch.setattr(module, "compute", broken)
    with pytest.raises((RuntimeError, ValueError)):
        module.analyze_run(run)
    assert not [p.name for p in (paths.summary_path(run), paths.results_path(run), paths.report_path(run)) if p.exists()]


def test_shards_are_not_inputs_and_a_shard_added_later_is_no_warning(run):
    """The analysis reads merged files, never shards: summary.json's inputs leave them out (so a sweep through cluster
    jobs writes the same summary.json as a serial one), and the report does not warn about them."""
    scores = paths.scores_dir(run)
    for suffix in (".parquet", ".json"):
        shutil.copy(scores / f"smollm2-135m-instruct{suffix}", scores / f"smollm2-135m-instruct.shard-0-of-2{suffix}")
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze")])
    recorded = json.loads(paths.summary_path(run).read_text())["inputs"]
    assert recorded == {"score_files": {"smollm2-135m-instruct.parquet": artifacts.sha256_file(
        scores / "smollm2-135m-instruct.parquet")}}
    shutil.copy(scores / "smollm2-135m-instruct.json", scores / "smollm2-135m-instruct.shard-1-of-2.json")
    shutil.copy(scores / "smollm2-135m-instruct.parquet", scores / "smollm2-135m-instruct.shard-1-of-2.parquet")
    assert "Warning" not in text_of(write_report(run))


def test_a_cue_profile_that_did_not_finish_is_left_out_and_said_in_red(run):
    cues = studies.RUN_ANALYSES["cues"]
    executed(run, [nbformat.v4.new_markdown_cell("# Analyze")])
    executed(run, [nbformat.v4.new_markdown_cell("# Cue profile\n\nhalf done"), code("profile()")], notebook=cues,
             finished=False, results=False)
    page = write_report(run)
    alert = BeautifulSoup(page.read_text(), "html.parser").select_one("main > .alert").get_text()
    assert "left out of this page" in alert and "cues_01_profile.ipynb did not finish" in alert
    assert "half done" not in text_of(page)


@pytest.mark.notebooks
def test_the_analysis_run_outside_papermill_writes_its_report_and_a_stale_page_is_refused(tmp_path):
    """The analysis executed by nbclient (as JupyterLab runs it: no papermill) writes report.html at its end from what
    its cells showed; a report from an executed notebook older than summary.json is refused, naming what to run."""
    import nbclient

    from nbutils.report import ReportError

    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run, ignore=shutil.ignore_patterns("notebooks", "tables", "figures", "*.md", "*.html",
                                                               "summary.json"))
    nb = nbformat.read(paths.resolve(ANALYZE), as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    params.source += f"\nrun_dir = {str(run)!r}\nn_boot = 100\nuse_r = False\n"
    env = {k: v for k, v in _env().items() if k != paths.PAPERMILL_ENV}
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(paths.repo_root())}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    page = paths.report_path(run)
    assert page.is_file() and nb.cells[-1].outputs[0]["data"]["text/plain"].startswith("'report → ")
    executed = nbformat.read(paths.executed_notebook(run, ANALYZE), as_version=4)
    assert executed.metadata["nbutils"]["interactive"] and "papermill" not in executed.metadata
    soup = BeautifulSoup(page.read_text(), "html.parser")
    assert soup.select_one("section.finding table.headline") and soup.select_one("section.finding figure img")
    assert soup.find(string=re.compile("Accuracy per concept"))  # the sections, from the outputs the kernel showed
    summary = json.loads(paths.summary_path(run).read_text())
    assert summary["analysed"] <= executed.metadata["nbutils"]["end_time"]
    assert [h["test"] for h in summary["headline"]] and "gap_ci95_bootstrap" in next(
        v for k, v in summary["models"].items() if k == "SmolLM2-135M-Instruct")["conditions"]["concept_learning"]
    # the analysis ran again later (its summary.json is newer than the executed notebook): refused, saying what to run
    summary["analysed"] = "2999-01-01T00:00:00+00:00"
    artifacts.write_json(summary, paths.summary_path(run))
    with pytest.raises(ReportError, match=r"after the executed analysis .* ended .*python -m nbutils run "):
        write_report(run)
