"""lm-evaluation-harness ``--log_samples`` files read without lm-eval: one model's answers to one task, item by item.

A samples file (``samples_<task>_<date>.jsonl``, one JSON object per document) holds for each document its
``doc_id``, the ``doc`` itself, the ``target``, the requests' ``arguments`` (context and continuation), their
responses (``resps``, and ``filtered_resps`` after the task's filter), the per-document metrics (``acc``,
``acc_norm``…) and the hashes of the doc, prompt and target. lm-eval writes each log-likelihood as the text of the
float (``"-4.79103946685791"``), which ``float`` reads back exactly. The run's ``results_<date>.json`` beside it, when
present, gives the model's name, the task's ``target_delimiter`` and lm-eval's version.

What is read (``read``): a ``multiple_choice`` task, each option's log-likelihood from ``filtered_resps``, its text the
continuation without the target delimiter (what lm-eval's ``acc_norm`` divides by), the gold option from ``target``
(an index or the option's text, told apart by the log's own ``acc``). A log of generations (``generate_until``) or of
single continuations (``loglikelihood``, ``loglikelihood_rolling``) has no options to choose between; it is refused with
what can and cannot be analysed.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np

from .records import LogError, LogItem, ModelLog, check_file, doc_fields

NAME = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[\d\-.]+)\.jsonl$")
GENERATIONS = ("the log holds generated text, not log-likelihoods (a generate_until task): this suite compares "
               "models through each option's log-likelihood (the choice, the margin, correctness, response bias and "
               "accuracy against chance all come from it), so none of these can be read from generations; the "
               "log's own per-item metric ({metrics}) is the model's score and nothing here can check or calibrate it. "
               "Run the task as multiple_choice (output_type: multiple_choice, with doc_to_choice) with --log_samples "
               "to analyse it here")
SINGLE = ("the log scores one continuation per item (output_type loglikelihood or loglikelihood_rolling), not a "
          "choice between options: its acc says whether the continuation is the greedy one, and there is no option "
          "to compare it with, so no choice, margin or response bias; run a multiple_choice variant of the task to "
          "analyse it here")


def _float(v, path: Path, line: int) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise LogError(f"{path}: line {line}: a log-likelihood {v!r} is not a number") from None
    if not np.isfinite(x):
        raise LogError(f"{path}: line {line}: a log-likelihood is {v!r}; every option needs a finite one")
    return x


def _requests(rec: dict, path: Path, line: int) -> list[tuple[str, str]]:
    """(context, continuation) of each request, in order (lm-eval writes them as gen_args_i / arg_j)."""
    args = rec.get("arguments")
    if isinstance(args, dict):
        keys = sorted(args, key=lambda k: int(k.rsplit("_", 1)[-1]) if k.rsplit("_", 1)[-1].isdigit() else 0)
        args = [[args[k][a] for a in sorted(args[k], key=lambda a: int(a.rsplit("_", 1)[-1]))] for k in keys]
    if not isinstance(args, list) or not all(isinstance(a, (list, tuple)) for a in args):
        raise LogError(f"{path}: line {line}: 'arguments' is not the list of requests lm-eval writes")
    return [tuple(a) for a in args]


def results_beside(path: Path) -> dict:
    """The ``results_<date>.json`` lm-eval wrote beside a samples file in the same run (empty when there is none)."""
    m = NAME.match(path.name)
    if not m:
        return {}
    beside = path.with_name(f"results_{m['date']}.json")
    try:
        return json.loads(beside.read_text(encoding="utf-8")) if beside.is_file() else {}
    except (OSError, ValueError):
        return {}


def _model_name(results: dict, path: Path) -> str:
    """The model's name: the folder or hub id lm-eval loaded (its last path part), else the samples file's folder."""
    args = (results.get("config") or {}).get("model_args")
    name = results.get("model_name") or (args.get("pretrained") if isinstance(args, dict) else None)
    if isinstance(args, str):
        found = re.search(r"(?:^|,)pretrained=([^,]+)", args)
        name = name or (found[1] if found else None)
    if name:
        name = str(name).rstrip("/")
        return name.rsplit("/", 1)[-1] if name.startswith(("/", ".", "~")) else name
    return path.parent.name


def _readings(target: str, options: list[str]) -> dict[str, int]:
    """The gold option's position under each reading of a logged target: as an index, as the option's text."""
    out = {}
    if re.fullmatch(r"\d+", target.strip()) and int(target) < len(options):
        out["index"] = int(target)
    if target in options:
        out["text"] = options.index(target)
    return out


def _gold_reading(docs: list[dict], path: Path) -> str:
    """How the log's targets name the gold option: ``index`` or ``text``, the one that names an option of every
    document and agrees with the log's own ``acc`` on each (lm-eval writes the target as text, so ``"2"`` may be
    either); where both do, ``index`` (lm-eval's multiple-choice targets are positions unless a task says otherwise)."""
    fits = [how for how in ("index", "text")
            if all(how in d["readings"] and (d["acc"] is None or (d["pred"] == d["readings"][how]) == bool(d["acc"]))
                   for d in docs)]
    if not fits:
        bad = next((d for d in docs if not d["readings"]), docs[0])
        raise LogError(f"{path}: line {bad['line']}: the targets name the gold option neither by position nor by text "
                       f"consistently with the log's acc (doc {bad['doc_id']}: target {bad['target']!r}, options "
                       f"{bad['options']})")
    return fits[0]


def _document(rec: dict, path, line: int, output_type, delimiter: str) -> tuple[set, list[str], list[float]]:
    """One document's prompt (its one context), options and their log-likelihoods, checked: scored options (not
    generations), at least two, one context, no option twice."""
    metrics = [k for k in rec.get("metrics") or [] if k in rec]
    requests = _requests(rec, path, line)
    resps = rec["filtered_resps"]
    if output_type == "generate_until" or any(isinstance(r, str) for r in resps) or any(
            len(a) != 2 for a in requests):
        raise LogError(f"{path}: {GENERATIONS.format(metrics=', '.join(metrics) or 'none')}")
    if output_type in ("loglikelihood", "loglikelihood_rolling") or len(requests) < 2:
        raise LogError(f"{path}: {SINGLE}")
    if "acc_mutual_info" in rec and len(requests) % 2 == 0:  # the second half: unconditional log-likelihoods
        half = len(requests) // 2
        requests, resps = requests[:half], resps[:half]
    contexts = {c for c, _ in requests}
    if len(contexts) > 1:
        raise LogError(f"{path}: line {line}: the options of doc {rec['doc_id']} have different contexts (a "
                       "multiple-input task such as winogrande): not read; this reader takes tasks whose "
                       "options are continuations of one prompt")
    conts = [str(c) for _, c in requests]
    options = [c[len(delimiter):] if delimiter and c.startswith(delimiter) else c for c in conts]
    logp = [_float(r[0] if isinstance(r, (list, tuple)) else r, path, line) for r in resps]
    if len(set(options)) != len(options):
        raise LogError(f"{path}: line {line}: doc {rec['doc_id']} repeats an option ({options}); its "
                       "choice cannot be named by its text")
    return contexts, options, logp


def read(path, group_by=()) -> ModelLog:
    """One samples file as a ``ModelLog``: every document's options, their log-likelihoods, the gold option and the
    log's own ``acc``/``acc_norm``; a ``LogError`` (a ValueError) naming the file and line for anything else."""
    path = check_file(path, "an lm-eval samples file (samples_<task>_<date>.jsonl, written by --log_samples)")
    m = NAME.match(path.name)
    results = results_beside(path)
    task = m["task"] if m else None
    configs = results.get("configs") or {}
    if task is None and len(configs) == 1:
        task = next(iter(configs))
    config = configs.get(task) or {}
    delimiter = config.get("target_delimiter", " ")
    output_type = config.get("output_type")
    items, notes, seen_hash, docs = [], [], {}, []
    with path.open(encoding="utf-8") as f:
        for line, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
            except ValueError as err:
                raise LogError(f"{path}: line {line} is not JSON ({err.msg}): not an lm-eval samples file") from None
            if not isinstance(rec, dict) or "doc_id" not in rec or "filtered_resps" not in rec:
                raise LogError(f"{path}: line {line} has no doc_id and filtered_resps: not an lm-eval samples file "
                               "(written by lm_eval --log_samples)")
            contexts, options, logp = _document(rec, path, line, output_type, delimiter)
            pred = int(np.argmax(logp))
            target = str(rec.get("target", ""))
            docs.append({"line": line, "doc_id": rec["doc_id"], "target": target, "options": options, "pred": pred,
                         "acc": float(rec["acc"]) if "acc" in rec else None, "readings": _readings(target, options)})
            gold = -1  # resolved below, once every document's target is read
            doc = rec.get("doc") if isinstance(rec.get("doc"), dict) else {}
            key = rec.get("doc_hash") or f"doc_id:{rec['doc_id']}"
            if key in seen_hash:  # the same document twice in the task: told apart by its doc_id
                key = f"{key}:{rec['doc_id']}"
            seen_hash[key] = True
            items.append(LogItem(key=key, item_id=str(rec["doc_id"]), prompt=str(next(iter(contexts))),
                                 options=tuple(options), gold=gold, logp=tuple(logp), chosen=pred,
                                 fields=doc_fields(doc, group_by, path, f"line {line} (doc {rec['doc_id']})", "doc"),
                                 logged={k: float(rec[k]) for k in ("acc", "acc_norm") if k in rec},
                                 target=target, doc_hash=rec.get("doc_hash"),
                                 prompt_hash=rec.get("prompt_hash")))
    if not items:
        raise LogError(f"{path}: holds no documents")
    how = _gold_reading(docs, path)
    items = [dataclasses.replace(i, gold=d["readings"][how]) for i, d in zip(items, docs)]
    if "target_delimiter" not in config:
        notes.append(f"{path.name}: no results_*.json beside it gives the task's target_delimiter; options are read "
                     "as lm-eval's default, the continuation without its leading space")
    return ModelLog(path=path, tool="lm-eval", tool_version=results.get("lm_eval_version"), task=task or "(unnamed)",
                    model=_model_name(results, path), items=items, has_logp=True, notes=notes,
                    details={"output_type": output_type or "multiple_choice", "target_delimiter": delimiter,
                             "n_shot": (results.get("n-shot") or {}).get(task), "target_read_as": how,
                             "filter": rec.get("filter")})
