"""A run directory with the demo's prompts and simulated answers, for tests of the analysis path without a model:
one score file per model, each written as the score notebook writes it (sidecar, sha256, consistent log-probs)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from nbutils import paths
from nbutils.runstore import write_scores

SAMPLE = paths.repo_root() / "outputs" / "samples" / "monotonicity"


def simulated_run(root: Path, answers: dict, labels: dict | None = None) -> Path:
    """``root/run`` holding the demo's prompts and, for each model name of ``answers`` (in order, each written a
    second after the last), a score file whose correct answers are ``answers[name](prompts)``; ``labels``: the label
    a model's sidecar records (by name; none for the others)."""
    run = root / "run"
    (run / "scores").mkdir(parents=True)
    for name in ("prompts.parquet", "prompts.json"):
        shutil.copy(SAMPLE / name, run / name)
    prompts = pd.read_parquet(run / "prompts.parquet")
    src = SAMPLE / "scores" / "smollm2-135m-instruct"
    template = pd.read_parquet(src.with_suffix(".parquet")).set_index("prompt_id").loc[prompts["prompt_id"]]
    meta = json.loads(src.with_suffix(".json").read_text())
    for i, (model, correct_of) in enumerate(answers.items()):
        correct = np.asarray(correct_of(prompts), dtype=bool)
        pred = np.where(correct, prompts["label"], ~prompts["label"])
        yes, no = np.where(pred, -1.0, -2.0), np.where(pred, -2.0, -1.0)  # log-probs that give the answer ``pred``
        scores = template.reset_index().assign(
            pred_yes=pred, correct=correct, margin=yes - no, label=prompts["label"].to_numpy(),
            **{f"{k}_yes": yes for k in ("logp", "norm_token", "norm_char")},
            **{f"{k}_no": no for k in ("logp", "norm_token", "norm_char")},
            **{c: np.where(pred, "Yes", "No") for c in ("choice", "choice_norm_token", "choice_norm_char")},
            **{c: correct for c in ("correct_norm_token", "correct_norm_char")})
        write_scores(scores, dict(meta, model=model, created=f"2026-01-01T00:00:{i:02d}+00:00",
                                  label=(labels or {}).get(model)),
                     run / "scores" / f"{model}.parquet")
    return run


def comparable_bytes(path: Path) -> bytes:
    """A run file's bytes, for comparing two runs of the same sweep: summary.json's without the time it was analysed
    (the one field two runs may not share)."""
    if path.name != "summary.json":
        return path.read_bytes()
    summary = json.loads(path.read_text())
    assert summary.pop("analysed")
    return json.dumps(summary).encode()


TWIN_CONCEPTS = [f"{q} than {t}" for t in ("1/4", "1/3", "1/2", "2/3", "3/4") for q in ("more", "less")]


def twin_run(root: Path, answers: dict, prompts_per_concept: int = 12) -> Path:
    """``root/run`` holding the control's design with every twin (``prompts_per_concept`` per concept and condition, 4
    examples) and, for each model name of ``answers``, a score file whose Yes answers are ``answers[name](prompts)``
    (written as the score notebook writes it)."""
    from nbutils.studies.monotonicity import dataset

    run = root / "run"
    (run / "scores").mkdir(parents=True)
    kinds = ["label_flip", "threshold_shift", "copy"]
    params = dataset.parameters(TWIN_CONCEPTS, ["concept_learning", "explicit"], prompts_per_concept, 4, 0,
                                twins=kinds)
    prompts = dataset.generate_prompts(**params)
    written = dataset.write_prompts(prompts, run, params)
    meta = json.loads((SAMPLE / "scores" / "smollm2-135m-instruct.json").read_text())
    for i, (model, yes_of) in enumerate(answers.items()):
        pred = np.asarray(yes_of(prompts), dtype=bool)
        label = prompts["label"].to_numpy(dtype=bool)
        yes, no = np.where(pred, -1.0, -2.0), np.where(pred, -2.0, -1.0)
        words = np.where(pred, "Yes", "No")
        scores = pd.DataFrame({"prompt_id": prompts["prompt_id"], "logp_yes": yes, "logp_no": no,
                               "norm_token_yes": yes, "norm_token_no": no, "norm_char_yes": yes, "norm_char_no": no,
                               "margin": yes - no, "choice": words, "choice_norm_token": words,
                               "choice_norm_char": words, "pred_yes": pred, "label": label,
                               "correct": pred == label, "correct_norm_token": pred == label,
                               "correct_norm_char": pred == label, "n_tokens": 100, "rescored": False})
        write_scores(scores, dict(meta, model=model, created=f"2026-01-01T00:00:{i:02d}+00:00", label=None,
                                  dataset_sha256=written["sha256"]), run / "scores" / f"{model}.parquet")
    return run
