"""Split precision with grouped tails: one-prompt batches prefilled alone, their float32 tails computed together from
left-padded caches, against the naive whole-sequence reference and against each prompt's tail computed alone."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from nbutils.engine import split
from nbutils.engine.batching import plan_batches
from nbutils.engine.choices import answer_logprobs, build_requests, score_batches, tail_groups
from nbutils.studies.monotonicity.dataset import generate_prompts
from reference_scoring import reference_logprobs


@pytest.fixture(scope="module")
def texts():
    """Prompts of several lengths (2 to 6 examples), so a group's caches are padded."""
    frames = [generate_prompts(["more than 1/2", "less than 1/3"], prompts_per_concept=2, n_examples=k, seed=k)
              for k in (2, 4, 6)]
    return [t for df in frames for t in df["text"].tolist()]


def _collect(results, n):
    got = [None] * n
    for r in results:
        for i, lp in zip(r.indices, r.logprobs):
            got[i] = lp
    return np.vstack(got)


@pytest.mark.parametrize("model_name", ["tiny_llama", "tiny_gpt2"])
def test_grouped_tails_with_a_float32_head_equal_the_whole_float32_pass(request, tiny_tokenizer, texts, model_name):
    """The merge of caches of different lengths (left padding, mask, position ids) changes nothing by itself."""
    model = request.getfixturevalue(model_name)
    twin = copy.deepcopy(model)
    req = build_requests(tiny_tokenizer, texts, "never")
    assert len({len(p) for p in req.prompt_ids}) > 3, "the prompts differ in length, so the caches are padded"
    batches = plan_batches([len(p) for p in req.prompt_ids], 1)
    groups = tail_groups(req, batches, model, 5)
    assert max(len(g) for g in groups) == split.TAIL_GROUP_ROWS, "the grouped path is the one tested"
    res = score_batches(twin, req, batches, reference=model, tail=5, progress=False)
    assert [r.n_batches for r in res] == [len(g) for g in groups]
    got = _collect(res, len(texts))
    ref = np.vstack(reference_logprobs(model, tiny_tokenizer, texts, "never"))
    assert np.abs(got - ref).max() < 1e-4


def test_grouped_tails_equal_each_tail_alone_in_bf16(tiny_llama, tiny_tokenizer, texts):
    """bf16 head: a group's tails equal the same tails computed one prompt at a time (to float32 rounding), and a
    byte budget too small for two caches gives one pass per prompt, bit for bit the alone path."""
    req = build_requests(tiny_tokenizer, texts, "never")
    fast = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    seqs = req.prompt_ids
    grouped = torch.stack(split.tail_logprobs(fast, tiny_llama, seqs, 4))
    alone = torch.stack(split.tail_logprobs(fast, tiny_llama, seqs, 4, budget_bytes=1))
    one_by_one = torch.cat([torch.stack(split.tail_logprobs(fast, tiny_llama, [s], 4)) for s in seqs])
    assert torch.equal(alone, one_by_one)
    assert (grouped - alone).abs().max() < 1e-4
    whole_bf16 = torch.tensor(answer_logprobs(fast, req, batch_size=1))
    cols = [o[0] for o in req.option_ids[0]]
    assert (grouped[:, cols].double() - whole_bf16).abs().max() > 1e-6, "the tail really is float32"


def test_a_cache_that_cannot_be_merged_gets_its_tail_alone(tiny_llama, tiny_tokenizer, texts, monkeypatch):
    req = build_requests(tiny_tokenizer, texts, "never")
    fast = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    merged = torch.stack(split.tail_logprobs(fast, tiny_llama, req.prompt_ids, 4, budget_bytes=1))
    monkeypatch.setattr(split, "_plain", lambda cache, length: False)
    assert torch.equal(torch.stack(split.tail_logprobs(fast, tiny_llama, req.prompt_ids, 4)), merged)

    def uncastable(cache, dtype):
        raise TypeError("no per-layer keys/values")

    monkeypatch.setattr(split, "cast_cache", uncastable)
    whole = torch.stack(split.tail_logprobs(fast, tiny_llama, req.prompt_ids, 4))
    exact = answer_logprobs(tiny_llama, req, batch_size=1)
    cols = [o[0] for o in req.option_ids[0]]
    assert np.abs(whole[:, cols].double().numpy() - exact).max() < 1e-5, "scored whole in float32"


def test_tail_groups_are_runs_of_one_prompt_batches_fixed_by_the_list(tiny_llama, tiny_tokenizer, texts):
    req = build_requests(tiny_tokenizer, texts, "never")
    ones = [[i] for i in range(len(texts))]
    groups = tail_groups(req, ones, tiny_llama, 4)
    assert [b for g in groups for b in g] == ones and all(len(g) <= split.TAIL_GROUP_ROWS for g in groups)
    assert [len(g) for g in groups][0] == split.TAIL_GROUP_ROWS
    k = split.TAIL_GROUP_ROWS
    assert tail_groups(req, ones[k:], tiny_llama, 4) == groups[1:], "a resumed run groups the rest alike"
    assert all(len(g) == 1 for g in tail_groups(req, ones, None, 4)), "no reference: no split, no groups"
    assert all(len(g) == 1 for g in tail_groups(req, ones, tiny_llama, 0))
    mixed = [[0, 1]] + ones[2:5] + [[5, 6]] + ones[7:]
    assert tail_groups(req, mixed, tiny_llama, 4)[:3] == [[[0, 1]], ones[2:5], [[5, 6]]], "a batch of several alone"
    too_short = tail_groups(req, ones, tiny_llama, max(len(p) for p in req.prompt_ids))
    assert all(len(g) == 1 for g in too_short), "prompts no longer than the tail are scored whole, alone"


def test_grouped_close_calls_are_rescored_whole_in_float32(tiny_llama, tiny_tokenizer, texts):
    req = build_requests(tiny_tokenizer, texts, "never")
    exact = answer_logprobs(tiny_llama, req, batch_size=1)
    fast = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    batches = plan_batches([len(p) for p in req.prompt_ids], 1)
    res = score_batches(fast, req, batches, reference=tiny_llama, rescore_margin=1e9, progress=False, tail=4)
    assert max(r.n_batches for r in res) > 1 and all(all(r.rescored) for r in res)
    assert np.array_equal(_collect(res, len(texts)), exact), "re-scored one prompt per pass, as the float32 path"
    low = np.zeros_like(exact)
    for r in res:
        low[r.indices] = r.low_precision
    plain = score_batches(fast, req, batches, reference=tiny_llama, rescore_margin=0.0, progress=False, tail=4)
    assert np.array_equal(_collect(plain, len(texts)), low), "the kept fast scores are the grouped fast path's"
