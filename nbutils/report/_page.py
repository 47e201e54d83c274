"""The run's report, ``{run}/report.html``: one self-contained HTML page of what the analysis found, without code.

It is made from the study's executed analysis in the run (``{run}/notebooks/<study>_03_analyze.ipynb``, which a sweep or
``python -m nbutils run`` writes): the title, the results in words first, then every section's text, tables and figures,
code hidden. The cue profile (``notebooks/cues/01_profile.ipynb``) follows when the run holds an executed one.

The page ends with an item browser: every item of the models the analysis reported (``nbutils.items``, read through
the run store's checks), each row opening its whole prompt; beyond ``ALL_ITEMS`` items, the ``KEEP`` most confident
errors and the ``KEEP`` closest calls, and a line saying how to see the rest.

The page itself (escaping, cleaned tables, the template and its style) is made by ``report._html``.

The report refuses a run whose analysis did not finish (an error, or a kernel killed on its way), whose study is not
the one asked for, or whose results files are missing; and says at the top, in red, when the score files the analysis
read changed or disappeared since, or new ones were written.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from markupsafe import Markup

from .. import artifacts, paths, runlock, studies
from ._freshness import inputs as report_inputs, outside_record, stamp as stamp_inputs
from ..runstore import Run, read_sidecar
from ..results import table_rows
from ..records import Summary, SummaryVersionError
from ._models import top as models_first_screen, words as words_less_models_table
from ._html import _output_html, cell_html, headline_table, items_html, page

RESULTS_HEADING = "## Results in words"
ALL_ITEMS = 5000  # items (all models together) the report's browser holds every one of
FOLD_TEXT = 900  # a text longer than this shows its first paragraph; the rest is folded
KEEP = 500  # beyond that: this many most confident errors and this many closest calls
_BADGE = re.compile(r"^\[!\[Open In Colab\].*$\n?", re.MULTILINE)


class ReportError(ValueError):  # the run cannot be reported as asked: the message says why and what to run
    pass


def write_report(run_dir, study: str | None = None, warn: Callable[[str], None] | None = None) -> Path:
    """Write ``{run}/report.html`` from the run's executed analysis and return its path.

    ``study``: the registered study whose analysis to report; None takes the one whose dataset the run holds.
    A ``ReportError`` (a ValueError) names what is wrong (no run, another study's run, no executed analysis, an
    analysis that stopped with an error or before its end, results files missing) and the command that fixes it.
    ``warn`` is called with each warning the page shows in red at its top (score files changed since the analysis).
    """
    run = Run(run_dir)  # a handle of its own: what it reads is read for this report
    if not run.is_dir():
        raise ReportError(f"run_dir: {run} is not a folder holding a run")
    with runlock.hold(run, "writing its report"):  # nothing of the run changes while it is read and reported
        return _write_report(run, study, warn)


def _write_report(run: Run, study: str | None, warn: Callable[[str], None] | None) -> Path:
    record = _study(run, study)
    analyze = record.notebooks["analyze"]
    out = run.report_path
    if out.exists() and not out.is_file():
        raise ReportError(f"report: {out} is a folder, not a file, so the report cannot be written there; move or "
                          f"remove it (`rm -r {out}`), then run `python -m nbutils report {run}` again")
    nb = _read(executed := _executed(run, analyze), analyze, run)
    summary = _summary(run, analyze)
    _fresh(run, analyze, nb, summary, executed)
    alerts = _input_changes(run, analyze, summary, nb)
    cells = list(nb.cells)
    title_cell = cells.pop(0) if cells and cells[0].cell_type == "markdown" else None
    for extra_nb in studies.RUN_ANALYSES.values():  # run analyses the sweep ran after the study's (the cue profile)
        extra = next((p for p in (run.executed_notebook(extra_nb), run.legacy_executed_notebook(extra_nb))
                      if p.is_file()), None)
        if extra is not None:
            try:
                cells += _read(extra, extra_nb, run).cells
            except ReportError as err:
                alerts.append(f"left out of this page: {err}")
    for line in alerts:
        (warn or (lambda _: None))(line)
    question, method = _title_parts(title_cell)
    sections = _sections(cells)
    many = models_first_screen(run, summary)  # several models: a sentence each, their table, the forest plot
    figure, caption = (many["figure"], many["caption"]) if many else _figure_one(sections)
    if method.strip():
        sections.insert(0, {"title": "How this analysis works", "html": [cell_html(
            nbformat_markdown("## How this analysis works\n\n" + method))]})
    view = Summary(summary)
    named = view.model_order or list(view.labels) or sorted({str(r.model) for r in view.typed_records if r.model})
    models = [str(m) for m in named] or sorted(Path(n).stem for n in view.score_files or {})
    words = words_less_models_table(run.results_path.read_text(encoding="utf-8"))  # less a models table
    top = {"question": question, "figure": figure, "caption": caption, "words": cell_html(nbformat_markdown(words)),
           **({k: many[k] for k in ("findings", "table", "wide", "fold")} if many else
              {"table": headline_table(table_rows(summary))})}
    anchors = [(f"s{i}", s["title"]) for i, s in enumerate(sections)]
    items = _items_section(run, record.name, summary)
    toc = anchors + ([("items", "Items")] if items else [])
    title = f"{record.name}: {', '.join(models) if len(models) < 3 else f'{len(models)} models'} · run {run.name}"
    html = page(title, top, _about(run, record.name, nb, summary), alerts, toc,
                [(a, Markup("\n").join(s["html"])) for (a, _), s in zip(anchors, sections)], items)
    html = stamp_inputs(html, report_inputs(run, executed))  # what `runs` and a re-run compare with
    artifacts.atomic_write(out, lambda p: p.write_text(html, encoding="utf-8"))
    return out


def nbformat_markdown(text: str):
    from nbformat.v4 import new_markdown_cell
    return new_markdown_cell(text)


def _title_parts(cell) -> tuple[str, str]:
    """The notebook's question (its title without the step's number) and the rest of its first cell (the method)."""
    if cell is None:
        return "", ""
    lines = _BADGE.sub("", cell.source).strip().splitlines()
    if not lines or not lines[0].startswith("#"):
        return "", "\n".join(lines)
    head = re.sub(r"(^|·)\s*\d+\s*·\s*", r"\1 ", lines[0].lstrip("# ")).strip(" ·")  # the step's number
    question = head.split(":", 1)[1].strip() if ":" in head else head
    return question[:1].upper() + question[1:], "\n".join(lines[1:]).strip()


def _heading(cell) -> str | None:
    if cell.cell_type != "markdown" or not cell.source.lstrip().startswith("#"):
        return None
    return cell.source.lstrip().splitlines()[0].lstrip("#").strip().strip("`")


def _sections(cells: list) -> list[dict]:
    """The cells as sections, one per heading: the study's results in words left out (the page shows them first), and
    so is a section whose code showed nothing (only stdout, or a table with no rows): no section without content."""
    sections: list[dict] = []
    for c in cells:
        title = _heading(c)
        if title is not None or not sections:
            sections.append({"title": title or "", "cells": [], "code": 0, "shown": 0})
            if c.cell_type == "markdown" and c.source.lstrip().startswith("# "):  # a second notebook's title: its
                c.source = "#" + c.source.lstrip()  # introduction, a section of text (its setup cells show nothing)
                sections[-1]["prose"] = True
        sec = sections[-1]
        sec["cells"].append(c)
        if c.cell_type == "code":
            sec["code"] += 1
            sec["shown"] += bool(c.get("outputs"))
        elif c.cell_type == "markdown" and (title is None or len(c.source.strip().splitlines()) > 1):
            sec["text"] = True
    words = next((s for s in sections if s["title"].startswith(RESULTS_HEADING.lstrip("# "))), None)
    kept = [s for s in sections if (s["shown"] or (s.get("text") and (s.get("prose") or not s["code"])))
            and s is not words]  # the study's results in words are at the top of the page
    for s in kept:
        s["html"] = [_prose(c) for c in s["cells"]]
    return kept


def _prose(cell):
    """A cell as HTML; a long text (a method's description) shows its heading and first paragraph, the rest folded."""
    text = cell.source.strip() if cell.cell_type == "markdown" else ""
    paragraphs = text.split("\n\n")
    if len(text) <= FOLD_TEXT or len(paragraphs) < 2:
        return cell_html(cell)
    lead = 2 if paragraphs[0].startswith("#") and "\n" not in paragraphs[0] else 1
    rest = "\n\n".join(paragraphs[lead:])
    if not rest.strip():
        return cell_html(cell)
    return cell_html(nbformat_markdown("\n\n".join(paragraphs[:lead]))) + Markup(
        '<details class="prose"><summary>more on the method</summary>{}</details>').format(
        cell_html(nbformat_markdown(rest)))


def _figure_one(sections: list[dict]) -> tuple:
    """Figure 1 for the top of the page (the first figure of a section named "Figure 1…", else the first figure),
    taken out of its section (a section left with nothing else goes too)."""
    order = sorted(range(len(sections)), key=lambda i: not sections[i]["title"].lower().startswith("figure 1"))
    for i in order:
        for c in sections[i]["cells"]:
            for out in c.get("outputs", []) if c.cell_type == "code" else []:
                if any(m in out.get("data", {}) for m in ("image/png", "image/jpeg", "image/svg+xml")):
                    figure = _output_html(out)
                    c.outputs = [o for o in c.outputs if o is not out]
                    sec = sections[i]
                    sec["html"] = [_prose(x) for x in sec["cells"]]
                    name = sec["title"] if sec["title"].lower().startswith("figure") else f"Figure 1: {sec['title']}"
                    if not any(x.get("outputs") for x in sec["cells"] if x.cell_type == "code"):
                        sections.pop(i)
                    return figure, name
    return Markup(""), ""


def _items_section(run: Run, study: str, summary: dict):
    """The item browser of the models the analysis reported (all usable ones when its records name none); beyond
    ``ALL_ITEMS`` items, the most confident errors and the closest calls (a sentence study: the least and the most
    likely sentences). A run whose items cannot be read gets a line saying why instead."""
    from .. import items as it

    try:
        df = it.items(run, study=study)
    except ValueError as err:
        return Markup('<section class="items" id="items"><h2>Items</h2><p>{}</p></section>').format(
            f"The items cannot be shown: {err}")
    reported = {r.model for r in Summary(summary).typed_records} & set(df["model"])
    if reported:
        df = df[df["model"].isin(reported)].copy()
    total, every = len(df), f"python -m nbutils show {_where(run)}"
    if total <= ALL_ITEMS:
        intro = (f"Every scored item ({total:,}), one row per item and model: click a row's question to read its whole "
                 f"prompt, a column's name to sort by it; the box filters. In a terminal: {every} (--wrong, --closest "
                 "N, --where KEY=VALUE, --full, --jsonl).")
        return items_html(df, intro, df.attrs["notes"])
    if "margin" in df.columns:
        errors = it.select(df, wrong=True) if df["correct"].notna().any() else df.head(0)
        picked = errors.head(KEEP).index.union(it.select(df, closest=KEEP).index, sort=False)
        what = f"the {KEEP} most confident errors and the {KEEP} closest calls"
    else:
        order = df.sort_values("mean_logprob", kind="stable").index
        picked = order[:KEEP].union(order[-KEEP:], sort=False)
        what = f"the {KEEP} least likely and the {KEEP} most likely sentences"
    shown = df.loc[picked].copy()
    shown.attrs = dict(df.attrs)
    intro = (f"This run has {total:,} scored items (one per item and model); the page holds {what} ({len(shown):,} "
             f"rows). Every item: {every} --jsonl, or filtered: --wrong, --closest N, --where KEY=VALUE.")
    return items_html(shown, intro, df.attrs["notes"])


def _where(run: Run) -> str:
    """The run as a command names it on the page: relative to the project (``outputs/demo``), never a machine's path."""
    here, top = run.dir.resolve(), paths.root().resolve()
    return here.relative_to(top).as_posix() if here.is_relative_to(top) else "RUN_DIR"


# ---------------------------------------------------------------- which analysis, and is it whole

def _study(run: Run, study: str | None):
    """The study asked for, checked to be the one whose dataset the run holds; else the run's own."""
    if not study:
        return studies.for_run(run)
    record = studies.get(study)
    if not run.dataset_path(record.dataset_file).exists():
        held = [s.name for s in studies.REGISTRY.values() if run.dataset_path(s.dataset_file).exists()]
        raise ReportError(f"study: {run} is not a {study} run (it has no {record.dataset_file}"
                          + (f"; it holds the dataset of {', '.join(held)}" if held else "")
                          + f"): run `python -m nbutils report {run}` without --study")
    return record


def _executed(run: Run, analyze: str) -> Path:
    """The study's executed analysis: its own file, else the one file name every study's analysis shared before
    (read only when papermill's record says it ran this very notebook)."""
    executed = run.executed_notebook(analyze)
    if executed.is_file():
        return executed
    legacy = run.legacy_executed_notebook(analyze)
    if legacy.is_file():
        ran = _input_path(legacy, f"`python -m nbutils run {analyze} -p run_dir {run}`")
        if ran and Path(ran).as_posix().endswith(analyze):
            return legacy
        raise ReportError(f"report: {legacy} is the executed copy of {ran or 'an unknown notebook'}, not of {analyze}; "
                          f"run `python -m nbutils run {analyze} -p run_dir {run}` (it writes {executed.name})")
    raise ReportError(f"report: {run} has no executed analysis ({executed} is missing); make it with "
                      f"`python -m nbutils run {analyze} -p run_dir {run}` (a sweep runs it for you)")


def _input_path(executed: Path, again: str) -> str | None:
    return (_notebook(executed, again).metadata.get("papermill") or {}).get("input_path")


def _notebook(executed: Path, again: str):
    """An executed notebook read; one cut short (a full disk, a killed writer) or damaged is a ReportError naming it."""
    import nbformat

    try:
        return nbformat.read(executed, as_version=4)
    except Exception as err:  # noqa: BLE001 - nbformat raises several kinds (NotJSONError, ValidationError, …)
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:120]
        raise ReportError(f"report: {executed} is not a whole notebook ({first}): it was cut short (a full disk or a "
                          f"process stopped while writing it), so the analysis did not finish; run {again}") from None


def _read(executed: Path, notebook: str, run: Path):
    """An executed notebook, checked to be ``notebook`` run by papermill to its end; left out: stderr streams
    (warnings, progress bars), results shown only as a Python repr (a list or a dict, not a table or figure) and the
    Colab badge."""
    again = f"`python -m nbutils run {notebook} -p run_dir {run}`"
    nb = _notebook(executed, f"{again} again")
    pm = ran_by(nb)
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
    unfinished = [] if pm.get("interactive") else [  # written by its own last cell (``live``): every cell before ran
        c for c in nb.cells if c.cell_type == "code"
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


def ran_by(nb) -> dict:
    """When and from which notebook an executed notebook ran: papermill's record, or the one its own last cell wrote
    when it ran in JupyterLab or nbclient (``interactive`` True)."""
    return nb.metadata.get("papermill") or nb.metadata.get("nbutils") or {}


def _fresh(run: Run, analyze: str, nb, summary: dict, executed: Path) -> None:
    """Refuse an executed analysis older than the run's ``summary.json`` (``outside_record``): the analysis
    ran again since (in JupyterLab, say) and the page would show the earlier one's tables beside the newer results."""
    try:
        why = outside_record(run, summary, executed, ran_by(nb).get("end_time"))
    except ValueError as err:
        raise ReportError(f"report: {err}") from None
    if why:
        raise ReportError(f"report: {why}. Run `python -m nbutils run {analyze} -p run_dir {run}` (it writes both and "
                          "the report), or run the notebook to its end in JupyterLab (its last cell writes the report)")


def _summary(run: Run, analyze: str) -> dict:
    """The analysis's ``summary.json`` and ``results.md``: written last by a finished analysis, so missing ones mean it
    did not finish writing."""
    missing = [p.name for p in (run.summary_path, run.results_path) if not p.is_file()]
    if missing:
        raise ReportError(f"report: {run} has no {' or '.join(missing)}: its analysis did not finish writing its "
                          f"results; run `python -m nbutils run {analyze} -p run_dir {run}` again")
    try:
        return run.summary
    except SummaryVersionError as err:
        raise ReportError(f"report: {err}") from None


def _input_changes(run: Run, analyze: str, summary: dict, nb) -> list[str]:
    """Score files that changed, disappeared or appeared since the analysis (by the sha256 it recorded; an analysis
    that recorded none is compared by the time each score file was written)."""
    again = (f"run the analysis again (`python -m nbutils run {analyze} -p run_dir {run}`), then "
             f"`python -m nbutils report {run}`")
    now = {p.name: p for p in run.analysable_score_files}
    recorded = Summary(summary).score_files
    alerts = []
    if recorded is None:
        if not now:
            alerts.append(f"the run holds no score files now ({run.scores_dir}): the results below are of files "
                          f"no longer in it; {again}.")
        ran = ran_by(nb).get("start_time")
        try:
            newer = [n for n, p in now.items() if ran and _created(paths.sidecar(p)) > datetime.fromisoformat(ran)]
        except (ValueError, TypeError):
            raise ReportError(f"report: the executed analysis in {run.notebooks_dir} says it started at {ran!r}, "
                              f"not a time with its zone: it was edited; {again}") from None
        if newer:
            alerts.append(f"score files written after this analysis ran ({', '.join(newer)}): {again}.")
        return alerts
    gone = [n for n in recorded if n not in now]
    changed = [n for n in recorded if n in now and artifacts.sha256_file(now[n]) != recorded[n]]
    added = [n for n in now if n not in recorded]
    if gone:
        alerts.append(f"score files this analysis read are gone from {run.scores_dir} ({', '.join(gone)}): "
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
        return datetime.fromisoformat(read_sidecar(sidecar)["created"])
    except (KeyError, TypeError, ValueError):
        return datetime.fromtimestamp(0, timezone.utc)


def _noise(out) -> bool:
    """An output a reader of the report does not need: a stream (progress, warnings, lines printed for the notebook's
    reader, file paths), a bare repr, or a table view saying it has no rows (``nbutils.display.view``)."""
    if out.get("output_type") == "stream":
        return True
    if any((m or {}).get("nbutils") == "empty" for m in (out.get("metadata") or {}).values() if isinstance(m, dict)) \
            or (out.get("metadata") or {}).get("nbutils") == "empty":
        return True
    return out.get("output_type") in ("execute_result", "display_data") and set(out.get("data", {})) <= {"text/plain"}


def _about(run: Run, study: str, nb, summary: dict) -> dict:
    """Which run, study and score files the page shows, and when the analysis ran (as recorded in the files, so a
    copied run keeps them)."""
    ran = ran_by(nb).get("start_time")
    recorded = Summary(summary).score_files
    names = sorted(recorded) if recorded is not None else [p.name for p in run.analysable_score_files]
    return {"run": run.name, "study": study, "score_files": ", ".join(Path(n).stem for n in names) or "none",
            "ran": ran[:16].replace("T", " ") + " UTC" if ran else None}


def headline(run_dir, path=None) -> list[str]:
    """The results in words for a terminal: ``results.md``'s (or ``path``'s) title and findings (its list items), as
    plain text."""
    path = Path(path) if path is not None else paths.results_path(run_dir)
    if not path.is_file():
        return []
    paragraphs = [p.strip() for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    title = paragraphs[0] if paragraphs else ""
    items = [line[2:] for p in paragraphs for line in p.splitlines() if line.startswith(("- ", "* "))]
    lines = [title] + (items or paragraphs[1:3])
    return [re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", re.sub(r"(\*\*|__|`)", "", ln).strip("* ")) for ln in lines if ln]
