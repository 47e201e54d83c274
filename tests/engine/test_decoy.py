"""The decoy (adapters/smollm2-135m-balanced-decoy): an adapter made by the positive control's recipe on balanced data,
scored on a small set of prompts of the control's design that neither adapter trained or was checked on: the headline
test reads null, where the control's reads its planted bias (test_control.py)."""
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
MODEL_FILE = ROOT / "params" / "models" / "smollm2-135m-balanced-decoy.yaml"
DATASET_FILE = ROOT / "params" / "monotonicity" / "datasets" / "control.yaml"
ADAPTER = ROOT / "adapters" / "smollm2-135m-balanced-decoy"
PER_CONCEPT = 12  # concept-learning prompts per concept, as the control's test: 120 prompts


def test_the_decoy_model_file_names_the_shipped_adapter_its_training_passed_its_check():
    setting = yaml.safe_load(MODEL_FILE.read_text())
    assert (ROOT / setting["adapter"]).resolve() == ADAPTER.resolve() and (ADAPTER / "adapter_config.json").is_file()
    trained = json.loads((ADAPTER / "training.json").read_text())
    control = json.loads((ROOT / "adapters" / "smollm2-135m-upward-control" / "training.json").read_text())
    assert trained["saved"] and trained["check"]["passed"] and trained["design"] == "balanced"
    assert trained["check"]["changed_share"] >= 0.2 and trained["check"]["headline"]["verdict"] == "none"
    assert trained["check"]["headline"]["n"] >= 200
    # the same recipe as the control: the same steps kept, examples, prompts and LoRA
    for key in ("n_examples", "training_prompts", "lora", "lr", "batch", "explicit_share", "curriculum", "kept_step"):
        assert trained[key] == control[key], key
    assert (ADAPTER / "adapter_model.safetensors").stat().st_size <= 10 * 2 ** 20
    params = yaml.safe_load(DATASET_FILE.read_text())
    assert params["seed"] not in (trained["seed"], trained["held_out_seed"])


def test_the_headline_reads_null_on_the_decoy(tmp_path):
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
    assert scores["pred_yes"].nunique() == 2, "the decoy answers both ways: a null that is not a constant answer"
    records = stats.records({"mixed_model": stats.mixed_model(scores), "gap_pooled": stats.pooled_gap(scores, n_boot=200)})
    heads = [r for r in records if r.get("headline") and r.get("term") == "upward"
             and r.get("condition") in (None, "concept_learning")]
    assert heads and all(h.get("valid", True) for h in heads), records
    assert all(h["p"] >= 0.05 for h in heads), heads
