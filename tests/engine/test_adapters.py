"""LoRA adapters as a model setting: merged at load (equal to the unmerged adapter), recorded in the sidecar, part of a
score file's identity and name, and refused by name before any scoring when they do not fit the base model."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from nbutils import adapters, artifacts, paths, runstore, score_settings, studies
from nbutils.sweep import _cluster as cluster
from nbutils.engine import run as scoring
from nbutils.engine.models import load_model
from nbutils.engine.settings import EngineSettings
from test_runs import fresh_run  # the same copy of the tiny run's dataset as the run tests use

SPEC = studies.get("monotonicity").spec
TARGETS = ["q_proj", "v_proj", "gate_proj"]


def make_adapter(base, folder, seed=0, rank=4, targets=TARGETS, base_name=None):
    """A LoRA adapter with random (non-zero) matrices on ``base``, saved by peft into ``folder``."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    cfg = LoraConfig(r=rank, lora_alpha=8, target_modules=targets, init_lora_weights=False, lora_dropout=0.0)
    peft_model = get_peft_model(base, cfg)
    peft_model.save_pretrained(folder)
    base = peft_model.unload()  # the base model as it was, for the next adapter
    if base_name is not None:
        config = json.loads((folder / adapters.CONFIG).read_text())
        (folder / adapters.CONFIG).write_text(json.dumps(dict(config, base_model_name_or_path=base_name)))
    return folder


@pytest.fixture(scope="module")
def base_model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory, base_model):
    return make_adapter(base_model, tmp_path_factory.mktemp("lora") / "tiny-lora")


@pytest.fixture(scope="module")
def adapted(tiny_model_dir, adapter_dir):
    return load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=None, adapter=str(adapter_dir))


def test_merged_adapter_scores_as_the_unmerged_one(adapted, lm, base_model, adapter_dir, tiny_tokenizer):
    from peft import PeftModel

    ids = torch.tensor([tiny_tokenizer("Is 3/4 more than 1/2? Yes")["input_ids"]])
    with torch.no_grad():
        unmerged = PeftModel.from_pretrained(base_model, str(adapter_dir)).eval()
        want = unmerged(ids).logits
        unmerged.unload()
        got, plain = adapted.model(ids).logits, lm.model(ids).logits
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (got - want).abs().max()
    assert (got - plain).abs().max() > 1e-3, "the adapter changes the model"
    assert not any("lora" in n for n, _ in adapted.model.named_parameters()), "merged: a plain model is scored"
    meta = adapted.meta
    assert meta["adapter"] == str(adapter_dir) and meta["adapter_merged"] and meta["adapter_layers"] == 2 * len(TARGETS)
    assert meta["adapter_sha256"] == artifacts.sha256_file(adapter_dir / "adapter_model.safetensors")


def test_adapter_is_in_the_name_the_sidecar_and_the_identity(tmp_path, tiny_run, adapted, lm, tiny_model_dir,
                                                            adapter_dir, base_model):
    run = fresh_run(tmp_path, tiny_run)
    scoring.score_run(run, lm, SPEC, progress=False)
    _, meta = scoring.score_run(run, adapted, SPEC, progress=False)
    names = sorted(p.name for p in paths.scores_dir(run).glob("*.parquet"))
    slug = paths.score_slug(str(tiny_model_dir), adapter=str(adapter_dir))
    assert f"{slug}.parquet" in names and len(names) == 2 and "tiny-lora" in slug
    assert paths.check_plain_name(slug, "slug") == slug
    assert meta["adapter"] == str(adapter_dir) and meta["adapter_sha256"] == adapters.weights_sha256(adapter_dir)
    model = str(tiny_model_dir)
    assert runstore.is_done(run, SPEC, {"model": model, "adapter": str(adapter_dir)})
    assert runstore.is_done(run, SPEC, {"model": model}), "the base model's own file"
    # the analysis reads two models, not one model at two precisions
    scores = runstore.load_scores(run, SPEC)
    main, variants, notes = runstore.split_precisions(scores)
    assert scores["model"].nunique() == 2 and variants is None and not notes
    # the same folder with other weights is not "already scored"; another adapter folder is another file
    other = make_adapter(base_model, tmp_path / "other", seed=1)
    assert not runstore.is_done(run, SPEC, {"model": model, "adapter": str(other)})
    models, tasks, skipped = cluster.plan(run, SPEC, [{"model": model, "adapter": str(adapter_dir)},
                                                      {"model": model, "adapter": str(other)}], 1)
    assert skipped == [slug] and list(models) == [paths.score_slug(model, adapter=str(other))] and len(tasks) == 1
    meta_side = paths.sidecar(paths.score_file(run, slug))
    side = artifacts.read_json(meta_side)
    def same(meta, params):  # the sweep's rule: the identity of a model file's settings before the model loads
        expected = score_settings.identity(EngineSettings.of_model_file(SPEC, params), SPEC, meta["dataset_sha256"])
        return score_settings.matches(expected, meta)

    assert same(side, {"model": model, "adapter": str(adapter_dir)})
    assert not same(side, {"model": model}), "a file with an adapter is not the base model's"
    changed = tmp_path / "changed"
    shutil.copytree(adapter_dir, changed)
    assert same(dict(side, adapter=str(changed)), {"model": model, "adapter": str(changed)})
    make_adapter(base_model, changed, seed=2)  # retrained in place
    assert not same(dict(side, adapter=str(changed)), {"model": model, "adapter": str(changed)})


def test_refused_by_name_before_loading(tmp_path, tiny_model_dir, adapter_dir):
    model = str(tiny_model_dir)
    with pytest.raises(ValueError, match=r"^adapter: no such folder"):
        EngineSettings(model=model, adapter=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"^adapter: must be None"):
        EngineSettings(model=model, adapter=3)
    not_lora = tmp_path / "prefix"
    shutil.copytree(adapter_dir, not_lora)
    config = json.loads((not_lora / adapters.CONFIG).read_text())
    (not_lora / adapters.CONFIG).write_text(json.dumps(dict(config, peft_type="PREFIX_TUNING")))
    with pytest.raises(ValueError, match=r"^adapter: .* PREFIX_TUNING adapter; only LoRA"):
        EngineSettings(model=model, adapter=str(not_lora))
    other_base = tmp_path / "other-base"
    shutil.copytree(adapter_dir, other_base)
    (other_base / adapters.CONFIG).write_text(json.dumps(dict(config, base_model_name_or_path="someone/Other-7B")))
    with pytest.raises(ValueError, match=r"^adapter: .* made for base model 'someone/Other-7B'"):
        EngineSettings(model=model, adapter=str(other_base))
    with pytest.raises(ValueError, match=r"^adapter: .*quantization"):
        EngineSettings(model=model, adapter=str(adapter_dir), quantization="4bit")
    # the embedded GGUF model takes an adapter made for the hub model it was made from, and no other
    smol = tmp_path / "smol"
    shutil.copytree(adapter_dir, smol)
    smol_config = dict(config, base_model_name_or_path="HuggingFaceTB/SmolLM2-135M-Instruct")
    (smol / adapters.CONFIG).write_text(json.dumps(smol_config))
    EngineSettings(model="smollm2-135m-instruct", adapter=str(smol))
    with pytest.raises(ValueError, match=r"^adapter: .*not 'gemma3-270m' \(which stands for google/gemma-3-270m\)"):
        EngineSettings(model="gemma3-270m", adapter=str(smol))


def test_another_architecture_is_refused_at_load(tmp_path, tiny_model_dir, tiny_tokenizer, tiny_gpt2):
    from transformers import LlamaConfig, LlamaForCausalLM

    model = str(tiny_model_dir)
    wider = LlamaForCausalLM(LlamaConfig(vocab_size=len(tiny_tokenizer), hidden_size=64, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
    make_adapter(wider, tmp_path / "wider", base_name=model)
    with pytest.raises(ValueError, match=r"^adapter: .* does not fit layer .*_proj"):
        load_model(model, device="cpu", dtype="float32", adapter=str(tmp_path / "wider"))
    make_adapter(tiny_gpt2, tmp_path / "gpt2", targets=["c_attn"], base_name=model)
    with pytest.raises(ValueError, match=r"^adapter: .* adapts layer .*c_attn.*does not have"):
        load_model(model, device="cpu", dtype="float32", adapter=str(tmp_path / "gpt2"))


def test_a_hub_adapter_not_in_the_cache_is_an_error_naming_adapter(tiny_model_dir):
    settings = EngineSettings(model=str(tiny_model_dir), adapter="someone/not-cached-lora", device="cpu")
    assert not adapters.is_local(settings.adapter) and ".someone--not-cached-lora" in settings.slug
    with pytest.raises(ValueError, match=r"^adapter: cannot fetch 'someone/not-cached-lora' from the hub"):
        load_model(settings)


def test_adapter_scale_zero_is_the_base_model_and_a_half_is_peft_at_half_strength(lm, base_model, adapter_dir,
                                                                                 tiny_model_dir, tiny_tokenizer):
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    model = str(tiny_model_dir)
    ids = torch.tensor([tiny_tokenizer("Is 3/4 more than 1/2? Yes")["input_ids"]])
    zero = load_model(model, device="cpu", dtype="float32", threads=None, adapter=str(adapter_dir), adapter_scale=0)
    half = load_model(model, device="cpu", dtype="float32", threads=None, adapter=str(adapter_dir), adapter_scale=0.5)
    with torch.no_grad():
        unmerged = PeftModel.from_pretrained(base_model, str(adapter_dir)).eval()
        for m in unmerged.modules():
            if isinstance(m, LoraLayer):
                m.scale_layer(0.5)
        want = unmerged(ids).logits
        unmerged.unload()
        plain, got_zero, got_half = lm.model(ids).logits, zero.model(ids).logits, half.model(ids).logits
    assert torch.equal(got_zero, plain), "scale 0 merges nothing: the base model's weights, bit for bit"
    assert torch.allclose(got_half, want, atol=1e-5, rtol=1e-5), (got_half - want).abs().max()
    assert (got_half - plain).abs().max() > 1e-4
    # the answer margins a run scores are the base model's at scale 0
    from nbutils.engine.choices import answer_logprobs, build_requests

    req = build_requests(lm.tokenizer, ["Is 3/4 more than 1/2?", "Is 1/4 more than 1/2?"], "never", ("Yes", "No"))
    assert np.array_equal(answer_logprobs(zero.model, req, batch_size=2), answer_logprobs(lm.model, req, batch_size=2))
    assert zero.settings.sidecar()["adapter_scale"] == 0.0 and half.settings.sidecar()["adapter_scale"] == 0.5


def test_adapter_scale_names_its_own_score_file_and_is_never_already_scored_at_another_strength(
        tmp_path, tiny_model_dir, adapter_dir):
    model, adapter = str(tiny_model_dir), str(adapter_dir)
    slugs = {s: EngineSettings(model=model, adapter=adapter, adapter_scale=s).slug for s in (0, 0.25, 0.5, 1, 1.0, 2)}
    assert slugs[1] == slugs[1.0] == paths.score_slug(model, adapter=adapter), "full strength keeps the old name"
    assert slugs[0.5] == f"{slugs[1]}-s0.5" and slugs[0] == f"{slugs[1]}-s0" and len(set(slugs.values())) == 5
    assert all(paths.check_plain_name(s, "slug") == s for s in slugs.values())
    params = {"model": model, "adapter": adapter, "adapter_scale": 0.25}

    assert score_settings.slug_of(params) == slugs[0.25]
    ident = {s: score_settings.identity(EngineSettings.of_model_file(SPEC, dict(params, adapter_scale=s)), SPEC, "x")
             for s in (0.25, 0.5, 1)}
    assert ident[1]["adapter_scale"] is None and ident[0.5]["adapter_scale"] == 0.5
    recorded = {k: v for k, v in ident[0.5].items() if not isinstance(v, score_settings.Undecided)}
    assert not score_settings.matches(ident[0.25], recorded) and "adapter_scale" in score_settings.mismatched(ident[0.25], recorded)
    # a file scored before the setting existed (no adapter_scale key) is the adapter at full strength
    old = {k: v for k, v in recorded.items() if k != "adapter_scale"}
    assert "adapter_scale" not in score_settings.mismatched(ident[1], old)
    assert "adapter_scale" in score_settings.mismatched(ident[0.5], old)


@pytest.mark.parametrize("scale, match", [(-0.5, "number from 0 to 100"), (float("nan"), "number from 0 to 100"),
                                          (float("inf"), "number from 0 to 100"), ("half", "number from 0 to 100"),
                                          (True, "number from 0 to 100"), (1e30, "number from 0 to 100")])
def test_a_bad_adapter_scale_is_refused_by_name(tiny_model_dir, adapter_dir, scale, match):
    with pytest.raises(ValueError, match=rf"^adapter_scale: must be a {match}"):
        EngineSettings(model=str(tiny_model_dir), adapter=str(adapter_dir), adapter_scale=scale)


def test_adapter_scale_without_an_adapter_is_refused_by_name(tiny_model_dir):
    with pytest.raises(ValueError, match=r"^adapter_scale: 0.5 scales a LoRA adapter, and this model has none"):
        EngineSettings(model=str(tiny_model_dir), adapter_scale=0.5)
    assert EngineSettings(model=str(tiny_model_dir), adapter_scale=1).slug == paths.score_slug(str(tiny_model_dir))


def test_one_adapter_at_two_strengths_is_two_models_in_the_analysis(tmp_path, tiny_run, adapted, tiny_model_dir,
                                                                    adapter_dir):
    run = fresh_run(tmp_path, tiny_run)
    half = load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=None, adapter=str(adapter_dir),
                      adapter_scale=0.5)
    scoring.score_run(run, adapted, SPEC, progress=False)
    _, meta = scoring.score_run(run, half, SPEC, progress=False)
    assert meta["adapter_scale"] == 0.5 and meta["settings"]["adapter_scale"] == 0.5
    scores = runstore.load_scores(run, SPEC)
    main, variants, notes = runstore.split_precisions(scores)
    assert sorted(main["slug"].unique()) == sorted([adapted.settings.slug, half.settings.slug])
    assert main["model"].nunique() == 2 and any(m.endswith("(strength 0.5)") for m in main["model"].unique())
    assert variants is None and not notes, "not one model at two precisions"
