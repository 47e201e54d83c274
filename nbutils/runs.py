"""Scoring runs that never lose work: checkpoints, resume, identity checks, shards and their merge."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from . import artifacts
from .artifacts import OverwriteError
from .models import LoadedModel
from .paths import model_slug, prompts_path, resolve
from .scoring import ANSWERS, BatchResult, build_requests, model_device, plan_batches, score_batches

SCORE_COLUMNS = ["prompt_id", "logp_yes", "logp_no", "margin", "pred_yes", "label", "correct", "n_tokens", "rescored"]
IDENTITY_KEYS = ("model", "revision", "quantization", "dtype", "prompts_sha256", "used_chat_template",
                 "answer_strings", "limit", "batch_size", "rescore_margin", "num_shards", "shard_index", "scorer",
                 "pll_variant")


def select_limit(prompts: pd.DataFrame, limit: int | None) -> pd.DataFrame:
    """At most ``limit`` prompts per concept × condition (the first ones, so labels stay balanced)."""
    if limit is None:
        return prompts
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit: must be None or a positive integer (prompts per concept and condition), got {limit!r}")
    return prompts.groupby(["concept", "condition"], sort=False).head(limit)


def output_paths(run_dir, slug: str, shard_index: int = 0, num_shards: int = 1) -> tuple[Path, Path]:
    """Final parquet and its in-progress checkpoint for one model (and shard)."""
    scores = resolve(run_dir) / "scores"
    name = slug if num_shards == 1 else f"{slug}.shard-{shard_index}-of-{num_shards}"
    return scores / f"{name}.parquet", scores / ".partial" / f"{name}.parquet"


def identity(meta: dict) -> dict:
    """The fields that must match for two score files to be the same experiment."""
    return {k: meta.get(k) for k in IDENTITY_KEYS}


def _describe_mismatch(old: dict, new: dict) -> str:
    diff = [f"{k}: {old.get(k)!r} → {new.get(k)!r}" for k in IDENTITY_KEYS if old.get(k) != new.get(k)]
    return "; ".join(diff)


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
                         f"({_describe_mismatch(old, expected)}); pass overwrite=True to replace it")


def _frame(prompts: pd.DataFrame, req_lengths: list[int], done: dict[int, tuple[np.ndarray, bool]]) -> pd.DataFrame:
    idx = sorted(done)
    lp = np.array([done[i][0] for i in idx]).reshape(len(idx), -1)
    sub = prompts.iloc[idx]
    pred = lp[:, 0] > lp[:, 1]
    return pd.DataFrame({
        "prompt_id": sub["prompt_id"].to_numpy(), "logp_yes": lp[:, 0], "logp_no": lp[:, 1],
        "margin": lp[:, 0] - lp[:, 1], "pred_yes": pred, "label": sub["label"].to_numpy(),
        "correct": pred == sub["label"].to_numpy(), "n_tokens": np.array([req_lengths[i] for i in idx], dtype="int64"),
        "rescored": np.array([done[i][1] for i in idx], dtype=bool),
    }, columns=SCORE_COLUMNS)


def score_run(run_dir, lm: LoadedModel, *, chat_template: str = "auto", batch_size: int | str = "auto",
              limit: int | None = None, checkpoint_every: int = 16, shard_index: int = 0, num_shards: int = 1,
              overwrite: bool = False, progress: bool = True, stop_after: int | None = None) -> tuple[pd.DataFrame, dict]:
    """Score ``{run_dir}/prompts.parquet`` with ``lm`` into ``{run_dir}/scores/{slug}.parquet`` + ``.json``.

    Checkpoints every ``checkpoint_every`` batches; a rerun resumes from the checkpoint, skips a finished
    run with the same identity, and refuses to mix results from a different model, precision or dataset.
    ``stop_after`` (batches) exists to test interruption.
    """
    for name, val, lo in (("checkpoint_every", checkpoint_every, 1), ("num_shards", num_shards, 1), ("shard_index", shard_index, 0)):
        if isinstance(val, bool) or not isinstance(val, int) or val < lo:
            raise ValueError(f"{name}: must be an integer ≥ {lo}, got {val!r}")
    if shard_index >= num_shards:
        raise ValueError(f"shard_index: must be < num_shards ({num_shards}), got {shard_index}")
    ppath = prompts_path(run_dir)
    if not ppath.exists():
        raise ValueError(f"run_dir: no prompts file at {ppath}; run notebooks/01_generate.ipynb first")
    prompts = select_limit(pd.read_parquet(ppath), limit).reset_index(drop=True)
    req = build_requests(lm.tokenizer, prompts["text"].tolist(), chat_template, ANSWERS)
    if len(req.answer_ids) != 2:
        raise ValueError("answers: exactly two answers (Yes, No) are scored")
    meta = dict(lm.meta, prompts_sha256=artifacts.sha256_file(ppath), used_chat_template=req.used_chat_template,
                answer_strings=list(req.answer_strings), answer_token_ids=req.answer_ids, limit=limit,
                batch_size=batch_size, num_shards=num_shards, shard_index=shard_index,
                single_forward_pass=req.single_token)
    expected = identity(meta)
    slug = model_slug(lm.meta["model"])
    final, partial = output_paths(run_dir, slug, shard_index, num_shards)
    old = check_existing(final.with_suffix(".json"), expected, "scores", overwrite)
    if old is not None and final.exists():
        return pd.read_parquet(final), old
    lengths = [len(p) for p in req.prompt_ids]
    batches = plan_batches(lengths, batch_size, str(model_device(lm.model)))[shard_index::num_shards]
    done: dict[int, tuple[np.ndarray, bool]] = {}
    elapsed_before = 0.0
    if check_existing(partial.with_suffix(".json"), expected, "checkpoint", overwrite) is not None and partial.exists():
        pos = {pid: i for i, pid in enumerate(prompts["prompt_id"])}
        ck = pd.read_parquet(partial)
        for row in ck.itertuples(index=False):
            done[pos[row.prompt_id]] = (np.array([row.logp_yes, row.logp_no]), bool(row.rescored))
        elapsed_before = artifacts.read_json(partial.with_suffix(".json")).get("elapsed_seconds", 0.0)
    todo = [b for b in batches if not all(i in done for i in b)]
    if stop_after is not None:
        todo = todo[:stop_after]
    t0 = time.perf_counter()
    state = {"since_checkpoint": 0}

    def checkpoint() -> None:
        artifacts.write_parquet(_frame(prompts, lengths, done), partial)
        artifacts.write_json(dict(meta, elapsed_seconds=elapsed_before + time.perf_counter() - t0), partial.with_suffix(".json"))
        state["since_checkpoint"] = 0

    def on_result(res: BatchResult) -> None:
        for k, i in enumerate(res.indices):
            done[i] = (res.logprobs[k], res.rescored[k])
        state["since_checkpoint"] += 1
        if state["since_checkpoint"] >= checkpoint_every:
            checkpoint()

    score_batches(lm.model, req, todo, lm.reference, lm.meta.get("rescore_margin", 0.0), on_result, progress)
    expected = {i for b in batches for i in b}
    if not expected.issubset(done):
        checkpoint()
        return _frame(prompts, lengths, done), dict(meta, complete=False)
    elapsed = elapsed_before + time.perf_counter() - t0
    df = _frame(prompts, lengths, {i: done[i] for i in expected})
    meta.update(complete=True, n_prompts=len(df), elapsed_seconds=round(elapsed, 3),
                prompts_per_second=round(len(df) / elapsed, 4) if elapsed else None,
                tokens_per_second=round(int(df["n_tokens"].sum()) / elapsed, 1) if elapsed else None,
                rescored_prompt_ids=df.loc[df["rescored"], "prompt_id"].tolist(),
                accuracy=round(float(df["correct"].mean()), 4), created=artifacts.now_utc(),
                versions=artifacts.versions())
    artifacts.write_parquet(df, final)
    artifacts.write_json(meta, final.with_suffix(".json"))
    partial.unlink(missing_ok=True)
    partial.with_suffix(".json").unlink(missing_ok=True)
    return df, meta


def merge_shards(run_dir, slug: str, overwrite: bool = False) -> tuple[pd.DataFrame, dict]:
    """Join all shards of one model into the file an unsharded run writes (rows in prompts order)."""
    scores = resolve(run_dir) / "scores"
    sidecars = sorted(scores.glob(f"{slug}.shard-*-of-*.json"))
    if not sidecars:
        raise ValueError(f"slug: no shards named {slug}.shard-*-of-*.json under {scores}")
    metas = [artifacts.read_json(p) for p in sidecars]
    n = metas[0]["num_shards"]
    got = sorted(m["shard_index"] for m in metas)
    if got != list(range(n)) or any(not m.get("complete") for m in metas):
        raise ValueError(f"slug: {slug} needs complete shards 0..{n - 1}, found {got}")
    base = {k: v for k, v in identity(metas[0]).items() if k not in ("num_shards", "shard_index")}
    for m in metas[1:]:
        if {k: v for k, v in identity(m).items() if k not in ("num_shards", "shard_index")} != base:
            raise ValueError(f"slug: shards of {slug} disagree ({_describe_mismatch(metas[0], m)})")
    prompts = select_limit(pd.read_parquet(prompts_path(run_dir)), metas[0]["limit"])
    order = {pid: i for i, pid in enumerate(prompts["prompt_id"])}
    df = pd.concat([pd.read_parquet(p.with_suffix(".parquet")) for p in sidecars], ignore_index=True)
    df = df.sort_values("prompt_id", key=lambda s: s.map(order)).reset_index(drop=True)
    elapsed = sum(m["elapsed_seconds"] for m in metas)
    meta = dict(metas[0], num_shards=1, shard_index=0, n_prompts=len(df), merged_from=[p.name for p in sidecars],
                elapsed_seconds=round(elapsed, 3), prompts_per_second=round(len(df) / elapsed, 4),
                tokens_per_second=round(int(df["n_tokens"].sum()) / elapsed, 1),
                rescored_prompt_ids=df.loc[df["rescored"], "prompt_id"].tolist(),
                accuracy=round(float(df["correct"].mean()), 4), created=artifacts.now_utc())
    final = scores / f"{slug}.parquet"
    check_existing(final.with_suffix(".json"), identity(meta), "scores", overwrite)
    artifacts.write_parquet(df, final)
    artifacts.write_json(meta, final.with_suffix(".json"))
    return df, meta


def load_scores(run_dir) -> pd.DataFrame:
    """Every complete model's scores in a run joined with the prompts (one row per model × prompt)."""
    run = resolve(run_dir)
    prompts = pd.read_parquet(prompts_path(run))
    frames = []
    for sidecar in sorted((run / "scores").glob("*.json")):
        meta = artifacts.read_json(sidecar)
        if not meta.get("complete") or meta.get("num_shards", 1) != 1:
            continue
        s = pd.read_parquet(sidecar.with_suffix(".parquet")).drop(columns=["label"])
        s.insert(0, "model", sidecar.stem)
        frames.append(s.merge(prompts, on="prompt_id", how="left", validate="one_to_one"))
    if not frames:
        raise ValueError(f"run_dir: no complete scores under {run / 'scores'}; run notebooks/02_score.ipynb first")
    return pd.concat(frames, ignore_index=True)
