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
# concept-learning prompts per concept: resampling the control's sample (90% upward, 20% downward), the headline (or its
# stand-in) finds the gap at α = .05 in 87% of 200 simulated sets of 12 per concept (120 prompts), 72% with 8, 55% with 4
PER_CONCEPT = 12


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
    # the analysis's headline test of the concept-learning gap, or the stand-in it reports where that one is not
    # estimable (lme4's GLMM → the GEE → Mantel–Haenszel: a control that answers by the query can separate the data)
    records = stats.records({"mixed_model": stats.mixed_model(scores), "gap_pooled": stats.pooled_gap(scores, n_boot=200)})
    heads = [r for r in records if r.get("headline") and r.get("valid", True) and r.get("term") == "upward"
             and r.get("condition") in (None, "concept_learning")]
    assert heads, records
    assert all(h["estimate"] > 0 and h["p"] < 0.05 for h in heads), heads
    accuracy = scores.groupby("monotonicity")["correct"].mean()
    assert accuracy["upward"] > accuracy["downward"], accuracy.to_dict()
