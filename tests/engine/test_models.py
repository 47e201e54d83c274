"""Model loading: parameters, quantization settings, memory checks; the CUDA paths where a GPU exists."""
from __future__ import annotations

import copy

import pytest
import torch

from nbutils.engine import models
from nbutils.engine.loading import host as host_module
from nbutils.engine.loading.quantization import quantization_config


def test_four_bit_is_nf4_with_bf16_compute_and_double_quantization():
    cfg = quantization_config("4bit")
    assert cfg.load_in_4bit and cfg.bnb_4bit_quant_type == "nf4"
    assert cfg.bnb_4bit_compute_dtype == torch.bfloat16 and cfg.bnb_4bit_use_double_quant
    assert quantization_config("8bit").load_in_8bit
    assert quantization_config("none") is None
    with pytest.raises(ValueError, match="^quantization:"):
        quantization_config("3bit")


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(dtype="float8"), "dtype"), (dict(device="tpu"), "device"), (dict(threads=0), "threads"),
    (dict(model=""), "model"), (dict(model="no-such-org/no-such-model"), "model"),
])
def test_bad_arguments_name_the_parameter(tiny_model_dir, kwargs, parameter):
    args = dict(model=str(tiny_model_dir)) | kwargs
    with pytest.raises(ValueError, match=f"^{parameter}:"):
        models.load_model(**args)


def test_weight_memory_estimate_and_refusal(tiny_llama):
    n = host_module.count_parameters(tiny_llama.config)
    assert n == sum(p.numel() for p in tiny_llama.parameters())
    tied = copy.deepcopy(tiny_llama.config)
    tied.tie_word_embeddings = True
    assert host_module.count_parameters(tied) == n - tied.vocab_size * tied.hidden_size, "a tied output layer counts once"
    assert host_module.estimate_weight_bytes(32_000_000_000, "4bit") < host_module.estimate_weight_bytes(32_000_000_000, "8bit")
    gib = 2**30
    line = host_module.check_fits_gpu(32_000_000_000, "4bit", free_bytes=80 * gib)
    assert "GiB free" in line
    with pytest.raises(ValueError, match="^quantization: the model does not fit"):
        host_module.check_fits_gpu(65_000_000_000, "bfloat16", free_bytes=80 * gib)


def test_local_folder_loads_with_metadata(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(host_module, "cpu_supports_bf16", lambda: False)  # the defaults on a CPU without native bf16
    lm = models.load_model(str(tiny_model_dir), device="cpu")
    assert lm.meta["dtype"] == "float32" and lm.meta["device"] == "cpu" and lm.meta["quantization"] == "none"
    assert lm.meta["chat_template_available"] and lm.reference is None
    half = models.load_model(str(tiny_model_dir), device="cpu", dtype="bfloat16", rescore_margin=0.5)
    assert next(half.model.parameters()).dtype == torch.bfloat16
    assert next(half.reference.parameters()).dtype == torch.float32


@pytest.mark.cuda  # skipped without a CUDA GPU (tests/conftest.py)
@pytest.mark.parametrize("q", ["8bit", "4bit"])
def test_quantized_model_scores_on_gpu(tiny_model_dir, tiny_tokenizer, q):
    from nbutils.studies.monotonicity.dataset import generate_prompts
    from nbutils.engine.choices import answer_logprobs, build_requests

    lm = models.load_model(str(tiny_model_dir), quantization=q)
    texts = generate_prompts(["more than 1/2"], prompts_per_concept=2, n_examples=4)["text"].tolist()
    lp = answer_logprobs(lm.model, build_requests(lm.tokenizer, texts))
    assert lp.shape == (4, 2) and torch.isfinite(torch.tensor(lp)).all()


@pytest.mark.cuda  # skipped without a CUDA GPU (tests/conftest.py)
@pytest.mark.parametrize("q", ["8bit", "4bit"])
def test_a_quantized_run_on_the_gpu_keeps_every_weight_on_the_card_and_records_what_was_loaded(tmp_path, tiny_run,
                                                                                                tiny_model_dir, q):
    from nbutils import artifacts, paths, studies
    from nbutils.engine.run import score_run

    run = tmp_path / "run"
    run.mkdir()
    for name in ("prompts.parquet", "prompts.json"):
        (run / name).write_bytes((tiny_run / name).read_bytes())
    lm = models.load_model(str(tiny_model_dir), quantization=q, device="cuda")
    assert {p.device.type for p in lm.model.parameters()} == {"cuda"}, "no module left on the CPU or disk"
    df, meta = score_run(run, lm, studies.get("monotonicity").spec, progress=False)
    [sidecar] = paths.score_sidecars(run)
    side = artifacts.read_json(sidecar)
    details = side["quantization_details"]
    assert meta["complete"] and side["quantization"] == q and details["quantized_linear_layers"] > 0
    assert details["bitsandbytes"] and all(str(v).startswith("cuda") or str(v).isdigit() for v in details["device_map"].values())
    if q == "4bit":
        assert (details["quant_type"], details["compute_dtype"], details["double_quant"]) == ("nf4", "bfloat16", True)
    else:
        assert details["quant_type"] == "llm.int8" and details["activations_cast_to"] == "float16"
    assert torch.isfinite(torch.tensor(df[["logp_yes", "logp_no"]].to_numpy())).all()


@pytest.mark.cuda  # skipped without a CUDA GPU (tests/conftest.py)
@pytest.mark.parametrize("dtype, bound", [("float32", 1e-4), ("bfloat16", None)])
def test_batched_with_left_padding_equals_one_by_one_on_the_gpu(tiny_model_dir, dtype, bound):
    """Mixed lengths, left-padded in batches of 5, against one prompt per batch; bf16's bound is its own error
    against float32 on the same prompts (batching may not move scores more than the precision already does)."""
    import numpy as np

    from nbutils.engine.choices import answer_logprobs, build_requests
    from nbutils.studies.monotonicity.dataset import generate_prompts

    texts = [t for k in (2, 4, 8) for t in generate_prompts(["more than 1/2"], prompts_per_concept=4, n_examples=k,
                                                            seed=k)["text"]]
    lm = models.load_model(str(tiny_model_dir), device="cuda", dtype=dtype, rescore_margin=0)
    req = build_requests(lm.tokenizer, texts)
    assert len({len(p) for p in req.prompt_ids}) > 3, "mixed lengths, so batches are padded"
    one, batched = answer_logprobs(lm.model, req, 1), answer_logprobs(lm.model, req, 5)
    if bound is None:
        exact = answer_logprobs(models.load_model(str(tiny_model_dir), device="cuda", dtype="float32").model, req, 1)
        bound = max(np.abs(one - exact).max(), 1e-3)
    assert np.abs(one - batched).max() <= bound
