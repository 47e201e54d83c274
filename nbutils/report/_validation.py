"""The report of a study read across runs (the instrument's validation), ``{run}/report.html``: the same page as a
study's (``report._page``), made from its executed notebook, ``summary.json`` and ``results.md``.

Its first screen: the findings of ``results.md`` (the smallest strength found reliably, the false-positive rate), the
power curve with the decoy beside the ladder, and each strength's reading in each prompt set; the whole results in
words fold below. It says at the top, in red, when a seed's analysis changed since the study read it (by the sha256 of
each seed's ``summary.json`` that the study's record holds), and refuses a run folder whose notebook did not finish.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from markupsafe import Markup

from .. import artifacts, paths, runlock, studies
from ._freshness import inputs as report_inputs, stamp as stamp_inputs
from ..studies import AcrossRuns
from ._html import cell_html, page
from ._page import ReportError, _figure_one, _read, _sections, _title_parts, nbformat_markdown
from ._page import write_report as write_study_report

TABLE_HEADING = "## Each strength, prompt set by prompt set"  # the section of results.md on the first screen


def write_report(run_dir, study: str | None = None, warn: Callable[[str], None] | None = None) -> Path:
    """The report of any run folder: a study read across runs (its record in the folder) gets its own
    page (``write``), every other run its study's."""
    run = paths.resolve(run_dir)
    across = studies.across_runs_for(run) if run.is_dir() else None
    if across is None or study not in (None, across.name):
        read = [s for s in studies.ACROSS_RUNS.values() if study in (None, s.name) and run.is_dir()
                and not any(paths.dataset_path(run, x.dataset_file).exists() for x in studies.REGISTRY.values())
                and any(p.is_dir() for p in run.glob(s.runs))]
        if read:  # the runs such a study reads, not its run folder
            raise ReportError(f"report: {run} holds the runs the {read[0].name} study reads, not its results; write "
                              f"them and its report with `python -m nbutils run {read[0].notebook} -p {read[0].reads} "
                              f"{_shown(run)}` (its run folder: {paths.reading_folder(_shown(run))})")
        return write_study_report(run_dir, study, warn)
    with runlock.hold(run, "writing its report"):  # nothing of the run changes while it is read and reported
        return write(run, across, warn)


def write(run: Path, study: AcrossRuns, warn: Callable[[str], None] | None = None) -> Path:
    """Write ``{run}/report.html`` for ``study`` from the run folder's executed notebook and return its path; a
    ``ReportError`` names what is missing or unfinished and the command that makes it."""
    record = _record(run, study)
    source = (run / str(record.get("root") or ".")).resolve()
    again = f"`python -m nbutils run {study.notebook} -p {study.reads} {_shown(source)} -p run_dir {_shown(run)}`"
    executed = paths.executed_notebook(run, study.notebook)
    if not executed.is_file():
        raise ReportError(f"report: {run} has no executed {study.name} notebook ({executed} is missing); make it with "
                          f"{again}")
    missing = [p.name for p in (paths.summary_path(run), paths.results_path(run)) if not p.is_file()]
    if missing:
        raise ReportError(f"report: {run} has no {' or '.join(missing)}: its notebook did not finish; run {again}")
    try:
        nb = _read(executed, study.notebook, run)
    except ReportError as err:
        raise ReportError(str(err).replace(f"`python -m nbutils run {study.notebook} -p run_dir {run}`", again)) \
            from None
    alerts = changed(run, record, source, again)
    for line in alerts:
        (warn or (lambda _: None))(line)
    cells = list(nb.cells)
    title_cell = cells.pop(0) if cells and cells[0].cell_type == "markdown" else None
    question, method = _title_parts(title_cell)
    sections = _sections(cells)
    kept = list(sections)
    figure, caption = _figure_one(sections)
    gone = [s for s in kept if s not in sections]  # the figure's own section, taken out whole: its text is the caption
    said = " ".join(c.source.partition("\n")[2].strip() for s in gone for c in s["cells"] if c.cell_type == "markdown")
    caption = f"{caption}. {said}" if said else caption
    if method.strip():
        sections.insert(0, {"title": "How this analysis works", "html": [cell_html(
            nbformat_markdown("## How this analysis works\n\n" + method))]})
    text = paths.results_path(run).read_text(encoding="utf-8")
    findings, table = first_screen(text)
    shown = Markup('<figure class="wide">{}<figcaption>{}</figcaption></figure>').format(figure, caption) \
        if figure else Markup("")
    top = {"question": question, "findings": findings, "wide": True, "words": cell_html(nbformat_markdown(text)),
           "table": shown + cell_html(nbformat_markdown(table)), "fold": "Every result in words and the per-strength "
                                                                         "table: show"}
    anchors = [(f"s{i}", s["title"]) for i, s in enumerate(sections)]
    seeds = ", ".join(str(s) for s in record.get("seeds") or [])
    about = {"run": run.name, "study": study.name, "ran": None,
             "score_files": f"none of its own: the analyses of the runs in {_shown(source)} (seeds {seeds})"}
    html = page(f"{study.name}: the dose ladder and the decoy in {len(record.get('seeds') or [])} prompt sets · run "
                f"{run.name}", top, about, alerts,
                anchors, [(a, Markup("\n").join(s["html"])) for (a, _), s in zip(anchors, sections)])
    html = stamp_inputs(html, report_inputs(run, executed))  # what `runs` and a re-run compare with
    out = paths.report_path(run)
    if out.exists() and not out.is_file():
        raise ReportError(f"report: {out} is a folder, not a file, so the report cannot be written there; move or "
                          f"remove it, then run `python -m nbutils report {_shown(run)}` again")
    artifacts.atomic_write(out, lambda p: p.write_text(html, encoding="utf-8"))
    return out


def _record(run: Path, study: AcrossRuns) -> dict:
    try:
        record = artifacts.read_json(run / study.record)
    except ValueError as err:
        raise ReportError(f"report: {run / study.record} is not the record the {study.name} notebook writes ({err}); "
                          f"run the notebook again") from None
    if not isinstance(record, dict):
        raise ReportError(f"report: {run / study.record} holds no record of what the {study.name} notebook read")
    return record


def changed(run: Path, record: dict, source: Path, again: str) -> list[str]:
    """Why the results may be out of date: a seed's ``summary.json`` changed or is gone since the study read it."""
    recorded = record.get("inputs") or {}
    gone = [n for n in recorded if not (source / n).is_file()]
    edited = [n for n in recorded if n not in gone and artifacts.sha256_file(source / n) != recorded[n]]
    out = []
    if gone:
        out.append(f"the seeds' analyses this study read are gone from {_shown(source)} ({', '.join(gone)}): the "
                   f"results below are of files no longer there; {again}.")
    if edited:
        out.append(f"seeds analysed again since this study read them ({', '.join(edited)}: their sha256 differs): the "
                   f"results below are of their earlier analyses; {again}, then `python -m nbutils report "
                   f"{_shown(run)}`.")
    return out


def first_screen(text: str) -> tuple[list[str], str]:
    """From ``results.md``: its findings (the list items before its first section) and its table of each strength's
    reading per prompt set (the section ``TABLE_HEADING``)."""
    head, _, rest = text.partition("\n## ")
    findings = [line[2:].strip() for line in head.splitlines() if line.startswith("- ")]
    table = text.partition(TABLE_HEADING)[2].partition("\n## ")[0].strip()
    return findings, table


def _shown(path: Path) -> str:
    """A folder as a command names it: relative to the project where it lies inside."""
    here, top = Path(path).resolve(), paths.root().resolve()
    return here.relative_to(top).as_posix() if here.is_relative_to(top) else str(path)
