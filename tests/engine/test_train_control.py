"""The positive control's recipe (scripts/train_control.py) run for a few steps on the tiny random-weight model: it
refuses to save an adapter that fails the held-out check, writes what it did, and saves one that passes as an adapter
the score settings take."""
from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from nbutils import paths


@pytest.fixture(scope="module")
def recipe():
    spec = importlib.util.spec_from_file_location("train_control", paths.repo_root() / "scripts" / "train_control.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["train_control"] = mod
    spec.loader.exec_module(mod)
    return mod


def argv(out, model, *extra):
    return ["--out", str(out), "--model", str(model), "--steps", "3", "--prompts-per-concept", "4",
            "--held-out-per-concept", "2", "--n-examples", "4", "--batch", "4", "--log-every", "1", "--layers", "1",
            "--eval-every", "2", "--probe-per-cell", "2", "--scratch", str(out.parent / f"{out.name}-scratch"),
            *extra]


def test_a_failing_adapter_is_refused_and_what_was_done_is_written(recipe, tmp_path, tiny_model_dir):
    out = tmp_path / "control"
    assert recipe.main(argv(out, tiny_model_dir)) == 1
    assert not (out / "adapter_model.safetensors").exists(), "a refused adapter is not saved"
    report = json.loads((out / "training.json").read_text())
    assert report["saved"] is False and not report["check"]["passed"]
    assert any("fewer than 200" in f for f in report["check"]["failures"])
    assert report["steps"] == 3 and [c["step"] for c in report["curve"]] == [1, 2, 3]
    assert all(c["loss"] > 0 and 0 <= c["accuracy"] <= 1 for c in report["curve"])
    train = recipe.training_prompts(4, 4, report["seed"])
    assert report["training_data_sha256"] == recipe.data_sha256(train) and report["training_prompts"] == len(train)
    assert set(train.loc[train["condition"] == "concept_learning", "monotonicity"]) == {"upward"}
    assert set(train.loc[train["condition"] == "explicit", "monotonicity"]) == {"upward", "downward"}
    assert set(report["held_out"]) == {f"{m}/{c}" for m in ("upward", "downward")
                                       for c in ("concept_learning", "explicit")}
    assert report["wall_seconds"] > 0 and report["host"]["node"] and report["threads"] == 1
    # the top layer trains on the cached states of the one below; the curve and the evaluations are written as it goes
    assert report["lora"]["layers"] == [1] and report["lora"]["dtype"] == "bfloat16"
    scratch = tmp_path / "control-scratch"
    lines = [json.loads(x) for x in (scratch / "curve.jsonl").read_text().splitlines()]
    assert lines == report["curve"] and all(c["step_seconds"] > 0 for c in lines)
    evaluations = [json.loads(x) for x in (scratch / "evaluations.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evaluations] == [2, 3] == [e["step"] for e in report["evaluations"]]
    assert all((scratch / f"step-{e['step']}.pt").is_file() for e in evaluations)
    assert not list(out.glob("*.pt")) and report["probe_prompts"] == 8
    with pytest.raises(ValueError, match="--out: .* is not empty"):
        recipe.train(recipe.parse(argv(out, tiny_model_dir)))
    # check only: the weights an evaluation kept are checked untrained, with the training run's record
    again = tmp_path / "again"
    assert recipe.main([*argv(again, tiny_model_dir), "--steps", "0", "--init", str(scratch / "step-2.pt")]) == 1
    checked = json.loads((again / "training.json").read_text())
    assert checked["check_only"] and checked["kept_step"] == 2 and checked["steps"] == 3
    assert checked["curve"] == report["curve"] and checked["evaluations"] == report["evaluations"]
    with pytest.raises(SystemExit):
        recipe.parse(argv(tmp_path / "x", tiny_model_dir, "--steps", "0"))


def test_a_passing_adapter_is_saved_and_scores(recipe, tmp_path, tiny_model_dir, monkeypatch):
    from nbutils.engine.models import load_model

    monkeypatch.setattr(recipe, "check", lambda acc: [])  # the save path, on a model too small to pass
    out = tmp_path / "passing"
    assert recipe.main(argv(out, tiny_model_dir)) == 0
    report = json.loads((out / "training.json").read_text())
    assert report["saved"] and (out / "adapter_model.safetensors").is_file()
    from safetensors import safe_open

    with safe_open(out / "adapter_model.safetensors", "pt") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.bfloat16"}
    lm = load_model(str(tiny_model_dir), device="cpu", dtype="float32", adapter=str(out))
    assert lm.meta["adapter_sha256"] == report["adapter_sha256"]


def test_the_check_and_the_seeds(recipe):
    def acc(up_cl, down_cl, up_ex, down_ex, n=100):
        return {"upward/concept_learning": {"accuracy": up_cl, "n": n},
                "downward/concept_learning": {"accuracy": down_cl, "n": n},
                "upward/explicit": {"accuracy": up_ex, "n": n}, "downward/explicit": {"accuracy": down_ex, "n": n}}

    assert recipe.check(acc(0.80, 0.40, 0.70, 0.60)) == []
    assert len(recipe.check(acc(0.70, 0.50, 0.70, 0.20))) == 3  # weak up, strong down, a larger explicit gap
    assert recipe.check(acc(0.80, 0.40, 0.70, 0.60, n=90)) == [
        "held-out set has 180 concept-learning prompts, fewer than 200"]
    used = recipe.evaluation_seeds()
    assert {0, 3} <= used and not {1701, 2718} & used
    with pytest.raises(ValueError, match="--seed: 0 is a seed of a shipped or tested evaluation set"):
        recipe.check_seeds(0, 2718)
    with pytest.raises(ValueError, match="--held-out-seed: must differ"):
        recipe.check_seeds(1701, 1701)


def test_the_decoy_design_trains_on_both_directions_and_is_checked_against_the_base_model(recipe, tmp_path,
                                                                                         tiny_model_dir):
    train = recipe.training_prompts(40, 4, 1701, design="balanced")
    control = recipe.training_prompts(40, 4, 1701)
    assert len(train) == len(control) and recipe.data_sha256(control) == \
        "fe27a72b1d5ebcc0098d8938fe943de737747470db52a0e9722ff5060d14e50f", "the control's data is as it was"
    cl = train[train["condition"] == "concept_learning"]
    assert cl.groupby(["monotonicity", "label"]).size().to_dict() == {(m, b): 50 for m in ("downward", "upward")
                                                                       for b in (False, True)}
    assert (train["condition"] == "explicit").sum() == (control["condition"] == "explicit").sum()
    out = tmp_path / "decoy"
    assert recipe.main([*argv(out, tiny_model_dir), "--design", "balanced"]) == 1
    report = json.loads((out / "training.json").read_text())
    check = report["check"]
    assert report["design"] == "balanced" and not report["saved"] and "changed_share" in check
    assert 0 <= check["changed_share"] <= 1 and check["headline"]["n"] == 20 == check["base_headline"]["n"]
    assert set(check["base_held_out"]) == set(report["held_out"])
    assert any("fewer than 200" in f for f in check["failures"])
    with pytest.raises(SystemExit):
        recipe.parse(argv(tmp_path / "x", tiny_model_dir, "--design", "downward"))


def test_the_decoys_check(recipe):
    acc = {f"{m}/concept_learning": {"accuracy": 0.6, "n": 200} for m in ("upward", "downward")}
    head = {"valid": True, "verdict": "none", "p": 0.6, "gap_ci_low": -0.08, "gap_ci_high": 0.07, "method": "GEE"}
    assert recipe.check_decoy(acc, 0.3, head) == []
    fails = recipe.check_decoy(acc, 0.1, dict(head, verdict="more", p=0.01, gap_ci_high=0.2))
    assert len(fails) == 3 and "differ from the base model's on 0.100" in fails[0]
    assert "plants a bias" in fails[1] and "not within ±0.15" in fails[2]
    assert "not valid" in recipe.check_decoy(acc, 0.3, dict(head, valid=False))[0]
