"""A run's items, one row per scored item and model: the prompt (or sentence) beside what the model did with it.

``items(run_dir)`` joins each usable score file with the run's dataset through the run store
(``runstore.load_scores``), so a file that is stale, edited, unfinished or a shard never comes in; the files left out
are in ``df.attrs["excluded"]`` with the reason. Its columns: ``model`` (the model's label, the name results print),
``slug`` (its score file's name), the dataset's id column, ``text`` (the prompt or sentence as scored), the study's design columns, then for an answer-choice study
``gold``, ``options`` (as scored), one ``logp_<option>`` per option (named as in the score file), ``margin``,
``choice``, ``correct``; for a sentence study ``n_tokens``, ``sum_logprob``, ``mean_logprob``, ``ppl``; and
``precision`` (what the score file was computed in).

``select`` filters and orders them as ``python -m nbutils show`` does (errors, closest calls, design values),
``disagree`` keeps the items two models answer differently, ``jsonl``
writes one JSON object per item, ``table_lines`` / ``full_lines`` format them for a terminal and ``to_read`` for a
notebook. No torch here.
"""
from __future__ import annotations

import json
import math
import re
from typing import Iterable

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from . import artifacts, paths, studies
from .runstore import Run, excluded_notes, load_scores
from .spec import options_per_row

WIDTH = 120  # columns of the terminal table where the terminal does not say ($COLUMNS, else its size)
SENTENCE_COLUMNS = ("n_tokens", "sum_logprob", "mean_logprob", "ppl")
_OUTCOME = ("gold", "choice", "correct", "margin")  # besides the design, the keys --where accepts
# control characters and bidirectional overrides: shown as escapes in a terminal, where they could move the cursor,
# recolour the screen or reorder the text a reader sees
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def design_columns(run_dir, study: studies.Study, data: pd.DataFrame) -> list[str]:
    """The study's design columns the dataset has; a prompt file's own group columns (from its sidecar) too."""
    cols = list(study.design)
    side = paths.sidecar(Run.of(run_dir).dataset_path(study.dataset_file))
    if side.is_file():
        cols += [str(c) for c in (artifacts.read_json(side).get("parameters") or {}).get("group_by") or []]
    return [c for c in dict.fromkeys(cols) if c in data.columns]


def _study_of(run_dir) -> studies.Study:
    """The study of the run ``run_dir`` names; a ValueError naming ``run_dir`` when it is missing, a file, or a folder
    holding no study's dataset."""
    run = Run.of(run_dir)
    if not run.is_dir():
        raise ValueError(f"run_dir: {run} " + ("is a file, not a run directory; give the folder that holds the run"
                         if run.exists() else "does not exist") + "; `python -m nbutils runs` lists the runs there are")
    if not any(run.dataset_path(s.dataset_file).exists() for s in studies.REGISTRY.values()):
        raise ValueError(f"run_dir: {run} holds no study's dataset (none of "
                         f"{sorted({s.dataset_file for s in studies.REGISTRY.values()})}), so it is not a run directory; "
                         f"`python -m nbutils runs {run}` lists the runs below it")
    return studies.for_run(run)


def items(run_dir, model: str | None = None, *, study: str | None = None, include_limited: bool = True) -> pd.DataFrame:
    """One row per scored item and model (see the module's docstring for the columns), in the dataset's order.

    ``model``: one model, by its label or its score file's name (``scores/<slug>.parquet``; a ValueError lists the
    run's). ``study``: the
    registered study (default: the one whose dataset the run holds). ``include_limited``: quick-look runs made with
    ``limit`` too (their rows are the sample they were planned on).
    """
    run_dir = Run.of(run_dir)  # resolved once for every step below
    record = studies.get(study) if study else _study_of(run_dir)
    spec = record.spec
    joined = load_scores(run_dir, spec, include_limited=include_limited)
    models = list(dict.fromkeys(joined["model"]))
    slugs = dict(joined.attrs.get("slugs") or {})
    if model is not None:
        model = model_named(model, models, slugs, run_dir, "model")
        joined = joined[joined["model"] == model].reset_index(drop=True)
    data_cols = pq.read_schema(run_dir.dataset_path(spec.dataset_file)).names
    design = design_columns(run_dir, record, joined)
    out = joined[["model", spec.id_column]].copy()
    out.insert(1, "slug", out["model"].map(lambda m: slugs.get(m, m)))
    out["text"] = joined[spec.text_column].astype(str)
    for c in design:
        out[c] = joined[c]
    if spec.scorer == "choices":
        chosen = spec.choice_items(joined[data_cols].reset_index(drop=True))
        out["gold"] = list(chosen.gold) if chosen.gold is not None else None
        out["options"] = options_per_row(chosen.options, len(joined))
        for c in [c for c in joined.columns if c.startswith("logp_")]:
            out[c] = joined[c].to_numpy(float)
        out["margin"] = joined["margin"].to_numpy(float)
        out["choice"] = joined["choice"].astype(str)
        out["correct"] = joined["correct"].astype("boolean") if "correct" in joined else pd.NA
    else:
        for c in SENTENCE_COLUMNS:
            out[c] = joined[c]
    prec = joined.attrs.get("precision") or {}
    out["precision"] = out["model"].map(lambda m: (prec.get(m) or {}).get("precision"))
    out.attrs = {"study": record.name, "id_column": spec.id_column, "scorer": spec.scorer, "design": design,
                 "models": models, "slugs": slugs,
                 "table_design": _not_implied(out, design),
                 "question": next((c for c in ("question", "prompt") if c in joined.columns), spec.text_column),
                 "excluded": joined.attrs.get("excluded", []),
                 "notes": [n.replace("not analysed: ", "not shown: ", 1) for n in excluded_notes(joined)]}
    out["gist"] = [last_line(t) for t in joined[out.attrs["question"]].astype(str)]
    return out


def model_named(name: str, models: list[str], slugs: dict, run_dir, option: str) -> str:
    """The model (its label) ``name`` names, by label or by score file slug; a ValueError naming ``option`` and
    listing the run's models (label and slug) when it names none."""
    by_slug = {v: k for k, v in slugs.items()}
    if name in models and by_slug.get(name, name) != name:  # one model's label, another's score file
        raise ValueError(f"{option}: {name!r} is the label of one model and the score file of another "
                         f"({by_slug[name]!r}); name the first by its score file {slugs.get(name, name)!r}, the second "
                         f"by its label {by_slug[name]!r}")
    if name in models:
        return name
    if name in by_slug:
        return by_slug[name]
    listed = ", ".join(f"{m!r} ({slugs[m]})" if slugs.get(m, m) != m else repr(m) for m in models)
    raise ValueError(f"{option}: {name!r} is not a usable model of {paths.resolve(run_dir)}; its models (label, "
                     f"score file) are {listed}")


def disagree(df: pd.DataFrame, first: str, second: str, run_dir="the run") -> pd.DataFrame:
    """The items ``first`` and ``second`` (a label or a slug each) both answered and answered differently: both
    models' rows of each, side by side (``first`` then ``second``), the largest difference in margin first."""
    models, slugs = list(df.attrs.get("models") or dict.fromkeys(df["model"])), df.attrs.get("slugs") or {}
    a, b = (model_named(m, models, slugs, run_dir, "--disagree") for m in (first, second))
    if a == b:
        raise ValueError(f"--disagree: give two different models, got {first!r} and {second!r} (both {a!r})")
    if "choice" not in df.columns:
        raise ValueError(f"--disagree: the {df.attrs.get('study')} study scores sentences, so its items have no "
                         "answer to differ in; show them without it")
    id_col = df.attrs["id_column"]
    wide = df[df["model"].isin([a, b])].pivot_table(index=id_col, columns="model", values=["choice", "margin"],
                                                      aggfunc="first")
    shared = wide.dropna(subset=[("choice", a), ("choice", b)]) if (
        a in wide["choice"].columns and b in wide["choice"].columns) else wide.head(0)
    if shared.empty:  # nothing to compare: not "0 items they answer differently", which reads as full agreement
        counts = df[df["model"].isin([a, b])].groupby("model")[id_col].nunique()
        raise ValueError(f"--disagree: {a!r} and {b!r} share no scored item ({int(counts.get(a, 0))} and "
                         f"{int(counts.get(b, 0))} items scored), so there is nothing to compare")
    wide = shared
    differ = wide[wide[("choice", a)] != wide[("choice", b)]]
    gap = (differ[("margin", a)] - differ[("margin", b)]).abs().sort_values(ascending=False, kind="stable")
    rank = {i: k for k, i in enumerate(gap.index)}
    out = df[df["model"].isin([a, b]) & df[id_col].isin(rank)]
    order = np.lexsort(((out["model"] != a).to_numpy(), out[id_col].map(rank).to_numpy()))
    res = out.iloc[order]
    res.attrs = dict(df.attrs, pair=[a, b], shared=len(wide))  # ``select`` keeps an item's two rows together
    return res


def _not_implied(df: pd.DataFrame, design: list[str]) -> list[str]:
    """The design columns the terminal table shows: a column whose value another shown one fixes (a concept fixes its
    threshold) is left out there; ``full_lines`` and ``jsonl`` keep every one."""
    keep: list[str] = []
    for c in design:
        if not any(df.groupby(k, dropna=False)[c].nunique(dropna=False).max() <= 1 for k in keep):
            keep.append(c)
    return keep


def last_line(text: str) -> str:
    """The last line of a prompt that holds anything: the question a few-shot prompt ends with."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def where_keys(df: pd.DataFrame) -> list[str]:
    """The keys ``select``'s ``where`` accepts: the design columns, ``model``, and the outcome columns there are."""
    return ["model"] + list(df.attrs.get("design", [])) + [c for c in _OUTCOME[:3] if c in df.columns]


def _key(value) -> str:
    """A value as ``where`` matches it: booleans ``true``/``false``, whole numbers without ``.0``."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None or value is pd.NA else str(value)


def select(df: pd.DataFrame, where: Iterable[str] = (), wrong: bool = False, closest: int | None = None,
           limit: int | None = None) -> pd.DataFrame:
    """The items ``python -m nbutils show`` prints, in its order.

    ``where``: ``KEY=VALUE`` filters (a key given twice matches either value; different keys must all match); an
    unknown key or value is a ValueError listing the keys, or that key's values. ``wrong``: errors only, the most
    confident first (largest |margin|). ``closest``: the N smallest |margin|. ``limit``: at most that many rows.
    On ``disagree``'s pairs an item ``wrong`` or ``closest`` keeps (either model wrong, or close) keeps both models'
    rows, and ``where`` takes no ``model``.
    """
    wanted: dict[str, list[str]] = {}
    for pair in where:
        key, sep, value = str(pair).partition("=")
        if not sep or not key:
            raise ValueError(f"--where: must be KEY=VALUE, got {pair!r}")
        wanted.setdefault(key.strip(), []).append(value.strip())
    keys = where_keys(df)
    for key, values in wanted.items():
        if key not in keys:
            raise ValueError(f"--where: {key!r} is not a key of this run; its keys are {keys}")
        if key == "model" and df.attrs.get("pair"):
            raise ValueError("--where: model= does not go with --disagree, which shows both models' answers to each "
                             "item; show one model's with --model")
        have = sorted({_key(v) for v in df[key]}, key=_natural)
        missing = [v for v in values if v not in have]
        if missing:
            shown = have if len(have) <= 40 else have[:40] + [f"… ({len(have) - 40} more)"]
            raise ValueError(f"--where: {key} has no value {missing[0]!r} in this run; its values are {shown}")
        df = df[df[key].map(_key).isin(values)]
    whole = df  # a pair of models (``disagree``): an item kept by ``wrong`` or ``closest`` keeps both its rows
    choices = "margin" in df.columns
    if (wrong or closest) and not choices:
        raise ValueError(f"--wrong, --closest: the {df.attrs.get('study')} study scores sentences, so its items have "
                         "no answer to be wrong and no margin; show them without these options")
    if wrong:
        if "correct" not in df.columns or df["correct"].isna().all():
            raise ValueError("--wrong: this run's dataset has no gold answers, so no item is right or wrong")
        df = df[df["correct"].fillna(True).eq(False)]
        df = df.iloc[np.argsort(-df["margin"].abs().to_numpy(), kind="stable")]
    if closest is not None:
        df = df.iloc[np.argsort(df["margin"].abs().to_numpy(), kind="stable")].head(int(closest))
    if df.attrs.get("pair") and (wrong or closest is not None):  # both models' rows of each item kept, in its order
        id_col = df.attrs["id_column"]
        rank = {i: k for k, i in enumerate(dict.fromkeys(df[id_col]))}
        kept = whole[whole[id_col].isin(rank)]
        df = kept.iloc[np.lexsort(((kept["model"] != df.attrs["pair"][0]).to_numpy(),
                                   kept[id_col].map(rank).to_numpy()))]
    return df.head(int(limit)) if limit is not None else df


def _natural(text: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def plain(text, keep_lines: bool = False) -> str:
    """Text safe to print in a terminal: control characters shown as escapes (``\\x1b``), line breaks kept or not."""
    s = str(text)
    if not keep_lines:
        s = " ".join(s.split())
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), s)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


_LAST_SENTENCE = re.compile(r"(?<=[.!:;])\s+(?=\S)")


def cut_question(text: str, width: int) -> str:
    """``text`` in ``width`` characters, keeping its last sentence (the question part of a prompt) whole where it fits:
    the start, ``…``, then the question; a question longer than the width keeps its end (``…`` first)."""
    if len(text) <= width:
        return text
    starts = [m.end() for m in _LAST_SENTENCE.finditer(text)]
    question = text[starts[-1]:] if starts else text
    room = width - len(question) - 2  # "… " between the start and the question
    if room >= 8 and question is not text:
        return text[:room].rstrip() + "… " + question
    if len(question) + 2 <= width:
        return "… " + question
    return "…" + question[len(question) - width + 1:] if width > 1 else "…"


def _margin(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.3f}"


def _cells(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The terminal table's columns and cells, before widths: the outcome first, then the design, the question last."""
    several = len(df.attrs.get("models") or []) > 1 or df["model"].nunique() > 1  # the run's models, not the rows'
    design = list(df.attrs.get("table_design", df.attrs.get("design", [])))
    if "margin" in df.columns:
        head = ["margin", "gold", "choice", "ok"]
        rows = [[_margin(r.margin), plain(r.gold), plain(r.choice),
                 "" if pd.isna(r.correct) else "✓" if r.correct else "✗"] for r in df.itertuples()]
    else:
        head = ["ppl", "logp"]
        rows = [[f"{r.ppl:.1f}", f"{r.sum_logprob:.2f}"] for r in df.itertuples()]
    for row, (_, r) in zip(rows, df.iterrows()):
        row += ([plain(r["model"])] if several else []) + [plain(_key(r[c])) for c in design] + [plain(r["gist"])]
    return head + (["model"] if several else []) + design + ["question" if "margin" in df.columns else "sentence"], rows


def table_lines(df: pd.DataFrame, width: int = WIDTH) -> list[str]:
    """The items as a table no wider than ``width``: outcome, model (when several), design columns, the question's
    last line (cut to fit, its last sentence kept whole where it fits; ``full_lines`` shows it whole)."""
    head, rows = _cells(df)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(head)]
    for i in range(len(head) - 1):
        widths[i] = min(widths[i], 36 if head[i] == "model" else 24)  # a model's label whole where it fits
    fixed = sum(widths[:-1]) + 2 * (len(head) - 1)
    want = min(40, widths[-1])  # room for the question part of a prompt (cut_question keeps it)
    if width - fixed < want:  # many or wide design columns: narrower ones, so the question keeps its room
        first = 5 if head[4:5] == ["model"] else 4  # the design columns give way; the model's label keeps its room
        cap = max(6 if first == 4 else 13, (width - want - 2 * (len(head) - 1) - sum(widths[:first]))
                  // max(len(head) - first - 1, 1))
        widths[first:-1] = [min(w, cap) for w in widths[first:-1]]
        fixed = sum(widths[:-1]) + 2 * (len(head) - 1)
    widths[-1] = max(10, width - fixed)
    cut = cut_question if head[-1] == "question" else _cut  # a sentence study's sentence keeps its start

    def line(cells):
        return "  ".join((cut(c, w) if i == len(cells) - 1 else _cut(c, w)).ljust(w) if i
                         else _cut(c, w).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()[:width]
    return [line(head)] + [line(r) for r in rows]


def margin_line(df: pd.DataFrame) -> str | None:
    """What the table's margin is, for its header (None for a sentence study, which has none)."""
    if "margin" not in df.columns:
        return None
    return ("margin: log-probability of the first option minus the second's (Yes − No); with more options, the best "
            "minus the runner-up; the larger |margin|, the surer the choice")


def full_lines(df: pd.DataFrame, max_lines: int | None = None) -> list[str]:
    """Each item as a block: one line of what the model did and the design, then the prompt, indented: whole, or, when
    it is longer than ``max_lines`` by more than 4 lines (a few-shot prompt), its last ``max_lines`` lines after a line
    saying how many came before."""
    id_col = df.attrs.get("id_column", df.columns[1])
    out = []
    for _, r in df.iterrows():
        what = (f"gold {plain(r['gold'])} · choice {plain(r['choice'])} · margin {_margin(r['margin'])}"
                if "margin" in df.columns else f"ppl {r['ppl']:.2f} · sum log-prob {r['sum_logprob']:.3f}")
        design = " · ".join(f"{c} {plain(_key(r[c]))}" for c in df.attrs.get("design", []))
        out += [f"── {plain(r['model'])} · {plain(r[id_col])} · {what}" + (f" · {design}" if design else "")]
        lines = plain(r["text"], keep_lines=True).splitlines()
        if max_lines is not None and len(lines) > max_lines + 4:
            lines = [f"… {len(lines) - max_lines} earlier lines (--full shows them)"] + lines[-max_lines:]
        out += ["   " + ln for ln in lines] + [""]
    return out


def record(row: pd.Series, df: pd.DataFrame) -> dict:
    """One item as a JSON-ready object: model, id, design values, the outcome, each option's log-prob, the text."""
    def value(v):
        if isinstance(v, (np.generic,)):
            v = v.item()
        return None if v is None or v is pd.NA or (isinstance(v, float) and not math.isfinite(v)) else v

    id_col = df.attrs.get("id_column", df.columns[1])
    obj = {"model": row["model"], "slug": value(row.get("slug")), id_col: value(row[id_col]),
           "precision": value(row["precision"])}
    obj.update({c: value(row[c]) for c in df.attrs.get("design", [])})
    if "margin" in df.columns:
        lps = [c for c in df.columns if c.startswith("logp_")]
        obj.update(gold=value(row["gold"]), choice=value(row["choice"]), correct=value(row["correct"]),
                   margin=value(row["margin"]),
                   logprobs={str(o): value(row[c]) for o, c in zip(row["options"], lps)})
    else:
        obj.update({c: value(row[c]) for c in SENTENCE_COLUMNS})
    obj["text"] = row["text"]
    return obj


def jsonl(df: pd.DataFrame) -> Iterable[str]:
    """One JSON object per item (``record``), one line each, text as UTF-8."""
    for _, row in df.iterrows():
        yield json.dumps(record(row, df), ensure_ascii=False, allow_nan=False)


def write_jsonl(df: pd.DataFrame, path, overwrite: bool = False) -> paths.Path:
    """The items as JSON lines at ``path`` (written atomically; an existing file is kept unless ``overwrite``)."""
    target = paths.resolve(path)
    if target.exists() and not overwrite:
        raise FileExistsError(f"path: {target} exists; pass overwrite=True to replace it")
    text = "".join(line + "\n" for line in jsonl(df))
    return artifacts.atomic_write(target, lambda p: p.write_text(text, encoding="utf-8"))


def to_read(run_dir, n: int = 5, include_limited: bool = False, max_lines: int = 6) -> str:
    """For a notebook: each model's ``n`` most confident errors and ``n`` closest calls (a sentence study: its ``n``
    least and most likely sentences), each with the last ``max_lines`` lines of its prompt, as text to scan."""
    df = items(run_dir, include_limited=include_limited)
    parts = list(df.attrs["notes"])
    for model, own in df.groupby("model", sort=False):
        own.attrs = dict(df.attrs)
        if "margin" in own.columns:
            picks = [("most confident errors", select(own, wrong=True, limit=n) if own["correct"].notna().any()
                      else own.head(0)), ("closest calls", select(own, closest=n))]
        else:
            order = own.sort_values("mean_logprob", kind="stable")
            picks = [("least likely sentences", order.head(n)), ("most likely sentences", order.tail(n)[::-1])]
        for title, chosen in picks:
            parts.append(f"═══ {model}: the {len(chosen)} {title} of {len(own)} items")
            parts += full_lines(chosen, max_lines) if len(chosen) else ["   (none)", ""]
    parts.append(f"every item: python -m nbutils show {run_dir} (--wrong, --closest N, --where KEY=VALUE, --full)")
    return "\n".join(parts)
