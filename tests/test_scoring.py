"""The engine against a naive reference that scores prompt+answer as whole sequences."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from nbutils.prompts import generate_prompts
from nbutils.scoring import (answer_logprobs, build_requests, naive_answer_logprobs, plan_batches, score_batch,
                             score_batches)


@pytest.fixture(scope="module")
def texts():
    df = generate_prompts(["more than 1/2", "less than 1/3"], prompts_per_concept=4, n_examples=4, seed=5)
    return df["text"].tolist()


@pytest.mark.parametrize("model_name", ["tiny_llama", "tiny_gpt2"])
@pytest.mark.parametrize("chat", ["always", "never"])
def test_single_pass_equals_naive_reference(request, tiny_tokenizer, texts, model_name, chat):
    model = request.getfixturevalue(model_name)
    req = build_requests(tiny_tokenizer, texts, chat)
    assert req.single_token, "Yes/No are single tokens for this tokenizer"
    fast = answer_logprobs(model, req, batch_size=3)  # batched with left padding
    ref = naive_answer_logprobs(model, tiny_tokenizer, texts, chat)
    assert np.abs(fast - ref).max() < 1e-4
    assert ((fast[:, 0] > fast[:, 1]) == (ref[:, 0] > ref[:, 1])).all()


@pytest.mark.parametrize("chat", ["always", "never"])
def test_multi_token_answers_from_cached_prefill(tiny_llama, tiny_tokenizer, texts, chat):
    answers = ("Yes indeed", "No never")
    req = build_requests(tiny_tokenizer, texts, chat, answers)
    assert not req.single_token and all(len(a) > 1 for a in req.answer_ids)
    fast = answer_logprobs(tiny_llama, req)
    ref = naive_answer_logprobs(tiny_llama, tiny_tokenizer, texts, chat, answers)
    assert np.abs(fast - ref).max() < 1e-4


def test_chat_rendering_puts_answers_after_the_generation_prompt(tiny_tokenizer, texts):
    chat = build_requests(tiny_tokenizer, texts[:1], "auto")
    plain = build_requests(tiny_tokenizer, texts[:1], "never")
    assert chat.used_chat_template and chat.answer_strings == ("Yes", "No")
    assert not plain.used_chat_template and plain.answer_strings == (" Yes", " No")
    rendered = tiny_tokenizer.decode(chat.prompt_ids[0])
    assert rendered.startswith("<s><|im_start|>user\n") and rendered.endswith("<|im_start|>assistant\n")
    bos = tiny_tokenizer.bos_token_id
    for req in (chat, plain):
        ids = req.prompt_ids[0]
        assert ids.count(bos) <= 1 and not (len(ids) > 1 and ids[0] == ids[1] == bos), "BOS is never doubled"


def test_bad_chat_template_choice(tiny_tokenizer, texts):
    with pytest.raises(ValueError, match="^chat_template:"):
        build_requests(tiny_tokenizer, texts, "sometimes")


def test_batches_are_sorted_by_length_and_respect_the_budget():
    lengths = [5, 9, 3, 9, 7, 1]
    b = plan_batches(lengths, 2)
    assert b == [[1, 3], [4, 0], [2, 5]]
    assert plan_batches(lengths, 2) == b, "deterministic"
    for batch in plan_batches(lengths, "auto", "cuda"):
        assert len(batch) * max(lengths[i] for i in batch) <= 16384
    with pytest.raises(ValueError, match="^batch_size:"):
        plan_batches(lengths, 0)


def test_out_of_memory_halves_the_batch_and_continues(tiny_llama, tiny_tokenizer, texts, monkeypatch):
    req = build_requests(tiny_tokenizer, texts, "never")
    expected = answer_logprobs(tiny_llama, req, batch_size=1)
    real_forward = tiny_llama.forward
    sizes = []

    def forward(*args, input_ids=None, **kwargs):
        sizes.append(input_ids.shape[0])
        if input_ids.shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_forward(*args, input_ids=input_ids, **kwargs)

    monkeypatch.setattr(tiny_llama, "forward", forward)
    batch = list(range(len(texts)))
    got = score_batch(tiny_llama, req, batch)
    assert max(sizes) == len(texts) and sizes[-1] <= 2
    assert np.abs(got - expected[batch]).max() < 1e-4


def test_other_runtime_errors_are_not_swallowed(tiny_llama, tiny_tokenizer, texts, monkeypatch):
    req = build_requests(tiny_tokenizer, texts, "never")
    monkeypatch.setattr(tiny_llama, "forward", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        score_batch(tiny_llama, req, [0, 1])


def test_close_calls_are_rescored_with_the_reference(tiny_llama, tiny_tokenizer, texts):
    req = build_requests(tiny_tokenizer, texts, "never")
    exact = answer_logprobs(tiny_llama, req, batch_size=1)
    fast = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    batches = plan_batches([len(p) for p in req.prompt_ids], 1)
    res = score_batches(fast, req, batches, reference=tiny_llama, rescore_margin=1e9, progress=False)
    got = np.zeros_like(exact)
    for r in res:
        got[r.indices] = r.logprobs
        assert all(r.rescored)
    assert np.abs(got - exact).max() < 1e-4, "every prompt re-scored in float32 equals the float32 path"
    none = score_batches(fast, req, batches, reference=tiny_llama, rescore_margin=0.0, progress=False)
    assert not any(any(r.rescored) for r in none)
    low = np.zeros_like(exact)
    for r in res:
        low[r.indices] = r.low_precision
    assert np.abs(low - answer_logprobs(fast, req, batch_size=1)).max() < 1e-6, "the pre-rescore bf16 scores are kept"
    assert all(r.low_precision is None for r in none)


def test_a_margin_above_the_bf16_margin_error_gives_float32_decisions(tiny_llama, tiny_tokenizer, texts):
    req = build_requests(tiny_tokenizer, texts, "never")
    exact = answer_logprobs(tiny_llama, req, batch_size=1)
    fast = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    bf16 = answer_logprobs(fast, req, batch_size=1)
    err = np.abs((bf16[:, 0] - bf16[:, 1]) - (exact[:, 0] - exact[:, 1]))
    margin = float(np.sort(np.abs(exact[:, 0] - exact[:, 1]))[len(texts) // 2])  # re-score about half
    batches = plan_batches([len(p) for p in req.prompt_ids], 2)
    res = score_batches(fast, req, batches, reference=tiny_llama, rescore_margin=max(margin, err.max() + 1e-6),
                        progress=False)
    got = np.zeros_like(exact)
    for r in res:
        got[r.indices] = r.logprobs
    assert ((got[:, 0] > got[:, 1]) == (exact[:, 0] > exact[:, 1])).all()
    assert 0 < sum(sum(r.rescored) for r in res) <= len(texts)
