"""Inspect eval logs read item by item: one model's answers to one multiple-choice task.

A log is read through ``inspect_ai.log.read_eval_log`` when Inspect is installed (the ``imports`` extra), else from
its own format: a ``.json`` log is one JSON object; an ``.eval`` log is a zip archive holding ``header.json`` and one
``samples/<id>_epoch_<n>.json`` per sample. Either way each sample gives its ``id``, ``input``, ``choices``,
``target`` (the gold letter), ``metadata`` and ``scores``: the scorer's ``value`` (``C`` correct, ``I`` incorrect, or
1/0) and ``answer`` (the letter the scorer read from the model's output; empty when it read none).

Inspect generates an answer and scores it; it records no log-likelihoods. So an imported Inspect log gives each
item's choice and correctness, which the paired comparison of models, the accuracy against chance, the per-group
gaps and the choice distribution use, but no margins: how close a call was is not known.
"""
from __future__ import annotations

import json
import string
import zipfile
from pathlib import Path

from .records import LogError, LogItem, ModelLog, check_file, doc_fields

LETTERS = string.ascii_uppercase
ZSTD = 93  # the zip compression method Inspect writes .eval members with (Zstandard)
VALUES = {"C": True, "I": False, "N": False, 1: True, 0: False, 1.0: True, 0.0: False, True: True, False: False}
NOT_CHOICE = ("its samples have no choices (the task is not multiple choice): Inspect records the generated answer "
              "and its score, not log-likelihoods, so without options there is no choice, margin, response bias or "
              "accuracy against chance to analyse here; only a multiple-choice task (a dataset with choices, the "
              "multiple_choice() solver and the choice() scorer) is read")


def _load(path: Path) -> dict:
    """The log as the JSON object Inspect writes (samples included)."""
    try:
        from inspect_ai.log import read_eval_log
    except ImportError:
        read_eval_log = None
    if read_eval_log is not None:
        try:
            return json.loads(read_eval_log(str(path)).model_dump_json())
        except Exception as err:  # noqa: BLE001 - any failure to read is the file's, named with it
            raise LogError(f"{path}: Inspect cannot read it as an eval log ({type(err).__name__}: {err})") from None
    if path.suffix == ".eval":
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
                head = _member(z, "header.json" if "header.json" in names else "_journal/start.json", path)
                head["samples"] = [_member(z, n, path) for n in sorted(names)
                                   if n.startswith("samples/") and n.endswith(".json")]
                return head
        except (zipfile.BadZipFile, KeyError, ValueError) as err:
            raise LogError(f"{path}: not an Inspect .eval log (a zip with header.json and samples/): {err}") from None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise LogError(f"{path}: not JSON ({err}): not an Inspect eval log (.json or .eval)") from None


def _member(z: zipfile.ZipFile, name: str, path: Path):
    """One JSON member of an .eval archive. Inspect compresses them with Zstandard, which ``zipfile`` cannot read: that
    member's bytes are read from the archive and decompressed with ``zstandard`` (the ``imports`` extra)."""
    info = z.getinfo(name)
    if info.compress_type != ZSTD:
        return json.loads(z.read(name))
    try:
        import zstandard
    except ImportError:
        raise LogError(f"{path}: its members are Zstandard-compressed; reading them needs the zstandard package "
                       "(pip install zstandard, or the imports extra), or convert the log to JSON with "
                       "`inspect log convert --to json`") from None
    with open(z.filename, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
        if local[:4] != b"PK\x03\x04":
            raise ValueError(f"member {name}: no local file header")
        skip = int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
        f.seek(info.header_offset + 30 + skip)
        data = f.read(info.compress_size)
    return json.loads(zstandard.ZstdDecompressor().decompress(data, max_output_size=info.file_size))


def _correct(score: dict, path: Path, sid) -> bool:
    value = score.get("value")
    if isinstance(value, str):
        value = value.strip().upper()
    if value not in VALUES:
        raise LogError(f"{path}: sample {sid!r}: the score {score.get('value')!r} is not correct/incorrect (C, I or "
                       "1, 0); only a right-or-wrong score is read")
    return VALUES[value]


def read(path, group_by=()) -> ModelLog:
    """One Inspect log as a ``ModelLog`` (its items without log-likelihoods); a ``LogError`` naming the file for a log
    that is not a finished multiple-choice eval of one epoch."""
    path = check_file(path, "an Inspect eval log (.eval or .json, written by inspect eval)")
    log = _load(path)
    if not isinstance(log, dict) or not isinstance(log.get("eval"), dict):
        raise LogError(f"{path}: has no 'eval' header: not an Inspect eval log")
    ev = log["eval"]
    if log.get("status") not in (None, "success"):
        raise LogError(f"{path}: the eval's status is {log.get('status')!r}, not success; import a finished eval")
    samples = log.get("samples") or []
    if not samples:
        raise LogError(f"{path}: holds no samples (was it written with --no-log-samples?)")
    for step in (log.get("plan") or {}).get("steps") or []:
        if step.get("solver") == "multiple_choice" and (step.get("params") or {}).get("shuffle"):
            raise LogError(f"{path}: its multiple_choice solver shuffled the options, and the log keeps them in the "
                           "dataset's order: the answer letters cannot be matched to options")
    epochs = sorted({s.get("epoch", 1) for s in samples})
    if len(epochs) > 1:
        raise LogError(f"{path}: holds {len(epochs)} epochs of each sample; one answer per item is read (run with "
                       "--epochs 1)")
    items, notes, scorers = [], [], []
    for s in samples:
        sid = s.get("id")
        choices = s.get("choices")
        if not choices:
            raise LogError(f"{path}: {NOT_CHOICE}")
        scores = s.get("score" + "s") or {}  # the sample's scorers (not a run directory's folder)
        if not scores:
            raise LogError(f"{path}: sample {sid!r} has no score")
        name = next(iter(scores))
        scorers = scorers or list(scores)
        score = scores[name]
        target = s.get("target")
        target = target[0] if isinstance(target, list) and len(target) == 1 else target
        if not isinstance(target, str) or target.strip().upper() not in LETTERS[: len(choices)]:
            raise LogError(f"{path}: sample {sid!r}: the target {target!r} is not one letter of its {len(choices)} "
                           "options")
        gold = LETTERS.index(target.strip().upper())
        answer = str(score.get("answer") or "").strip().upper()
        chosen = LETTERS.index(answer) if len(answer) == 1 and answer in LETTERS[: len(choices)] else None
        correct = _correct(score, path, sid)
        text = s.get("input")
        if not isinstance(text, str):  # a chat input: its messages' text, in order
            text = "\n".join(str(m.get("content", "")) for m in text or [] if isinstance(m, dict))
        items.append(LogItem(key=str(sid), item_id=str(sid), prompt=text, options=tuple(map(str, choices)), gold=gold,
                             logp=None, chosen=chosen,
                             fields=doc_fields({"metadata": s.get("metadata") or {}, "score": score.get("value"),
                                                "answer": answer or None}, group_by, path, f"sample {sid!r}", ""),
                             logged={"correct": float(correct)}, target=target, answer=answer or None))
    if len(scorers) > 1:
        notes.append(f"{path.name}: scored by {', '.join(scorers)}; the first, {scorers[0]}, is read")
    no_answer = sum(i.chosen is None for i in items)
    if no_answer:
        notes.append(f"{path.name}: the scorer read no single answer letter in {no_answer} of {len(items)} outputs "
                     "(counted wrong, choosing no option)")
    model = str(ev.get("model") or path.stem)
    return ModelLog(path=path, tool="inspect", tool_version=(ev.get("packages") or {}).get("inspect_ai"),
                    task=str(ev.get("task") or "(unnamed)"), model=model.split("/", 1)[-1] if "/" in model else model,
                    items=items, has_logp=False, notes=notes,
                    details={"scorer": scorers[0] if scorers else None, "solver": [
                        st.get("solver") for st in (log.get("plan") or {}).get("steps") or []]})
