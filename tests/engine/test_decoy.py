"""The decoy (adapters/smollm2-135m-balanced-decoy) scored on a small held-out set of the positive control's design:
it changes the base model's answers, yet the headline test finds no gap between upward and downward concepts. The
instrument stays null on real weights that were fine-tuned on the same kind of data without the bias."""
from __future__ import annotations

import json

import numpy as np
import yaml

from nbutils import paths
from nbutils.engine import run as scoring
from nbutils.engine.models import load_model
from nbutils.studies import get
from nbutils.studies.monotonicity import dataset, stats
from nbutils.studies.monotonicity.scores import load_scores

ROOT = paths.repo_root()
MODEL_FILE = ROOT / "params" / "models" / "smollm2-135m-balanced-decoy.yaml"
DATASET_FILE = ROOT / "params" / "monotonicity" / "datasets" / "control.yaml"
ADAPTER = ROOT / "adapters" / "smollm2-135m-balanced-decoy"
PER_CONCEPT = 12  # concept-learning prompts per concept, as the control's test scores (120 prompts)


def test_the_decoy_model_file_names_the_shipped_adapter_and_its_training_passed_its_check():
    setting = yaml.safe_load(MODEL_FILE.read_text())
    assert (ROOT / setting["adapter"]).resolve() == ADAPTER.resolve() and (ADAPTER / "adapter_config.json").is_file()
    trained = json.loads((ADAPTER / "training.json").read_text())
    assert trained["design"] == "balanced" and trained["saved"] and trained["check"]["passed"]
    control = json.loads((ROOT / "adapters" / "smollm2-135m-upward-control" / "training.json").read_text())
    for key in ("model", "concepts", "n_examples", "training_prompts", "lora", "lr", "batch", "explicit_share",
                "curriculum"):  # the control's recipe, on other data
        assert trained[key] == control[key], key
    assert trained["steps"] == control["kept_step"]
    params = yaml.safe_load(DATASET_FILE.read_text())
    assert params["seed"] not in (trained["seed"], trained["held_out_seed"])


def score(run, adapter):
    setting = yaml.safe_load(MODEL_FILE.read_text())
    lm = load_model(setting["model"], device="cpu", dtype="float32", adapter=adapter)
    scoring.score_run(run, lm, get("monotonicity").spec, progress=False)
    return load_scores(run)


def test_the_decoy_changes_the_answers_and_the_headline_reads_null(tmp_path):
    params = yaml.safe_load(DATASET_FILE.read_text())
    prompts = dataset.generate_prompts(params["concepts"], ["concept_learning"], PER_CONCEPT, params["n_examples"],
                                       params["seed"])
    meta = dataset.parameters(params["concepts"], ["concept_learning"], PER_CONCEPT, params["n_examples"],
                              params["seed"])
    runs = {}
    for name, adapter in (("decoy", str(ADAPTER)), ("base", None)):
        runs[name] = tmp_path / name
        dataset.write_prompts(prompts, runs[name], meta)
    decoy = score(runs["decoy"], str(ADAPTER)).sort_values("prompt_id")
    base = score(runs["base"], None).sort_values("prompt_id")
    changed = np.mean(decoy["pred_yes"].to_numpy() != base["pred_yes"].to_numpy())
    assert changed >= 0.2, f"the decoy changes only {changed:.0%} of the base model's answers"
    records = stats.records({"mixed_model": stats.mixed_model(decoy), "gap_pooled": stats.pooled_gap(decoy, n_boot=200)})
    heads = [r for r in records if r.get("headline") and r.get("valid", True) and r.get("term") == "upward"
             and r.get("condition") in (None, "concept_learning")]
    assert heads, records
    assert all(h["p"] >= 0.05 for h in heads), heads
