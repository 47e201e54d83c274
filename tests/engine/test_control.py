"""The positive control (adapters/smollm2-135m-upward-control) scored on a small held-out set of its own dataset's
design: the headline test finds its planted bias, upward concepts learned better than downward ones."""
from __future__ import annotations

import json

import yaml

from nbutils import paths
from nbutils.engine import run as scoring
from nbutils.engine.models import load_model
from nbutils.studies import get
from nbutils.studies.monotonicity import dataset, stats
from nbutils.studies.monotonicity.scores import load_scores

ROOT = paths.repo_root()
MODEL_FILE = ROOT / "params" / "models" / "smollm2-135m-upward-control.yaml"
DATASET_FILE = ROOT / "params" / "monotonicity" / "datasets" / "control.yaml"
ADAPTER = ROOT / "adapters" / "smollm2-135m-upward-control"
# concept-learning prompts per concept: at the held-out accuracies in training.json (upward ≥ 75%, downward ≤ 45%),
# 4 per concept (40 prompts over 5 thresholds) find the gap at α = .05 with ≥ 80% power (the README's simulation)
PER_CONCEPT = 4


def test_the_control_model_file_names_the_shipped_adapter_and_its_dataset_its_training():
    setting = yaml.safe_load(MODEL_FILE.read_text())
    assert (ROOT / setting["adapter"]).resolve() == ADAPTER.resolve() and (ADAPTER / "adapter_config.json").is_file()
    slug = paths.score_slug(setting["model"], setting["quantization"], setting["dtype"], str(ADAPTER))
    assert "control" in slug
    trained = json.loads((ADAPTER / "training.json").read_text())
    assert trained["saved"] and trained["check"]["passed"]
    assert yaml.safe_load(DATASET_FILE.read_text())["n_examples"] == trained["n_examples"]


def test_the_headline_finds_the_planted_bias(tmp_path):
    params = yaml.safe_load(DATASET_FILE.read_text())
    prompts = dataset.generate_prompts(params["concepts"], ["concept_learning"], PER_CONCEPT, params["n_examples"],
                                       params["seed"])
    run = tmp_path / "run"
    dataset.write_prompts(prompts, run, dataset.parameters(params["concepts"], ["concept_learning"], PER_CONCEPT,
                                                           params["n_examples"], params["seed"]))
    setting = yaml.safe_load(MODEL_FILE.read_text())
    lm = load_model(setting["model"], device="cpu", dtype="float32", adapter=str(ADAPTER))
    scoring.score_run(run, lm, get("monotonicity").spec, progress=False)
    scores = load_scores(run)
    mixed = stats.mixed_model(scores)  # the analysis's headline test (the GLMM with R, the GEE without)
    head = mixed[mixed["headline"] & (mixed["term"] == "upward")].iloc[0]
    assert head["valid"] and head["odds_ratio"] > 1 and head["p"] < 0.05, head.to_dict()
    accuracy = scores.groupby("monotonicity")["correct"].mean()
    assert accuracy["upward"] > accuracy["downward"], accuracy.to_dict()
