"""bitsandbytes 8-bit (LLM.int8) and 4-bit NF4 for real on the CPU: loading, what the sidecar records, and scores
against the same weights in float32 through both scorers and a whole run (no mocks)."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from nbutils import artifacts, studies
from nbutils.engine import models, run as scoring
from nbutils.engine.choices import answer_logprobs, build_requests
from nbutils.engine.loading import quantization
from nbutils.engine.sentences import sentence_logprobs
from nbutils.studies.monotonicity.dataset import generate_prompts

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path; the GPU has its own tests")

SENTENCES = ["Alice has more than half of the boxes.", "Bob does not have fewer than three apples.", "Yes indeed"]
# Largest |Δ log-prob| allowed against float32 on the small random-weight Llama, per precision. Its log-probs are near
# log(1/vocab) ≈ −6.2 and differ between tokens by a few tenths, so these bounds are tight enough to catch a layer
# left unquantized in the wrong dtype or a wrong dequantization (which move log-probs by whole units), and loose
# enough for the rounding of 8-bit rows and 4-bit NF4 blocks (measured: 0.002 and 0.013 on the answers).
BOUND = {"8bit": 0.02, "4bit": 0.1}


@pytest.fixture(scope="module")
def quant_model_dir(tmp_path_factory, tiny_tokenizer):
    """A 2-layer random-weight Llama whose layer widths are multiples of 64, as in every real model: bitsandbytes'
    CPU 4-bit kernel repacks weights in blocks of 64 input features (the shared 32-wide tiny Llama is too narrow)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    cfg = LlamaConfig(vocab_size=len(tiny_tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
                      bos_token_id=tiny_tokenizer.bos_token_id, eos_token_id=tiny_tokenizer.eos_token_id)
    d = tmp_path_factory.mktemp("quant-llama")
    LlamaForCausalLM(cfg).eval().save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def exact(quant_model_dir):
    return models.load_model(str(quant_model_dir), device="cpu", dtype="float32", quantization="none")


@pytest.mark.parametrize("q", ["8bit", "4bit"])
def test_quantized_model_loads_on_the_cpu_and_scores_close_to_float32(quant_model_dir, exact, q, capsys):
    lm = models.load_model(str(quant_model_dir), device="cpu", quantization=q)
    out = capsys.readouterr().out
    assert f"quantization: {q}: on the CPU" in out and "not for speed" in out
    assert lm.meta["quantization"] == q and lm.meta["dtype"] == "float32" and lm.reference is None
    assert lm.meta["rescore_margin"] == 0.0, "no float32 twin to re-score with"
    d = lm.meta["quantization_details"]
    import bitsandbytes as bnb

    n_linear = 7 * exact.model.config.num_hidden_layers  # q, k, v, o, gate, up, down per layer; lm_head stays
    assert d["bitsandbytes"] == bnb.__version__ and d["quantized_linear_layers"] == n_linear
    assert set(d["device_map"].values()) == {"cpu"}
    if q == "8bit":
        assert d["quant_type"] == "llm.int8" and d["llm_int8_threshold"] == 6.0 and d["activations_cast_to"] == "float16"
    else:
        assert d["quant_type"] == "nf4" and d["compute_dtype"] == "bfloat16" and d["double_quant"] is True
    kind = bnb.nn.Linear8bitLt if q == "8bit" else bnb.nn.Linear4bit
    assert isinstance(lm.model.model.layers[0].mlp.down_proj, kind)

    texts = generate_prompts(["more than 1/2", "less than 1/3"], prompts_per_concept=4, n_examples=4)["text"].tolist()
    got = answer_logprobs(lm.model, build_requests(lm.tokenizer, texts))
    ref = answer_logprobs(exact.model, build_requests(exact.tokenizer, texts))
    diff = np.abs(got - ref).max()
    print(f"{q}: max |Δ answer log-prob| vs float32 {diff:.4f}")
    assert 0 < diff < BOUND[q], "really quantized (not equal), and close"

    s_got = sentence_logprobs(lm.model, lm.tokenizer, SENTENCES)
    s_ref = sentence_logprobs(exact.model, exact.tokenizer, SENTENCES)
    per_token = (np.abs(s_got["sum_logprob"] - s_ref["sum_logprob"]) / s_ref["n_tokens"]).to_numpy()
    print(f"{q}: max |Δ sentence log-prob| per token vs float32 {per_token.max():.4f}")
    assert 0 < per_token.max() < BOUND[q], per_token


def test_a_quantized_run_writes_its_score_file_and_records_the_precision(tmp_path, tiny_run, quant_model_dir):
    spec = studies.get("monotonicity").spec
    run = tmp_path / "run"
    run.mkdir()
    for name in ("prompts.parquet", "prompts.json"):
        (run / name).write_bytes((tiny_run / name).read_bytes())
    lm = models.load_model(str(quant_model_dir), device="cpu", quantization="4bit")
    df, meta = scoring.score_run(run, lm, spec, progress=False)
    assert len(df) == 24 and np.isfinite(df[["logp_yes", "logp_no"]].to_numpy()).all()
    side = artifacts.read_json(next((run / "scores").glob("*.json")))
    assert side["quantization"] == "4bit" and side["quantization_details"]["quant_type"] == "nf4"
    assert side["quantization_details"]["quantized_linear_layers"] == 14


def test_a_bitsandbytes_that_cannot_run_is_refused_by_name_before_loading(tiny_model_dir, monkeypatch):
    quantization.bitsandbytes_cpu_problem.cache_clear()
    try:
        with monkeypatch.context() as m:
            m.setitem(sys.modules, "bitsandbytes", None)  # as if it were not installed
            with pytest.raises(ValueError, match=r"^quantization: '8bit' cannot run on this CPU: bitsandbytes does "
                                                 r"not import .*Install bitsandbytes >= 0.46"):
                models.load_model(str(tiny_model_dir), device="cpu", quantization="8bit")
    finally:
        quantization.bitsandbytes_cpu_problem.cache_clear()
    assert quantization.bitsandbytes_cpu_problem("4bit") is None, "the installed one runs"
