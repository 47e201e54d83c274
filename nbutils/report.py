"""The run's report, ``{run}/report.html``: one self-contained HTML page of what the analysis found, without code.

It is made from the executed analyze notebook of the run (``{run}/notebooks/03_analyze.ipynb``, which a sweep or
``python -m nbutils run`` writes): the title, the results in words first, then every section's text (markdown rendered by
nbconvert's renderer), tables and figures, code hidden. The cue profile (``notebooks/cues/01_profile.ipynb``) follows
when the run holds an executed one. Figures are embedded as data URIs and the page loads no script, style or font from
elsewhere, so the one file can be mailed, archived or opened offline.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from html import escape
from pathlib import Path

from . import artifacts, paths, runlock, studies

RESULTS_HEADING = "## Results in words"
_BADGE = re.compile(r"^\[!\[Open In Colab\].*$\n?", re.MULTILINE)


def write_report(run_dir, study: str | None = None) -> Path:
    """Write ``{run}/report.html`` from the run's executed analysis and return its path.

    ``study``: the registered study whose analysis to report; None takes the one whose dataset the run holds.
    A ValueError names what is missing (the run, its executed analysis, or an analysis that stopped with an error)
    and the command that makes it.
    """
    run = paths.resolve(run_dir)
    if not run.is_dir():
        raise ValueError(f"run_dir: {run} is not a folder holding a run")
    record = studies.get(study) if study else studies.for_run(run)
    analyze = record.notebooks["analyze"]
    executed = paths.executed_notebook(run, analyze)
    if not executed.is_file():
        raise ValueError(f"report: {run} has no executed analysis ({executed} is missing); make it with "
                         f"`python -m nbutils run {analyze} -p run_dir {run}` (a sweep runs it for you)")
    cells = _ordered(_read(executed, analyze, run), run, record.name)
    for nb in studies.RUN_ANALYSES.values():  # run analyses the sweep ran after the study's (e.g. the cue profile)
        extra = paths.executed_notebook(run, nb)
        if extra.is_file():
            cells += _read(extra, nb, run).cells
    html = _to_html(cells, f"{record.name} · {run.name}")
    out = paths.report_path(run)
    with runlock.hold(run, "writing its report"):
        artifacts.atomic_write(out, lambda p: p.write_text(html, encoding="utf-8"))
    return out


def _read(executed: Path, notebook: str, run: Path):
    """An executed notebook, checked to have run to its end; left out: stderr streams (warnings, progress bars),
    results shown only as a Python repr (a cell's last value that is a list or dict, not a table or figure) and the
    Colab badge."""
    import nbformat

    nb = nbformat.read(executed, as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                raise ValueError(f"report: the analysis in {executed} stopped with an error "
                                 f"({out.get('ename')}: {out.get('evalue')}); fix it and run "
                                 f"`python -m nbutils run {notebook} -p run_dir {run}` again")
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if not _noise(o)]
        elif cell.cell_type == "markdown":
            cell.source = _BADGE.sub("", cell.source)
    nb.cells = [c for c in nb.cells if "papermill-error-cell-tag" not in c.metadata.get("tags", [])]
    return nb


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


def _ordered(nb, run: Path, study: str) -> list:
    """The notebook's cells in report order: its title, a line saying which run this is, its "Results in words"
    section (the paragraph the analysis also writes to the run's results file), then everything else."""
    import nbformat

    cells = list(nb.cells)
    title = [cells.pop(0)] if cells and cells[0].cell_type == "markdown" else []
    results, rest = _results_section(cells)
    return title + [nbformat.v4.new_markdown_cell(_about(run, study, nb))] + results + rest


def _about(run: Path, study: str, nb) -> str:
    """Which run, study and score files the page shows, when the analysis ran, and a warning when a score file was
    written after it started (times as recorded inside the files, so a copied run keeps them)."""
    ran = (nb.metadata.get("papermill") or {}).get("start_time")
    sides = paths.score_sidecars(run)
    names = ", ".join(f"`{p.stem}`" for p in sides) or "none"
    text = f"**Run** `{run}` · **study** {study} · **score files** {names}"
    if not ran:
        return text
    text += f" · **analysed** {ran[:16].replace('T', ' ')} UTC"
    newer = [p.stem for p in sides if _created(p) > datetime.fromisoformat(ran)]
    if newer:
        analyze = studies.get(study).notebooks["analyze"]
        text += (f"\n\n**Warning:** score files written after this analysis ran ({', '.join(newer)}): run the analysis "
                 f"again (`python -m nbutils run {analyze} -p run_dir {run}`), then `python -m nbutils report {run}`.")
    return text


def _created(sidecar: Path) -> datetime:
    """When a score file was written, from its sidecar (the epoch when it does not say)."""
    try:
        return datetime.fromisoformat(artifacts.read_json(sidecar)["created"])
    except (KeyError, TypeError, ValueError):
        return datetime.fromtimestamp(0, timezone.utc)


def _to_html(cells: list, title: str) -> str:
    """The cells as one HTML page: markdown rendered, code hidden, outputs shown (figures as data URIs), a style sheet
    of its own; nothing loaded from elsewhere (nbconvert's page templates are data files an install may lack)."""
    body = "\n".join(_cell_html(c) for c in cells)
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{escape(title)}</title>\n"
            f"<style>{_CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n")


def _cell_html(cell) -> str:
    """A markdown cell rendered, or a code cell's outputs (never its code)."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    if cell.cell_type == "markdown":
        return f'<section class="text">{markdown2html_mistune(cell.source)}</section>' if cell.source.strip() else ""
    if cell.cell_type != "code":
        return ""
    parts = [_output_html(o) for o in cell.get("outputs", [])]
    return "\n".join(f'<div class="output">{p}</div>' for p in parts if p)


def _output_html(out) -> str:
    """One output in its richest form a page can show by itself."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    if out.get("output_type") == "stream":
        return f"<pre>{escape(out.get('text', ''))}</pre>"
    data = out.get("data", {})
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            return f'<img src="data:{mime};base64,{"".join(data[mime].split())}" alt="figure">'
    if "image/svg+xml" in data:
        return data["image/svg+xml"]
    if "text/html" in data:
        return f'<div class="table">{data["text/html"]}</div>'
    if "text/markdown" in data:
        return markdown2html_mistune(data["text/markdown"])
    if "text/plain" in data:
        return f"<pre>{escape(data['text/plain'])}</pre>"
    return ""


_CSS = """
body { margin: 0; background: #fff; color: #1f2328; font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto,
       "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1150px; margin: 0 auto; padding: 24px 28px 64px; }
h1 { font-size: 1.7em; line-height: 1.25; margin: 0.4em 0 0.6em; }
h2 { font-size: 1.3em; margin: 1.8em 0 0.5em; padding-bottom: 0.2em; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 1.1em; margin: 1.4em 0 0.4em; }
a.anchor-link { display: none; }
code { font: 0.9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f6f8fa; padding: 0.1em 0.3em;
       border-radius: 4px; }
pre { font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f6f8fa; padding: 10px 12px;
      border-radius: 6px; overflow-x: auto; white-space: pre-wrap; }
img { max-width: 100%; height: auto; display: block; margin: 8px 0; }
.output { margin: 10px 0; }
.table { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12.5px; margin: 6px 0; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: right; vertical-align: top; }
thead th { background: #f6f8fa; }
tbody tr:nth-child(even) { background: #fafbfc; }
.text table th, .text table td { text-align: left; }
"""
