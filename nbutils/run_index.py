"""An index of the run directories below a folder (``python -m nbutils runs [DIR]``): for each, its study, models,
number of items, when it was analysed, its headline in one line and whether its report is up to date.

Everything is read from the files a run records (dataset sidecar, score inventory, ``summary.json``, the executed
analysis, ``report.html``); nothing is computed again and nothing is written.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from . import artifacts, paths, studies
from .records import SummaryVersionError
from .results import fmt_num, fmt_p, headline_records
from .runstore import score_inventory



def run_dirs(folder) -> list[Path]:
    """The folders at or below ``folder`` that hold a registered study's dataset (symbolic links not followed; a run's
    own folders not searched)."""
    top = paths.resolve(folder)
    if not top.is_dir():
        raise ValueError(f"DIR: {top} is not a folder")
    names = {s.dataset_file for s in studies.REGISTRY.values()}
    skip = {f(top).name for f in (paths.notebooks_dir, paths.scores_dir, paths.tables_dir, paths.figures_dir,
                                  paths.logs_dir)}  # a run's own folders
    found = []
    for here, dirs, files in os.walk(top):
        if names & set(files):
            found.append(Path(here))
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
    return found


def _headline(summary: dict) -> str:
    """The first headline record that could be estimated, in one line: its estimate (an odds ratio where it has one)
    and p; how many headline records there are besides."""
    recs = sorted(headline_records(summary), key=lambda r: not r.get("valid", True))
    if not recs:
        return "no headline test"
    r = recs[0]
    who = " ".join(str(r[k]) for k in ("model", "condition") if r.get(k))
    if not r.get("valid", True):
        return f"{who}: {r.get('test')} not estimable"
    est = (f"OR = {fmt_num(r['odds_ratio'])}" if r.get("odds_ratio") is not None
           else f"estimate {fmt_num(r.get('estimate'))}")
    try:
        p = fmt_p(r.get("p"))
    except ValueError:
        p = f"p = {r.get('p')!r} (not a probability)"
    return f"{who}: {r.get('test')} {est}, {p}" + (f" (+{len(recs) - 1} more)" if len(recs) > 1 else "")


def _analysed(run: Path, study: studies.Study) -> str | None:
    """When the study's analysis ended, as papermill recorded it in the executed notebook."""
    nb = paths.executed_notebook(run, study.notebooks["analyze"])
    try:
        end = json.loads(nb.read_text(encoding="utf-8"))["metadata"]["papermill"]["end_time"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return end[:16].replace("T", " ") + " UTC" if isinstance(end, str) else None


def _report_state(run: Path, summary: dict | None) -> str:
    """``up to date``, or what makes the report out of date (no analysis, no report, older than the analysis,
    score files changed since the analysis read them)."""
    report, spath = paths.report_path(run), paths.summary_path(run)
    if summary is None:
        return "not analysed"
    recorded = (summary.get("inputs") or {}).get("score_files")
    if recorded is not None:
        now = {p.name: p for p in paths.analysable_score_files(run)}
        if set(now) != set(recorded) or any(artifacts.sha256_file(now[n]) != s for n, s in recorded.items()):
            return "scores changed since the analysis"
    if not report.is_file():
        return "no report"
    if report.stat().st_mtime < spath.stat().st_mtime:
        return "report older than the analysis"
    return "up to date"


def describe(run: Path) -> dict:
    """One run's line of the index, as a record."""
    try:
        study = studies.for_run(run)
    except ValueError as err:
        return {"run": str(run), "study": "?", "models": "", "items": None, "analysed": None, "headline": str(err),
                "report": "-"}
    side = paths.sidecar(paths.dataset_path(run, study.dataset_file))
    try:
        rows = artifacts.read_json(side).get("rows") if side.is_file() else None
    except ValueError:
        rows = None
    inv = score_inventory(run, study.spec)
    models = [f"{r.model}" + ("" if r.status == "ok" else f" ({r.status})")
              for r in inv.itertuples() if r.status in ("ok", "limited", "stale", "edited", "incomplete")]
    try:
        summary = artifacts.read_summary(paths.summary_path(run)) if paths.summary_path(run).is_file() else None
    except SummaryVersionError:
        return {"run": str(run), "study": study.name, "models": ", ".join(models) or "none scored", "items": rows,
                "analysed": _analysed(run, study), "report": "-",
                "headline": "summary.json made by an older version of the suite: run the analysis again"}
    except ValueError:
        summary = None
    return {"run": str(run), "study": study.name, "models": ", ".join(models) or "none scored", "items": rows,
            "analysed": _analysed(run, study) if summary else None,
            "headline": _headline(summary) if summary else "-", "report": _report_state(run, summary)}


def index_lines(folder) -> list[str]:
    """The index as text: one block of two lines per run, the runs in path order."""
    top = paths.resolve(folder)
    runs = run_dirs(top)
    if not runs:
        return [f"no run directories below {top}"]
    out = []
    for run in runs:
        d = describe(run)
        name = os.path.relpath(run, top) if run != top else run.name
        items = "?" if d["items"] is None else f"{d['items']:,} items"
        out.append(f"{name}  [{d['study']}]  {items} · {d['models']} · analysed {d['analysed'] or '-'} · "
                   f"report {d['report']}")
        out.append(f"    {d['headline']}")
    return out
