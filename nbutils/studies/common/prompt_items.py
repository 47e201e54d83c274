"""A prompt file's rows (``prompt_files.read_table``) checked row by row and turned into one item per row: the prompt
as rendered for the model (``text``), its options as scored, the gold option (``answer``) and the analysis group.

Every problem is one ValueError naming the parameter or file, the rows (1-based, after the header; with the line for
text files) and the column, and what is allowed. ``load_items`` reads, checks, normalises and renders.
"""
from __future__ import annotations

import json
import re
import unicodedata
import zlib

import numpy as np
import pandas as pd

from ... import artifacts
from ...spec import LETTERS, YES_NO, normalize_answer
from .prompt_files import MAX_LISTED, RawTable, is_text, read_table

SUITE_COLUMNS = ("prompt", "answer", "choices", "item_id", "system")  # names `columns` maps to the file's columns
REQUIRED = ("prompt", "answer")
OPTION_FORMATS = ("text", "letters")
LETTER_INSTRUCTION = "Answer with the letter of the correct option."
OWN_COLUMNS = ("row_id", "item_id", "group", "row", "line", "prompt", "text", "answer", "answer_text", "answer_raw",
               "options", "scored", "n_options", "system", "model")
_SCORE_COLUMN = re.compile(r"^(logp_|norm_token_|norm_char_|choice|correct|margin$|label$|pred_yes$|n_tokens$|rescored$)")


# ---------------------------------------------------------------- parameters

def check_parameters(columns, choices, option_format: str, group_by, system, shuffle_options: bool, seed: int) -> None:
    """Every load parameter checked before the file is read."""
    if columns is not None and not isinstance(columns, dict):
        raise ValueError(f"columns: must be a mapping from {list(SUITE_COLUMNS)} to the file's column names, got {columns!r}")
    unknown = sorted(set(columns or {}) - set(SUITE_COLUMNS))
    if unknown:
        raise ValueError(f"columns: unknown key(s) {unknown}; allowed: {list(SUITE_COLUMNS)}")
    for key, value in (columns or {}).items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"columns: {key!r} must map to a column name (a non-empty string), got {value!r}")
    if option_format not in OPTION_FORMATS:
        raise ValueError(f"option_format: must be one of {list(OPTION_FORMATS)}, got {option_format!r}")
    if isinstance(choices, bool) or not (isinstance(choices, (int, np.integer)) or isinstance(choices, (list, tuple))):
        raise ValueError(f"choices: must be a list of answer options (e.g. ['Yes', 'No']) or, with a choices column, "
                         f"the number of options every row holds; got {choices!r}")
    if isinstance(choices, (int, np.integer)) and choices < 2:
        raise ValueError(f"choices: a row needs at least 2 options, got {choices}")
    if isinstance(choices, (list, tuple)):
        _check_options(list(choices), "choices", "choices")
    k = choices if isinstance(choices, (int, np.integer)) else len(choices)
    if option_format == "letters" and k > len(LETTERS):
        raise ValueError(f"choices: option_format 'letters' allows at most {len(LETTERS)} options, got {k}")
    if isinstance(group_by, str) or not isinstance(group_by, (list, tuple)) or any(not isinstance(g, str) for g in group_by):
        raise ValueError(f"group_by: must be a list of column names (empty: one group), got {group_by!r}")
    if len(set(group_by)) != len(group_by):
        raise ValueError(f"group_by: repeats a column: {list(group_by)}")
    if system is not None and not isinstance(system, str):
        raise ValueError(f"system: must be a string (a system message for every row) or None, got {system!r}")
    if not isinstance(shuffle_options, bool):
        raise ValueError(f"shuffle_options: must be True or False, got {shuffle_options!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= artifacts.SEED_MAX:
        raise ValueError(f"seed: must be an integer from 0 to {artifacts.SEED_MAX}, got {seed!r}")


def _check_options(opts: list, where: str, parameter: str) -> str | None:
    """Why an option list is unusable (None when it is fine); for the parameter itself, raise."""
    problem = None
    if len(opts) < 2:
        problem = f"needs at least 2 options, got {opts!r}"
    elif any(_nested(o) for o in opts):
        problem = f"each option must be one text, not a list or mapping, got {opts!r}"
    elif any(not isinstance(o, str) or _blank(o) for o in opts):
        problem = f"options must be non-blank strings, got {opts!r}"
    elif len({normalize_answer(o) for o in opts}) != len(opts):
        problem = f"options must differ after case-folding and trimming, got {opts!r}"
    if problem and parameter == "choices" and where == "choices":
        raise ValueError(f"choices: {problem}")
    return problem


def resolve_columns(columns: dict | None, raw: RawTable) -> dict[str, str]:
    """The file column behind each suite name: as mapped in ``columns``, else a file column of the same name."""
    have = list(raw.frame.columns)
    out = {}
    for key in SUITE_COLUMNS:
        if columns and key in columns:
            if columns[key] not in have:
                raise ValueError(f"columns: {key!r} maps to column {columns[key]!r}, which data_file {raw.path.name} "
                                 f"does not have; its columns: {have}")
            out[key] = columns[key]
        elif key in have:
            out[key] = key
        elif key in REQUIRED:
            raise ValueError(f"columns: data_file {raw.path.name} has no column {key!r}; map one of its columns "
                             f"{have} to it, e.g. columns={{{key!r}: {have[0]!r}}}")
    shared = {c for c in out.values() if list(out.values()).count(c) > 1}
    if shared:
        raise ValueError(f"columns: one file column may serve one role only; {sorted(shared)} is mapped to "
                         f"{[k for k, c in out.items() if c in shared]}")
    return out


# ---------------------------------------------------------------- per-row values

def _invisible(ch: str) -> bool:
    """Whitespace, and characters that show nothing: format (zero-width space and joiners, BOM, soft hyphen),
    control and separator characters."""
    return ch.isspace() or unicodedata.category(ch) in ("Cf", "Cc", "Zs", "Zl", "Zp")


def _blank(v) -> bool:
    return (v is None or (isinstance(v, float) and np.isnan(v))
            or (isinstance(v, str) and all(_invisible(ch) for ch in v)))


def _nested(v) -> bool:
    """A list, mapping or array in a cell (Parquet list and struct columns, JSON arrays and objects)."""
    return isinstance(v, (list, tuple, dict, np.ndarray))


def _plain(v):
    """JSON-ready: arrays → lists, numpy scalars → Python numbers (Parquet list and struct cells hold them)."""
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def _text(v) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=_plain) if _nested(v) else str(v)


def _option_values(items) -> list:
    """Option entries as texts (trimmed; numbers written out); a nested list or mapping, or a null, stays as it is
    for the option check to refuse."""
    return [o.strip() if isinstance(o, str) else o if _nested(o) or o is None else str(o) for o in items]


def _row_options(v) -> list[str] | None:
    """A row's options: a list (JSONL, Parquet), a JSON list in a string, or texts separated by ``|``."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return _option_values(v)
    if _blank(v):
        return []
    s = str(v).strip()
    if s.startswith("["):
        try:
            parsed = json.loads(s)
        except json.JSONDecodeError:
            return None
        return _option_values(parsed) if isinstance(parsed, list) else None
    return [o.strip() for o in s.split("|")]


def _fail_rows(raw: RawTable, idx, column: str, what: str) -> None:
    if len(idx):
        raise ValueError(f"data_file: {raw.path.name} {raw.rows(idx)} (column {column!r}): {what}")


def _match(answer, opts: tuple[str, ...]) -> int | None:
    """The option an answer names: by its text (normalised), else by its letter (A = first) when no option is a letter."""
    norm = normalize_answer(answer)
    keys = [normalize_answer(o) for o in opts]
    if norm in keys:
        return keys.index(norm)
    letters = [x.casefold() for x in LETTERS[: len(opts)]]
    if norm in letters and not set(keys) & set(x.casefold() for x in LETTERS):
        return letters.index(norm)
    return None


def render_letters(prompt: str, opts) -> str:
    """The prompt followed by its options as a lettered list and the instruction to answer with a letter."""
    listed = "\n".join(f"{letter}. {o}" for letter, o in zip(LETTERS, opts))
    return f"{prompt}\n\n{listed}\n{LETTER_INSTRUCTION}"


# ---------------------------------------------------------------- the dataset

def load_items(data_file, columns: dict | None = None, choices=YES_NO, option_format: str = "text",
               group_by=(), system: str | None = None, shuffle_options: bool = False, seed: int = 0) -> pd.DataFrame:
    """The run's dataset from a user's file: one row per prompt, checked, normalised and rendered.

    - ``columns``: the file's column for each of ``prompt``, ``answer`` (required), ``choices``, ``item_id`` and
      ``system`` (optional); a name left out is taken from a file column of the same name.
    - ``choices``: the options of every row (default Yes/No), or, with a ``choices`` column, the number of options
      each row holds (a JSON list or ``a | b | c``).
    - ``option_format``: ``text`` scores each option's own text; ``letters`` lists the options as ``A. …`` after the
      prompt and scores the letters.
    - Answers match an option after case-folding, trimming spaces and one trailing full stop ("Yes." → Yes), or by
      letter (``B``) when no option is itself a letter.
    - ``group_by``: file columns to analyse by (joined in ``group``); ``limit`` samples per group.
    - ``system``: a system message for every row (a ``system`` column overrides it where a row has one).
    - ``shuffle_options``: reorder each row's options at random (seeded by ``seed`` and the row), against position bias.
    """
    group_by = list(group_by) if isinstance(group_by, (list, tuple)) else group_by
    check_parameters(columns, choices, option_format, group_by, system, shuffle_options, seed)
    raw = read_table(data_file)
    col = resolve_columns(columns, raw)
    f = raw.frame
    missing = [g for g in group_by if g not in f.columns]
    if missing:
        raise ValueError(f"group_by: data_file {raw.path.name} has no column(s) {missing}; its columns: {list(f.columns)}")
    prompts, answers = _prompts_and_answers(raw, col)
    per = _options_of_rows(raw, col, choices)
    gold_idx = _gold_options(raw, col, answers, per)
    group = _groups(f, group_by)
    item_id = _item_ids(raw, col, group, group_by)
    row_id = item_id if item_id.is_unique else group + "::" + item_id

    systems = _systems(f, col, system)
    _check_one_answer_per_prompt(raw, col, prompts, per, systems, gold_idx)

    out = _rendered(raw, col, prompts, answers, per, gold_idx, row_id, item_id, group, option_format,
                    shuffle_options, seed)
    if systems is not None:
        out["system"] = systems
    used = {c for k, c in col.items()}
    for c in f.columns:  # every other column of the file travels along (group_by columns, concept, …)
        if c in used and c not in group_by:
            continue
        name = f"file_{c}" if (c in OWN_COLUMNS or _SCORE_COLUMN.match(str(c))) else str(c)
        out[name] = _parquet_safe(f[c]).to_numpy()
    return out


def _prompts_and_answers(raw, col: dict) -> tuple[pd.Series, pd.Series]:
    """The rows' prompts (as text) and answers (as given), checked: one text each, no blank prompt, no missing answer."""
    f = raw.frame
    for key in ("prompt", "answer", "item_id", "system"):
        if key in col:
            _fail_rows(raw, np.flatnonzero(f[col[key]].map(_nested).to_numpy()), col[key],
                       f"a list or mapping where one text was expected (the {key} of a row is a single value)")
    prompts = f[col["prompt"]]
    _fail_rows(raw, np.flatnonzero(prompts.map(_blank).to_numpy()), col["prompt"],
               "blank prompt (empty, or only spaces and invisible characters)")
    answers = f[col["answer"]]
    _fail_rows(raw, np.flatnonzero(answers.map(_blank).to_numpy()), col["answer"], "no answer")
    return prompts.map(_text), answers


def _rendered(raw, col: dict, prompts, answers, per, gold_idx, row_id, item_id, group, option_format: str,
              shuffle_options: bool, seed: int) -> pd.DataFrame:
    """The run's rows: each row's options in the order shown (shuffled if asked), the text the model reads (with
    lettered options if asked) and what it scores, with its answer among them."""
    n = len(prompts)
    order = [tuple(range(len(o))) for o in per]
    if shuffle_options:
        order = [tuple(int(j) for j in np.random.default_rng([seed, zlib.crc32(r.encode())]).permutation(len(o)))
                 for r, o in zip(row_id, per)]
    shown = [tuple(o[j] for j in perm) for o, perm in zip(per, order)]
    gold_pos = [perm.index(g) for perm, g in zip(order, gold_idx)]
    if option_format == "letters":
        scored = [LETTERS[: len(o)] for o in shown]
        text = [render_letters(p, o) for p, o in zip(prompts, shown)]
    else:
        scored, text = shown, list(prompts)

    out = pd.DataFrame({
        "row_id": row_id.to_numpy(), "item_id": item_id.to_numpy(), "group": group.to_numpy(),
        "row": np.arange(1, n + 1, dtype="int64"),
        "line": pd.array(raw.lines if raw.lines else [None] * n, dtype="Int64"),
        "prompt": prompts.to_numpy(), "text": text,
        "answer": [s[g] for s, g in zip(scored, gold_pos)], "answer_text": [o[g] for o, g in zip(shown, gold_pos)],
        "answer_raw": answers.map(_text).to_numpy(), "options": [json.dumps(list(o)) for o in shown],
        "scored": [json.dumps(list(s)) for s in scored], "n_options": np.array([len(o) for o in shown], dtype="int64"),
    })
    return out


def _options_of_rows(raw, col: dict, choices) -> list[tuple]:
    """Each row's options: the file's ``choices`` column checked (readable, as many as ``choices`` declares, each
    option usable), or the same options for every row."""
    f, n = raw.frame, len(raw.frame)
    if "choices" in col:
        if not isinstance(choices, (int, np.integer)):
            raise ValueError(f"choices: the file's column {col['choices']!r} gives each row its options; set choices to "
                             f"the number of options every row holds (an integer), got {choices!r}")
        per = [_row_options(v) for v in f[col["choices"]]]
        unreadable = [i for i, o in enumerate(per) if o is None]
        _fail_rows(raw, unreadable, col["choices"], "options are not a JSON list; write them as [\"a\", \"b\"] or a | b")
        wrong = [i for i, o in enumerate(per) if len(o) != choices]
        if wrong:
            counts = sorted({len(per[i]) for i in wrong})
            _fail_rows(raw, wrong, col["choices"], f"hold {', '.join(map(str, counts))} option(s); choices declares "
                                                   f"{int(choices)} per row (options are a JSON list or separated by '|')")
        bad = [(i, _check_options(o, "row", "")) for i, o in enumerate(per)]
        bad = [(i, p) for i, p in bad if p]
        if bad:
            _fail_rows(raw, [i for i, _ in bad], col["choices"], bad[0][1])
        return [tuple(o) for o in per]
    if isinstance(choices, (int, np.integer)):
        raise ValueError(f"choices: an integer ({int(choices)}) means per-row options from a choices column, but "
                         f"data_file {raw.path.name} has no column 'choices'; map one with columns={{'choices': …}} "
                         "or give the options as a list, e.g. ['Yes', 'No']")
    return [tuple(str(c) for c in choices)] * n


def _gold_options(raw, col: dict, answers: pd.Series, per: list[tuple]) -> list[int]:
    """Each row's answer as the index of the option it names (an error naming the rows whose answer matches none)."""
    gold_idx = [_match(a, o) for a, o in zip(answers, per)]
    unmatched = [i for i, g in enumerate(gold_idx) if g is None]
    if unmatched:
        shown = ", ".join(repr(_text(answers.iloc[i])) for i in unmatched[:MAX_LISTED])
        opts = (f"the options {list(per[0])}" if "choices" not in col
                else "its options (" + "; ".join(f"{raw.where(i)}: {list(per[i])}" for i in unmatched[:MAX_LISTED]) + ")")
        _fail_rows(raw, unmatched, col["answer"], f"answers {shown} match none of {opts} (compared after case-folding, "
                                                  "trimming spaces and one trailing full stop; a letter names an option by position)")
    return gold_idx


def _groups(f: pd.DataFrame, group_by) -> pd.Series:
    """Each row's group: its ``group_by`` columns joined (``(missing)`` for a blank), or ``all``."""
    if group_by:
        parts = f[group_by].map(lambda v: "(missing)" if _blank(v) else _text(v))
        return parts.apply(lambda r: " / ".join(r), axis=1) if len(group_by) > 1 else parts[group_by[0]]
    return pd.Series("all", index=f.index)


def _item_ids(raw, col: dict, group: pd.Series, group_by) -> pd.Series:
    """Each row's item id: the file's (checked: none blank, none twice within a group), or its row number."""
    f, n = raw.frame, len(raw.frame)
    if "item_id" in col:
        ids = f[col["item_id"]]
        _fail_rows(raw, np.flatnonzero(ids.map(_blank).to_numpy()), col["item_id"], "blank item id")
        ids = ids.map(_text).str.strip()
        dup = pd.DataFrame({"id": ids, "group": group}).duplicated(keep=False)
        if dup.any():
            first = ids[dup].iloc[0]
            where = " within a group (the same item may appear once per group)" if group_by else ""
            _fail_rows(raw, np.flatnonzero(dup.to_numpy()), col["item_id"],
                       f"duplicate item ids{where}, e.g. {first!r}")
        return ids
    return pd.Series([f"row-{i + 1:05d}" for i in range(n)], index=f.index)


def _check_one_answer_per_prompt(raw, col: dict, prompts: pd.Series, per: list[tuple], systems, gold_idx) -> None:
    """The same prompt with the same options and system message must have one answer (else one of them is wrong)."""
    n = len(prompts)
    asked = pd.DataFrame({"prompt": prompts.to_numpy(), "options": [json.dumps(sorted(o)) for o in per],
                          "system": systems if systems is not None else [None] * n,
                          "gold": [normalize_answer(o[g]) for o, g in zip(per, gold_idx)]})
    key = ["prompt", "options", "system"]
    clash = asked.groupby(key, dropna=False)["gold"].transform("nunique") > 1
    if clash.any():
        first = asked.loc[clash, "prompt"].iloc[0]
        golds = sorted(asked.loc[clash & (asked["prompt"] == first), "gold"].unique())
        _fail_rows(raw, np.flatnonzero(clash.to_numpy()), col["answer"],
                   f"the same prompt with the same options has different answers ({' vs '.join(golds)} for "
                   f"{first[:60]!r}); one of them is wrong")


def _systems(f: pd.DataFrame, col: dict, system: str | None) -> list[str | None] | None:
    """Each row's system message: its own (``system`` column) where it has one, else the file-level ``system``."""
    if "system" not in col and not system:
        return None
    own = f[col["system"]] if "system" in col else pd.Series([None] * len(f))
    out = [None if _blank(v) else _text(v) for v in own]
    out = [s if s is not None else (system or None) for s in out]
    return out if any(out) else None


def _parquet_safe(s: pd.Series) -> pd.Series:
    """A column Parquet can store: mixed or nested values become their text."""
    if not is_text(s):
        return s
    values = [v for v in s if not _blank(v)]
    if all(isinstance(v, str) for v in values):
        return s.map(lambda v: None if _blank(v) else v)
    return s.map(lambda v: None if _blank(v) else _text(v.tolist() if isinstance(v, np.ndarray) else v))
