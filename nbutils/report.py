"""The run's report, ``{run}/report.html``: one self-contained HTML page of what the analysis found, without code.

It is made from the study's executed analysis in the run (``{run}/notebooks/<study>_03_analyze.ipynb``, which a sweep or
``python -m nbutils run`` writes): the title, the results in words first, then every section's text, tables and figures,
code hidden. The cue profile (``notebooks/cues/01_profile.ipynb``) follows when the run holds an executed one.

The page is safe to open whatever the run's data hold: it is built with a template engine that escapes by default
(jinja2), markdown is rendered with raw HTML escaped, tables are cleaned to table markup (bleach), so a group value such
as ``<script>…</script>`` reads as text; and a Content-Security-Policy forbids every script and every fetch: figures
are data URIs, so the one file can be mailed, archived or opened offline. Tables fit a 1280-pixel-wide window: long
cells and headers wrap, and a table of many columns is split into parts that repeat its naming columns.

The report refuses a run whose analysis did not finish (an error, or a kernel killed on its way), whose study is not
the one asked for, or whose results files are missing; and says at the top, in red, when the score files the analysis
read changed or disappeared since, or new ones were written.
"""
from __future__ import annotations

import math
import re
from copy import copy
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from markupsafe import Markup

from . import artifacts, paths, runlock, studies

RESULTS_HEADING = "## Results in words"
MAX_COLUMNS = 11  # a table shown with more columns than this is split into parts (each repeating the naming columns)
CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'none'; object-src 'none'; "
       "base-uri 'none'; form-action 'none'")
_BADGE = re.compile(r"^\[!\[Open In Colab\].*$\n?", re.MULTILINE)
_BASE64 = re.compile(r"^[A-Za-z0-9+/=]*$")
_TABLE_TAGS = {"table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col", "div", "span", "p",
               "br", "b", "strong", "i", "em", "code", "sub", "sup", "wbr"}
_TABLE_ATTRS = {"*": ["class", "id", "colspan", "rowspan", "title"]}
_CSS_SAFE = re.compile(r"^[^<>@\\]*$")  # a table's own style block: selectors and properties, nothing that loads
_NUMBER = re.compile(r"^\s*([<>]\s*)?[-+−]?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?%?\s*$|^\s*$", re.IGNORECASE)


class ReportError(ValueError):
    """The run cannot be reported as asked: the message says why and what to run."""


def write_report(run_dir, study: str | None = None, warn: Callable[[str], None] | None = None) -> Path:
    """Write ``{run}/report.html`` from the run's executed analysis and return its path.

    ``study``: the registered study whose analysis to report; None takes the one whose dataset the run holds.
    A ``ReportError`` (a ValueError) names what is wrong (no run, another study's run, no executed analysis, an
    analysis that stopped with an error or before its end, results files missing) and the command that fixes it.
    ``warn`` is called with each warning the page shows in red at its top (score files changed since the analysis).
    """
    run = paths.resolve(run_dir)
    if not run.is_dir():
        raise ReportError(f"run_dir: {run} is not a folder holding a run")
    with runlock.hold(run, "writing its report"):  # nothing of the run changes while it is read and reported
        return _write_report(run, study, warn)


def _write_report(run: Path, study: str | None, warn: Callable[[str], None] | None) -> Path:
    record = _study(run, study)
    analyze = record.notebooks["analyze"]
    nb = _read(_executed(run, analyze), analyze, run)
    summary = _summary(run, analyze)
    alerts = _input_changes(run, analyze, summary, nb)
    cells = _ordered(nb)
    for extra_nb in studies.RUN_ANALYSES.values():  # run analyses the sweep ran after the study's (the cue profile)
        extra = next((p for p in (paths.executed_notebook(run, extra_nb), paths.legacy_executed_notebook(run, extra_nb))
                      if p.is_file()), None)
        if extra is not None:
            try:
                cells += _read(extra, extra_nb, run).cells
            except ReportError as err:
                alerts.append(f"left out of this page: {err}")
    for line in alerts:
        (warn or (lambda _: None))(line)
    title, rest = (cells[:1], cells[1:]) if cells and cells[0].cell_type == "markdown" else ([], cells)
    html = _page(f"{record.name} · {run.name}", [_cell_html(c) for c in title], _about(run, record.name, nb, summary),
                 alerts, [_cell_html(c) for c in rest])
    out = paths.report_path(run)
    artifacts.atomic_write(out, lambda p: p.write_text(html, encoding="utf-8"))
    return out


# ---------------------------------------------------------------- which analysis, and is it whole

def _study(run: Path, study: str | None):
    """The study asked for, checked to be the one whose dataset the run holds; else the run's own."""
    if not study:
        return studies.for_run(run)
    record = studies.get(study)
    if not paths.dataset_path(run, record.dataset_file).exists():
        held = [s.name for s in studies.REGISTRY.values() if paths.dataset_path(run, s.dataset_file).exists()]
        raise ReportError(f"study: {run} is not a {study} run (it has no {record.dataset_file}"
                          + (f"; it holds the dataset of {', '.join(held)}" if held else "")
                          + f"): run `python -m nbutils report {run}` without --study")
    return record


def _executed(run: Path, analyze: str) -> Path:
    """The study's executed analysis: its own file, else the one file name every study's analysis shared before
    (read only when papermill's record says it ran this very notebook)."""
    executed = paths.executed_notebook(run, analyze)
    if executed.is_file():
        return executed
    legacy = paths.legacy_executed_notebook(run, analyze)
    if legacy.is_file():
        ran = _input_path(legacy)
        if ran and Path(ran).as_posix().endswith(analyze):
            return legacy
        raise ReportError(f"report: {legacy} is the executed copy of {ran or 'an unknown notebook'}, not of {analyze}; "
                          f"run `python -m nbutils run {analyze} -p run_dir {run}` (it writes {executed.name})")
    raise ReportError(f"report: {run} has no executed analysis ({executed} is missing); make it with "
                      f"`python -m nbutils run {analyze} -p run_dir {run}` (a sweep runs it for you)")


def _input_path(executed: Path) -> str | None:
    import nbformat

    return ((nbformat.read(executed, as_version=4).metadata.get("papermill") or {}).get("input_path"))


def _read(executed: Path, notebook: str, run: Path):
    """An executed notebook, checked to be ``notebook`` run by papermill to its end; left out: stderr streams
    (warnings, progress bars), results shown only as a Python repr (a list or a dict, not a table or figure) and the
    Colab badge."""
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    again = f"`python -m nbutils run {notebook} -p run_dir {run}`"
    pm = nb.metadata.get("papermill") or {}
    if not pm:
        raise ReportError(f"report: {executed} was not run by papermill, so nothing says it ran to its end; run {again}")
    if pm.get("input_path") and not Path(pm["input_path"]).as_posix().endswith(notebook):
        raise ReportError(f"report: {executed} is the executed copy of {pm['input_path']}, not of {notebook}; "
                          f"run {again}")
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                raise ReportError(f"report: the analysis in {executed} stopped with an error "
                                  f"({out.get('ename')}: {out.get('evalue')}); fix it and run {again} again")
    unfinished = [c for c in nb.cells if c.cell_type == "code"
                  and (c.metadata.get("papermill") or {}).get("status", "completed") != "completed"]
    if not pm.get("end_time") or unfinished or pm.get("exception"):
        raise ReportError(f"report: the analysis in {executed} did not finish (it started {pm.get('start_time')}; "
                          f"{len(unfinished)} cell(s) never completed: the kernel was killed or is still running); "
                          f"run {again} again")
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if not _noise(o)]
        elif cell.cell_type == "markdown":
            cell.source = _BADGE.sub("", cell.source)
    nb.cells = [c for c in nb.cells if "papermill-error-cell-tag" not in c.metadata.get("tags", [])]
    return nb


def _summary(run: Path, analyze: str) -> dict:
    """The analysis's ``summary.json`` and ``results.md``: written last by a finished analysis, so missing ones mean it
    did not finish writing."""
    missing = [p.name for p in (paths.summary_path(run), paths.results_path(run)) if not p.is_file()]
    if missing:
        raise ReportError(f"report: {run} has no {' or '.join(missing)}: its analysis did not finish writing its "
                          f"results; run `python -m nbutils run {analyze} -p run_dir {run}` again")
    return artifacts.read_json(paths.summary_path(run))


def _input_changes(run: Path, analyze: str, summary: dict, nb) -> list[str]:
    """Score files that changed, disappeared or appeared since the analysis (by the sha256 it recorded; an analysis
    that recorded none is compared by the time each score file was written)."""
    again = (f"run the analysis again (`python -m nbutils run {analyze} -p run_dir {run}`), then "
             f"`python -m nbutils report {run}`")
    now = {p.name: p for p in paths.analysable_score_files(run)}
    recorded = (summary.get("inputs") or {}).get("score_files")
    alerts = []
    if recorded is None:
        if not now:
            alerts.append(f"the run holds no score files now ({paths.scores_dir(run)}): the results below are of files "
                          f"no longer in it; {again}.")
        ran = (nb.metadata.get("papermill") or {}).get("start_time")
        newer = [n for n, p in now.items() if ran and _created(paths.sidecar(p)) > datetime.fromisoformat(ran)]
        if newer:
            alerts.append(f"score files written after this analysis ran ({', '.join(newer)}): {again}.")
        return alerts
    gone = [n for n in recorded if n not in now]
    changed = [n for n in recorded if n in now and artifacts.sha256_file(now[n]) != recorded[n]]
    added = [n for n in now if n not in recorded]
    if gone:
        alerts.append(f"score files this analysis read are gone from {paths.scores_dir(run)} ({', '.join(gone)}): "
                      f"the results below are of files no longer in the run; {again}.")
    if changed:
        alerts.append(f"score files changed since this analysis read them ({', '.join(changed)}: their sha256 "
                      f"differs): the results below are of their earlier contents; {again}.")
    if added:
        alerts.append(f"score files written after this analysis ran ({', '.join(added)}): they are not in the "
                      f"results below; {again}.")
    return alerts


def _created(sidecar: Path) -> datetime:
    """When a score file was written, from its sidecar (the epoch when it does not say)."""
    try:
        return datetime.fromisoformat(artifacts.read_json(sidecar)["created"])
    except (KeyError, TypeError, ValueError):
        return datetime.fromtimestamp(0, timezone.utc)


def _noise(out) -> bool:
    """An output a reader of the report does not need: stderr, or a bare repr."""
    if out.get("output_type") == "stream":
        return out.get("name") == "stderr"
    return out.get("output_type") == "execute_result" and set(out.get("data", {})) <= {"text/plain"}


def _results_section(cells: list) -> tuple[list, list]:
    """The notebook's "Results in words" section (its heading cell up to the next markdown heading) and the rest."""
    start = next((i for i, c in enumerate(cells)
                  if c.cell_type == "markdown" and c.source.lstrip().startswith(RESULTS_HEADING)), None)
    if start is None:
        return [], cells
    end = next((j for j in range(start + 1, len(cells))
                if cells[j].cell_type == "markdown" and cells[j].source.lstrip().startswith("#")), len(cells))
    return cells[start:end], cells[:start] + cells[end:]


def _ordered(nb) -> list:
    """The notebook's cells in report order: its title, its "Results in words" section (the paragraph the analysis
    also writes to the run's results file), then everything else."""
    cells = list(nb.cells)
    title = [cells.pop(0)] if cells and cells[0].cell_type == "markdown" else []
    results, rest = _results_section(cells)
    return title + results + rest


def _about(run: Path, study: str, nb, summary: dict) -> dict:
    """Which run, study and score files the page shows, and when the analysis ran (as recorded in the files, so a
    copied run keeps them)."""
    ran = (nb.metadata.get("papermill") or {}).get("start_time")
    recorded = (summary.get("inputs") or {}).get("score_files")
    names = sorted(recorded) if recorded is not None else [p.name for p in paths.analysable_score_files(run)]
    return {"run": str(run), "study": study, "score_files": ", ".join(Path(n).stem for n in names) or "none",
            "ran": ran[:16].replace("T", " ") + " UTC" if ran else None}


# ---------------------------------------------------------------- HTML, escaped by default

def _markdown(text: str) -> Markup:
    """Markdown as HTML with any raw HTML in it escaped (it reads as text) and unsafe link targets dropped."""
    import mistune

    md = mistune.create_markdown(escape=True, plugins=["table", "strikethrough"])
    return Markup(md(text))


def _cell_html(cell) -> Markup:
    """A markdown cell rendered, or a code cell's outputs (never its code)."""
    if cell.cell_type == "markdown":
        return Markup('<section class="text">{}</section>').format(_markdown(cell.source)) if cell.source.strip() \
            else Markup("")
    if cell.cell_type != "code":
        return Markup("")
    parts = [_output_html(o) for o in cell.get("outputs", [])]
    return Markup("\n").join(Markup('<div class="output">{}</div>').format(p) for p in parts if p)


def _output_html(out) -> Markup:
    """One output in its richest form a page can show by itself, made safe."""
    if out.get("output_type") == "stream":
        return Markup("<pre>{}</pre>").format(out.get("text", ""))
    data = out.get("data", {})
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            b64 = "".join(data[mime].split())
            if _BASE64.match(b64):
                return Markup('<img src="data:{};base64,{}" alt="figure">').format(mime, b64)
    if "image/svg+xml" in data:  # as an image: a script inside an SVG shown by <img> never runs
        import base64

        b64 = base64.b64encode(data["image/svg+xml"].encode()).decode()
        return Markup('<img src="data:image/svg+xml;base64,{}" alt="figure">').format(b64)
    if "text/html" in data:
        return Markup('<div class="table">{}</div>').format(_clean_table(data["text/html"]))
    if "text/markdown" in data:
        return _markdown(data["text/markdown"])
    if "text/plain" in data:
        return Markup("<pre>{}</pre>").format(data["text/plain"])
    return Markup("")


def _clean_table(html: str) -> Markup:
    """A table output (pandas HTML or a Styler) kept to table markup: any other tag in it, such as a data value that
    holds ``<script>`` or ``<img onerror=…>``, is escaped to text by bleach; the Styler's own style block is kept when
    it holds only selectors and properties; headers may wrap after an underscore; a table of many columns is split."""
    import bleach
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    styles = [s.extract().get_text() for s in soup.find_all("style")]
    clean = bleach.clean(str(soup), tags=_TABLE_TAGS, attributes=_TABLE_ATTRS, strip=False, strip_comments=True)
    soup = BeautifulSoup(clean, "html.parser")
    for table in soup.find_all("table"):
        _split_wide(table, soup)
    for th in soup.find_all("th"):  # a long column name may break after each underscore
        for text in [t for t in th.find_all(string=True) if "_" in t]:
            pieces = str(text).split("_")
            nodes = []
            for piece in pieces[:-1]:
                nodes += [piece + "_", soup.new_tag("wbr")]
            text.replace_with(*nodes, pieces[-1])
    style = "".join(f"<style>{s}</style>" for s in styles if _CSS_SAFE.match(s))
    return Markup(style + str(soup))


def _split_wide(table, soup) -> None:
    """A table of more than ``MAX_COLUMNS`` columns becomes several, each repeating the leading naming columns (the
    ones whose cells are words, not numbers), so that no part is wider than the page."""
    rows = table.find_all("tr")
    if not rows or any(c.get("colspan") or c.get("rowspan") for r in rows for c in r.find_all(["th", "td"])):
        return
    grid = [r.find_all(["th", "td"], recursive=False) for r in rows]
    width = max(len(g) for g in grid)
    if width <= MAX_COLUMNS or any(len(g) != width for g in grid):
        return
    body = [g for g, r in zip(grid, rows) if r.find_parent("thead") is None]
    keys = 0
    while keys < min(4, width - 1) and all(not _NUMBER.match(g[keys].get_text()) for g in body):
        keys += 1
    rest = list(range(keys, width))
    parts = math.ceil(len(rest) / (MAX_COLUMNS - keys))
    size = math.ceil(len(rest) / parts)
    caption = table.find("caption")
    anchor = table
    for k in range(parts):
        cols = list(range(keys)) + rest[k * size:(k + 1) * size]
        part = soup.new_tag("table", attrs={k: v for k, v in table.attrs.items() if k != "id"})
        part["class"] = list(table.get("class") or []) + ["part"]
        for section_name in ("thead", "tbody"):
            section = table.find(section_name)
            if section is None:
                continue
            new_section = soup.new_tag(section_name)
            for r in section.find_all("tr", recursive=False):
                cells = r.find_all(["th", "td"], recursive=False)
                new_row = soup.new_tag("tr")
                for c in cols:
                    new_row.append(copy(cells[c]))
                new_section.append(new_row)
            part.append(new_section)
        if caption is not None and k == parts - 1:
            cap = copy(caption)
            cap.append(f" (split into {parts} parts of its columns to fit the page)")
            part.insert(0, cap)
        anchor.insert_after(part)
        anchor = part
    table.decompose()


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>{{ css }}</style>
</head>
<body>
<main>
{% for alert in alerts %}<div class="alert" role="alert"><strong>Warning:</strong> {{ alert }}</div>
{% endfor %}{% for part in heading %}{{ part }}
{% endfor %}<p class="about"><strong>Run</strong> <code>{{ about.run }}</code> · <strong>study</strong> {{ about.study }} · <strong>score files</strong> {{ about.score_files }}{% if about.ran %} · <strong>analysed</strong> {{ about.ran }}{% endif %}</p>
{% for part in body %}{{ part }}
{% endfor %}</main>
</body>
</html>
"""


def _page(title: str, heading: list, about: dict, alerts: list[str], body: list) -> str:
    """The page from its parts: strings are escaped by the template; only the parts built above as ``Markup`` (already
    escaped or cleaned) go in as HTML."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(_TEMPLATE).render(csp=CSP, title=title, css=Markup(_CSS), heading=heading, about=about,
                                             alerts=alerts, body=body)


def headline(run_dir) -> list[str]:
    """The results in words for a terminal: ``results.md``'s title and findings (its list items), as plain text."""
    path = paths.results_path(run_dir)
    if not path.is_file():
        return []
    paragraphs = [p.strip() for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    title = paragraphs[0] if paragraphs else ""
    items = [line[2:] for p in paragraphs for line in p.splitlines() if line.startswith(("- ", "* "))]
    lines = [title] + (items or paragraphs[1:3])
    return [re.sub(r"(\*\*|__|`)", "", line).strip("* ") for line in lines if line]


_CSS = """
body { margin: 0; background: #fff; color: #1f2328; font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto,
       "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 20px 20px 64px; }
h1 { font-size: 1.7em; line-height: 1.25; margin: 0.4em 0 0.6em; }
h2 { font-size: 1.3em; margin: 1.8em 0 0.5em; padding-bottom: 0.2em; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 1.1em; margin: 1.4em 0 0.4em; }
p, li { overflow-wrap: anywhere; }
code { font: 0.9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f6f8fa; padding: 0.1em 0.3em;
       border-radius: 4px; overflow-wrap: anywhere; }
pre { font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f6f8fa; padding: 10px 12px;
      border-radius: 6px; white-space: pre-wrap; overflow-wrap: anywhere; }
img { max-width: 100%; height: auto; display: block; margin: 8px 0; }
.alert { background: #ffebe9; border: 2px solid #cf222e; color: #82071e; padding: 10px 14px; margin: 0 0 12px;
         border-radius: 6px; font-weight: 500; }
.about { color: #444; }
.output { margin: 10px 0; }
.table { max-width: 100%; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; max-width: 100%; }
table.part { margin-bottom: 2px; }
th, td { border: 1px solid #d0d7de; padding: 2px 6px !important; text-align: right; vertical-align: top; }
th { white-space: normal !important; overflow-wrap: normal; }
td { overflow-wrap: anywhere; }
td[class*="col"] { max-width: 36em; }
thead th { background: #f6f8fa; }
tbody tr:nth-child(even) { background: #fafbfc; }
caption { caption-side: bottom; text-align: left; font-size: 0.85em; color: #555; overflow-wrap: anywhere; }
.text table th, .text table td { text-align: left; }
"""
