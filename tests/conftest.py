"""Shared fixtures: offline tiny models (random weights) and a trained-on-the-fly tokenizer."""
from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _corpus() -> list[str]:
    from nbutils.studies.monotonicity.dataset import generate_prompts

    df = generate_prompts(["more than 1/2", "less than 1/3"], prompts_per_concept=6, n_examples=6)
    return df["text"].tolist() + ["Yes", "No", "Yes indeed", "No never"] * 50


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A byte-level BPE tokenizer (vocab ≈ 500) with BOS and a ChatML-like template; no downloads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


@pytest.fixture(scope="session")
def tiny_llama(tiny_tokenizer):
    """A 2-layer Llama (rotary positions, grouped-query attention) with random weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      bos_token_id=tiny_tokenizer.bos_token_id, eos_token_id=tiny_tokenizer.eos_token_id)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="session")
def tiny_gpt2(tiny_tokenizer):
    """A 2-layer GPT-2 (absolute position embeddings, so left padding must pass position ids)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    cfg = GPT2Config(vocab_size=len(tiny_tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=4096,
                     bos_token_id=tiny_tokenizer.bos_token_id, eos_token_id=tiny_tokenizer.eos_token_id)
    return GPT2LMHeadModel(cfg).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_llama, tiny_tokenizer):
    """The tiny Llama and tokenizer saved as a local Hugging Face folder (loads like any local model)."""
    d = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama.save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A run directory holding a small generated prompts file (8 concepts × conditions × 4 prompts)."""
    from nbutils import artifacts
    from nbutils.paths import prompts_path
    from nbutils.studies.monotonicity.dataset import generate_prompts

    run = tmp_path_factory.mktemp("run")
    params = dict(concepts=["more than 1/2", "less than 1/2"], conditions=["concept_learning", "explicit"],
                  prompts_per_concept=6, n_examples=6, seed=3)
    artifacts.write_dataset(generate_prompts(**params), prompts_path(run), {"parameters": params})
    return run
