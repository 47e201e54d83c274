"""Other tools' per-item logs brought into a custom-study run: lm-evaluation-harness ``--log_samples`` files and
Inspect eval logs, one model per log, several logs of one task matched item by item.

``import_logs("lm-eval", [log_a, log_b], run_dir)`` reads every log (``lmeval.read``, ``inspect_logs.read``), keeps
the items every log holds (matched by the doc's hash where the tool records one, else by its id; the others are
named in the dataset's sidecar and in the analysis's notes, never paired), and writes the custom study's run layout:
``items.parquet`` (one row per shared item: prompt, options, gold option, the group-by fields) with its sidecar, and
per model ``scores/{slug}.parquet`` with a typed sidecar whose ``imported_from`` names the log and its sha256. The
custom study's analysis, report and item browser then read the run as they read one scored here. Nothing is written
outside ``run_dir``; a run that holds other data is refused unless ``overwrite``.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import artifacts, labels, paths
from ..runstore import SidecarError, read_sidecar, write_scores
from ..spec import decisions
from ..studies import REGISTRY, get
from . import inspect_logs, lmeval
from .records import LogError, ModelLog, check_group_by

TOOLS = {"lm-eval": (lmeval.read, ("doc",)), "inspect": (inspect_logs.read, ("metadata", "score", "answer"))}
__all__ = ["import_logs", "LogError", "Imported", "TOOLS"]


@dataclass
class Imported:
    """What an import wrote: the run, the models (labels, log order: the first is the reference), the items shared and
    those left out per model, and the notes."""

    run_dir: Path
    tool: str
    task: str
    models: list[str]
    n_items: int
    left_out: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What the command prints."""
        out = [f"imported {len(self.models)} {self.tool} log(s) of task {self.task!r} into {self.run_dir}: "
               f"{', '.join(self.models)}; {self.n_items} items every log holds"]
        out += [f"left out: {len(ids)} item(s) of {m} that not every log holds: {', '.join(ids[:8])}"
                + (" …" if len(ids) > 8 else "") for m, ids in self.left_out.items() if ids]
        return out + self.notes


def studies_here(run: Path) -> list[Path]:
    """The datasets of other studies than the custom one already in ``run``."""
    return [p for s in REGISTRY.values() if s.name != "custom"
            if (p := paths.dataset_path(run, s.dataset_file)).exists()]


def _slug(label: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-.")[:80]
    return paths.check_plain_name(slug or "model", "label")


def _match(logs: list[ModelLog], names: list[str]) -> tuple[list[str], dict[str, list[str]], list[str], list]:
    """The keys every log holds (in the first log's order), the item ids each log holds alone, notes, and the logs as
    matched (keyed by doc_id when some lm-eval log lacks doc hashes); a ``LogError`` when one key names different
    items in two logs."""
    notes = []
    if logs[0].tool == "lm-eval" and not all(i.doc_hash for log in logs for i in log.items):
        logs = [dataclasses.replace(log, items=[dataclasses.replace(i, key=f"doc_id:{i.item_id}") for i in log.items])
                for log in logs]  # a log without hashes (an older lm-eval): every log matched by doc_id
        notes.append("not every log records doc_hash: items are matched by doc_id")
    keys = [set(i.key for i in log.items) for log in logs]
    shared = set.intersection(*keys)
    order = [i.key for i in logs[0].items if i.key in shared]
    left = {n: [i.item_id for i in log.items if i.key not in shared] for n, log in zip(names, logs)}
    first = {i.key: i for i in logs[0].items}
    differ = 0
    for log in logs[1:]:
        for i in log.items:
            a = first.get(i.key)
            if a is None:
                continue
            if a.options != i.options or a.gold != i.gold:
                raise LogError(f"{log.path}: item {i.item_id} is not the item {a.item_id} of {logs[0].path} with the "
                               f"same key (options {list(i.options)} gold {i.gold} vs {list(a.options)} gold {a.gold}); "
                               "these logs are not of one task")
            differ += a.prompt != i.prompt
    if differ:
        notes.append(f"the prompt differs between logs on {differ} shared item(s) (another template or number of "
                     "few-shot examples): the items are paired, and the dataset keeps the first log's prompt")
    return order, left, notes, logs


def _dataset(log: ModelLog, order: list[str], group_names: list[str]) -> pd.DataFrame:
    """The custom study's dataset from the first log's items (one row per shared item)."""
    by = {i.key: i for i in log.items}
    rows = [by[k] for k in order]
    group = [" / ".join(i.fields[g] for g in group_names) if group_names else "all" for i in rows]
    ids = [i.item_id for i in rows]
    if len(set(ids)) != len(ids):
        ids = [i.key for i in rows]
    df = pd.DataFrame({
        "row_id": ids, "item_id": ids, "group": group, "row": np.arange(1, len(rows) + 1, dtype="int64"),
        "line": pd.array([None] * len(rows), dtype="Int64"), "prompt": [i.prompt for i in rows],
        "text": [i.prompt for i in rows], "answer": [i.options[i.gold] for i in rows],
        "answer_text": [i.options[i.gold] for i in rows], "answer_raw": [i.target for i in rows],
        "options": [json.dumps(list(i.options)) for i in rows], "scored": [json.dumps(list(i.options)) for i in rows],
        "n_options": np.array([len(i.options) for i in rows], dtype="int64"), "item_key": [i.key for i in rows]})
    for g in group_names:
        df[g if g not in df.columns else f"field_{g}"] = [i.fields[g] for i in rows]
    return df


def _scores(log: ModelLog, order: list[str], row_ids: list[str]) -> pd.DataFrame:
    """One model's score table in the custom study's columns: each option's log-likelihood (``logp_j``) and per
    character (``norm_char_j``, lm-eval's ``acc_norm`` rule), the choice, margin and correctness by the suite's one
    rule (``spec.decisions``); a log without log-likelihoods (Inspect) gives the choice and correctness it records."""
    by = {i.key: i for i in log.items}
    rows = [by[k] for k in order]
    per = [i.options for i in rows]
    answer = [i.options[i.gold] for i in rows]
    out = pd.DataFrame({"row_id": row_ids})
    if log.has_logp:
        k = max(len(o) for o in per)
        raw = np.full((len(rows), k), np.nan)
        norm = np.full((len(rows), k), np.nan)
        for r, i in enumerate(rows):
            raw[r, : len(i.logp)] = i.logp
            norm[r, : len(i.logp)] = np.asarray(i.logp) / np.array([float(len(o)) for o in i.options])
        choice, margin = decisions(raw, per)
        choice_norm, _ = decisions(norm, per)
        for j in range(k):
            out[f"logp_{j}"] = raw[:, j]
        for j in range(k):
            out[f"norm_char_{j}"] = norm[:, j]
        out["margin"] = margin
        out["choice"] = choice
        out["choice_norm_char"] = choice_norm
        out["correct"] = np.asarray(choice, dtype=object) == np.asarray(answer, dtype=object)
        out["correct_norm_char"] = np.asarray(choice_norm, dtype=object) == np.asarray(answer, dtype=object)
    else:
        out["margin"] = np.nan
        out["choice"] = [i.options[i.chosen] if i.chosen is not None else None for i in rows]
        out["correct"] = [bool(i.logged["correct"]) for i in rows]
    return out


def _read_all(tool: str, logs, group_by) -> tuple[list[ModelLog], list[str]]:
    if tool not in TOOLS:
        raise LogError(f"tool: must be one of {list(TOOLS)}, got {tool!r}")
    if isinstance(logs, (str, Path)) or not logs:
        raise LogError("logs: give a list of one or more log files (one model each)")
    reader, prefixes = TOOLS[tool]
    pairs = check_group_by(list(group_by or ()), prefixes)
    read = [reader(p, pairs) for p in logs]
    seen = {}
    for log in read:
        if log.path.resolve() in seen:
            raise LogError(f"{log.path}: given twice")
        seen[log.path.resolve()] = log
    tasks = {}
    for log in read:
        tasks.setdefault(log.task, []).append(log.path.name)
    if len(tasks) > 1:
        raise LogError("logs: the logs are of different tasks (" + "; ".join(f"{t}: {', '.join(f)}" for t, f in
                                                                           tasks.items())
                       + "); a run compares models on one task: import each task into its own run directory")
    if len({log.has_logp for log in read}) > 1:
        raise LogError("logs: some logs hold log-likelihoods and some do not; import them into separate runs")
    return read, [n for n, _ in pairs]


def _labels(read: list[ModelLog], given) -> list[str]:
    given = list(given or [])
    if given and len(given) != len(read):
        raise LogError(f"label: give one --label per log ({len(read)} logs, {len(given)} labels), in the logs' order")
    names = [labels.check_label(g, "label") for g in given] if given else [log.model for log in read]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise LogError(f"label: {len(read)} logs name their model {dup[0]!r}: give each log its own --label "
                       "(in the logs' order) so that results can tell them apart")
    slugs = [_slug(n) for n in names]
    if len(set(slugs)) != len(slugs):
        raise LogError(f"label: {names} become the same file name; give labels that differ in letters or digits")
    return names


def import_logs(tool: str, logs, run_dir, group_by=(), label=None, overwrite: bool = False) -> Imported:
    """Read ``logs`` (``tool``: ``lm-eval`` or ``inspect``; one model each, one task), keep the items they share, and
    write them into ``run_dir`` as a custom-study run (see the module). ``group_by``: the fields to analyse by
    (``doc.FIELD`` for lm-eval; ``metadata.FIELD``, ``score`` or ``answer`` for Inspect); ``label``: each model's name,
    one per log in order (default: the model's name in its log). Everything is read and checked before anything is
    written; an existing run of other logs is refused unless ``overwrite``."""
    read, group_names = _read_all(tool, logs, group_by)
    names = _labels(read, label)
    run = paths.check_run_dir(run_dir)
    if run.exists() and not run.is_dir():
        raise LogError(f"run_dir: {run} is a file, not a folder")
    order, left, notes, read = _match(read, names)
    if not order:
        raise LogError("logs: no item is in every log (" + ", ".join(f"{log.path.name}: {len(log.items)}" for log in read)
                       + " items); the logs are not of one set of items")
    notes = [n for log in read for n in log.notes] + notes
    if not read[0].has_logp:
        notes.append("Inspect logs record the answer each model generated, not log-likelihoods: choices and "
                     "correctness are analysed, margins are not")
    data = _dataset(read[0], order, group_names)
    row_ids = data["row_id"].tolist()
    sources = [{"file": str(log.path), "sha256": artifacts.sha256_file(log.path), "model": log.model, "label": n,
                "task": log.task, "tool_version": log.tool_version, "n_items": len(log.items), **log.details}
               for log, n in zip(read, names)]
    params = {"imported_from": tool, "task": read[0].task, "logs": sources, "group_by": list(group_by or ()),
              "reference": names[0], "models": names, "left_out": left, "notes": notes}
    dpath = paths.dataset_path(run, get("custom").dataset_file)
    for path in [dpath, *(paths.score_file(run, _slug(n)) for n in names)]:  # no link anywhere, before any write
        for p in (path, paths.sidecar(path)):
            paths.check_inside(run, p, "run_dir")
    others = [s.name for s in studies_here(run)]
    if others:
        raise LogError(f"run_dir: {run} holds another study's dataset ({', '.join(others)}); import into a run "
                       "directory of its own")
    run.mkdir(parents=True, exist_ok=True)
    side = artifacts.write_dataset(data, dpath, {"parameters": params}, overwrite)
    files = [dpath]
    ours = {paths.score_file(run, _slug(n)) for n in names}
    others = [p for side in paths.score_sidecars(run) if (p := side.with_suffix(".parquet")) not in ours]
    if others and overwrite:  # another import's models: set aside, so that only these logs are analysed
        artifacts.set_aside_scores(run, [f for p in others for f in (p, paths.sidecar(p))])
    files += _write_scores(tool, read, names, sources, order, row_ids, run, dpath, side, overwrite)
    return Imported(run, tool, read[0].task, names, len(order), {k: v for k, v in left.items() if v}, notes, files)


def _write_scores(tool: str, read: list, names: list[str], sources: list[dict], order, row_ids, run, dpath, side,
                  overwrite: bool) -> list:
    """Each log's scores written as a score file of the run; one already written from the same log and dataset is
    kept, another model's refused unless ``overwrite``."""
    files = []
    for log, name, src in zip(read, names, sources):
        path = paths.score_file(run, _slug(name))
        if paths.sidecar(path).exists():
            try:
                old = read_sidecar(paths.sidecar(path))
            except SidecarError:
                old = None
            same = (old is not None and old.get("dataset_sha256") == side["sha256"]
                    and (old.get("imported_from") or {}).get("sha256") == src["sha256"] and path.exists())
            if same:
                files.append(path)
                continue
            if not overwrite:
                raise artifacts.OverwriteError(f"run_dir: {path} already holds other scores; choose another --run-dir "
                                               "or pass --overwrite to replace them")
        scores = _scores(log, order, row_ids)
        meta = {"model": log.model, "dataset_file": dpath.name, "dataset_sha256": side["sha256"],
                "scorer": "choices", "id_column": "row_id", "complete": True, "label": name,
                "created": artifacts.now_utc(), "accuracy": round(float(scores["correct"].mean()), 4),
                "imported_from": {"tool": tool, "tool_version": log.tool_version, "file": str(log.path),
                                  "sha256": src["sha256"], "task": log.task, "log_likelihoods": log.has_logp}}
        write_scores(scores, meta, path)
        files.append(path)
    return files
