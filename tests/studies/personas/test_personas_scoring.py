"""Scores of persona prompts through the engine equal the independent naive reference (tests/reference_scoring.py:
prompt + letter scored as one sequence, tokenized through the tokenizer's own chat template), with the persona in the
system turn, prefixed to the user turn when the template refuses a system message, and prefixed to the prompt for base
models; `correct` is the highest-log-prob letter against the gold letter."""
from __future__ import annotations

import json

import numpy as np
import pytest

from nbutils import studies
from nbutils.engine.choices import build_requests, render_chat
from nbutils.engine.models import load_model
from nbutils.engine.run import score_run
from nbutils.runstore import read_dataset
from nbutils.studies.personas import dataset
from reference_scoring import reference_logprobs

REFUSING = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
            "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("personas-run")
    params = dict(n_questions=4, n_null_personas=1, categories=["gender"], seed=0)
    dataset.write(dataset.make_dataset(**params), run, params)
    return run


def _reference(lm, data, chat_template):
    systems = [s if isinstance(s, str) else None for s in data["system"]]
    return reference_logprobs(lm.model, lm.tokenizer, data["text"].tolist(), chat_template,
                              [tuple(s) for s in data["scored"]], systems)


@pytest.mark.parametrize("chat_template", ["always", "never"])
def test_scores_equal_the_naive_reference(small_run, lm, chat_template, tmp_path):
    spec = studies.get("personas").spec
    scores, meta = score_run(small_run, lm, spec, chat_template=chat_template, progress=False, overwrite=True)
    data, _ = read_dataset(small_run, spec)
    assert len(scores) == len(data) == 4 * (1 + 4 + 1 + 1)
    ref = _reference(lm, data, chat_template)
    cols = ["logp_0", "logp_1", "logp_2", "logp_3"]  # per-row letter sets (A–D and A–B): columns by position
    for k, r in enumerate(ref):
        got = scores[cols].iloc[k].dropna().to_numpy()
        np.testing.assert_allclose(got, r, atol=2e-4)
    best = [data["scored"].iloc[k][int(np.argmax(r))] for k, r in enumerate(ref)]
    assert scores["choice"].tolist() == best
    assert (scores["correct"] == (scores["choice"] == data["gold"])).all()
    assert meta["used_chat_template"] == (chat_template == "always") and meta["system_in_user_turn"] is False
    # One forward pass per prompt is a property of the tokenizer, not of the study: the chat path scores bare
    # letters ("A"), one token each; the base path scores " A", which this tiny tokenizer splits into "Ġ" + "A",
    # so `never` exercises the engine's multi-token path (prefill once, score each option from the cache).
    req = build_requests(lm.tokenizer, data["text"].tolist(), chat_template, [tuple(s) for s in data["scored"]])
    assert meta["single_forward_pass"] == req.single_token == (chat_template == "always")


def test_the_persona_changes_the_prompt_only_through_the_system_turn(lm):
    df = dataset.make_dataset(n_questions=1, n_null_personas=0, categories=["religion"])
    base, persona = df.iloc[0], df.iloc[1]
    plain, _ = render_chat(lm.tokenizer, base["text"], None)
    with_persona, moved = render_chat(lm.tokenizer, persona["text"], persona["system"])
    assert not moved and with_persona.endswith(plain.removeprefix(lm.tokenizer.bos_token))
    assert f"<|im_start|>system\n{persona['system']}<|im_end|>" in with_persona


def test_a_template_that_refuses_a_system_message_gets_the_persona_in_the_user_turn(tmp_path, lm, tiny_model_dir):
    import shutil

    folder = tmp_path / "refusing"
    shutil.copytree(tiny_model_dir, folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["chat_template"] = REFUSING
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    refusing = load_model(str(folder), device="cpu", dtype="float32", threads=None)
    run = tmp_path / "run"
    params = dict(n_questions=2, n_null_personas=0, categories=["disability"], seed=1)
    dataset.write(dataset.make_dataset(**params), run, params)
    spec = studies.get("personas").spec
    scores, meta = score_run(run, refusing, spec, chat_template="always", progress=False)
    assert meta["system_in_user_turn"] is True
    data, _ = read_dataset(run, spec)
    ref = _reference(refusing, data, "always")
    for k, r in enumerate(ref):
        np.testing.assert_allclose(scores[["logp_0", "logp_1", "logp_2", "logp_3"]].iloc[k].dropna().to_numpy(), r, atol=2e-4)
    text, moved = render_chat(refusing.tokenizer, data["text"].iloc[-1], data["system"].iloc[-1])
    assert moved and f"<|im_start|>user\n{data['system'].iloc[-1]}\n\n" in text
