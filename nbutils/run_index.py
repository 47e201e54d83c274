"""An index of the run directories below a folder (``python -m nbutils runs [DIR]``): for each, its study, models,
number of items, when it was analysed, each model's headline in a line (the models that found something first) and
whether its report is up to date.

Everything is read from the files a run records (dataset sidecar, score inventory, ``summary.json``, the executed
analysis, ``report.html``); nothing is computed again and nothing is written.
"""
from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

from . import artifacts, freshness, paths, studies
from .records import Record, SummaryVersionError, as_record
from .results import fmt_num, fmt_p, headline_records
from .runstore import load_scores, score_inventory



def run_dirs(folder) -> list[Path]:
    """The folders at or below ``folder`` that hold a registered study's dataset (symbolic links not followed; a run's
    own folders not searched)."""
    top = paths.resolve(folder)
    if not top.is_dir():
        raise ValueError(f"DIR: {escape(top)} is not a folder")
    names = {s.dataset_file for s in studies.REGISTRY.values()}
    skip = {f(top).name for f in (paths.notebooks_dir, paths.scores_dir, paths.tables_dir, paths.figures_dir,
                                  paths.logs_dir)}  # a run's own folders
    found = []
    for here, dirs, files in os.walk(top):
        if names & set(files):
            found.append(Path(here))
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
    return found


def _one(r: Record) -> str:
    """One headline record in a few words: whom it is about, its test, estimate (an odds ratio where it has one), p."""
    who = " ".join(str(v) for v in (r.model, r.condition) if v) or " vs ".join(map(str, r.extra.get("models") or []))
    if not r.valid:
        return f"{who}: {r.test} not estimable"
    odds = r.extra.get("odds_ratio")
    est = f"OR = {fmt_num(odds)}" if odds is not None else f"estimate {fmt_num(r.estimate)}"
    try:
        p = fmt_p(r.p)
    except ValueError:
        p = f"p = {r.p!r} (not a probability)"
    return f"{who}: {r.test} {est}, {p}"


def _found(r: Record) -> bool:
    return r.valid and isinstance(r.p, (int, float)) and r.p < 0.05


def _headlines(summary: dict, most: int = 4) -> list[str]:
    """Each model's headline, one line each (its first record that found something, else its first estimable one),
    the models that found something first; with more than ``most`` models the rest are counted. Comparisons of two
    models are counted on the last line."""
    recs = [as_record(r) for r in headline_records(summary)]
    if not recs:
        return ["no headline test"]
    per: dict[str, list[Record]] = {}
    pairs = [r for r in recs if r.extra.get("models") and not r.model]
    for r in recs:
        if r.model:
            per.setdefault(str(r.model), []).append(r)
    if not per:  # a study whose headline names no model
        per[""] = [r for r in recs if r not in pairs] or pairs
    firsts = [sorted(rs, key=lambda r: (not _found(r), not r.valid))[0] for rs in per.values()]
    n_more = {id(f): len(rs) - 1 for f, rs in zip(firsts, per.values())}
    firsts.sort(key=lambda r: not _found(r))  # stable: the order the records came in within each kind
    out = [_one(r) + (f" (+{n_more[id(r)]} more)" if n_more[id(r)] else "") for r in firsts[:most]]
    rest = firsts[most:]
    if rest:
        out.append(f"… {len(rest)} more model(s), {sum(map(_found, rest))} of them with a finding at p < .05")
    if pairs:
        out.append(f"+ {len(pairs)} comparison(s) of two models, {sum(map(_found, pairs))} at p < .05")
    return out


def escape(text) -> str:
    """``text`` safe to print on one line of a terminal: every control character (escape sequences, newlines,
    carriage returns, DEL, C1 controls) and every backslash shown as a Python escape, so no name can colour the
    terminal, set its title or start a line of its own."""
    return "".join(c.encode("unicode_escape").decode("ascii") if c == "\\" or unicodedata.category(c) in ("Cc", "Cf")
                   or c in "\u2028\u2029" else c for c in str(text))


def _executed(run: Path, study: studies.Study) -> Path | None:
    """The study's executed analysis in the run, as the report takes it: its own file, else the shared old name."""
    nb = study.notebooks["analyze"]
    return next((p for p in (paths.executed_notebook(run, nb), paths.legacy_executed_notebook(run, nb)) if p.is_file()),
                None)


def _ended(executed: Path | None) -> tuple[str | None, str | None]:
    """When the executed analysis ended (papermill's record, or its own last cell's), and a problem reading it."""
    if executed is None:
        return None, None
    try:
        meta = json.loads(executed.read_text(encoding="utf-8"))["metadata"]
        end = (meta.get("papermill") or meta.get("nbutils") or {}).get("end_time")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, f"{executed.name} is not a whole notebook (cut short or edited)"
    return (end if isinstance(end, str) else None), None


def _scores_problem(run: Path, study: studies.Study, inv) -> str | None:
    """Why the run's score files cannot be read as they are (a damaged dataset or sidecar, a score file edited, cut
    short or with NaN scores), by the checks every analysis applies (``runstore.load_scores``); None when they can."""
    bad = [f"{r.file}: {r.why if isinstance(r.why, str) else r.status}" for r in inv.itertuples()
           if r.status in ("edited", "unreadable")]
    if not bad and not inv["status"].isin(["ok", "limited"]).any():
        return None
    try:
        df = load_scores(run, study.spec, include_limited=True)
    except ValueError as err:
        return bad[0] if bad else str(err)
    bad += [f"{r['file']}: {r.get('why') or r['status']}" for r in df.attrs.get("excluded", [])
            if r.get("status") in ("edited", "unreadable") and f"{r['file']}:" not in " ".join(bad)]
    return "; ".join(bad) or None


def describe(run: Path) -> dict:
    """One run's line of the index, as a record. A run whose summary, dataset sidecar or score files fail the checks
    their readers apply is ``damaged``, with the reason, never listed as scored or as not analysed."""
    try:
        study = studies.for_run(run)
    except ValueError as err:
        return {"run": str(run), "study": "?", "models": "", "items": None, "analysed": None, "headline": str(err),
                "report": "-", "damaged": [], "headlines": [str(err)]}
    side = paths.sidecar(paths.dataset_path(run, study.dataset_file))
    damaged, rows = [], None
    try:
        rows = artifacts.read_json(side).get("rows") if side.exists() else None
    except (ValueError, AttributeError) as err:
        damaged.append(f"dataset sidecar: {err}")
    inv = score_inventory(run, study.spec)
    if not damaged and (problem := _scores_problem(run, study, inv)):
        damaged.append(f"scores: {problem}")
    said = " ".join(damaged)
    models = [f"{r.label}" + (" (damaged)" if f"{r.file}:" in said else "" if r.status == "ok" else f" ({r.status})")
              for r in inv.itertuples() if r.status in ("ok", "limited", "stale", "incomplete", "edited")]
    executed = _executed(run, study)
    ended, nb_problem = _ended(executed)
    spath, summary, headline = paths.summary_path(run), None, "-"
    if spath.exists():
        try:
            summary = artifacts.read_summary(spath)
        except SummaryVersionError as err:
            headline = ("summary.json made by an older version of the suite: run the analysis again"
                        if "older version" in str(err) else str(err))
        except (ValueError, OSError) as err:
            damaged.append(f"summary: {err}")
    if summary is not None and nb_problem:
        damaged.append(f"executed analysis: {nb_problem}")
    state = freshness.report_state(run, summary, executed, ended) if summary is not None else (
        "-" if spath.exists() else "not analysed")
    if state.startswith("damaged: "):
        damaged.append(state.removeprefix("damaged: "))
    out = {"run": str(run), "study": study.name, "models": ", ".join(models) or "none scored", "items": rows,
           "analysed": (ended[:16].replace("T", " ") + " UTC") if summary and ended else None,
           "headline": _headlines(summary)[0] if summary else headline, "report": state, "damaged": damaged,
           "headlines": _headlines(summary) if summary else [headline]}
    if damaged:
        out.update(report="damaged", headline="damaged: " + "; ".join(damaged))
    return out


def index_lines(folder) -> list[str]:
    """The index as text: one block of two lines per run, the runs in path order."""
    top = paths.resolve(folder)
    runs = run_dirs(top)
    if not runs:
        return [escape(f"no run directories below {top}")]
    out = []
    for run in runs:
        d = describe(run)
        name = os.path.relpath(run, top) if run != top else run.name
        items = f"{d['items']:,} items" if type(d["items"]) is int else "?"
        out.append(escape(f"{name}  [{d['study']}]  {items} · {d['models']} · analysed {d['analysed'] or '-'} · "
                          f"report {d['report']}"))
        out += ["    " + escape(line) for line in ([d["headline"]] if d["damaged"] else d["headlines"])]
    return out
