"""One rule for "is this the same scoring?": ``score_settings.identity``, read without torch, decides the sweep's and
the cluster's skip as it decides scoring's own; a change to any identity setting in a model file scores again."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nbutils import artifacts, paths, runstore, score_settings, studies
from nbutils.sweep import _cluster as cluster
from nbutils.runstore import _sidecar as score_sidecar
from nbutils.score_settings import IDENTITY_KEYS, ScoreSettings, Undecided

MONO = studies.get("monotonicity").spec
NEG = studies.get("negation").spec


def test_the_settings_the_sweep_and_the_run_store_import_no_torch():
    code = ("import sys, nbutils.score_settings, nbutils.runstore, nbutils.sweep, nbutils.sweep._cluster, nbutils.sweep._parameters;"
            "s = nbutils.score_settings.ScoreSettings(model='org/m', dtype='bfloat16');"
            "print(s.slug, 'torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["org--m.bfloat16", "False", "False"]


def _adapter(folder, weights: bytes):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": "org/m"}))
    header = json.dumps({"__metadata__": {"weights": weights.decode()}}).encode()  # a whole safetensors file
    (folder / "adapter_model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    return str(folder)


def _scored(run, spec, params: dict, **decided) -> dict:
    """The sidecar a finished scoring of a model file's ``params`` records (what loading decided: ``decided``)."""
    settings = ScoreSettings.of_model_file(spec, params)
    dpath = paths.dataset_path(run, spec.dataset_file)
    if not dpath.exists():
        dpath.parent.mkdir(parents=True, exist_ok=True)
        dpath.write_bytes(b"the run's dataset")
    expected = score_settings.identity(settings, spec, artifacts.sha256_file(dpath))
    undecided = {k for k, v in expected.items() if isinstance(v, Undecided)}
    assert undecided <= set(decided) | {"options_sha256"}, f"the test names what loading decided: {undecided}"
    meta = dict({k: "digest-of-the-options" if k in undecided else v for k, v in expected.items()}, **decided,
                complete=True, batch_size=1, id_column=spec.id_column)
    score_sidecar.write(meta, paths.sidecar(settings.score_file(run)))
    settings.score_file(run).write_bytes(b"the scores")
    return meta


CHOICES = {"model": "org/m", "revision": "r1", "quantization": "none", "dtype": "bfloat16", "rescore_margin": 0.5,
           "chat_template": "never", "limit_seed": 0, "batch_size": 4, "overwrite": False}
SENTENCES = {"model": "org/bert", "masked": True, "pll_variant": "original", "revision": "r1", "dtype": "float32",
             "quantization": "none"}

# every identity setting a model file (or the run's dataset) sets, each changed once: (spec, base, change, key)
CHANGES = [
    (MONO, CHOICES, {"model": "org/n"}, "model"),
    (MONO, CHOICES, {"revision": "r2"}, "revision"),
    (MONO, CHOICES, {"adapter": "A"}, "adapter"),
    (MONO, CHOICES, {"adapter": "A", "retrained": True}, "adapter_sha256"),  # the same folder, other weights
    (MONO, CHOICES, {"adapter": "A", "adapter_scale": 0.5}, "adapter_scale"),  # the same adapter, at half strength
    (MONO, CHOICES, {"quantization": "8bit"}, "quantization"),
    (MONO, CHOICES, {"dtype": "float16"}, "dtype"),
    (MONO, CHOICES, {"chat_template": "always"}, "used_chat_template"),
    (MONO, CHOICES, {"chat_template": "auto"}, "used_chat_template"),  # the tokenizer had a template: it is used
    (MONO, CHOICES, {"limit": 4}, "limit"),
    (MONO, CHOICES, {"limit_seed": 1}, "limit_seed"),
    (MONO, CHOICES, {"rescore_margin": 0.25}, "rescore_margin"),
    (MONO, CHOICES, {"rescore_margin": 0}, "rescore_margin"),
    (MONO, CHOICES, {"num_shards": 2, "shard_index": 1}, "num_shards"),
    (MONO, CHOICES, {"dataset": b"another dataset"}, "dataset_sha256"),
    (MONO, {"model": "org/m", "revision": "r1", "quantization": "none", "dtype": "float32", "chat_template": "never"},
     {"scorer": NEG}, "scorer"),
    (NEG, SENTENCES, {"masked": False}, "masked"),
    (NEG, SENTENCES, {"pll_variant": "within_word_l2r"}, "pll_variant"),
]


def test_every_identity_key_is_changed_by_a_case_below():
    assert {key for *_, key in CHANGES} | {"dataset_file", "shard_index", "options_sha256"} == set(IDENTITY_KEYS)


@pytest.mark.parametrize("spec, base, change, key", CHANGES, ids=[f"{c[3]}-{i}" for i, c in enumerate(CHANGES)])
def test_a_changed_identity_setting_is_scored_again_by_the_sweep_and_the_cluster(tmp_path, spec, base, change, key):
    run = tmp_path / "run"
    change, base, retrain = dict(change), dict(base), False
    if "adapter" in change:  # scored with a local adapter, then another adapter, or the same one retrained
        base["adapter"] = _adapter(tmp_path / "lora", b"weights one")
        retrain = change.pop("retrained", False)
        change = ({} if retrain else {"adapter_scale": change["adapter_scale"]} if "adapter_scale" in change
                  else {"adapter": _adapter(tmp_path / "lora2", b"weights two")})
    scorer_spec = change.pop("scorer", spec)
    dataset = change.pop("dataset", None)
    recorded = _scored(run, spec, base, **({"chat_template_available": True} if spec is MONO else {}))  # a template
    assert runstore.is_done(run, spec, base), "the file just scored is already scored"
    assert runstore.set_aside_changed(run, spec, base) == ([], ""), "nor set aside"
    assert cluster.plan(run, spec, [base], 1)[2] == [score_settings.slug_of(base)]
    changed = {**base, **change}
    if retrain:
        _adapter(tmp_path / "lora", b"weights three")  # the same folder, retrained in place
    if dataset is not None:
        paths.dataset_path(run, spec.dataset_file).write_bytes(dataset)
    if scorer_spec is not spec:  # the same bytes read as another study's dataset
        same_bytes = paths.dataset_path(run, spec.dataset_file).read_bytes()
        paths.dataset_path(run, scorer_spec.dataset_file).write_bytes(same_bytes)
    assert not runstore.is_done(run, scorer_spec, changed), key
    models, tasks, skipped = cluster.plan(run, scorer_spec, [changed], 1)
    assert not skipped and list(models) == [score_settings.slug_of(changed)] and len(tasks) == 1
    side = paths.sidecar(ScoreSettings.of_model_file(scorer_spec, changed).score_file(run))
    # the identity the changed settings would record differs from the one recorded in the key that changed, whether
    # or not the file name differs too (a name alone would pass a scoring whose identity forgot the setting)
    expected = score_settings.identity(ScoreSettings.of_model_file(scorer_spec, changed), scorer_spec,
                                       artifacts.sha256_file(paths.dataset_path(run, scorer_spec.dataset_file)))
    assert key in score_settings.mismatched(expected, recorded), "the recorded identity holds the key that changed"
    if side.exists():  # the same file name: the file the other settings made is named, and set aside
        assert key in score_settings.mismatched(expected, artifacts.read_json(side)), "the key that changed"
        moved, why = runstore.set_aside_changed(run, scorer_spec, changed)
        assert f"{key}: " in why and sorted(p.name for p in moved) == sorted([side.name, side.with_suffix(".parquet").name])
        assert all(p.parent.parent == paths.scores_dir(run) / ".stale" for p in moved) and not side.exists()
    else:
        assert runstore.set_aside_changed(run, scorer_spec, changed) == ([], ""), "another file: nothing moves"
    assert not runstore.is_done(run, scorer_spec, changed)


def test_what_the_host_decides_matches_any_value_it_can_decide(tmp_path):
    run = tmp_path / "run"
    auto = {"model": "org/m"}  # dtype, quantization, rescore_margin and chat_template: auto
    for dtype, quantization, margin, used in (("float32", "none", 0.0, True), ("bfloat16", "none", "auto", True),
                                              ("bfloat16", "8bit", 0.0, False)):
        _scored(run, MONO, auto, revision="sha-of-the-commit", dtype=dtype, quantization=quantization,
                rescore_margin=margin, used_chat_template=used, chat_template_available=used)
        assert runstore.is_done(run, MONO, auto), (dtype, quantization, margin)
    side = paths.sidecar(ScoreSettings.of_model_file(MONO, auto).score_file(run))
    artifacts.write_json(dict(artifacts.read_json(side), used_chat_template=False, chat_template_available=True), side)
    assert not runstore.is_done(run, MONO, auto), "auto uses the template the tokenizer has"
    artifacts.write_json(dict(artifacts.read_json(side), used_chat_template=True, dtype="float64"), side)
    assert not runstore.is_done(run, MONO, auto), "a dtype the host cannot decide"


def test_invalid_parameters_are_never_already_scored_and_keep_their_name(tmp_path):
    bad = {"model": str(tmp_path / "no-such-model"), "dtype": "float16"}
    assert not runstore.is_done(tmp_path, MONO, bad)
    assert score_settings.slug_of(bad) == paths.model_slug(bad["model"]) + ".float16"
    with pytest.raises(ValueError, match="^model: no such folder"):
        ScoreSettings.of_model_file(MONO, bad)


def test_the_sweep_sets_aside_a_models_files_and_shards_made_with_other_settings(tmp_path, capsys):
    from nbutils.sweep import _sweep as sweep

    run = tmp_path / "run"
    before = dict(CHOICES, chat_template="never")
    for shard in ({}, {"shard_index": 0, "num_shards": 2}, {"shard_index": 1, "num_shards": 2}):
        _scored(run, MONO, {**before, **shard}, chat_template_available=True)
    sweep._set_aside_changed(run, MONO, before, shards=2)
    assert len(list(paths.scores_dir(run).glob("*.json"))) == 3, "the same scoring: nothing moves"
    sweep._set_aside_changed(run, MONO, dict(before, chat_template="auto", overwrite=True), shards=2)
    assert len(list(paths.scores_dir(run).glob("*.json"))) == 3, "overwrite: the notebook replaces them"
    sweep._set_aside_changed(run, MONO, dict(before, chat_template="auto"), shards=2)
    assert not list(paths.scores_dir(run).glob("*.json")) and len(list(paths.stale_sidecars(run))) == 3
    out = capsys.readouterr().out
    assert out.count("scored before with other settings (used_chat_template: False → <whether the tokenizer") == 3
