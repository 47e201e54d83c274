"""The scoring settings: built and validated once, frozen, resolved once per host; the score file's name derived in one
place; written whole into the sidecar; scores that do not depend on the batch size."""
from __future__ import annotations

import ast
import dataclasses
import json

import numpy as np
import pytest

from nbutils import artifacts, paths, runstore, studies
from nbutils.sweep import _cluster as cluster
from nbutils.engine import models, run as scoring
from nbutils.engine.loading.host import Host
from nbutils.engine.settings import EngineSettings

MONO = studies.get("monotonicity").spec
NEG = studies.get("negation").spec
CPU = Host(cuda=False, cuda_bf16=False, cpu_native_bf16=False, cores=2, free_gpu_bytes=lambda: 1 / 0)


@pytest.mark.parametrize("bad, parameter", [
    (dict(dtype="float8"), "dtype"), (dict(quantization="2bit"), "quantization"), (dict(device="tpu"), "device"),
    (dict(threads=0), "threads"), (dict(threads=True), "threads"), (dict(model=""), "model"),
    (dict(rescore_margin=-1), "rescore_margin"), (dict(rescore_margin="wide"), "rescore_margin"),
    (dict(calibration_size=0), "calibration_size"), (dict(batch_size=0), "batch_size"),
    (dict(batch_size="big"), "batch_size"), (dict(batch_size=True), "batch_size"), (dict(limit=0), "limit"),
    (dict(limit_seed=-1), "limit_seed"), (dict(checkpoint_every=0), "checkpoint_every"),
    (dict(shard_index=1, num_shards=1), "shard_index"), (dict(pll_variant="l2r"), "pll_variant"),
    (dict(chat_template="maybe"), "chat_template"), (dict(masked="yes"), "masked"), (dict(scorer="tokens"), "scorer"),
    (dict(masked=True, scorer="sentences"), "masked"),  # the embedded default is a causal LM
    (dict(masked=True, model="some/bert"), "masked"),  # answer choices (the default scorer) need a causal LM
    (dict(scorer="sentences", rescore_margin=0.5), "rescore_margin"),
])
def test_every_bad_value_is_refused_once_naming_the_parameter(bad, parameter):
    with pytest.raises(ValueError, match=f"^{parameter}:"):
        EngineSettings(**bad)


def test_bad_settings_are_refused_before_a_model_loads(tmp_path):
    missing = str(tmp_path / "no-such-model")  # loading it would fail with "model: cannot load"
    with pytest.raises(ValueError, match="^dtype:"):
        models.load_model(missing, dtype="float8")
    with pytest.raises(ValueError, match="^chat_template:"):
        EngineSettings.from_params(MONO, model=missing, chat_template="maybe")
    with pytest.raises(ValueError, match="^temperature: not a scoring setting"):
        EngineSettings.from_params(MONO, temperature=0.7)
    assert EngineSettings.from_params(NEG).scorer == "sentences", "the scorer kind comes from the dataset"


def test_settings_are_frozen_and_a_change_is_a_new_validated_object():
    s = EngineSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.dtype = "float16"
    with pytest.raises(ValueError, match="^batch_size:"):
        s.with_run(batch_size=0)
    r = s.resolve(CPU)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.resolved.dtype = "float16"
    assert s.resolved is None and r.resolved.dtype == "float32" and r.with_run(limit=3).resolved == r.resolved


@pytest.mark.parametrize("kw, rows, budget", [
    (dict(), 1, None),  # answer choices on a CPU: one prompt per pass
    (dict(batch_size=8), 8, None),
    (dict(scorer="sentences"), 32, None),  # sentences: 32 per pass
    (dict(scorer="sentences", batch_size=4), 4, None),
])
def test_batch_size_has_one_meaning_decided_by_the_settings(kw, rows, budget):
    assert EngineSettings(**kw).resolve(CPU).batch_plan() == (rows, budget)


def test_auto_on_a_gpu_packs_under_the_probed_token_budget():
    gpu = dataclasses.replace(CPU, cuda=True, cuda_bf16=True, free_gpu_bytes=lambda: 80 * 2**30)
    s = EngineSettings().resolve(gpu)
    assert s.resolved.dtype == "bfloat16" and s.resolved.rescore_margin == 0.0 and s.batch_plan() == (64, 16384)
    resolved = dataclasses.replace(s, resolved=dataclasses.replace(s.resolved, token_budget=4096))
    assert resolved.batch_plan() == (64, 4096) and resolved.batch_plan("sentences") == (32, None)


def test_the_score_file_name_is_derived_in_one_place(tmp_path, tiny_run):
    cases = [("smollm2-135m-instruct", "auto", "auto"), ("org/m", "8bit", "auto"), ("org/m", "none", "bfloat16"),
             ("org/m", "4bit", "float16"), ("org/m", "none", "float32")]
    names = {paths.score_slug(*c) for c in cases}
    assert names == {"smollm2-135m-instruct", "org--m.8bit", "org--m.bfloat16", "org--m.4bit", "org--m"}
    for model, q, d in cases:
        slug = paths.score_slug(model, q, d)
        assert EngineSettings(model=model, quantization=q, dtype=d).slug == slug  # the score notebook and run loop
        planned, _, _ = cluster.plan(tiny_run, MONO, [{"model": model, "quantization": q, "dtype": d}], 1)
        assert list(planned) == [slug]  # the cluster
    # the sweep, the cluster and the run loop call that one function and spell no slug of their own
    root = paths.repo_root() / "nbutils"
    for rel in ("sweep/_sweep.py", "sweep/_cluster.py", "engine/run.py", "runstore/_score_files.py"):
        tree = ast.parse((root / rel).read_text())
        calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert not {c for c in calls if c.endswith(("score_slug", "model_slug", "file_tag", "precision_tag"))} - {
            "paths.score_slug"}, rel
    assert not hasattr(runstore, "score_slug")


def test_the_sidecar_holds_the_whole_settings(tmp_path, tiny_run, tiny_model_dir):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("prompts.parquet", "prompts.json"):
        (run / name).write_bytes((tiny_run / name).read_bytes())
    lm = models.load_model(EngineSettings(model=str(tiny_model_dir), device="cpu", dtype="float32", threads=None))
    _, meta = scoring.score_run(run, lm, MONO, limit=2, batch_size=2, progress=False)
    side = artifacts.read_json(paths.sidecar(lm.settings.with_run(limit=2).score_file(run)))
    whole = lm.settings.with_run(limit=2, batch_size=2).as_dict()
    assert side["settings"] == json.loads(json.dumps(whole)) == meta["settings"]
    assert side["settings"]["resolved"]["dtype"] == side["dtype"] == "float32"
    assert side["settings"]["resolved"]["device"] == side["device"] == "cpu"
    assert side["settings"]["limit"] == side["limit"] == 2 and side["batch_size"] == 2 == side["batch_rows"]
    for key in ("dtype_requested", "dtype_reason", "quantization_reason", "rescore_margin_requested", "threads"):
        assert key in side, key  # the flat keys readers use stay


# ---------------------------------------------------------------- batch invariance (float32, mixed lengths)

def _copy_run(tmp_path, tiny_run, name):
    run = tmp_path / name
    run.mkdir()
    for f in ("prompts.parquet", "prompts.json"):
        (run / f).write_bytes((tiny_run / f).read_bytes())
    return run


@pytest.fixture(scope="module")
def float32_lm(tiny_model_dir):
    return models.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=None)


def test_answer_choice_scores_do_not_depend_on_the_batch_size(tmp_path, tiny_run, float32_lm):
    one, _ = scoring.score_run(_copy_run(tmp_path, tiny_run, "one"), float32_lm, MONO, batch_size=1, progress=False)
    many, meta = scoring.score_run(_copy_run(tmp_path, tiny_run, "many"), float32_lm, MONO, batch_size=7,
                                   progress=False)
    lengths = many["n_tokens"].to_numpy()
    assert len(set(lengths)) > 1 and meta["batch_rows"] == 7, "mixed lengths: batches are left-padded"
    for col in ("logp_yes", "logp_no", "margin"):
        assert np.abs(one[col].to_numpy() - many[col].to_numpy()).max() < 1e-5, col
    assert (one["pred_yes"] == many["pred_yes"]).all()


def test_sentence_scores_do_not_depend_on_the_batch_size(tmp_path, float32_lm):
    from nbutils.studies.negation import dataset

    df, params = dataset.build_stimuli(structures=["because"], max_roots=2)
    out = {}
    for size in (1, 5):
        run = tmp_path / f"neg{size}"
        dataset.write_stimuli(df, run, params)
        out[size], _ = scoring.score_run(run, float32_lm, NEG, batch_size=size, progress=False)
    assert out[1]["n_tokens"].nunique() > 1, "mixed lengths: batches are right-padded"
    assert np.abs(out[1]["sum_logprob"].to_numpy() - out[5]["sum_logprob"].to_numpy()).max() < 1e-5
    for a, b in zip(out[1]["token_logprobs"], out[5]["token_logprobs"]):
        assert len(a) == len(b) and np.abs(np.asarray(a) - np.asarray(b)).max() < 1e-5


# ---------------------------------------------------------------- the identity before and after the host decides

HOSTS = {"cpu": CPU, "cpu with native bf16": dataclasses.replace(CPU, cpu_native_bf16=True),
         "gpu": dataclasses.replace(CPU, cuda=True, cuda_bf16=True, free_gpu_bytes=lambda: 80 * 2**30),
         "gpu without bf16": dataclasses.replace(CPU, cuda=True, free_gpu_bytes=lambda: 80 * 2**30)}


@pytest.mark.parametrize("host", list(HOSTS))
@pytest.mark.parametrize("spec", [MONO, NEG], ids=["choices", "sentences"])
def test_what_a_host_resolves_is_what_the_identity_before_loading_admits(host, spec, monkeypatch):
    """``score_settings.identity`` before a model loads (the sweep's skip) admits exactly the precision and margin
    ``resolve`` picks on every kind of host, for every combination of the settings it depends on."""
    from nbutils import score_settings as base

    monkeypatch.setattr("nbutils.engine.settings.bitsandbytes_cpu_problem", lambda q: None)
    for dtype in base.DTYPE_CHOICES:
        for quantization in base.QUANTIZATION_CHOICES:
            for margin in (("auto", 0, 0.5) if spec is MONO else ("auto", 0)):
                s = EngineSettings.from_params(spec, model="org/m", dtype=dtype, quantization=quantization,
                                              rescore_margin=margin)
                resolved = s.resolve(HOSTS[host], n_params=lambda: 100_000_000)
                r = resolved.resolved
                got = {"dtype": r.dtype, "quantization": r.quantization, "rescore_margin": r.rescore_margin}
                expected = {k: v for k, v in base.identity(s, spec, "sha").items() if k in got}
                assert not base.mismatched(expected, got), (dtype, quantization, margin, got, expected)
                after = base.identity(s, spec, "sha", loaded=resolved.sidecar())  # what the run loop compares
                assert {k: after[k] for k in got} == got
