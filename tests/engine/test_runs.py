"""Scoring runs: outputs, skip, refusal to mix, resume after interruption (kill -9 too), shards, atomic writes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest
from interruption import score_until

from nbutils import artifacts, paths, runstore, score_settings, studies
from nbutils.engine import run as scoring
from nbutils.engine.models import load_model
from nbutils.score_settings import ScoreSettings

SPEC = studies.get("monotonicity").spec
STUDY1_COLUMNS = ["prompt_id", "logp_yes", "logp_no", "margin", "pred_yes", "label", "correct", "n_tokens", "rescored"]


def score_run(run, lm, **kw):
    return scoring.score_run(run, lm, SPEC, **kw)


def load_scores(run, **kw):
    return runstore.load_scores(run, SPEC, **kw)


def merge_shards(run, slug, **kw):
    return runstore.merge_shards(run, slug, **kw)


def fresh_run(tmp_path, tiny_run):
    run = tmp_path / "run"
    run.mkdir(parents=True)
    for name in ("prompts.parquet", "prompts.json"):
        (run / name).write_bytes((tiny_run / name).read_bytes())
    return run


def test_outputs_and_sidecar(tmp_path, tiny_run, lm):
    run = fresh_run(tmp_path, tiny_run)
    df, meta = score_run(run, lm, progress=False)
    files = sorted(p.name for p in (run / "scores").iterdir() if p.is_file())
    assert len(files) == 2 and files[0].endswith(".json") and files[1].endswith(".parquet")
    assert set(STUDY1_COLUMNS) <= set(df.columns) and df.columns[0] == "prompt_id" and len(df) == 24
    assert (df["pred_yes"] == (df["logp_yes"] > df["logp_no"])).all()
    assert (df["correct"] == (df["pred_yes"] == df["label"])).all()
    side = artifacts.read_json(run / "scores" / files[0])
    for key in ("model", "revision", "dtype", "quantization", "used_chat_template", "answer_strings", "device",
                "versions", "elapsed_seconds", "rows_per_second", "dataset_sha256", "float32_tail_tokens"):
        assert key in side, key
    assert side["dataset_sha256"] == artifacts.sha256_file(run / "prompts.parquet")
    assert side["used_chat_template"] is True and side["answer_strings"] == ["Yes", "No"]
    joined = load_scores(run)
    assert len(joined) == 24 and joined["model"].nunique() == 1


def test_rerun_is_skipped_and_other_settings_are_refused(tmp_path, tiny_run, lm, tiny_model_dir):
    run = fresh_run(tmp_path, tiny_run)
    df, meta = score_run(run, lm, progress=False)
    final = next((run / "scores").glob("*.parquet"))
    mtime = final.stat().st_mtime_ns
    again, _ = score_run(run, lm, progress=False)
    assert final.stat().st_mtime_ns == mtime and again.equals(df)
    with pytest.raises(artifacts.OverwriteError, match="chat_template|used_chat_template"):
        score_run(run, lm, chat_template="never", progress=False)
    assert final.stat().st_mtime_ns == mtime, "nothing already written is touched"
    replaced, meta2 = score_run(run, lm, chat_template="never", progress=False, overwrite=True)
    assert meta2["used_chat_template"] is False and final.stat().st_mtime_ns != mtime


def test_a_finished_file_is_reused_whatever_the_batch_size(tmp_path, tiny_run, lm):
    run = fresh_run(tmp_path, tiny_run)
    df, meta = score_run(run, lm, batch_size=1, progress=False)
    final = next((run / "scores").glob("*.parquet"))
    mtime = final.stat().st_mtime_ns
    again, meta2 = score_run(run, lm, batch_size=2, progress=False)  # no OverwriteError: batch size is no identity
    assert final.stat().st_mtime_ns == mtime and again.equals(df) and meta2["batch_size"] == 1 == meta["batch_rows"]
    assert "batch_size" not in score_settings.IDENTITY_KEYS and "batch_size" in meta and meta["settings"]["batch_size"] == 1
    assert runstore.is_done(run, SPEC, {"model": lm.meta["model"], "batch_size": 2})
    # the sidecar records the identity the run loop computed, one the sweep's rule before loading admits
    settings = lm.settings.with_run(batch_size=1)
    assert score_settings.recorded(meta) == score_settings.identity(settings, SPEC, meta["dataset_sha256"], loaded=meta)
    before_loading = score_settings.identity(ScoreSettings(model=lm.meta["model"]), SPEC, meta["dataset_sha256"])
    assert score_settings.matches(before_loading, meta)


def test_a_resumed_run_keeps_its_checkpoints_batch_plan(tmp_path, tiny_run, lm):
    a = fresh_run(tmp_path / "a", tiny_run)
    b = fresh_run(tmp_path / "b", tiny_run)
    full, _ = score_run(a, lm, batch_size=3, checkpoint_every=1, progress=False)
    part, meta = score_until(2, b, lm, SPEC, batch_size=3, checkpoint_every=1, progress=False)
    assert meta["complete"] is False and len(part) == 6
    resumed, meta = score_run(b, lm, batch_size=5, checkpoint_every=1, progress=False)  # another batch size asked
    assert meta["complete"] and meta["batch_size"] == 3 and meta["batch_rows"] == 3, "the checkpoint's plan"
    fa, fb = next((a / "scores").glob("*.parquet")), next((b / "scores").glob("*.parquet"))
    assert artifacts.sha256_file(fa) == artifacts.sha256_file(fb), "what an uninterrupted run writes"


def test_a_precision_set_explicitly_is_scored_beside_the_default(tmp_path, tiny_run, lm, tiny_model_dir):
    run = fresh_run(tmp_path, tiny_run)
    score_run(run, lm, progress=False)
    half = load_model(str(tiny_model_dir), dtype="bfloat16", device="cpu", rescore_margin=0)
    _, meta = score_run(run, half, progress=False)
    slug = paths.model_slug(str(tiny_model_dir))
    assert sorted(p.name for p in (run / "scores").glob("*.parquet")) == [f"{slug}.bfloat16.parquet", f"{slug}.parquet"]
    assert meta["dtype"] == "bfloat16" and artifacts.read_json(run / "scores" / f"{slug}.json")["dtype"] == "float32"
    assert runstore.is_done(run, SPEC, {"model": str(tiny_model_dir), "dtype": "bfloat16", "rescore_margin": 0})
    assert not runstore.is_done(run, SPEC, {"model": str(tiny_model_dir), "quantization": "8bit"})


def test_a_changed_chat_template_is_not_already_scored(tmp_path, tiny_run, lm):
    """The sweep's and the cluster's skip (``is_done``) follows how the prompts were rendered: a model file changed
    from ``chat_template: auto`` to ``never`` scores again, as the score notebook would refuse to mix the two."""
    model = lm.meta["model"]
    run = fresh_run(tmp_path, tiny_run)
    score_run(run, lm, progress=False)  # auto, and the tiny tokenizer has a chat template: the template is used
    done = {mode: runstore.is_done(run, SPEC, {"model": model, "chat_template": mode})
            for mode in ("auto", "always", "never")}
    assert done == {"auto": True, "always": True, "never": False}
    assert runstore.is_done(run, SPEC, {"model": model}), "auto is the default"
    other = fresh_run(tmp_path / "never", tiny_run)
    score_run(other, lm, chat_template="never", progress=False)
    done = {mode: runstore.is_done(other, SPEC, {"model": model, "chat_template": mode})
            for mode in ("auto", "always", "never")}
    assert done == {"auto": False, "always": False, "never": True}


def test_changed_prompts_file_is_refused(tmp_path, tiny_run, lm):
    run = fresh_run(tmp_path, tiny_run)
    score_run(run, lm, progress=False)
    p = pd.read_parquet(run / "prompts.parquet")
    artifacts.write_parquet(p.iloc[::-1], run / "prompts.parquet")
    with pytest.raises(ValueError, match="^run_dir: .*prompts.parquet does not match the sha256 in prompts.json"):
        score_run(run, lm, progress=False)
    with pytest.raises(ValueError, match="does not match the sha256"):
        load_scores(run)


def test_resume_after_interruption_matches_uninterrupted(tmp_path, tiny_run, lm):
    a = fresh_run(tmp_path / "a", tiny_run)
    b = fresh_run(tmp_path / "b", tiny_run)
    full, _ = score_run(a, lm, batch_size=2, checkpoint_every=2, progress=False)
    part, meta = score_until(5, b, lm, SPEC, batch_size=2, checkpoint_every=2, progress=False)
    assert meta["complete"] is False and len(part) == 10
    assert not list((b / "scores").glob("*.parquet")), "no final file from an unfinished run"
    resumed, meta = score_run(b, lm, batch_size=2, checkpoint_every=2, progress=False)
    assert meta["complete"] and resumed.equals(full)
    fa, fb = next((a / "scores").glob("*.parquet")), next((b / "scores").glob("*.parquet"))
    assert artifacts.sha256_file(fa) == artifacts.sha256_file(fb), "final file byte-identical"
    assert not list((b / "scores" / ".partial").iterdir())


def test_kill_minus_nine_then_resume(tmp_path, tiny_run, tiny_model_dir):
    run = fresh_run(tmp_path, tiny_run)
    script = textwrap.dedent(f"""
        import sys, time
        from nbutils import studies
        from nbutils.engine import choices, run as scoring
        from nbutils.engine.models import load_model
        real = choices.score_batch
        def slow(*a, **k):
            time.sleep(0.25)
            return real(*a, **k)
        choices.score_batch = slow
        lm = load_model({str(tiny_model_dir)!r}, device="cpu", dtype="float32", threads=1)
        print("loaded", flush=True)
        scoring.score_run({str(run)!r}, lm, studies.get("monotonicity").spec, batch_size=1, checkpoint_every=3, progress=False)
    """)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    assert proc.stdout.readline().strip() == b"loaded"
    partial = run / "scores" / ".partial"
    deadline = time.time() + 60
    while time.time() < deadline and not any(partial.glob("*.parquet")):
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ck = pd.read_parquet(next(partial.glob("*.parquet")))
    assert 3 <= len(ck) < 24, "killed mid-run, after at least one checkpoint"
    lm = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    resumed, meta = score_run(run, lm, batch_size=1, checkpoint_every=3, progress=False)
    ref_run = fresh_run(tmp_path / "ref", tiny_run)
    ref, _ = score_run(ref_run, lm, batch_size=1, checkpoint_every=3, progress=False)
    assert meta["complete"] and resumed.equals(ref)


def test_shards_merge_into_the_unsharded_file(tmp_path, tiny_run, lm):
    whole = fresh_run(tmp_path / "w", tiny_run)
    sharded = fresh_run(tmp_path / "s", tiny_run)
    full, _ = score_run(whole, lm, batch_size=2, progress=False)
    parts = [score_run(sharded, lm, batch_size=2, shard_index=i, num_shards=3, progress=False)[0] for i in range(3)]
    ids = [set(p["prompt_id"]) for p in parts]
    assert sum(map(len, ids)) == 24 and len(set.union(*ids)) == 24, "disjoint and complete"
    slug = next((whole / "scores").glob("*.parquet")).stem
    merged, meta = merge_shards(sharded, slug)
    assert merged.equals(full) and meta["num_shards"] == 1
    with pytest.raises(ValueError, match="^shard_index:"):
        score_run(sharded, lm, shard_index=3, num_shards=3)
    with pytest.raises(ValueError, match="^slug: no shards"):
        merge_shards(sharded, "nobody")


def test_atomic_write_never_leaves_a_truncated_file(tmp_path):
    target = tmp_path / "x.parquet"
    artifacts.write_parquet(pd.DataFrame({"a": [1, 2]}), target)
    before = artifacts.sha256_file(target)

    def crash(p):
        p.write_bytes(b"PAR1 half a file")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        artifacts.atomic_write(target, crash)
    assert artifacts.sha256_file(target) == before
    assert [p.name for p in tmp_path.iterdir()] == ["x.parquet"], "no temp file left behind"


def test_missing_prompts_file_is_a_clear_error(tmp_path, lm):
    with pytest.raises(ValueError, match="^run_dir: no dataset at .*prompts.parquet; run notebooks/monotonicity/01_generate"):
        score_run(tmp_path, lm)


def test_limit_is_stratified_seeded_and_kept_beside_the_full_run(tmp_path, tiny_run, lm):
    run = fresh_run(tmp_path, tiny_run)
    prompts = pd.read_parquet(run / "prompts.parquet")
    sorted_file = prompts.sort_values("label", ascending=False)  # every Yes before every No
    picked = runstore.select_limit(sorted_file, SPEC, 2, seed=0)
    per = picked.groupby(["concept", "condition"])
    assert (per.size() == 2).all() and (per["label"].sum() == 1).all(), "balanced on the gold answer, not the first rows"
    pairs = picked.groupby("pair_id")["condition"].nunique()
    assert (pairs == 2).all(), "a pair's two conditions are kept together"
    assert runstore.select_limit(sorted_file, SPEC, 2, seed=0).equals(picked)
    full, _ = score_run(run, lm, progress=False)
    small, meta = score_run(run, lm, limit=2, progress=False)
    assert len(small) == 8 and meta["limit"] == 2
    names = sorted(p.name for p in (run / "scores").glob("*.parquet"))
    assert names == [f"{paths.model_slug(lm.meta['model'])}.limit-2.parquet", f"{paths.model_slug(lm.meta['model'])}.parquet"]
    assert len(load_scores(run)) == 24, "the limited run is not analysed as the full one"
    assert {r["status"] for r in load_scores(run).attrs["excluded"]} == {"limited"}
    assert len(load_scores(run, include_limited=True)) == 32


def test_stale_and_unfinished_scores_are_listed_not_mixed(tmp_path, tiny_run, lm):
    run = fresh_run(tmp_path, tiny_run)
    score_run(run, lm, progress=False)
    score_until(2, run, lm, SPEC, batch_size=2, checkpoint_every=1, limit=3, progress=False)
    inv = runstore.score_inventory(run, SPEC)
    assert sorted(inv["status"]) == ["incomplete", "ok"]
    assert inv.loc[inv.status == "incomplete", "n_done"].iloc[0] == 4
    notes = runstore.excluded_notes(load_scores(run))
    assert len(notes) == 1 and "unfinished (4/12 rows)" in notes[0]


def test_sentence_scorer_runs_through_the_same_machinery(tmp_path, lm):
    """Negation stimuli: limit, checkpoints and resume, shards and merge, exactly as for answer choices."""
    from nbutils.engine.sentences import sentence_logprobs
    from nbutils.studies.negation import dataset

    run = tmp_path / "neg"
    df, params = dataset.build_stimuli(structures=["because"], max_roots=3)
    dataset.write_stimuli(df, run, params)
    spec = studies.get("negation").spec
    whole, meta = scoring.score_run(run, lm, spec, batch_size=4, progress=False)
    ref = sentence_logprobs(lm.model, lm.tokenizer, df["sentence"].tolist(), batch_size=4)
    assert list(whole["stimulus_id"]) == list(df["stimulus_id"]) and meta["scorer"] == "sentences"
    assert (whole["sum_logprob"] - ref["sum_logprob"]).abs().max() < 1e-4
    b = tmp_path / "neg2"
    dataset.write_stimuli(df, b, params)
    part, m = score_until(2, b, lm, spec, batch_size=4, checkpoint_every=1, progress=False)
    assert not m["complete"] and len(part) == 8
    resumed, m = scoring.score_run(b, lm, spec, batch_size=4, checkpoint_every=1, progress=False)
    assert m["complete"] and resumed.equals(whole)
    c = tmp_path / "neg3"
    dataset.write_stimuli(df, c, params)
    for i in range(2):
        scoring.score_run(c, lm, spec, batch_size=4, shard_index=i, num_shards=2, progress=False)
    merged, _ = runstore.merge_shards(c, paths.model_slug(lm.meta["model"]))
    assert merged.equals(whole)
    lim, m = scoring.score_run(run, lm, spec, batch_size=4, limit=2, progress=False)
    assert lim.merge(df, on="stimulus_id")["item_id"].nunique() == 2 and len(lim) == 8, "limit counts whole items"
    with pytest.raises(ValueError, match="^rescore_margin: applies to answer choices only"):
        ScoreSettings.from_params(spec, rescore_margin=0.5)
    with pytest.raises(ValueError, match="^masked: answer choices need a causal LM"):
        ScoreSettings.from_params(SPEC, masked=True)


@pytest.mark.parametrize("bad, match", [
    (dict(batch_size=0), "^batch_size:"), (dict(batch_size="big"), "^batch_size:"), (dict(limit=0), "^limit:"),
    (dict(limit=True), "^limit:"), (dict(checkpoint_every=0), "^checkpoint_every:"), (dict(num_shards=0), "^num_shards:"),
    (dict(shard_index=2, num_shards=2), "^shard_index:"), (dict(pll_variant="l2r"), "^pll_variant:"),
    (dict(chat_template="maybe"), "^chat_template:"), (dict(rescore_margin=-1), "^rescore_margin:"),
])
def test_run_parameters_are_checked_without_a_model(bad, match):
    with pytest.raises(ValueError, match=match):
        ScoreSettings(**bad)


def test_rates_guard_a_zero_elapsed_time():
    rates = runstore.rates(pd.DataFrame({"prompt_id": ["a"], "n_tokens": [5], "correct": [True], "rescored": [False]}), 0.0)
    assert rates["rows_per_second"] is None and "tokens_per_second" not in rates and rates["accuracy"] == 1.0
