"""One scoring run's files, checked by the one rule for "is this the same run?" (``score_settings.identity``): the
score file, its checkpoint and progress file, the content fields every reader checks, the sweep's skip, and the
shards of one model merged into one file."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from .. import artifacts, paths, runlock
from ._sidecar import ScoreSidecar, SidecarError, read as read_sidecar, write as write_sidecar
from ..artifacts import OverwriteError
from ._dataset import read_dataset, select_limit
from ..score_settings import (IDENTITY_KEYS, SHARD_KEYS, ScoreSettings, check_int, describe_mismatch, identity, matches,
                              recorded)
from ..spec import DatasetSpec


def check_existing(sidecar: Path, expected: dict, what: str, overwrite: bool) -> ScoreSidecar | None:
    """The existing sidecar if it matches ``expected`` (``score_settings.identity``); OverwriteError if it differs
    and overwrite is off (a ``SidecarError`` when it cannot be read: it says what to score again)."""
    if not sidecar.exists():
        return None
    try:
        old = read_sidecar(sidecar)
    except SidecarError:
        if overwrite:
            return None
        raise
    if matches(expected, old):
        return old
    if overwrite:
        return None
    raise OverwriteError(f"{what} {sidecar.with_suffix('.parquet')} was made differently "
                         f"({describe_mismatch(old, expected)}); use another run_dir to keep both, or pass "
                         "overwrite=True to replace it")


def is_done(run_dir, spec: DatasetSpec, params: dict) -> bool:
    """True when a complete score file of these parameters (a model file's, as the sweep and the cluster hold them)
    exists for the run's current dataset: the sweep's and the cluster's skip, by the rule of scoring itself
    (``score_settings.identity`` before the model loads). Parameters that are no valid settings are never done:
    scoring them says what is wrong."""
    found = _expected(run_dir, spec, params)
    if found is None:
        return False
    settings, expected = found
    side = paths.sidecar(settings.score_file(run_dir))
    if not side.exists():
        return False
    try:
        meta = read_sidecar(side)
    except SidecarError:
        return False  # scoring it says what is wrong with the file
    return bool(meta.get("complete")) and matches(expected, meta)


def _expected(run_dir, spec: DatasetSpec, params: dict) -> tuple[ScoreSettings, dict] | None:
    """A model file's settings and the identity its scoring of the run's current dataset would record
    (``score_settings.identity`` before the model loads); None for parameters that are no valid settings, or a run
    without its dataset."""
    try:
        settings = ScoreSettings.of_model_file(spec, params)
    except ValueError:
        return None
    dpath = paths.dataset_path(run_dir, spec.dataset_file)
    if not dpath.exists():
        return None
    return settings, identity(settings, spec, artifacts.sha256_file(dpath))


def set_aside_changed(run_dir, spec: DatasetSpec, params: dict) -> tuple[list[Path], str]:
    """The score file and checkpoint named for these parameters (a model file's) that another scoring made (their
    recorded identity does not match ``score_settings.identity``), moved into ``scores/.stale/<time>/`` as the
    scores of a regenerated dataset are, so that the sweep scores these parameters again: the paths moved, and what
    differed. Nothing moves for parameters that are no valid settings, or for files of this same scoring."""
    found = _expected(run_dir, spec, params)
    if found is None:
        return [], ""
    settings, expected = found
    files = ScoreFiles(run_dir, settings.slug, settings.limit, settings.shard_index, settings.num_shards)
    move, why = [], ""
    for data, extra in ((files.final, ()), (files.partial, (files.progress,))):
        side = paths.sidecar(data)
        try:
            old = read_sidecar(side) if side.exists() else None
        except SidecarError as err:
            move += [data, side, *extra]
            why = why or str(err)
            continue
        if old is not None and not matches(expected, old):
            move += [data, side, *extra]
            why = why or describe_mismatch(old, expected)
    return (artifacts.set_aside_scores(run_dir, move) if move else []), why


# ---------------------------------------------------------------- one scoring run's files

class ScoreFiles:
    """The files of one scoring run: ``final`` (the score file, + sidecar), the checkpoint it resumes from
    (``partial`` + sidecar) and a small progress file. Records are ``{row: {column: value}}`` keyed by the row's
    position in the (limited) dataset; the checkpoint stores them with the row's id, so a resumed run maps them back."""

    def __init__(self, run_dir, slug: str, limit: int | None = None, shard_index: int = 0, num_shards: int = 1):
        self.final = paths.score_file(run_dir, slug, limit, shard_index, num_shards)
        self.partial = paths.partial_file(run_dir, slug, limit, shard_index, num_shards)
        self.progress = paths.progress_file(self.partial)

    def finished(self, expected: dict, overwrite: bool) -> tuple[pd.DataFrame, ScoreSidecar] | None:
        """The score file and its metadata when this same run already finished; OverwriteError when a different
        one did and ``overwrite`` is off; None when it must be scored."""
        old = check_existing(paths.sidecar(self.final), expected, "score file", overwrite)
        if old is not None and self.final.exists():
            return pd.read_parquet(self.final), old
        return None

    def resume(self, expected: dict, overwrite: bool, ids: list) -> tuple[dict, ScoreSidecar | dict]:
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
        side = ScoreSidecar.of(dict(meta, complete=False))
        idx = sorted(records)
        frame = pd.DataFrame([records[i] for i in idx])
        frame.insert(0, "_row", idx)
        frame.insert(1, "_id", [ids[i] for i in idx])
        artifacts.write_parquet(frame, self.partial)
        write_sidecar(side, paths.sidecar(self.partial))

    def report_progress(self, n_done: int, n_planned: int, rate: float) -> None:
        """What a watcher (the sweep) reads while scoring runs."""
        artifacts.write_json({"n_done": n_done, "n_planned": n_planned, "rows_per_second": round(rate, 4),
                              "updated": artifacts.now_utc()}, self.progress)

    def write(self, df: pd.DataFrame, meta: dict) -> tuple[pd.DataFrame, ScoreSidecar]:
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


def write_scores(df: pd.DataFrame, meta, path: Path) -> ScoreSidecar:
    """Write a score table and its sidecar (``meta``: its keys, checked as a ``ScoreSidecar`` before the table is
    written); the sidecar ties the file to its content as a dataset's does: the file's sha256, its row count and the
    digest of its ids (every reader checks them)."""
    ScoreSidecar.of(dict(meta, n_rows=len(df), scores_sha256="", ids_sha256=""))  # a wrong key fails before writing
    artifacts.write_parquet(df, path)
    meta = dict(meta, n_rows=len(df), scores_sha256=artifacts.sha256_file(path), ids_sha256=ids_digest(df.iloc[:, 0]))
    return write_sidecar(meta, paths.sidecar(path))


def check_scores_file(path: Path, meta: dict) -> str | None:
    """What is wrong with a finished score file against its own sidecar (None when nothing): missing, or changed
    after it was written (its sha256 differs; a file written before sidecars recorded it is checked by its rows)."""
    if not path.exists():
        return f"{path.name} is missing (its sidecar {paths.sidecar(path).name} is there)"
    written = meta.get("scores_sha256")
    if written and written != artifacts.sha256_file(path):
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
    if limit is not None:
        check_int("limit", limit, 1)
    if not paths.check_run_dir(run_dir).is_dir():
        raise ValueError(f"run_dir: {paths.resolve(run_dir)} does not exist; give the run directory the shards were "
                         "scored into")
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
    metas = [read_sidecar(p) for p in sidecars]
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
        if not matches({k: v for k, v in recorded(metas[0]).items() if k in keys}, m):
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
    check_existing(paths.sidecar(final), recorded(meta), "score file", overwrite)
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
