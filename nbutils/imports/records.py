"""What a reader of another tool's log hands on: one model's answers to one task, item by item (``ModelLog``,
``LogItem``), and the checks every reader shares (the file, the group-by fields)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


class LogError(ValueError):
    """A log that cannot be imported, with the file and what is wrong."""


@dataclass(frozen=True)
class LogItem:
    """One item of one log: its key (how logs are matched: the doc's hash where the tool records one), the tool's own
    item id, the prompt, the options, the gold option's position, each option's log-likelihood (None where the log
    holds none), the position of the option the model chose (None: it chose none), the group-by fields, and the log's
    own per-item results (``logged``) the import is checked against."""

    key: str
    item_id: str
    prompt: str
    options: tuple[str, ...]
    gold: int
    logp: tuple[float, ...] | None
    chosen: int | None
    fields: dict = field(default_factory=dict)
    logged: dict = field(default_factory=dict)
    target: str = ""
    doc_hash: str | None = None
    prompt_hash: str | None = None
    answer: str | None = None  # what the model answered, as the log has it (Inspect)


@dataclass(frozen=True)
class ModelLog:
    """One model's log of one task: the file, the tool and its version, the task, the model's name, the items, and
    whether they carry log-likelihoods (``has_logp``; Inspect's do not); ``notes`` say what was assumed."""

    path: Path
    tool: str
    tool_version: str | None
    task: str
    model: str
    items: list[LogItem]
    has_logp: bool
    notes: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)


def check_file(path, what: str) -> Path:
    """The log's path, or a ``LogError`` naming it when it is missing or not a file."""
    p = Path(path).expanduser()
    if not p.exists():
        raise LogError(f"{p}: no such file; give {what}")
    if not p.is_file():
        raise LogError(f"{p}: is a folder, not a file; give {what}")
    return p


def check_group_by(group_by, prefixes: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """``group_by`` as (name, path) pairs: each entry is ``PREFIX.FIELD`` (``doc.subject``, ``metadata.category``;
    ``.`` reaches into nested fields) or, for Inspect, a name the sample has itself (``score``, ``answer``)."""
    out = []
    for g in group_by or ():
        if not isinstance(g, str) or not g.strip():
            raise LogError(f"group_by: each entry is a field such as {prefixes[0]}.FIELD, got {g!r}")
        parts = g.strip().split(".")
        if parts[0] not in prefixes or (len(parts) < 2 and parts[0] in ("doc", "metadata")) or not all(parts):
            allowed = ", ".join(p + (".FIELD" if p in ("doc", "metadata") else "") for p in prefixes)
            raise LogError(f"group_by: {g!r} is not one of {allowed}")
        # a doc's or sample's own field keeps its name; a model's own result (Inspect's score, answer) is the first
        # log's, the reference's, and says so
        out.append((parts[-1] if parts[0] in ("doc", "metadata") else f"reference_{parts[0]}", parts))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise LogError(f"group_by: two entries give the same column name ({names})")
    return out


def _text(v) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, sort_keys=True)


def doc_fields(record: dict, group_by, path: Path, where, root: str) -> dict:
    """The group-by values of one item (``group_by``: ``check_group_by``'s pairs; ``record`` is the part of the item
    named ``root``, or the whole item when ``root`` is empty); a ``LogError`` naming the file, the item and the
    fields it has when one is missing."""
    out = {}
    for name, parts in group_by:
        start = 1 if parts[0] == root else 0
        value = record
        for k, part in enumerate(parts[start:], start):
            if not isinstance(value, dict) or part not in value:
                have = sorted(value) if isinstance(value, dict) else []
                raise LogError(f"{path}: {where}: has no field {'.'.join(parts)!r} (group_by); "
                               f"{'.'.join(parts[:k]) or 'the item'} has {have[:12]}")
            value = value[part]
        out[name] = "(missing)" if value is None else _text(value)
    return out
