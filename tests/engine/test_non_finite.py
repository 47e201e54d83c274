"""Log-probabilities that overflow (NaN or inf) never reach a score file: refused with the setting to change, or,
where a float32 twin exists, re-scored in float32. The model overflows for real: a tiny Llama whose MLP weights are
scaled so its residual stream exceeds float16's range (±65,504) while float32 and bfloat16 hold it."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from nbutils import paths, runstore, studies
from nbutils.engine import run as scoring
from nbutils.engine.models import load_model
from nbutils.engine.settings import non_finite_message

SPEC = studies.get("monotonicity").spec


@pytest.fixture(scope="module")
def overflowing_dir(tmp_path_factory, tiny_llama, tiny_tokenizer):
    net = copy.deepcopy(tiny_llama)
    with torch.no_grad():
        for layer in net.model.layers:  # weights stay small (|w| < 30); activations reach ~1e5
            for lin in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
                lin.weight.mul_(300)
    d = tmp_path_factory.mktemp("overflowing-llama")
    net.save_pretrained(d)
    tiny_tokenizer.save_pretrained(d)
    return d


def _run(tmp_path, tiny_run):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("prompts.parquet", "prompts.json"):
        (run / name).write_bytes((tiny_run / name).read_bytes())
    return run


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_float16_overflow_is_refused_naming_dtype_and_nothing_is_written(tmp_path, tiny_run, overflowing_dir, device):
    run = _run(tmp_path, tiny_run)
    exact, meta = scoring.score_run(run, load_model(str(overflowing_dir), device=device, dtype="float32"), SPEC,
                                    limit=8, progress=False)
    assert meta["complete"] and np.isfinite(exact[["logp_yes", "logp_no"]].to_numpy()).all(), "float32 holds it"
    lm = load_model(str(overflowing_dir), device=device, dtype="float16", rescore_margin=0)
    with pytest.raises(ValueError, match=r"^dtype: float16: \d+ of \d+ rows scored here \(first: '.+'\) have "
                                         r"log-probabilities that are NaN or inf: .*overflow float16's range.*"
                                         r"Use dtype: bfloat16"):
        scoring.score_run(run, lm, SPEC, limit=8, checkpoint_every=1, progress=False)
    slug = paths.score_slug(lm.meta["model"], "auto", "float16")
    assert not list(paths.scores_dir(run).rglob(f"{slug}*")), "no score file, no checkpoint"


def test_with_a_float32_twin_overflowed_prompts_are_rescored_in_float32(tmp_path, tiny_run, overflowing_dir):
    run = _run(tmp_path, tiny_run)
    exact, _ = scoring.score_run(run, load_model(str(overflowing_dir), device="cpu", dtype="float32"), SPEC,
                                 limit=8, progress=False)
    for margin in (0.01, "auto"):
        lm = load_model(str(overflowing_dir), device="cpu", dtype="float16", rescore_margin=margin)
        df, meta = scoring.score_run(run, lm, SPEC, limit=8, calibration_size=2, progress=False, overwrite=True)
        assert meta["complete"] and df["rescored"].all(), "every prompt overflowed, so every one is re-scored"
        assert np.abs(df[["logp_yes", "logp_no"]].to_numpy() - exact[["logp_yes", "logp_no"]].to_numpy()).max() < 1e-5
        assert (df["choice"] == exact["choice"]).all()
        if margin == "auto":
            assert meta["calibration_non_finite"] == len(df) and meta["calibration_size"] == 0, "none left to sample"


def test_any_scorer_record_with_nan_or_inf_is_found_and_the_message_names_the_setting():
    records = {3: {"logps": np.array([-1.0, np.nan]), "rescored": False}, 1: {"logps": np.array([-1.0, -2.0]),
                                                                             "rescored": True},
               7: {"token_logprobs": np.array([-0.5, -np.inf])}, 2: {"token_logprobs": np.array([-0.5])}}
    assert scoring.non_finite_rows(records) == [3, 7]
    assert non_finite_message("bfloat16", "8bit", 1, 4, "p1").startswith("quantization: 8bit: 1 of 4 rows")
    assert "Use quantization: 4bit" in non_finite_message("bfloat16", "8bit", 1, 4, "p1")
    assert non_finite_message("bfloat16", "none", 1, 4, "p1").startswith("dtype: bfloat16: 1 of 4 rows")
    assert "broken weights" in non_finite_message("float32", "4bit", 2, 4, "p1")
