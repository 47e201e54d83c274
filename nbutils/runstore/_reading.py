"""A run's scores read back for analysis: every score file and checkpoint with its status against the current dataset,
the usable ones joined with the dataset (each verified: checksum, rows, derived columns), every file left out named
with the reason, and a model scored at several precisions split for the precision comparison."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .. import artifacts, labels, paths
from ._sidecar import read_meta
from ..stats import precision_label, precision_rank
from ..score_settings import derived_label
from ._dataset import read_dataset, select_limit
from ._handle import Run
from ._score_files import check_scores_file, coverage_problem
from ..spec import DatasetSpec, decisions, options_per_row

EXCLUDED_WHY = {"stale": "made from an earlier version of the dataset", "incomplete": "unfinished",
                "shard": "a shard (merge it first)", "other_dataset": "scores of another study's dataset",
                "unreadable": "unreadable sidecar"}


def score_inventory(run_dir, spec: DatasetSpec) -> pd.DataFrame:
    """Every score file and checkpoint in a run with its status against the current dataset.

    ``status``: ``ok`` (complete, full run, on the current dataset), ``limited``, ``shard``, ``merged`` (a shard
    already joined into a score file), ``stale`` (made from another version of the dataset), ``other_dataset``,
    ``edited`` (the file changed after it was written, or is missing), or ``incomplete`` (a checkpoint, with its
    progress); ``why`` says more where a status needs it.
    """
    run = Run.of(run_dir)
    dpath = run.dataset_path(spec.dataset_file)
    current = artifacts.sha256_file(dpath) if dpath.exists() else None
    rows = []
    finals = paths.score_sidecars(run)
    listed = ([(p, "final") for p in finals] + [(p, "partial") for p in paths.partial_sidecars(run)]
              + [(p, "set_aside") for p in paths.stale_sidecars(run)])
    metas, unread = {}, {}
    for side, where in listed:
        try:
            metas[side] = read_meta(side)
        except ValueError as err:  # a SidecarError says what to score again
            metas[side], unread[side] = None, str(err)
    merged_into = {name: side.name for side in finals if metas.get(side) for name in metas[side].get("merged_from") or []}
    for side, where in listed:
        meta = metas[side]
        if meta is None:
            rows.append({"file": side.name, "model": side.stem, "label": side.stem, "label_given": False,
                         "status": "unreadable", "why": unread[side]})
            continue
        why = None
        if where == "set_aside":
            status = "stale"
        elif meta.get("dataset_file", spec.dataset_file) != spec.dataset_file:
            status = "other_dataset"
        elif meta.get("dataset_sha256") != current:
            status = "stale"
        elif where == "partial" or not meta.get("complete"):
            status = "incomplete"
        elif (why := check_scores_file(side.with_suffix(".parquet"), meta)) is not None:
            status = "edited"
        elif where == "final" and (why := misnamed(side, meta)) is not None:
            status = "edited"  # its scores would be shown under a name that is not the model's
        elif meta.get("num_shards", 1) != 1:
            status = "merged" if side.name in merged_into else "shard"
            why = f"merged into {merged_into[side.name]}" if status == "merged" else None
        elif meta.get("limit") is not None:
            status = "limited"
        else:
            status = "ok"
        rows.append({"file": str(side.relative_to(run.scores_dir)), "model": side.stem,
                     "label": _label(meta, side.stem), "label_given": meta.get("label") is not None, "status": status,
                     "limit": meta.get("limit"), "n_done": meta.get("n_done"), "n_planned": meta.get("n_planned"),
                     "model_id": meta.get("model"), "adapter": meta.get("adapter"),
                     "adapter_scale": paths.scale_of(meta.get("adapter_scale")),
                     "precision": precision_label(meta),
                     "limit_seed": meta.get("limit_seed", 0), "why": why})
    return pd.DataFrame(rows, columns=["file", "model", "label", "label_given", "status", "limit", "n_done", "n_planned",
                                       "model_id", "adapter", "adapter_scale", "precision", "limit_seed", "why"])


def _name_part(name) -> str:
    """What a model or an adapter contributes to a score file's name, as a regex: its slug (``paths.model_slug``), or
    for a local folder its folder name and 8 hex digits of where it is (which need not exist here to be read)."""
    import re

    name = str(name).rstrip("/")
    forms = [re.escape(paths.model_slug(name))]
    if "/" in name or name.startswith("."):
        folder = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(name).name).strip("-")
        forms.append(re.escape(folder) + "-[0-9a-f]{8}")
    return "(?:" + "|".join(forms) + ")"


def misnamed(side: Path, meta: dict) -> str | None:
    """Why a score file's name is not the one its sidecar's settings give (the model, the adapter and its strength,
    the precision asked for, a limit, a shard: ``paths.score_slug``, ``paths.score_stem``), or None when it is: a file
    renamed, or a sidecar edited or copied from another model's file, would show one model's scores under another's
    name."""
    import re

    model = meta.get("model")
    if not isinstance(model, str) or not model:
        return "its sidecar names no model"
    adapter, scale = meta.get("adapter"), meta.get("adapter_scale")
    scale = paths.scale_recorded(adapter, scale) if isinstance(scale, (int, float)) and not isinstance(scale, bool) \
        else None
    pattern = _name_part(model)
    if adapter:
        pattern += r"\." + _name_part(adapter) + (re.escape(f"-s{scale:g}") if scale is not None else "")
    if "quantization_requested" in meta or "dtype_requested" in meta:
        tag = paths.precision_tag(meta.get("quantization_requested"), meta.get("dtype_requested"))
        pattern += re.escape(f".{tag}") if tag else ""
    else:  # a sidecar that does not say what was asked for: any precision tag
        pattern += r"(?:\.(?:8bit|4bit|bfloat16|float16))?"
    if meta.get("limit") is not None:
        pattern += re.escape(f".limit-{meta['limit']}")
    if meta.get("num_shards", 1) != 1:
        pattern += re.escape(f".shard-{meta.get('shard_index', 0)}-of-{meta['num_shards']}")
    if re.fullmatch(pattern, side.stem):
        return None
    what = model + (f" with the adapter {adapter}" if adapter else "") + (
        f" at strength {scale:g}" if scale is not None else "")
    return (f"its sidecar describes {what}, whose score file would not be named {side.stem} (a renamed file, or a "
            "sidecar edited or copied from another file); score the model again rather than rename its files")


def _label(meta: dict, stem: str) -> str:
    """The name results print for a score file: the ``label`` its sidecar records, else one derived from the model,
    the adapter and what the file's name marks (``score_settings.derived_label``; a sidecar written before labels
    existed reads the same way)."""
    try:
        label = labels.check_label(meta.get("label"))
    except ValueError:
        label = None  # an edited sidecar's label is not trusted as display text
    if label:  # a quick look (limit) of the same model goes by its label and its limit
        return label + (f" (limit-{meta['limit']})" if meta.get("limit") is not None else "")
    return derived_label(meta["model"], meta.get("adapter"), stem) if meta.get("model") else stem


def check_label_free(run_dir, label: str, slug: str, given: bool = True) -> None:
    """Before a model is scored into ``run_dir`` under ``slug``: a ValueError naming both files when a score file of
    another model there already goes by ``label`` and either label was given by a model file (``given``: this one's;
    two derived alike go by their slugs)."""
    for side in paths.score_sidecars(run_dir):
        stem = side.stem
        if stem == slug or stem.startswith((f"{slug}.limit-", f"{slug}.shard-")):
            continue  # this model's own files
        try:
            meta = read_meta(side)
            other = _label(meta, stem)
        except (ValueError, KeyError):
            continue
        if other == label and (given or meta.get("label") is not None):  # two derived alike: their slugs tell them apart
            raise ValueError(f"label: {side} already goes by {label!r}, the label of the model scored now as "
                             f"{slug}; give one of them another `label:` so that results can tell them apart")


def derived_problem(scores: pd.DataFrame, data: pd.DataFrame, spec: DatasetSpec) -> str | None:
    """Whether a score table's log-probabilities are finite and its derived columns (``choice``, ``margin``,
    ``correct``; a sentence's ``sum_logprob``) agree with them; a description of the first problem, or None."""
    ids = scores[spec.id_column].to_numpy()  # load_scores checked the column
    if "token_logprobs" in scores.columns and "sum_logprob" in scores.columns:
        sums = np.array([float(np.sum(t)) for t in scores["token_logprobs"]])
        problem = _non_finite_problem(ids, np.isfinite(sums))  # a sum is NaN or inf exactly when a term is
        if problem:
            return problem
        bad = ~np.isclose(sums, scores["sum_logprob"].to_numpy(float), rtol=0, atol=1e-6)
        return f"sum_logprob disagrees with token_logprobs on {int(bad.sum())} row(s)" if bad.any() else None
    lp_cols = [c for c in scores.columns if c.startswith("logp_")]
    if spec.scorer != "choices" or spec.choice_items is None or not lp_cols:
        return None
    if "choice" not in scores.columns or "margin" not in scores.columns:
        return "has no 'choice' or 'margin' column"
    rows = data.set_index(spec.id_column).loc[scores[spec.id_column]].reset_index()
    items = spec.choice_items(rows)
    per = options_per_row(items.options, len(rows))
    raw = scores[lp_cols].to_numpy(float)
    problem = _non_finite_problem(ids, [np.isfinite(raw[r, : len(opts)]).all() for r, opts in enumerate(per)])
    if problem:  # a row's own options only: with per-row option sets the columns past a row's options are blank
        return problem
    choice, margin = decisions(raw, per)
    wrong = np.asarray(choice, dtype=object) != scores["choice"].to_numpy(dtype=object)
    if wrong.any():
        return f"its 'choice' is not the option with the highest log-prob on {int(wrong.sum())} row(s) (first: {ids[wrong][0]!r})"
    off = ~np.isclose(np.asarray(margin, float), scores["margin"].to_numpy(float), rtol=0, atol=1e-9)
    if off.any():
        return f"its 'margin' disagrees with its log-probs on {int(off.sum())} row(s) (first: {ids[off][0]!r})"
    if items.gold is not None:
        if "correct" not in scores.columns:
            return "has no 'correct' column though the dataset has gold answers"
        expected = np.asarray(choice, dtype=object) == np.asarray(list(items.gold), dtype=object)
        wrong = expected != scores["correct"].to_numpy(bool)
        if wrong.any():
            return f"its 'correct' disagrees with its choice and the gold answer on {int(wrong.sum())} row(s)"
    return None


def _non_finite_problem(ids, finite_per_row) -> str | None:
    bad = ~np.asarray(finite_per_row, dtype=bool)
    if not bad.any():
        return None
    return (f"its log-probabilities are NaN or inf on {int(bad.sum())} row(s) (first: {ids[bad][0]!r}); score that "
            "model again in a precision whose range its activations fit (dtype: bfloat16 or float32)")


def load_scores(run_dir, spec: DatasetSpec, include_limited: bool = False) -> pd.DataFrame:
    """Every usable model's scores joined with the dataset (one row per model × row).

    Only complete, unsharded score files made from the current dataset are used (limited ones too when
    ``include_limited``), and only when they are as written (sha256), cover exactly the rows they were planned on,
    and their derived columns agree with their log-probs. The rest are listed in ``df.attrs["excluded"]`` with the
    reason, never mixed in; ``df.attrs["coverage"]`` notes models analysed on different rows.
    """
    run = Run.of(run_dir)
    data, dpath = read_dataset(run, spec)
    inv = score_inventory(run, spec)
    usable = {"ok", "limited"} if include_limited else {"ok"}
    frames, used = [], []
    for i, r in inv[inv["status"].isin(usable)].iterrows():
        s = pd.read_parquet(run.scores_dir / Path(r.file).with_suffix(".parquet"))
        if spec.id_column not in s.columns:
            inv.loc[i, ["status", "why"]] = ["edited", f"has no {spec.id_column!r} column"]
            continue
        planned = select_limit(data, spec, None if pd.isna(r.limit) else int(r.limit), int(r.limit_seed))
        problem = coverage_problem(s[spec.id_column], planned[spec.id_column].tolist(), dpath.name)
        problem = problem and f"does not match its dataset: its rows {problem}"
        problem = problem or derived_problem(s, data, spec)
        if problem:
            inv.loc[i, ["status", "why"]] = ["edited", problem]
            continue
        s = s.drop(columns=[c for c in s.columns if c in data.columns and c != spec.id_column])
        s.insert(0, "model", r.label)  # the name results print; the file's slug beside it
        s.insert(1, "slug", r.model)
        frames.append(s.merge(data, on=spec.id_column, how="left", validate="one_to_one"))
        used.append(r)
    if not frames:
        listed = "; ".join(f"{r.file}: {r.status}" + (f" ({r.why})" if isinstance(r.why, str) else "")
                           for r in inv.itertuples(index=False))
        raise ValueError(f"run_dir: no complete scores of the current dataset under {run.scores_dir}"
                         + (f" (excluded: {listed})" if len(inv) else "") + "; " + _no_scores_fix(inv, include_limited))
    out = pd.concat(frames, ignore_index=True)
    named = labels.distinct({str(run.scores_dir / r.file): (r.label, bool(r.label_given), r.model)
                             for r in used})  # one name per file; two given alike are refused, naming both
    label = {r.model: named[str(run.scores_dir / r.file)] for r in used}  # slug → the name printed
    out["model"] = out["slug"].map(label)
    out.attrs["slugs"] = {label[r.model]: r.model for r in used}  # label → score file slug, for anything that needs files
    out.attrs["excluded"] = inv[~inv["status"].isin(usable)].to_dict("records")
    out.attrs["precision"] = {label[r.model]: {"model": paths.score_slug(  # an adapter at another strength is another model
                                            r.model_id, adapter=r.adapter if isinstance(r.adapter, str) else None,
                                            adapter_scale=r.adapter_scale) if r.model_id else r.model,
                                        "precision": r.precision} for r in used}
    sizes = {label[f.loc[0, "slug"]]: len(f) for f in frames}
    if len(set(sizes.values())) > 1:
        out.attrs["coverage"] = [f"models are analysed on different rows ({', '.join(f'{m}: {n}' for m, n in sizes.items())}"
                                 f" of {len(data)}): statistics that pair models use the rows they share"]
    return out


def _no_scores_fix(inv: pd.DataFrame, include_limited: bool) -> str:
    """What to do when no score file is usable: analyse the limited runs there are, or score the dataset."""
    limits = sorted({int(v) for v in inv.loc[inv["status"] == "limited", "limit"].dropna()})
    if limits and not include_limited:
        return (f"only limited runs (limit={', '.join(map(str, limits))}) are there, and the analysis skips them "
                "unless asked: set include_limited: true (papermill: -p include_limited true; "
                "analyze_run(..., include_limited=True)), or score without limit for the full run")
    return "run the score notebook first"


def excluded_notes(df: pd.DataFrame) -> list[str]:
    """One line per score file the analysis left out, saying why (and a line when models cover different rows)."""
    notes = []
    for r in df.attrs.get("excluded", []):
        if r["status"] == "merged":
            continue  # its rows are in the merged file, which is analysed
        what = (f"a limited run (limit={int(r['limit'])}; include_limited: true analyses it)"
                if r["status"] == "limited"
                else f"not as written: {r.get('why')}" if r["status"] == "edited"
                else f"an unreadable sidecar ({r['why']})" if r["status"] == "unreadable" and r.get("why")
                else EXCLUDED_WHY[r["status"]])
        prog = (f" ({int(r['n_done'])}/{int(r['n_planned'])} rows)"
                if r["status"] == "incomplete" and pd.notna(r.get("n_planned")) and pd.notna(r.get("n_done")) else "")
        notes.append(f"not analysed: {r['file']} is {what}{prog}")
    return notes + list(df.attrs.get("coverage", []))


def split_precisions(scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str]]:
    """A run's scores (``load_scores``) split for analysis: the main frame keeps each model's most exact precision;
    the second frame, when some model was scored at several precisions, holds all of that model's rows with ``model``
    the label of its most exact file and ``precision`` the precision (for ``stats.compare_precisions``); the notes say what
    went where."""
    info = scores.attrs.get("precision") or {}
    by_model: dict[str, list[str]] = {}
    for stem, v in info.items():
        by_model.setdefault(v["model"], []).append(stem)
    several = {m: sorted(stems, key=lambda t: (precision_rank(info[t]["precision"]), t)) for m, stems in by_model.items()
               if len(stems) > 1}
    if not several:
        return scores, None, []
    drop, compared, notes = set(), set(), []
    for m, stems in several.items():
        drop |= set(stems[1:])
        seen: dict[str, str] = {}
        for t in stems:
            label = info[t]["precision"]
            if label in seen:
                notes.append(f"precision sensitivity: {t} is {label} like {seen[label]}, so only {seen[label]} is compared")
            else:
                seen[label] = t
                compared.add(t)
        notes.append(f"{stems[0]} was scored at several precisions: the main analysis uses {stems[0]} "
                     f"({info[stems[0]]['precision']}); " + ", ".join(f"{t} ({info[t]['precision']})" for t in stems[1:])
                     + " are compared with it under precision sensitivity")
    main = scores[~scores["model"].isin(drop)].reset_index(drop=True)
    main.attrs = dict(scores.attrs)
    variants = scores[scores["model"].isin(compared)].copy()
    variants["precision"] = variants["model"].map(lambda t: info[t]["precision"])
    main_of = {t: stems[0] for stems in several.values() for t in stems}  # each precision under the main one's label
    variants["model"] = variants["model"].map(main_of)
    return main, variants.reset_index(drop=True), notes
