"""``nbutils.probe.score_choices``, the scoring call for a notebook cell: the same engine and settings as a score run,
so four prompts of the shipped custom sample, scored by the embedded model from its model file, give the sample's score
file's numbers exactly; mistakes are refused before a model loads; importing it needs no PyTorch."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from nbutils import paths
from nbutils.probe import score_choices

SAMPLE = paths.repo_root() / "outputs" / "samples" / "custom"
MODEL_FILE = "params/models/smollm2-135m-instruct.yaml"


def test_four_prompts_score_as_the_samples_score_run_did(capsys):
    items = pd.read_parquet(SAMPLE / "items.parquet").iloc[[0, 4, 14, 18]]  # two groups, both gold answers
    scored = pd.read_parquet(SAMPLE / "scores" / "smollm2-135m-instruct.parquet").set_index("row_id").loc[
        items["row_id"]]
    assert json.loads((SAMPLE / "scores" / "smollm2-135m-instruct.json").read_text())["dtype"] == "float32"
    got = score_choices(MODEL_FILE, items["text"].tolist(), ["Yes", "No"], gold=items["answer"].tolist(),
                        system=items["system"].tolist())
    assert "scoring: 100%" in capsys.readouterr().err, "a progress bar"
    assert got["prompt"].tolist() == items["text"].tolist()
    # float32 on another CPU sums in another order: the log-probs agree to 1e-4 (9.7e-6 measured between an AMD EPYC
    # and an Intel Xeon host), the answers exactly
    for column in ("logp_yes", "logp_no", "margin", "norm_char_yes", "norm_char_no"):
        np.testing.assert_allclose(got[column].to_numpy(), scored[column].to_numpy(), rtol=0, atol=1e-4,
                                   err_msg=column)
    for column in ("choice", "correct", "n_tokens", "rescored"):
        assert got[column].tolist() == scored[column].tolist(), column
    assert got.attrs["settings"]["resolved"]["dtype"] == "float32" and got.attrs["scorer"]["used_chat_template"]


@pytest.mark.parametrize("kwargs,message", [
    ({"prompts": []}, "prompts: give at least one prompt"),
    ({"prompts": ["Is it?"], "options": "Yes"}, "options: a list of two or more answers"),
    ({"prompts": ["Is it?"], "options": ["Yes", "Yes"]}, "two or more different answers"),
    ({"prompts": ["a", "b"], "options": [["Yes", "No"]]}, "options: 1 option sets for 2 prompts"),
    ({"prompts": ["a", "b"], "gold": ["Yes"]}, "gold: 1 values for 2 prompts"),
    ({"prompts": ["a"], "gold": "Maybe"}, "gold: every gold answer must be one of its prompt's options"),
])
def test_mistakes_are_refused_before_the_model_loads(kwargs, message):
    with pytest.raises(ValueError, match=message):  # a model that does not exist would fail differently on load
        score_choices("no-such-model-anywhere", **kwargs)


def test_importing_the_probe_needs_no_torch():
    code = "import sys, nbutils.probe; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]
