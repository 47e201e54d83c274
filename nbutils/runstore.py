"""The run store: a run directory's datasets and score files, read and written without a model (no torch here).

Everything that touches a run's files on the way in and out of scoring lives here, so analyses read scores without
importing the engine:

- ``read_dataset`` — a run's dataset, verified against the sha256 its sidecar recorded;
- ``select_limit`` — the seeded, stratified sample a ``limit`` run scores;
- ``identity`` / ``check_existing`` / ``is_done`` — the one rule for "is this the same run?";
- ``ScoreFiles`` — one scoring run's score file, checkpoint and progress file;
- ``merge_shards`` — the shards of one model joined into the file an unsharded run writes;
- ``score_inventory`` / ``load_scores`` / ``excluded_notes`` — a run's scores read back for analysis, with every file
  left out named and the reason given.

File names come from ``paths``; writes are atomic (``artifacts``).
"""
from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from . import artifacts, paths, precision, runlock
from .artifacts import OverwriteError
from .spec import DatasetSpec, decisions, options_per_row

# The one rule for "is this the same run?": these fields must match, in scoring, resuming, merging and the sweep.
IDENTITY_KEYS = ("model", "revision", "quantization", "dtype", "dataset_file", "dataset_sha256", "scorer",
                 "used_chat_template", "options_sha256", "limit", "limit_seed", "batch_size", "rescore_margin",
                 "num_shards", "shard_index", "masked", "pll_variant")
SHARD_KEYS = ("num_shards", "shard_index")


def check_int(name: str, value, lo: int) -> int:
    """``value`` if it is an integer ≥ ``lo`` (not a bool); else a ValueError naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name}: must be an integer ≥ {lo}, got {value!r}")
    return value


# ---------------------------------------------------------------- the dataset and its limited sample

def read_dataset(run_dir, spec: DatasetSpec) -> tuple[pd.DataFrame, Path]:
    """The dataset of a run, verified against the sha256 its own sidecar recorded when it was written."""
    dpath = paths.dataset_path(run_dir, spec.dataset_file)
    if not dpath.exists():
        raise ValueError(f"run_dir: no dataset at {dpath}; run {spec.what_makes_it} first")
    side = paths.sidecar(dpath)
    if side.exists():
        recorded = artifacts.read_json(side).get("sha256")
        if recorded and recorded != artifacts.sha256_file(dpath):
            raise ValueError(f"run_dir: {dpath} does not match the sha256 in {side.name} (it changed after it was "
                             f"written); regenerate it with {spec.what_makes_it} and overwrite=True")
    df = pd.read_parquet(dpath)
    if spec.id_column not in df.columns:
        raise ValueError(f"run_dir: {dpath} has no {spec.id_column!r} column")
    if df[spec.id_column].duplicated().any():
        dup = df.loc[df[spec.id_column].duplicated(), spec.id_column].iloc[0]
        raise ValueError(f"run_dir: {dpath} repeats {spec.id_column} {dup!r}")
    return df, dpath


def _quotas(sizes: dict, limit: int) -> dict:
    """Split ``limit`` over strata in proportion to their sizes (largest remainder), never above a stratum's size."""
    total = sum(sizes.values())
    if limit >= total:
        return dict(sizes)
    raw = {k: limit * n / total for k, n in sizes.items()}
    q = {k: min(sizes[k], int(np.floor(v))) for k, v in raw.items()}
    order = sorted(sizes, key=lambda k: (-(raw[k] - np.floor(raw[k])), str(k)))
    while sum(q.values()) < limit:
        for k in order:
            if sum(q.values()) < limit and q[k] < sizes[k]:
                q[k] += 1
    return q


def select_limit(df: pd.DataFrame, spec: DatasetSpec, limit: int | None, seed: int = 0) -> pd.DataFrame:
    """At most ``limit`` units per group of ``spec.limit_by``, balanced on ``spec.limit_strata``, seeded.

    A unit is the set of rows sharing ``spec.limit_unit`` (a row on its own when None); they are kept or dropped
    together. Each group draws from its own random stream (seeded by ``seed`` and the group's key), so a file
    sorted by answer still yields a balanced sample and adding a group leaves the others' samples unchanged.
    Rows keep their order in the file.
    """
    if limit is None:
        return df
    check_int("limit", limit, 1)
    unit_col = spec.limit_unit
    units = df[unit_col].astype(str) if unit_col else pd.Series(df.index.astype(str), index=df.index)
    keep = pd.Series(False, index=df.index)
    groups = df.groupby(list(spec.limit_by), sort=False) if spec.limit_by else [((), df)]
    for key, g in groups:
        key_s = "|".join(map(str, key if isinstance(key, tuple) else (key,)))
        rng = np.random.default_rng([seed, zlib.crc32(key_s.encode())])
        first = g.assign(_unit=units[g.index]).drop_duplicates("_unit")
        strata = first[spec.limit_strata].astype(str) if spec.limit_strata else pd.Series("all", index=first.index)
        by = {s: first.loc[strata == s, "_unit"].tolist() for s in sorted(strata.unique())}
        quotas = _quotas({s: len(u) for s, u in by.items()}, limit)
        chosen = set()
        for s, us in by.items():
            chosen.update(us[i] for i in rng.permutation(len(us))[: quotas[s]])
        keep[g.index] = units[g.index].isin(chosen)
    return df[keep]


# ---------------------------------------------------------------- identity

def identity(meta: dict) -> dict:
    """The fields that must match for two score files to be the same experiment."""
    return {k: meta.get(k) for k in IDENTITY_KEYS}


def describe_mismatch(old: dict, new: dict, keys=IDENTITY_KEYS) -> str:
    """``key: old → new`` for every identity field that differs."""
    return "; ".join(f"{k}: {old.get(k)!r} → {new.get(k)!r}" for k in keys if old.get(k) != new.get(k))


def check_existing(sidecar: Path, expected: dict, what: str, overwrite: bool) -> dict | None:
    """The existing metadata if it matches ``expected``; OverwriteError if it differs and overwrite is off."""
    if not sidecar.exists():
        return None
    old = artifacts.read_json(sidecar)
    if identity(old) == expected:
        return old
    if overwrite:
        return None
    raise OverwriteError(f"{what} {sidecar.with_suffix('.parquet')} was made differently "
                         f"({describe_mismatch(old, expected)}); use another run_dir to keep both, or pass "
                         "overwrite=True to replace it")


def matches_params(meta: dict, params: dict) -> bool:
    """True when a finished run's metadata agrees with every identity field the user set explicitly in ``params``
    (``dtype: auto`` and ``revision: None`` mean "whatever was resolved", so they match anything)."""
    explicit = {k: v for k, v in params.items() if k in IDENTITY_KEYS
                and not (k in ("dtype", "quantization", "rescore_margin") and v == "auto")
                and not (k == "revision" and v is None)}
    return all(meta.get(k) == v for k, v in explicit.items())


def score_slug(model: str, quantization="auto", dtype="auto") -> str:
    """The name a model's score files start with: its slug, plus the precision when it was set explicitly
    (``{slug}.8bit``, ``{slug}.float32``), so one run can hold the same model at several precisions."""
    tag = precision.file_tag(quantization, dtype)
    return paths.model_slug(model) + (f".{tag}" if tag else "")


def is_done(run_dir, spec: DatasetSpec, params: dict) -> bool:
    """True when a complete score file exists for these parameters on the run's current dataset (the sweep's skip)."""
    slug = score_slug(params["model"], params.get("quantization", "auto"), params.get("dtype", "auto"))
    side = paths.sidecar(paths.score_file(run_dir, slug, params.get("limit"), params.get("shard_index", 0),
                                          params.get("num_shards", 1)))
    dpath = paths.dataset_path(run_dir, spec.dataset_file)
    if not side.exists() or not dpath.exists():
        return False
    meta = artifacts.read_json(side)
    return (bool(meta.get("complete")) and matches_params(meta, {"limit": None, **params})
            and meta.get("dataset_sha256") == artifacts.sha256_file(dpath))


# ---------------------------------------------------------------- one scoring run's files

class ScoreFiles:
    """The files of one scoring run: ``final`` (the score file, + sidecar), the checkpoint it resumes from
    (``partial`` + sidecar) and a small progress file. Records are ``{row: {column: value}}`` keyed by the row's
    position in the (limited) dataset; the checkpoint stores them with the row's id, so a resumed run maps them back."""

    def __init__(self, run_dir, slug: str, limit: int | None = None, shard_index: int = 0, num_shards: int = 1):
        self.final = paths.score_file(run_dir, slug, limit, shard_index, num_shards)
        self.partial = paths.partial_file(run_dir, slug, limit, shard_index, num_shards)
        self.progress = paths.progress_file(self.partial)

    def finished(self, expected: dict, overwrite: bool) -> tuple[pd.DataFrame, dict] | None:
        """The score file and its metadata when this same run already finished; OverwriteError when a different
        one did and ``overwrite`` is off; None when it must be scored."""
        old = check_existing(paths.sidecar(self.final), expected, "score file", overwrite)
        if old is not None and self.final.exists():
            return pd.read_parquet(self.final), old
        return None

    def resume(self, expected: dict, overwrite: bool, ids: list) -> tuple[dict, dict]:
        """The records and metadata of a checkpoint of this same run (empty when there is none); OverwriteError for a
        checkpoint made differently unless ``overwrite``."""
        side = paths.sidecar(self.partial)
        old = check_existing(side, expected, "checkpoint", overwrite)
        if old is None or not self.partial.exists():
            return {}, {}
        pos = {v: i for i, v in enumerate(ids)}
        records = {}
        for rec in pd.read_parquet(self.partial).to_dict("records"):
            i = pos.get(rec.pop("_id"))
            rec.pop("_row", None)
            if i is not None:
                records[i] = {k: (list(v) if isinstance(v, np.ndarray) else v) for k, v in rec.items()}
        return records, old

    def checkpoint(self, ids: list, records: dict, meta: dict) -> None:
        """Save the records so far (the sidecar says ``complete: false``)."""
        idx = sorted(records)
        frame = pd.DataFrame([records[i] for i in idx])
        frame.insert(0, "_row", idx)
        frame.insert(1, "_id", [ids[i] for i in idx])
        artifacts.write_parquet(frame, self.partial)
        artifacts.write_json(dict(meta, complete=False), paths.sidecar(self.partial))

    def report_progress(self, n_done: int, n_planned: int, rate: float) -> None:
        """What a watcher (the sweep) reads while scoring runs."""
        artifacts.write_json({"n_done": n_done, "n_planned": n_planned, "rows_per_second": round(rate, 4),
                              "updated": artifacts.now_utc()}, self.progress)

    def write(self, df: pd.DataFrame, meta: dict) -> tuple[pd.DataFrame, dict]:
        """Write the finished score file and its sidecar (with the file's content fields, see ``write_scores``), drop
        the checkpoint, and return the table and its metadata."""
        meta = write_scores(df, meta, self.final)
        for f in (self.partial, paths.sidecar(self.partial), self.progress):
            f.unlink(missing_ok=True)
        return df, meta


def ids_digest(ids) -> str:
    """sha256 of a score file's row ids, in order."""
    import hashlib

    return hashlib.sha256("\x1e".join(map(str, ids)).encode()).hexdigest()


def write_scores(df: pd.DataFrame, meta: dict, path: Path) -> dict:
    """Write a score table and its sidecar; the sidecar ties the file to its content as a dataset's does: the file's
    sha256, its row count and the digest of its ids (every reader checks them)."""
    artifacts.write_parquet(df, path)
    meta = dict(meta, n_rows=len(df), scores_sha256=artifacts.sha256_file(path), ids_sha256=ids_digest(df.iloc[:, 0]))
    artifacts.write_json(meta, paths.sidecar(path))
    return meta


def check_scores_file(path: Path, meta: dict) -> str | None:
    """What is wrong with a finished score file against its own sidecar (None when nothing): missing, or changed
    after it was written (its sha256 differs; a file written before sidecars recorded it is checked by its rows)."""
    if not path.exists():
        return f"{path.name} is missing (its sidecar {paths.sidecar(path).name} is there)"
    recorded = meta.get("scores_sha256")
    if recorded and recorded != artifacts.sha256_file(path):
        return f"{path.name} changed after it was written (its sha256 differs from the one in {paths.sidecar(path).name})"
    return None


def rates(df: pd.DataFrame, elapsed: float) -> dict:
    """Time and speed of a finished score file, the rows re-scored in float32, and accuracy where known (its row
    count is a content field, written by ``write_scores``)."""
    out = {"elapsed_seconds": round(elapsed, 3),
           "rows_per_second": round(len(df) / elapsed, 4) if elapsed > 0 else None}
    if "n_tokens" in df and elapsed > 0:
        out["tokens_per_second"] = round(int(df["n_tokens"].sum()) / elapsed, 1)
    if "rescored" in df:
        out["rescored_ids"] = df.loc[df["rescored"], df.columns[0]].tolist()
    if "correct" in df:
        out["accuracy"] = round(float(df["correct"].mean()), 4)
    return out


def merge_shards(run_dir, slug: str, limit: int | None = None, overwrite: bool = False) -> tuple[pd.DataFrame, dict]:
    """Join all shards of one model into the file an unsharded run writes (rows in dataset order), holding the run's
    lock."""
    paths.check_plain_name(slug, "slug")
    with runlock.hold(run_dir, "merging shards into it"):
        return _merge_shards(run_dir, slug, limit, overwrite)


def _missing_shards(run_dir, slug: str, limit: int | None) -> str:
    """The error when a model has no shards of this name: which shard files the run does hold, and how to name them."""
    want = f"{paths.score_stem(slug, limit)}.shard-*-of-*.json"
    there = sorted(p.name for p in paths.scores_dir(run_dir).glob("*.shard-*-of-*.json"))
    mine = [n for n in there if n.startswith(f"{slug}.")]
    limits = sorted({int(m.group(1)) for n in mine if (m := re.match(rf"{re.escape(slug)}\.limit-(\d+)\.", n))})
    hint = ("; these are shards of a limited run: pass --limit " + " or --limit ".join(map(str, limits))
            if limits and limit is None else "")
    held = f"; the run holds {', '.join(there[:8])}{' …' if len(there) > 8 else ''}" if there else "; it holds no shards"
    return f"slug: no shards named {want} under {paths.scores_dir(run_dir)}{held}{hint}"


def _merge_shards(run_dir, slug: str, limit: int | None, overwrite: bool) -> tuple[pd.DataFrame, dict]:
    sidecars = paths.shard_sidecars(run_dir, slug, limit)
    if not sidecars:
        raise ValueError(_missing_shards(run_dir, slug, limit))
    metas = [artifacts.read_json(p) for p in sidecars]
    splits = sorted({m.get("num_shards") for m in metas}, key=str)
    if len(splits) > 1:
        by = {k: [p.name for p, m in zip(sidecars, metas) if m.get("num_shards") == k] for k in splits}
        raise ValueError(f"slug: {slug} has shards of {len(splits)} different splits ("
                         + "; ".join(f"-of-{k}: {names}" for k, names in by.items())
                         + "); keep the split you finished and delete the other's files")
    n = metas[0]["num_shards"]
    got = sorted(m["shard_index"] for m in metas)
    unfinished = [p.name for p, m in zip(sidecars, metas) if not m.get("complete")]
    if got != list(range(n)) or unfinished:
        raise ValueError(f"slug: {slug} needs complete shards 0..{n - 1} of {n}, found shard indices {got}"
                         + (f" (unfinished: {unfinished})" if unfinished else ""))
    keys = [k for k in IDENTITY_KEYS if k not in SHARD_KEYS]
    for m in metas[1:]:
        if any(m.get(k) != metas[0].get(k) for k in keys):
            raise ValueError(f"slug: shards of {slug} disagree ({describe_mismatch(metas[0], m, keys)})")
    m0 = metas[0]
    spec = DatasetSpec(m0["dataset_file"], m0["id_column"], m0["scorer"], "", choice_items=lambda d: None,
                       limit_by=tuple(m0.get("limit_by") or ()), limit_unit=m0.get("limit_unit"),
                       limit_strata=m0.get("limit_strata"))
    full, dpath = read_dataset(run_dir, spec)
    if m0.get("dataset_sha256") != artifacts.sha256_file(dpath):
        raise ValueError(f"slug: the shards of {slug} were scored on another version of {dpath.name}; score them again")
    planned = select_limit(full, spec, m0["limit"], m0.get("limit_seed", 0))[spec.id_column].tolist()
    frames = []
    for side, m in zip(sidecars, metas):
        problem = check_scores_file(side.with_suffix(".parquet"), m)
        if problem:
            raise ValueError(f"slug: shard {problem}; score that shard again")
        frames.append(pd.read_parquet(side.with_suffix(".parquet")))
    df = pd.concat(frames, ignore_index=True)
    problem = coverage_problem(df[spec.id_column], planned, dpath.name)
    if problem:
        raise ValueError(f"slug: the shards of {slug} together {problem}; nothing was merged")
    order = {v: i for i, v in enumerate(planned)}
    df = df.sort_values(spec.id_column, key=lambda s: s.map(order)).reset_index(drop=True)
    elapsed = sum(m.get("elapsed_seconds") or 0.0 for m in metas)
    meta = dict(m0, num_shards=1, shard_index=0, merged_from=[p.name for p in sidecars], created=artifacts.now_utc(),
                resumed_rows=sum(m.get("resumed_rows") or 0 for m in metas))
    meta.update(rates(df, elapsed))
    final = paths.score_file(run_dir, slug, limit)
    check_existing(paths.sidecar(final), identity(meta), "score file", overwrite)
    return df, write_scores(df, meta, final)


def coverage_problem(ids: pd.Series, planned: list, dataset_name: str) -> str | None:
    """How a score table's ids differ from the rows it should cover (each planned id exactly once), or None."""
    dup = ids[ids.duplicated()]
    if len(dup):
        return f"repeat {len(dup)} row id(s) (first: {dup.iloc[0]!r})"
    have, want = set(ids), set(planned)
    if have != want:
        extra, missing = sorted(have - want, key=str), sorted(want - have, key=str)
        parts = ([f"miss {len(missing)} of the {len(want)} planned rows (first: {missing[0]!r})"] if missing else []) + (
            [f"hold {len(extra)} id(s) that are not planned rows of {dataset_name} (first: {extra[0]!r})"] if extra else [])
        return " and ".join(parts)
    return None


# ---------------------------------------------------------------- reading a run's scores back

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
    dpath = paths.dataset_path(run_dir, spec.dataset_file)
    current = artifacts.sha256_file(dpath) if dpath.exists() else None
    rows = []
    finals = paths.score_sidecars(run_dir)
    listed = ([(p, "final") for p in finals] + [(p, "partial") for p in paths.partial_sidecars(run_dir)]
              + [(p, "set_aside") for p in paths.stale_sidecars(run_dir)])
    metas = {}
    for side, where in listed:
        try:
            metas[side] = artifacts.read_json(side)
        except ValueError:
            metas[side] = None
    merged_into = {name: side.name for side in finals if metas.get(side) for name in metas[side].get("merged_from") or []}
    for side, where in listed:
        meta = metas[side]
        if meta is None:
            rows.append({"file": side.name, "model": side.stem, "status": "unreadable"})
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
        elif meta.get("num_shards", 1) != 1:
            status = "merged" if side.name in merged_into else "shard"
            why = f"merged into {merged_into[side.name]}" if status == "merged" else None
        elif meta.get("limit") is not None:
            status = "limited"
        else:
            status = "ok"
        rows.append({"file": str(side.relative_to(paths.scores_dir(run_dir))), "model": side.stem, "status": status,
                     "limit": meta.get("limit"), "n_done": meta.get("n_done"), "n_planned": meta.get("n_planned"),
                     "model_id": meta.get("model"), "precision": precision.precision_label(meta),
                     "limit_seed": meta.get("limit_seed", 0), "why": why})
    return pd.DataFrame(rows, columns=["file", "model", "status", "limit", "n_done", "n_planned", "model_id", "precision",
                                       "limit_seed", "why"])


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
    data, dpath = read_dataset(run_dir, spec)
    inv = score_inventory(run_dir, spec)
    usable = {"ok", "limited"} if include_limited else {"ok"}
    frames, used = [], []
    for i, r in inv[inv["status"].isin(usable)].iterrows():
        s = pd.read_parquet(paths.scores_dir(run_dir) / Path(r.file).with_suffix(".parquet"))
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
        s.insert(0, "model", r.model)
        frames.append(s.merge(data, on=spec.id_column, how="left", validate="one_to_one"))
        used.append(r)
    if not frames:
        listed = "; ".join(f"{r.file}: {r.status}" + (f" ({r.why})" if isinstance(r.why, str) else "")
                           for r in inv.itertuples(index=False))
        raise ValueError(f"run_dir: no complete scores of the current dataset under {paths.scores_dir(run_dir)}"
                         + (f" (excluded: {listed})" if len(inv) else "") + "; " + _no_scores_fix(inv, include_limited))
    out = pd.concat(frames, ignore_index=True)
    out.attrs["excluded"] = inv[~inv["status"].isin(usable)].to_dict("records")
    out.attrs["precision"] = {r.model: {"model": paths.model_slug(r.model_id) if r.model_id else r.model,
                                        "precision": r.precision} for r in used}
    sizes = {f.loc[0, "model"]: len(f) for f in frames}
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
                else f"not as written: {r.get('why')}" if r["status"] == "edited" else EXCLUDED_WHY[r["status"]])
        prog = (f" ({int(r['n_done'])}/{int(r['n_planned'])} rows)"
                if r["status"] == "incomplete" and pd.notna(r.get("n_planned")) and pd.notna(r.get("n_done")) else "")
        notes.append(f"not analysed: {r['file']} is {what}{prog}")
    return notes + list(df.attrs.get("coverage", []))


def split_precisions(scores: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str]]:
    """A run's scores (``load_scores``) split for analysis: the main frame keeps each model's most exact precision;
    the second frame, when some model was scored at several precisions, holds all of that model's rows with ``model``
    its slug and ``precision`` its label (for ``precision.compare``); the notes say what went where."""
    info = scores.attrs.get("precision") or {}
    by_model: dict[str, list[str]] = {}
    for stem, v in info.items():
        by_model.setdefault(v["model"], []).append(stem)
    several = {m: sorted(stems, key=lambda t: (precision.rank(info[t]["precision"]), t)) for m, stems in by_model.items()
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
        notes.append(f"{m} was scored at several precisions: the main analysis uses {stems[0]} "
                     f"({info[stems[0]]['precision']}); " + ", ".join(f"{t} ({info[t]['precision']})" for t in stems[1:])
                     + " are compared with it under precision sensitivity")
    main = scores[~scores["model"].isin(drop)].reset_index(drop=True)
    main.attrs = dict(scores.attrs)
    variants = scores[scores["model"].isin(compared)].copy()
    variants["precision"] = variants["model"].map(lambda t: info[t]["precision"])
    variants["model"] = variants["model"].map(lambda t: info[t]["model"])
    return main, variants.reset_index(drop=True), notes

