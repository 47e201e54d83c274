"""Scores of a custom file through the engine equal the independent naive reference (tests/reference_scoring.py: prompt
+ option scored as one sequence, tokenized through the tokenizer's own chat template), for Yes/No, letters and full-text
options, in chat and base rendering; columns are named as study 1 names them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from nbutils import studies
from nbutils.engine.run import score_run
from nbutils.runstore import read_dataset
from nbutils.studies.custom import dataset
from reference_scoring import reference_logprobs

MC = [{"prompt": "Which is a colour?", "answer": "Blue.", "choices": ["Blue", "Table", "Seven apples"], "sys": "Be brief."},
      {"prompt": "Which is a number?", "answer": "seven apples", "choices": ["Chair", "Red", "Seven apples"], "sys": ""},
      {"prompt": "Does Alice have the desired quantity?", "answer": "a", "choices": ["Yes indeed", "No never", "Maybe"], "sys": ""}]
YN = [{"prompt": "There are 10 cats. Alice has 7 of the 10 cats. Does Alice have more than 1/2 of the cats?", "answer": "Yes."},
      {"prompt": "There are 8 dogs. Alice has 1 of the 8 dogs. Does Alice have more than 1/2 of the dogs?", "answer": "no"},
      {"prompt": "Is it raining?", "answer": "YES"}]

CASES = {  # name: rows, load parameters, the log-prob columns study 1's naming gives
    "yes_no": (YN, dict(system="Answer Yes or No."), ["logp_yes", "logp_no"]),
    "letters": (MC, dict(columns={"system": "sys"}, choices=3, option_format="letters"), ["logp_a", "logp_b", "logp_c"]),
    "full_text": (MC, dict(columns={"system": "sys"}, choices=3, option_format="text"), ["logp_0", "logp_1", "logp_2"]),
}


@pytest.mark.parametrize("chat_template", ["always", "never"])
@pytest.mark.parametrize("case", list(CASES))
def test_scores_equal_the_naive_reference(tmp_path, lm, case, chat_template):
    rows, kw, columns = CASES[case]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = dataset.load_items(path, **kw)
    run = tmp_path / "run"
    full = dict(dict(columns=None, choices=["Yes", "No"], option_format="text", group_by=[], system=None,
                     shuffle_options=False, seed=0), data_file=path, **kw)
    dataset.write_items(items, run, dataset.parameters(**full))
    spec = studies.get("custom").spec
    scores, meta = score_run(run, lm, spec, chat_template=chat_template, progress=False)
    assert [c for c in scores.columns if c.startswith("logp_")] == columns
    assert meta["used_chat_template"] == (chat_template == "always")

    data, _ = read_dataset(run, spec)
    per = [tuple(json.loads(s)) for s in data["scored"]]
    systems = [None if isinstance(v, float) else v for v in data["system"]] if "system" in data else None
    ref = reference_logprobs(lm.model, lm.tokenizer, data["text"].tolist(), chat_template, per, systems)
    got = scores[columns].to_numpy()
    np.testing.assert_allclose(got, np.vstack(ref), atol=2e-4)
    assert (scores["choice"] == [p[int(np.argmax(r))] for p, r in zip(per, ref)]).all()
    assert (scores["correct"] == (scores["choice"] == data["answer"])).all()
    if case == "yes_no":
        assert scores["label"].tolist() == [True, False, True]
        np.testing.assert_allclose(scores["margin"], got[:, 0] - got[:, 1], atol=1e-9)
    assert "Be brief." not in data["text"].iloc[0]  # a system message goes to the system turn, not into `text`
    assert meta["system_in_user_turn"] is False  # the tiny template accepts a system message
    assert {"norm_token_" + c[5:] for c in columns} <= set(scores.columns)


def test_system_message_changes_the_scores(tmp_path, lm):
    """The per-file system message reaches the model (a test that would pass if it were dropped is no test)."""
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in YN))
    plain = dataset.choice_items(dataset.load_items(path))
    with_sys = dataset.choice_items(dataset.load_items(path, system="Answer Yes or No."))
    texts = [r["prompt"] for r in YN]
    a = reference_logprobs(lm.model, lm.tokenizer, texts, "always", plain.options, plain.systems)
    b = reference_logprobs(lm.model, lm.tokenizer, texts, "always", with_sys.options, with_sys.systems)
    assert with_sys.systems == ["Answer Yes or No."] * 3 and not np.allclose(a, b)
