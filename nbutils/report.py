"""The run's report, ``{run}/report.html``: one self-contained HTML page of what the analysis found, without code.

It is made from the study's executed analysis in the run (``{run}/notebooks/<study>_03_analyze.ipynb``, which a sweep or
``python -m nbutils run`` writes): the title, the results in words first, then every section's text, tables and figures,
code hidden. The cue profile (``notebooks/cues/01_profile.ipynb``) follows when the run holds an executed one.

The page ends with an item browser: every item of the models the analysis reported (``nbutils.items``, read through
the run store's checks), each row opening its whole prompt; beyond ``ALL_ITEMS`` items, the ``KEEP`` most confident
errors and the ``KEEP`` closest calls, and a line saying how to see the rest.

The page itself (escaping, cleaned tables, the template and its style) is made by ``nbutils.report_html``.

The report refuses a run whose analysis did not finish (an error, or a kernel killed on its way), whose study is not
the one asked for, or whose results files are missing; and says at the top, in red, when the score files the analysis
read changed or disappeared since, or new ones were written.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from . import artifacts, paths, runlock, studies
from .report_html import cell_html, items_html, page

RESULTS_HEADING = "## Results in words"
ALL_ITEMS = 5000  # items (all models together) the report's browser holds every one of
KEEP = 500  # beyond that: this many most confident errors and this many closest calls
_BADGE = re.compile(r"^\[!\[Open In Colab\].*$\n?", re.MULTILINE)


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
    html = page(f"{record.name} · {run.name}", [cell_html(c) for c in title], _about(run, record.name, nb, summary),
                 alerts, [cell_html(c) for c in rest], _items_section(run, record.name, summary))
    out = paths.report_path(run)
    artifacts.atomic_write(out, lambda p: p.write_text(html, encoding="utf-8"))
    return out


def _items_section(run: Path, study: str, summary: dict):
    """The item browser of the models the analysis reported (all usable ones when its records name none); beyond
    ``ALL_ITEMS`` items, the most confident errors and the closest calls (a sentence study: the least and the most
    likely sentences). A run whose items cannot be read gets a line saying why instead."""
    from . import items as it
    from markupsafe import Markup

    try:
        df = it.items(run, study=study)
    except ValueError as err:
        return Markup('<section class="items" id="items"><h2>Items</h2><p>{}</p></section>').format(
            f"The items cannot be shown: {err}")
    reported = {r.get("model") for r in summary.get("records") or []} & set(df["model"])
    if reported:
        df = df[df["model"].isin(reported)].copy()
    total, every = len(df), f"python -m nbutils show {run}"
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
