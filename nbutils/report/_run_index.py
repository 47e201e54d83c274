"""An index of the run directories below a folder (``python -m nbutils runs [DIR]``): for each, its study, models,
number of items, when it was analysed, each model's headline in a line (the models that found something first) and
whether its report is up to date.

Everything is read from the files a run records (dataset sidecar, score inventory, ``summary.json``, the executed
analysis, ``report.html``); nothing is computed again and nothing is written.
"""
from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path

from .. import artifacts, paths, studies
from ._freshness import report_state
from ..records import Record, SummaryVersionError, as_record
from ..results import entries, fmt_p, found, headline_records, phrase, short_method
from ..runstore import Run, load_scores, score_inventory



def run_dirs(folder) -> list[Path]:
    """The folders at or below ``folder`` that hold a registered study's dataset (symbolic links not followed; a run's
    own folders not searched)."""
    top = paths.resolve(folder)
    if not top.is_dir():
        raise ValueError(f"DIR: {escape(top)} is not a folder")
    names = {s.dataset_file for s in studies.REGISTRY.values()} | {s.record for s in studies.ACROSS_RUNS.values()}
    skip = {f(top).name for f in (paths.notebooks_dir, paths.scores_dir, paths.tables_dir, paths.figures_dir,
                                  paths.logs_dir)}  # a run's own folders
    found = []
    for here, dirs, files in os.walk(top):
        if names & set(files):
            found.append(Path(here))
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
    return found


def shorten(text: str) -> str:
    """A sentence of the results in words cut to its claim: its asides in parentheses that hold a CI, a p, a colon or
    a semicolon, or more than five words, dropped; the rest after its first semicolon dropped."""
    out, depth, group = [], 0, []
    for ch in text:  # each outermost aside judged whole, its own asides in it
        if ch == "(":
            depth += 1
        if depth:
            group.append(ch)
        else:
            out.append(ch)
        if ch == ")" and depth:
            depth -= 1
            inner = "".join(group)[1:-1]
            if not depth:
                keep = not re.search(r"CI|[:;]|\bp [=<>]", inner) and len(inner.split()) <= 5
                out.append(f"({inner})" if keep else "")
                group = []
    text = re.sub(r"\s+([,.;:])(?=\s|$)", r"\1", " ".join("".join(out + group).split()))  # no space left before a comma
    return text.split(";", 1)[0].strip().rstrip(".")


def _line(r: Record, entry: dict) -> str:
    """A model's headline in a line: what its headline sentence (its reading, where the study has readings) claims,
    shortened, with the test's numbers (estimate, p, the test's short name) where the claim does not carry them."""
    who = str(r.model or " vs ".join(map(str, r.extra.get("models") or [])))
    said = str(entry.get("sentence") or "")
    own = who and said.startswith(who)  # the sentence names its model first: its own words follow the name
    claim = shorten(said[len(who):] if own else said)
    head = (f"{who}{'' if claim[:1] in ',:' else ' '}{claim}" if own else f"{who}: {claim}" if who else claim)
    if not r.valid:
        return head if "not estimable" in claim else f"{head} ({short_method(r)}: not estimable)"
    try:
        p = fmt_p(r.p)
    except ValueError:
        p = f"p = {r.p!r} (not a probability)"
    if p in claim:
        return head if short_method(r) in head else f"{head} ({short_method(r)})"
    numbers = re.sub(r",? 95% CI \[[^\]]*\]", "", phrase(r))
    return f"{head} ({numbers}, {short_method(r)})"


def _headlines(summary: dict, most: int = 4) -> list[str]:
    """Each model's headline in a line (its first headline test, as the report's first screen reads it: the
    reading of the gap where the study has readings), the models that found something first; with more than ``most``
    models the rest are counted. Each model's other headline tests (other conditions and terms) and the comparisons of
    two models are counted on the last lines."""
    recs = [as_record(r) for r in headline_records(summary)]
    if not recs:
        return ["no headline test"]
    said = {(e.get("model"), e.get("condition"), e.get("term"), e.get("test")): e for e in entries(summary)}
    per: dict[str, list[Record]] = {}
    pairs = [r for r in recs if r.extra.get("models") and not r.model]
    for r in recs:
        if r.model:
            per.setdefault(str(r.model), []).append(r)
    if not per:  # a study whose headline names no model
        per[""] = [r for r in recs if r not in pairs] or pairs
    firsts = [rs[0] for rs in per.values()]
    others = sum(len(rs) - 1 for rs in per.values())
    firsts.sort(key=lambda r: not found(r))  # stable: the order the records came in within each kind
    out = [_line(r, said.get((r.model, r.condition, r.term, r.test), {})) for r in firsts[:most]]
    rest = firsts[most:]
    if rest:
        out.append(f"… {len(rest)} more model{'s' * (len(rest) > 1)}, {sum(map(found, rest))} of them with a "
                   "finding at p < .05 (results.md)")
    if others:
        out.append(f"+ {others} more headline test{'s' * (others > 1)} of {'these models' if len(per) > 1 else 'it'} "
                   f"(other conditions or terms), {sum(found(r) for rs in per.values() for r in rs[1:])} at p < .05 "
                   "(results.md)")
    if pairs:
        out.append(f"+ {len(pairs)} comparison{'s' * (len(pairs) > 1)} of two models, {sum(map(found, pairs))} at "
                   "p < .05 (results.md)")
    return out


def escape(text) -> str:
    """``text`` safe to print on one line of a terminal: every control character (escape sequences, newlines,
    carriage returns, DEL, C1 controls) and every backslash shown as a Python escape, so no name can colour the
    terminal, set its title or start a line of its own."""
    return "".join(c.encode("unicode_escape").decode("ascii") if c == "\\" or unicodedata.category(c) in ("Cc", "Cf")
                   or c in "\u2028\u2029" else c for c in str(text))


def _executed(run: Run, study: studies.Study) -> Path | None:
    """The study's executed analysis in the run, as the report takes it: its own file, else the shared old name."""
    nb = study.notebooks["analyze"]
    return next((p for p in (run.executed_notebook(nb), run.legacy_executed_notebook(nb)) if p.is_file()),
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


def _scores_problem(run: Run, study: studies.Study, inv) -> str | None:
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


def describe(run: Run | Path) -> dict:
    """One run's line of the index, as a record. A run whose summary, dataset sidecar or score files fail the checks
    their readers apply is ``damaged``, with the reason, never listed as scored or as not analysed."""
    run = Run(run)  # resolved once for every step below (a handle of its own: what it reads is read now)
    across = studies.across_runs_for(run)
    if across is not None and not any(run.dataset_path(s.dataset_file).exists()
                                      for s in studies.REGISTRY.values()):
        return _describe_across(run, across)
    try:
        study = studies.for_run(run)
    except ValueError as err:
        return {"run": str(run), "study": "?", "models": "", "items": None, "analysed": None, "headline": str(err),
                "report": "-", "damaged": [], "headlines": [str(err)]}
    side = paths.sidecar(run.dataset_path(study.dataset_file))
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
    spath, summary, headline = run.summary_path, None, "-"
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
    state = report_state(run, summary, executed, ended) if summary is not None else (
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


def _describe_across(run: Run, study: studies.AcrossRuns) -> dict:
    """The line of a study read across runs (the validation): how many runs it read and where, when its notebook ran,
    its findings (``results.md``'s, shortened) and whether its report is up to date (its record says which seeds'
    analyses it read: one analysed again since makes it out of date)."""
    out = {"run": str(run), "study": study.name, "items": None, "analysed": None, "report": "not analysed",
           "damaged": [], "models": "", "headline": "-", "headlines": ["-"]}
    try:
        record, summary = artifacts.read_json(run / study.record), artifacts.read_json(run.summary_path)
    except (OSError, ValueError) as err:
        return dict(out, damaged=[str(err)], report="damaged", headline=f"damaged: {err}")
    source = (run / str(record.get("root") or ".")).resolve()
    seeds = record.get("seeds") or []
    out["items"] = f"{len(seeds)} run{'s' * (len(seeds) != 1)} read"
    top = paths.root().resolve()
    where = "it" if source == run.dir.resolve() else source.relative_to(top).as_posix() if source.is_relative_to(top) \
        else str(source)
    out["models"] = f"the runs in {where}"
    executed = run.executed_notebook(study.notebook)
    executed = executed if executed.is_file() else None
    ended, problem = _ended(executed)
    state = report_state(run, summary, executed, ended)
    recorded = record.get("inputs") or {}
    if any(not (source / n).is_file() or artifacts.sha256_file(source / n) != h for n, h in recorded.items()):
        state = "runs it read analysed again since: run its notebook again"
    text = run.results_path.read_text(encoding="utf-8") if run.results_path.is_file() else ""
    found = [shorten(line[2:]) for line in text.partition("\n## ")[0].splitlines() if line.startswith("- ")]
    return dict(out, analysed=(ended[:16].replace("T", " ") + " UTC") if ended else None, report=state,
                headline=(found or ["-"])[0], headlines=found or ["no results.md"],
                **({"damaged": [problem], "report": "damaged", "headline": f"damaged: {problem}"} if problem else {}))


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
        items = f"{d['items']:,} items" if type(d["items"]) is int else d["items"] or "?"
        out.append(escape(f"{name}  [{d['study']}]  {items} · {d['models']} · analysed {d['analysed'] or '-'} · "
                          f"report {d['report']}"))
        out += ["    " + escape(line) for line in ([d["headline"]] if d["damaged"] else d["headlines"])]
    return out
