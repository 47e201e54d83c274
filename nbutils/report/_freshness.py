"""Whether a run's report is up to date, decided by content, not clocks: the one rule ``nbutils runs`` and
``nbutils report`` share.

A report records the sha256 of the ``summary.json`` and of the executed analysis it was made from (``stamp``: an HTML
comment at the top of ``report.html``). It is up to date while both files still have those digests, the score files
the analysis read are unchanged (by the sha256 the analysis recorded), and the analysis did not run again outside the
run's record (``summary.json``'s ``analysed`` time after the executed notebook's end). File times are used only for a
report made before reports recorded their inputs. So a copy of a run (``cp -r``) stays up to date, a clock that is
off cannot keep a rebuilt report out of date, and the index and the report never disagree.
"""
from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

from .. import artifacts
from ..records import Summary
from ..runstore import Run

MARK = "nbutils-report-inputs"
_STAMP = re.compile(r"<!-- " + MARK + r" (\{[^<>]*\}) -->")
UP_TO_DATE = "up to date"


def parse_time(value, what: str, source: Path) -> datetime:
    """An ISO 8601 time with its zone, as the suite writes them; else a ValueError naming the file and the key."""
    try:
        t = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        t = None
    if t is None or t.tzinfo is None:
        raise ValueError(f"{source}: its {what} is {value!r}, not a time with its zone as the suite writes it (such as "
                         "2026-01-31T12:00:00+00:00): the file was edited or damaged; run the analysis again")
    return t


def outside_record(run: Path, summary: dict, executed: Path, ended) -> str | None:
    """Why the executed analysis is not the one that wrote ``summary.json`` (its ``analysed`` time is after the
    notebook's end: the analysis ran again outside the run's record, in JupyterLab, say); None when it is."""
    made = Summary(summary).analysed
    if not made or not ended:
        return None
    spath = Run.of(run).summary_path
    if parse_time(made, "`analysed` time", spath) > parse_time(ended, "papermill `end_time`", executed):
        return (f"{spath} was written at {made}, after the executed analysis {executed} ended ({ended}): the "
                "analysis ran again outside this run's record")
    return None


def inputs(run: Path, executed: Path) -> dict:
    """The sha256 of the files a report is made from: ``summary.json`` and the executed analysis."""
    return {"summary_sha256": artifacts.sha256_file(Run.of(run).summary_path),
            "notebook": executed.name, "notebook_sha256": artifacts.sha256_file(executed)}


def stamp(html: str, record: dict) -> str:
    """``html`` with ``record`` (``inputs``) in a comment after its doctype."""
    comment = f"<!-- {MARK} {json.dumps(record, sort_keys=True)} -->"
    head, sep, rest = html.partition("\n")
    return f"{head}\n{comment}\n{rest}" if head.lower().startswith("<!doctype") else f"{comment}\n{html}"


def recorded(report: Path) -> dict | None:
    """The inputs a report recorded (None for a report made before reports recorded them, or not the suite's)."""
    try:
        with open(report, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
        found = _STAMP.search(head)
        return json.loads(found.group(1)) if found else None
    except (OSError, ValueError):
        return None


def score_changes(run: Path, summary: dict) -> str | None:
    """Why the score files are not the ones the analysis read (by the sha256 it recorded), or None."""
    written = Summary(summary).score_files
    if written is None:
        return None
    now = {p.name: p for p in Run.of(run).analysable_score_files}
    if set(now) != set(written) or any(artifacts.sha256_file(now[n]) != s for n, s in written.items()):
        return "scores changed since the analysis"
    return None


def report_state(run: Path, summary: dict | None, executed: Path | None, ended=None) -> str:
    """``UP_TO_DATE``, or why the report is not: no analysis, scores changed, an analysis run outside the record, no
    report, or a report made from other contents of ``summary.json`` or of the executed analysis (``executed``,
    ended at ``ended``). A damaged time is said, naming its file, not raised."""
    if summary is None:
        return "not analysed"
    changed = score_changes(run, summary)
    if changed:
        return changed
    if executed is None:
        return "no executed analysis in notebooks/: run the analysis again"
    try:
        why = outside_record(run, summary, executed, ended)
    except ValueError as err:
        return f"damaged: {err}"
    if why:
        return "analysis ran again outside this run's record: run the analysis again"
    report = Run.of(run).report_path
    if report.exists() and not report.is_file():
        return f"{report.name} is not a file: remove it, then `python -m nbutils report`"
    if not report.is_file():
        return "no report"
    record = recorded(report)
    if record is None:  # a report made before reports recorded their inputs: by the files' times
        newest = max(Run.of(run).summary_path.stat().st_mtime, executed.stat().st_mtime)
        return UP_TO_DATE if report.stat().st_mtime >= newest else "report older than the analysis"
    if record != inputs(run, executed):
        return "report made from another analysis (summary.json or the executed notebook changed since)"
    return UP_TO_DATE
