"""ONE scoring run for any dataset and either scorer: checkpoints, resume, identity refusal, shards, merge, limit.

A run scores ``{run}/<dataset file>`` with one loaded model into ``{run}/scores/{slug}….parquet`` + ``.json``.
The batch plan is fixed before scoring, so a run killed at any point (even ``kill -9``) and started again
resumes from its checkpoint and writes exactly the file an uninterrupted run writes.
"""
from __future__ import annotations

import time
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from .. import artifacts, paths
from ..artifacts import OverwriteError
from .spec import ChoiceItems, DatasetSpec

# The one rule for "is this the same run?": these fields must match, in scoring, resuming, merging and the sweep.
IDENTITY_KEYS = ("model", "revision", "quantization", "dtype", "dataset_file", "dataset_sha256", "scorer",
                 "used_chat_template", "options_sha256", "limit", "limit_seed", "batch_size", "rescore_margin",
                 "num_shards", "shard_index", "masked", "pll_variant")
SHARD_KEYS = ("num_shards", "shard_index")


# ---------------------------------------------------------------- parameters, checked before any model loads

def _int(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name}: must be an integer ≥ {lo}, got {value!r}")
    return value


def check_params(*, batch_size="auto", limit=None, limit_seed: int = 0, checkpoint_every: int = 16,
                 shard_index: int = 0, num_shards: int = 1, pll_variant: str = "original", spec: DatasetSpec | None = None,
                 masked: bool = False, rescore_margin: float | str = 0.0, chat_template: str = "auto",
                 calibration_size: int = 8) -> None:
    """Every user-settable run parameter, validated without a model (so a typo costs seconds, not a model load)."""
    from .choices import CHAT_TEMPLATE_MODES
    from .sentences import PLL_VARIANTS

    if chat_template not in CHAT_TEMPLATE_MODES:
        raise ValueError(f"chat_template: must be one of {list(CHAT_TEMPLATE_MODES)}, got {chat_template!r}")
    if not isinstance(masked, bool):
        raise ValueError(f"masked: must be True or False, got {masked!r}")
    from .models import check_rescore_margin

    check_rescore_margin(rescore_margin)
    _int("calibration_size", calibration_size, 1)
    if spec is not None and spec.scorer == "choices" and masked:
        raise ValueError("masked: answer choices need a causal LM; masked LMs score sentences only (negation)")
    if spec is not None and spec.scorer == "sentences" and rescore_margin and rescore_margin != "auto":
        raise ValueError("rescore_margin: applies to answer choices only; this dataset is scored as sentences")

    if batch_size != "auto":
        _int("batch_size", batch_size, 1)
    if limit is not None:
        _int("limit", limit, 1)
    _int("limit_seed", limit_seed, 0)
    _int("checkpoint_every", checkpoint_every, 1)
    _int("num_shards", num_shards, 1)
    _int("shard_index", shard_index, 0)
    if shard_index >= num_shards:
        raise ValueError(f"shard_index: must be < num_shards ({num_shards}), got {shard_index}")
    if pll_variant not in PLL_VARIANTS:
        raise ValueError(f"pll_variant: must be one of {list(PLL_VARIANTS)}, got {pll_variant!r}")


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


# ---------------------------------------------------------------- the stratified, seeded limit

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
    _int("limit", limit, 1)
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


def is_done(run_dir, spec: DatasetSpec, params: dict) -> bool:
    """True when a complete score file exists for these parameters on the run's current dataset (the sweep's skip)."""
    slug = paths.model_slug(params["model"])
    side = paths.sidecar(paths.score_file(run_dir, slug, params.get("limit"), params.get("shard_index", 0),
                                          params.get("num_shards", 1)))
    dpath = paths.dataset_path(run_dir, spec.dataset_file)
    if not side.exists() or not dpath.exists():
        return False
    meta = artifacts.read_json(side)
    return (bool(meta.get("complete")) and matches_params(meta, {"limit": None, **params})
            and meta.get("dataset_sha256") == artifacts.sha256_file(dpath))


# ---------------------------------------------------------------- scorers: what a batch of rows turns into

def _options_digest(per: list[tuple[str, ...]]) -> str:
    import hashlib

    h = hashlib.sha256()
    for opts in per:
        h.update(("\x1f".join(opts) + "\x1e").encode())
    return h.hexdigest()


class _ChoiceScorer:
    kind = "choices"

    def __init__(self, lm, data: pd.DataFrame, spec: DatasetSpec, chat_template: str):
        from .choices import _per_prompt, build_requests

        self.lm, self.spec = lm, spec
        items = spec.choice_items(data)
        if not isinstance(items, ChoiceItems):
            raise TypeError("choice_items: must return a ChoiceItems")
        self.items = items
        self.per = _per_prompt(items.options, len(data))
        self.req = build_requests(lm.tokenizer, data[spec.text_column].tolist(), chat_template, self.per, items.systems)
        self.lengths = [len(p) for p in self.req.prompt_ids]
        self.meta = {"pll_variant": None, "used_chat_template": self.req.used_chat_template, "options_sha256": _options_digest(self.per),
                     "system_in_user_turn": self.req.system_in_user_turn,
                     "single_forward_pass": self.req.single_token}
        if len(set(self.per)) == 1:
            self.meta.update(answer_strings=list(self.req.option_strings[0]), answer_token_ids=self.req.option_ids[0])

    def plan(self, batch_size, device) -> list[list[int]]:
        from .batching import plan_batches

        return plan_batches(self.lengths, batch_size, device, getattr(self, "token_budget", None))

    def calibrate(self, batches, prior: dict, size: int, on_records) -> dict:
        """``rescore_margin: auto``: set the margin from a sample of this run's prompts scored both ways,
        or reuse the margin a resumed run's checkpoint recorded; the sample's float32 scores become its results."""
        if self.lm.meta.get("rescore_margin") != "auto" or self.lm.reference is None:
            return {}
        tail = self.lm.meta.get("float32_tail_tokens", 0)
        if prior.get("rescore_margin_used") is not None and prior.get("float32_tail_tokens", 0) == tail:
            self.margin = prior["rescore_margin_used"]
            return {k: v for k, v in prior.items()
                    if k.startswith("calibration_") or k in ("rescore_margin_used", "float32_tail_tokens")}
        from .calibration import calibrate

        cal, results = calibrate(self.lm.model, self.lm.reference, self.req, batches, size, tail=tail)
        self.margin = cal.margin
        m = cal.as_meta()
        print(f"rescore_margin: {cal.margin:.4f} (calibrated: {cal.safety_factor:g} × the largest fast-path error "
              f"{m['calibration_error_max']:.4f} on {cal.size} of this run's prompts scored both ways)")
        for res in results:
            on_records({i: {"logps": res.logprobs[k].tolist(), "rescored": True} for k, i in enumerate(res.indices)})
        return m

    def total_lengths(self) -> list[int]:
        """Prompt plus its longest option, in tokens (what must fit the window)."""
        return [n + max(len(a) for a in opts) for n, opts in zip(self.lengths, self.req.option_ids)]

    def run(self, batches, on_records, progress) -> None:
        from .choices import score_batches

        def on_result(res) -> None:
            on_records({i: {"logps": res.logprobs[k].tolist(), "rescored": bool(res.rescored[k])}
                        for k, i in enumerate(res.indices)})

        margin = getattr(self, "margin", self.lm.meta.get("rescore_margin", 0.0))
        if margin == "auto":
            raise ValueError("rescore_margin: 'auto' needs the calibration that score_run does first")
        score_batches(self.lm.model, self.req, batches, self.lm.reference, margin, on_result, progress,
                      tail=self.lm.meta.get("float32_tail_tokens", 0))

    def frame(self, data: pd.DataFrame, rows: list[int], records: dict) -> pd.DataFrame:
        from .choices import choice_frame

        sub_items = ChoiceItems([self.per[i] for i in rows],
                                None if self.items.gold is None else [self.items.gold[i] for i in rows])
        view = _RequestView(self.req, rows)
        return choice_frame(data[self.spec.id_column].iloc[rows].tolist(), sub_items, view,
                            [np.array(records[i]["logps"]) for i in rows], [records[i]["rescored"] for i in rows],
                            self.spec.id_column)


class _RequestView:
    """The rows ``rows`` of a Requests, re-indexed from 0 (what choice_frame reads)."""

    def __init__(self, req, rows: list[int]):
        self.req, self.rows = req, rows
        self.prompt_ids = [req.prompt_ids[i] for i in rows]

    def option_token_counts(self, r: int) -> list[int]:
        return self.req.option_token_counts(self.rows[r])

    def option_byte_counts(self, r: int) -> list[int]:
        return self.req.option_byte_counts(self.rows[r])


class _SentenceScorer:
    kind = "sentences"

    def __init__(self, lm, data: pd.DataFrame, spec: DatasetSpec, pll_variant: str):
        from .sentences import causal_sequences, pll_rows

        self.lm, self.spec = lm, spec
        self.masked = bool(lm.meta.get("masked"))
        texts = data[spec.text_column].tolist()
        if self.masked:
            self.copies = pll_rows(lm.tokenizer, texts, pll_variant)
            self.lengths = [len(c) for c in self.copies]
        else:
            self.seqs = causal_sequences(lm.tokenizer, texts)
            self.lengths = [len(s) for s in self.seqs]
        self.meta = {"pll_variant": pll_variant if self.masked else None, "used_chat_template": None,
                     "options_sha256": None,
                     "sentence_scorer": "pseudo_perplexity" if self.masked else "perplexity"}

    def plan(self, batch_size, device) -> list[list[int]]:
        from .batching import plan_batches

        size = self.size = 32 if batch_size == "auto" else batch_size
        if not self.masked:
            return plan_batches(self.lengths, size)
        batches, cur, used = [], [], 0  # masked: sentences whose copies fill at most `size` rows per pass
        for i in sorted(range(len(self.lengths)), key=lambda i: (-self.lengths[i], i)):
            if cur and used + self.lengths[i] > size:
                batches.append(cur)
                cur, used = [], 0
            cur.append(i)
            used += self.lengths[i]
        return batches + ([cur] if cur else [])

    def total_lengths(self) -> list[int]:
        """Tokens of each sentence (or of its masked copies' input) as the model sees it."""
        if self.masked:
            return [len(c[0][0]) if c else 0 for c in self.copies]
        return list(self.lengths)

    def run(self, batches, on_records, progress) -> None:
        from tqdm.auto import tqdm

        from .batching import with_oom_halving
        from .sentences import causal_token_logprobs, pll_token_logprobs

        size = getattr(self, "size", 32)
        for batch in tqdm(batches, desc="scoring", unit="batch", disable=progress is not True, mininterval=2.0):
            if self.masked:
                lps = pll_token_logprobs(self.lm.model, self.lm.tokenizer, [self.copies[i] for i in batch], size)
            else:
                lps = with_oom_halving(lambda b: causal_token_logprobs(self.lm.model, [self.seqs[i] for i in b]), batch)
            if callable(progress):
                progress(len(batch))
            on_records({i: {"token_logprobs": lp.tolist()} for i, lp in zip(batch, lps)})

    def frame(self, data: pd.DataFrame, rows: list[int], records: dict) -> pd.DataFrame:
        from .sentences import sentence_frame

        df = sentence_frame(None, [np.array(records[i]["token_logprobs"], dtype=np.float64) for i in rows])
        df.insert(0, self.spec.id_column, data[self.spec.id_column].iloc[rows].to_numpy())
        return df


def _make_scorer(lm, data, spec: DatasetSpec, chat_template: str, pll_variant: str):
    masked = bool(lm.meta.get("masked"))
    if spec.scorer == "choices":
        if masked:
            raise ValueError("model: a masked LM cannot score answer choices; give a causal (decoder) model")
        return _ChoiceScorer(lm, data, spec, chat_template)
    return _SentenceScorer(lm, data, spec, pll_variant)


# ---------------------------------------------------------------- the run

def _records_frame(id_values, records: dict) -> pd.DataFrame:
    idx = sorted(records)
    out = pd.DataFrame([records[i] for i in idx])
    out.insert(0, "_row", idx)
    out.insert(1, "_id", [id_values[i] for i in idx])
    return out


def _records_from(frame: pd.DataFrame, pos: dict) -> dict:
    out = {}
    for rec in frame.to_dict("records"):
        i = pos.get(rec.pop("_id"))
        rec.pop("_row", None)
        if i is not None:
            out[i] = {k: (list(v) if isinstance(v, np.ndarray) else v) for k, v in rec.items()}
    return out


def score_run(run_dir, lm, spec: DatasetSpec, *, chat_template: str = "auto", batch_size: int | str = "auto",
              limit: int | None = None, limit_seed: int = 0, checkpoint_every: int = 16, shard_index: int = 0,
              num_shards: int = 1, pll_variant: str = "original", overwrite: bool = False, progress=True,
              stop_after: int | None = None, calibration_size: int = 8) -> tuple[pd.DataFrame, dict]:
    """Score the run's dataset with ``lm`` into ``scores/{slug}….parquet`` + ``.json`` (see ``paths.score_file``).

    Checkpoints every ``checkpoint_every`` batches; a rerun resumes from the checkpoint, returns a finished run with
    the same identity as it is, and refuses to mix results of a different model, precision, dataset or scorer.
    ``progress``: True for a bar, False for none, or a callable(n_rows) per batch. ``stop_after`` (batches)
    exists to test interruption. ``calibration_size``: prompts scored in bf16 and float32 to set
    ``rescore_margin: auto`` (see ``calibration``).
    """
    check_params(batch_size=batch_size, limit=limit, limit_seed=limit_seed, checkpoint_every=checkpoint_every,
                 shard_index=shard_index, num_shards=num_shards, pll_variant=pll_variant,
                 calibration_size=calibration_size)
    full, dpath = read_dataset(run_dir, spec)
    data = select_limit(full, spec, limit, limit_seed).reset_index(drop=True)
    scorer = _make_scorer(lm, data, spec, chat_template, pll_variant)
    meta = dict(lm.meta, dataset_file=spec.dataset_file, dataset_sha256=artifacts.sha256_file(dpath),
                id_column=spec.id_column, limit_by=list(spec.limit_by), limit_unit=spec.limit_unit,
                limit_strata=spec.limit_strata, scorer=spec.scorer, masked=bool(lm.meta.get("masked")),
                limit=limit, limit_seed=limit_seed, batch_size=batch_size, num_shards=num_shards,
                shard_index=shard_index, **scorer.meta)
    if spec.dataset_file == "prompts.parquet":
        meta["prompts_sha256"] = meta["dataset_sha256"]  # the name study-1 readers know
    expected = identity(meta)
    slug = paths.model_slug(lm.meta["model"])
    final = paths.score_file(run_dir, slug, limit, shard_index, num_shards)
    partial = paths.partial_file(run_dir, slug, limit, shard_index, num_shards)
    old = check_existing(paths.sidecar(final), expected, "score file", overwrite)
    if old is not None and final.exists():
        return pd.read_parquet(final), old
    check_context(lm, scorer, data[spec.id_column].tolist())
    prior = _prior_checkpoint(paths.sidecar(partial), expected)  # a resumed run keeps its budget and margin
    scorer.token_budget = prior.get("token_budget") or lm.meta.get("token_budget")
    meta["token_budget"] = scorer.token_budget
    batches = scorer.plan(batch_size, str(_device(lm)))[shard_index::num_shards]
    ids = data[spec.id_column].tolist()
    done: dict[int, dict] = {}
    elapsed_before = 0.0
    if check_existing(paths.sidecar(partial), expected, "checkpoint", overwrite) is not None and partial.exists():
        done = _records_from(pd.read_parquet(partial), {v: i for i, v in enumerate(ids)})
        elapsed_before = artifacts.read_json(paths.sidecar(partial)).get("elapsed_seconds", 0.0)
    todo = [b for b in batches if not all(i in done for i in b)]
    if stop_after is not None:
        todo = todo[:stop_after]
    t0 = time.perf_counter()
    state = {"since": 0}
    n_planned = sum(len(b) for b in batches)

    def checkpoint() -> None:
        artifacts.write_parquet(_records_frame(ids, done), partial)
        artifacts.write_json(dict(meta, complete=False, n_done=len(done), n_planned=n_planned,
                                  elapsed_seconds=elapsed_before + time.perf_counter() - t0), paths.sidecar(partial))
        state["since"] = 0

    prog_path = paths.progress_file(partial)
    n_before = len(done)

    def on_records(recs: dict) -> None:
        done.update(recs)
        now = time.perf_counter()
        if now - state.get("shown", 0.0) >= 2.0:
            rate = (len(done) - n_before) / (now - t0) if now > t0 else 0.0
            artifacts.write_json({"n_done": len(done), "n_planned": n_planned, "rows_per_second": round(rate, 4),
                                  "updated": artifacts.now_utc()}, prog_path)
            state["shown"] = now
        state["since"] += 1
        if state["since"] >= checkpoint_every:
            checkpoint()

    if hasattr(scorer, "calibrate"):  # calibrated re-scoring runs once, before the main loop
        calibration = scorer.calibrate(batches, prior, calibration_size, on_records)
        if calibration:
            meta.update(calibration)
            checkpoint()
            todo = [b for b in todo if not all(i in done for i in b)]
    try:
        scorer.run(todo, on_records, progress)
    except KeyboardInterrupt:
        checkpoint()
        raise
    planned = sorted(i for b in batches for i in b)
    if not set(planned).issubset(done):
        checkpoint()
        rows = sorted(done)
        return scorer.frame(data, rows, done), dict(meta, complete=False, n_done=len(done), n_planned=n_planned)
    elapsed = elapsed_before + time.perf_counter() - t0
    df = scorer.frame(data, planned, done)
    meta.update(_rates(df, elapsed), complete=True, created=artifacts.now_utc(), versions=artifacts.versions())
    artifacts.write_parquet(df, final)
    artifacts.write_json(meta, paths.sidecar(final))
    for f in (partial, paths.sidecar(partial), prog_path):
        f.unlink(missing_ok=True)
    return pd.read_parquet(final), meta  # as every later reader sees it


def _prior_checkpoint(sidecar: Path, expected: dict) -> dict:
    """The metadata of a checkpoint of this same run (empty when there is none or it was made differently)."""
    if not sidecar.exists():
        return {}
    old = artifacts.read_json(sidecar)
    return old if identity(old) == expected else {}


def context_window(lm) -> int | None:
    """The longest input the model was built for (``max_position_embeddings``), if it says."""
    cfg = getattr(lm.model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_context(lm, scorer, ids: list) -> None:
    """Inputs longer than the model's window are an error naming the count, the longest input and the window."""
    window = context_window(lm)
    if window is None:
        return
    totals = scorer.total_lengths()
    over = [i for i, n in enumerate(totals) if n > window]
    if over:
        worst = max(over, key=lambda i: totals[i])
        raise ValueError(f"context: {len(over)} of {len(totals)} inputs are longer than the model's window of {window} "
                         f"tokens (longest: {ids[worst]!r}, {totals[worst]} tokens); use shorter prompts (e.g. fewer "
                         "n_examples) or a model with a longer context")


def _device(lm):
    from .batching import model_device

    return model_device(lm.model)


def _rates(df: pd.DataFrame, elapsed: float) -> dict:
    out = {"n_rows": len(df), "n_prompts": len(df), "elapsed_seconds": round(elapsed, 3),
           "rows_per_second": round(len(df) / elapsed, 4) if elapsed > 0 else None}
    out["prompts_per_second"] = out["rows_per_second"]
    if "n_tokens" in df and elapsed > 0:
        out["tokens_per_second"] = round(int(df["n_tokens"].sum()) / elapsed, 1)
    if "rescored" in df:
        out["rescored_ids"] = df.loc[df["rescored"], df.columns[0]].tolist()
        out["rescored_prompt_ids"] = out["rescored_ids"]
    if "correct" in df:
        out["accuracy"] = round(float(df["correct"].mean()), 4)
    return out


def merge_shards(run_dir, slug: str, limit: int | None = None, overwrite: bool = False) -> tuple[pd.DataFrame, dict]:
    """Join all shards of one model into the file an unsharded run writes (rows in dataset order)."""
    sidecars = paths.shard_sidecars(run_dir, slug, limit)
    if not sidecars:
        raise ValueError(f"slug: no shards named {paths.score_stem(slug, limit)}.shard-*-of-*.json under "
                         f"{paths.scores_dir(run_dir)}")
    metas = [artifacts.read_json(p) for p in sidecars]
    n = metas[0]["num_shards"]
    got = sorted(m["shard_index"] for m in metas)
    if got != list(range(n)) or any(not m.get("complete") for m in metas):
        raise ValueError(f"slug: {slug} needs complete shards 0..{n - 1}, found {got}")
    keys = [k for k in IDENTITY_KEYS if k not in SHARD_KEYS]
    for m in metas[1:]:
        if any(m.get(k) != metas[0].get(k) for k in keys):
            raise ValueError(f"slug: shards of {slug} disagree ({describe_mismatch(metas[0], m, keys)})")
    m0 = metas[0]
    spec = DatasetSpec(m0["dataset_file"], m0["id_column"], m0["scorer"], "", choice_items=lambda d: None,
                       limit_by=tuple(m0.get("limit_by") or ()), limit_unit=m0.get("limit_unit"),
                       limit_strata=m0.get("limit_strata"))
    full, _ = read_dataset(run_dir, spec)
    order = {v: i for i, v in enumerate(select_limit(full, spec, m0["limit"], m0.get("limit_seed", 0))[spec.id_column])}
    df = pd.concat([pd.read_parquet(p.with_suffix(".parquet")) for p in sidecars], ignore_index=True)
    df = df.sort_values(spec.id_column, key=lambda s: s.map(order)).reset_index(drop=True)
    elapsed = sum(m.get("elapsed_seconds") or 0.0 for m in metas)
    meta = dict(m0, num_shards=1, shard_index=0, merged_from=[p.name for p in sidecars], created=artifacts.now_utc())
    meta.update(_rates(df, elapsed))
    final = paths.score_file(run_dir, slug, limit)
    check_existing(paths.sidecar(final), identity(meta), "score file", overwrite)
    artifacts.write_parquet(df, final)
    artifacts.write_json(meta, paths.sidecar(final))
    return df, meta


# ---------------------------------------------------------------- reading a run's scores back

def score_inventory(run_dir, spec: DatasetSpec) -> pd.DataFrame:
    """Every score file and checkpoint in a run with its status against the current dataset.

    ``status``: ``ok`` (complete, full run, on the current dataset), ``limited``, ``shard``, ``stale`` (made from
    another version of the dataset), ``other_dataset``, or ``incomplete`` (a checkpoint, with its progress).
    """
    dpath = paths.dataset_path(run_dir, spec.dataset_file)
    current = artifacts.sha256_file(dpath) if dpath.exists() else None
    rows = []
    listed = ([(p, "final") for p in paths.score_sidecars(run_dir)] + [(p, "partial") for p in paths.partial_sidecars(run_dir)]
              + [(p, "set_aside") for p in paths.stale_sidecars(run_dir)])
    for side, where in listed:
        partial = where == "partial"
        try:
            meta = artifacts.read_json(side)
        except ValueError:
            rows.append({"file": side.name, "model": side.stem, "status": "unreadable"})
            continue
        sha = meta.get("dataset_sha256") or meta.get("prompts_sha256")
        if where == "set_aside":
            status = "stale"
        elif meta.get("dataset_file", spec.dataset_file) != spec.dataset_file:
            status = "other_dataset"
        elif sha != current:
            status = "stale"
        elif partial or not meta.get("complete"):
            status = "incomplete"
        elif meta.get("num_shards", 1) != 1:
            status = "shard"
        elif meta.get("limit") is not None:
            status = "limited"
        else:
            status = "ok"
        rows.append({"file": str(side.relative_to(paths.scores_dir(run_dir))), "model": side.stem, "status": status, "limit": meta.get("limit"),
                     "n_done": meta.get("n_done"), "n_planned": meta.get("n_planned"),
                     "model_id": meta.get("model")})
    return pd.DataFrame(rows, columns=["file", "model", "status", "limit", "n_done", "n_planned", "model_id"])


def load_scores(run_dir, spec: DatasetSpec, include_limited: bool = False) -> pd.DataFrame:
    """Every usable model's scores joined with the dataset (one row per model × row).

    Only complete, unsharded score files made from the current dataset are used (limited ones too when
    ``include_limited``). The rest are listed in ``df.attrs["excluded"]`` with the reason, never mixed in.
    """
    data, _ = read_dataset(run_dir, spec)
    inv = score_inventory(run_dir, spec)
    usable = {"ok", "limited"} if include_limited else {"ok"}
    frames = []
    for r in inv[inv["status"].isin(usable)].itertuples(index=False):
        s = pd.read_parquet(paths.scores_dir(run_dir) / Path(r.file).with_suffix(".parquet"))
        s = s.drop(columns=[c for c in s.columns if c in data.columns and c != spec.id_column])
        s.insert(0, "model", r.model)
        frames.append(s.merge(data, on=spec.id_column, how="left", validate="one_to_one"))
    if not frames:
        raise ValueError(f"run_dir: no complete scores of the current dataset under {paths.scores_dir(run_dir)}"
                         + (f" (excluded: {_describe_excluded(inv)})" if len(inv) else "")
                         + "; run the score notebook first")
    out = pd.concat(frames, ignore_index=True)
    out.attrs["excluded"] = inv[~inv["status"].isin(usable)].to_dict("records")
    return out


def _describe_excluded(inv: pd.DataFrame) -> str:
    return "; ".join(f"{r.file}: {r.status}" for r in inv.itertuples(index=False))


def excluded_notes(df: pd.DataFrame) -> list[str]:
    """One line per score file the analysis left out, saying why."""
    notes = []
    for r in df.attrs.get("excluded", []):
        what = {"stale": "made from an earlier version of the dataset", "incomplete": "unfinished",
                "limited": f"a limited run (limit={r.get('limit')})", "shard": "a shard (merge it first)",
                "other_dataset": "scores of another study's dataset", "unreadable": "unreadable sidecar"}[r["status"]]
        prog = (f" ({int(r['n_done'])}/{int(r['n_planned'])} rows)"
                if r["status"] == "incomplete" and pd.notna(r.get("n_planned")) and pd.notna(r.get("n_done")) else "")
        notes.append(f"not analysed: {r['file']} is {what}{prog}")
    return notes
