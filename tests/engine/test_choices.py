"""The engine against an independent naive reference (tests/reference_scoring.py) that tokenizes through the
tokenizer's own chat template and scores prompt+answer as whole sequences."""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from nbutils.studies.monotonicity.dataset import generate_prompts
from nbutils.engine.batching import plan_batches
from nbutils.engine.choices import (answer_logprobs, build_requests, choice_frame, normalize_answer, option_names,
                                    score_batch, score_batches)
from nbutils.spec import ChoiceItems
from reference_scoring import reference_logprobs


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
    ref = np.vstack(reference_logprobs(model, tiny_tokenizer, texts, chat))
    assert np.abs(fast - ref).max() < 1e-4
    assert ((fast[:, 0] > fast[:, 1]) == (ref[:, 0] > ref[:, 1])).all()


@pytest.mark.parametrize("chat", ["always", "never"])
def test_multi_token_answers_from_cached_prefill(tiny_llama, tiny_tokenizer, texts, chat):
    answers = ("Yes indeed", "No never")
    req = build_requests(tiny_tokenizer, texts, chat, answers)
    assert not req.single_token and all(len(a) > 1 for a in req.answer_ids)
    fast = answer_logprobs(tiny_llama, req)
    ref = np.vstack(reference_logprobs(tiny_llama, tiny_tokenizer, texts, chat, answers))
    assert np.abs(fast - ref).max() < 1e-4


def _with_bos(tok, req):
    return dataclasses.replace(req, prompt_ids=[[tok.bos_token_id, *p] for p in req.prompt_ids])


def _without_generation_prompt(tok, req):
    n = len(tok("<|im_start|>assistant\n", add_special_tokens=False).input_ids)
    return dataclasses.replace(req, prompt_ids=[p[:len(p) - n] for p in req.prompt_ids])


PLANTED = {  # a request built wrong in one way a tokenizer or template error would build it
    "plain answer without its leading space": (
        "never", lambda tok, req: dataclasses.replace(req, option_ids=[
            [tok(a.strip(), add_special_tokens=False).input_ids for a in opts] for opts in req.option_strings])),
    "chat prompt without the generation prompt": ("always", _without_generation_prompt),
    "chat prompt with a doubled BOS": ("always", _with_bos),
    "plain prompt with a BOS the tokenizer does not add": ("never", _with_bos),
}


@pytest.mark.parametrize("planted", list(PLANTED))
def test_the_reference_catches_a_planted_request_error(tiny_llama, tiny_tokenizer, texts, planted):
    """The reference can fail: a request built wrong scores away from it by far more than the tolerance the right
    request meets, so a tokenization or chat-template error in the engine would not pass the tests above."""
    chat, plant = PLANTED[planted]
    right = build_requests(tiny_tokenizer, texts, chat)
    wrong = plant(tiny_tokenizer, right)
    assert wrong.prompt_ids != right.prompt_ids or wrong.option_ids != right.option_ids, "the error is really planted"
    ref = np.vstack(reference_logprobs(tiny_llama, tiny_tokenizer, texts, chat))
    assert np.abs(answer_logprobs(tiny_llama, right, batch_size=1) - ref).max() < 1e-5
    # the tiny model's random weights give near-uniform log-probs, so a wrong context moves them by only 3e-4 to 4e-3:
    # still over twice the tests' tolerance of 1e-4 and 20 times the right request's error (the embedded model's test
    # below sees the same errors move them by over 0.1)
    assert np.abs(answer_logprobs(tiny_llama, wrong, batch_size=1) - ref).max() > 2e-4, planted


SMOL_PROMPTS = ["There are 10 cats. Alice has 7 of the 10 cats. Does Alice have more than 1/2 of the cats?",
                "Is Paris the capital of France?",
                "Which is a colour?\nA. Blue\nB. Table\nC. Seven apples\nAnswer with the letter."]
SMOL_OPTIONS = [("Yes", "No"), ("Yes", "No"), ("A", "B", "C")]


@pytest.mark.notebooks  # the real embedded model, 3 short prompts (~10 s with the load)
def test_the_embedded_model_through_its_own_chat_template_equals_the_engine():
    """SmolLM2's own chat template (a default system turn, ChatML): the engine's scores of mixed option sets equal the
    reference within 1e-4, and the planted errors move them by far more."""
    from nbutils.engine.models import load_model

    lm = load_model("smollm2-135m-instruct", quantization="none", dtype="float32", device="cpu", rescore_margin=0.0)
    tok = lm.tokenizer
    for chat in ("always", "never"):
        req = build_requests(tok, SMOL_PROMPTS, chat, SMOL_OPTIONS)
        assert req.used_chat_template == (chat == "always")
        got = [None] * len(SMOL_PROMPTS)
        for r in score_batches(lm.model, req, plan_batches([len(p) for p in req.prompt_ids], 3), progress=False):
            for i, lp in zip(r.indices, r.logprobs):
                got[i] = lp
        ref = reference_logprobs(lm.model, tok, SMOL_PROMPTS, chat, SMOL_OPTIONS)
        for g, e in zip(got, ref):
            assert len(g) == len(e) and np.abs(g - e).max() < 1e-4, chat
    chat_req = build_requests(tok, SMOL_PROMPTS[:2], "always")
    assert tok.decode(chat_req.prompt_ids[0]).endswith("<|im_start|>assistant\n")
    ref = np.vstack(reference_logprobs(lm.model, tok, SMOL_PROMPTS[:2], "always"))
    no_generation_prompt = PLANTED["chat prompt without the generation prompt"][1](tok, chat_req)
    assert np.abs(answer_logprobs(lm.model, no_generation_prompt, batch_size=1) - ref).max() > 0.1
    plain_req = build_requests(tok, SMOL_PROMPTS[:2], "never")
    ref = np.vstack(reference_logprobs(lm.model, tok, SMOL_PROMPTS[:2], "never"))
    no_space = PLANTED["plain answer without its leading space"][1](tok, plain_req)
    assert np.abs(answer_logprobs(lm.model, no_space, batch_size=1) - ref).max() > 0.1


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


@pytest.mark.parametrize("chat", ["always", "never"])
def test_per_prompt_option_sets_letters_and_full_texts_equal_the_naive_reference(tiny_llama, tiny_tokenizer, texts, chat):
    """Option sets that differ per prompt (two to four options, one token or several) score like whole sequences."""
    options = [("A", "B", "C", "D"), ("Yes", "No"), ("Yes indeed", "No never", "maybe"), ("B", "A")] * 4
    options = options[: len(texts)]
    req = build_requests(tiny_tokenizer, texts, chat, options)
    batches = plan_batches([len(p) for p in req.prompt_ids], 3)
    got = [None] * len(texts)
    for r in score_batches(tiny_llama, req, batches, progress=False):
        for i, lp in zip(r.indices, r.logprobs):
            got[i] = lp
    ref = reference_logprobs(tiny_llama, tiny_tokenizer, texts, chat, options)
    for g, e, o in zip(got, ref, options):
        assert len(g) == len(o) and np.abs(g - e).max() < 1e-4


def test_system_message_goes_to_the_system_turn_or_the_user_turn_when_refused(tiny_tokenizer, texts):
    req = build_requests(tiny_tokenizer, texts[:1], "always", systems=["You are a careful judge."])
    text = tiny_tokenizer.decode(req.prompt_ids[0])
    assert "<|im_start|>system\nYou are a careful judge.<|im_end|>" in text and not req.system_in_user_turn
    strict = copy.deepcopy(tiny_tokenizer)
    strict.chat_template = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not "
                            "supported') }}{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    moved = build_requests(strict, texts[:1], "always", systems=["You are a careful judge."])
    assert moved.system_in_user_turn
    assert "<|im_start|>user\nYou are a careful judge.\n\n" in strict.decode(moved.prompt_ids[0])
    base = build_requests(tiny_tokenizer, texts[:1], "never", systems=["You are a careful judge."])
    assert tiny_tokenizer.decode(base.prompt_ids[0]).removeprefix("<s>").startswith("You are a careful judge.\n\nThere are")


def test_options_must_be_two_distinct_non_blank(tiny_tokenizer, texts):
    for bad in [("Yes",), ("Yes", "Yes"), ("Yes", " ")]:
        with pytest.raises(ValueError, match="^options: prompt 0"):
            build_requests(tiny_tokenizer, texts[:1], "never", bad)


def test_choice_frame_columns_normalised_scores_and_correctness(tiny_tokenizer, texts):
    req = build_requests(tiny_tokenizer, texts[:3], "never", ("Yes indeed", "No"))
    lps = [np.array([-2.0, -1.5]), np.array([-3.0, -4.0]), np.array([-9.0, -5.0])]
    df = choice_frame(["a", "b", "c"], ChoiceItems(("Yes indeed", "No"), ["No", "Yes indeed", "Yes indeed"]), req, lps,
                      [False] * 3)
    ntok = len(req.option_ids[0][0])
    assert ntok > 1 and list(df["logp_yes_indeed"]) == [-2.0, -3.0, -9.0]
    assert np.allclose(df["norm_token_yes_indeed"], df["logp_yes_indeed"] / ntok)
    assert np.allclose(df["norm_char_no"], df["logp_no"] / len(" No"))
    assert list(df["choice"]) == ["No", "Yes indeed", "No"] and list(df["correct"]) == [True, True, False]
    assert list(df["margin"]) == [-0.5, 1.0, -4.0]
    assert "pred_yes" not in df, "pred_yes only for exactly Yes/No"
    per_row = choice_frame(["a", "b"], ChoiceItems([("x y", "z"), ("p", "q", "r")], None),
                           build_requests(tiny_tokenizer, texts[:2], "never", [("x y", "z"), ("p", "q", "r")]),
                           [np.array([-1.0, -2.0]), np.array([-3.0, -1.0, -2.0])], [False, True])
    assert {"logp_0", "logp_1", "logp_2"} <= set(per_row.columns) and np.isnan(per_row["logp_2"].iloc[0])
    assert per_row["margin"].iloc[1] == 1.0 and "correct" not in per_row
    # the options' total probability, each row over its own options; NaN where a log-prob cannot be read
    assert np.allclose(df["option_mass"], [np.exp(-2.0) + np.exp(-1.5), np.exp(-3.0) + np.exp(-4.0),
                                           np.exp(-9.0) + np.exp(-5.0)])
    assert np.allclose(per_row["option_mass"], [np.exp(-1.0) + np.exp(-2.0), np.exp([-3.0, -1.0, -2.0]).sum()])
    odd = choice_frame(["a", "b"], ChoiceItems(("Yes", "No"), None), build_requests(tiny_tokenizer, texts[:2], "never"),
                       [np.array([np.nan, -1.0]), np.array([-np.inf, -0.5])], [False, False])
    assert np.isnan(odd["option_mass"].iloc[0]) and odd["option_mass"].iloc[1] == np.exp(-0.5)


def test_option_mass_is_the_options_share_of_the_next_token_distribution(tiny_llama, tiny_tokenizer, texts):
    """With one-token options the recorded mass is the options' share of the full next-token softmax."""
    import torch

    req = build_requests(tiny_tokenizer, texts[:4], "never")
    lps = answer_logprobs(tiny_llama, req, batch_size=2)
    df = choice_frame(list(range(4)), ChoiceItems(("Yes", "No"), None), req, list(lps), [False] * 4)
    for i, ids in enumerate(req.prompt_ids):
        with torch.inference_mode():
            p = tiny_llama(input_ids=torch.tensor([ids])).logits[0, -1].float().softmax(-1)
        assert abs(df["option_mass"].iloc[i] - float(p[[a[0] for a in req.option_ids[i]]].sum())) < 1e-5


def test_option_names_and_answer_normalisation():
    assert option_names(("Yes", "No")) == ["yes", "no"] and option_names(("A", "B", "C")) == ["a", "b", "c"]
    assert option_names(("The cat sat on the mat today", "No")) == ["0", "1"]
    assert normalize_answer(" Yes. ") == "yes" and normalize_answer("No") == "no" and normalize_answer("B.") == "b"


# ---------------------------------------------------------------- split precision

@pytest.mark.parametrize("model_name", ["tiny_llama", "tiny_gpt2"])
@pytest.mark.parametrize("chat", ["always", "never"])
def test_split_precision_with_a_float32_head_equals_the_whole_float32_pass(request, tiny_tokenizer, texts, model_name, chat):
    """The split's cache hand-over (left padding, position ids, multi-token options) changes nothing by itself:
    with a float32 model on both sides it equals the naive whole-sequence reference."""
    model = request.getfixturevalue(model_name)
    twin = copy.deepcopy(model)  # a distinct module, so a mix-up of the two sides would still be exact: see below
    options = [("Yes", "No"), ("Yes indeed", "No never", "maybe")] * (len(texts) // 2)
    for opts in (("Yes", "No"), options):
        req = build_requests(tiny_tokenizer, texts, chat, opts)
        batches = plan_batches([len(p) for p in req.prompt_ids], 3)  # left padding inside batches
        got = [None] * len(texts)
        for r in score_batches(twin, req, batches, reference=model, tail=5, progress=False):
            for i, lp in zip(r.indices, r.logprobs):
                got[i] = lp
        ref = reference_logprobs(model, tiny_tokenizer, texts, chat, opts)
        for g, e in zip(got, ref):
            assert np.abs(g - e).max() < 1e-4


def test_split_precision_runs_the_tail_in_the_reference_and_the_head_in_the_fast_model(tiny_llama, tiny_tokenizer, texts):
    """bf16 head + float32 tail: scores differ from float32 (the head really is bf16) and from whole bf16 (the tail
    really is float32); prompts no longer than the tail are scored whole in float32."""
    req = build_requests(tiny_tokenizer, texts, "never")
    fast = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    batches = plan_batches([len(p) for p in req.prompt_ids], 2)
    exact = answer_logprobs(tiny_llama, req, batch_size=2)
    whole = answer_logprobs(fast, req, batch_size=2)
    split = np.zeros_like(exact)
    for r in score_batches(fast, req, batches, reference=tiny_llama, tail=4, progress=False):
        split[r.indices] = np.vstack(r.logprobs)
    assert np.abs(split - exact).max() > 1e-6 and np.abs(split - whole).max() > 1e-6
    longest = max(len(p) for p in req.prompt_ids)
    for r in score_batches(fast, req, batches, reference=tiny_llama, tail=longest, progress=False):
        assert np.abs(np.vstack(r.logprobs) - exact[r.indices]).max() < 1e-5, "too short to split: float32 whole"


def test_a_cache_without_keys_and_values_cannot_be_split():
    from nbutils.engine.split import cast_cache

    class Recurrent:
        layers = [object()]

    with pytest.raises(TypeError, match="no key/value tensors"):
        cast_cache(Recurrent(), torch.float32)
    with pytest.raises(TypeError, match="no per-layer keys/values"):
        cast_cache(object(), torch.float32)
