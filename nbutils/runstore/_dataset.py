"""A run's dataset, verified against its own checksum, and the seeded, stratified sample a ``limit`` run scores."""
from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from .. import artifacts, paths
from ._handle import Run
from ..score_settings import check_int
from ..spec import DatasetSpec


def read_dataset(run_dir, spec: DatasetSpec) -> tuple[pd.DataFrame, Path]:
    """The dataset of a run, verified against the sha256 its own sidecar recorded when it was written."""
    dpath = Run.of(run_dir).dataset_path(spec.dataset_file)
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
