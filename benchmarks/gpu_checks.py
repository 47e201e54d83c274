"""Does precision or batching change the scores? One ≥1B random-weight model, one set of prompts, every precision.

For each precision (float32, bfloat16, float16, bitsandbytes 8-bit and 4-bit NF4) the same prompts of mixed lengths
(concept-learning prompts with 4 to 20 examples) are scored twice: one prompt per batch, and batched as a run
batches them (``--batched``: ``auto`` packs the token budget the load probed, left-padded). The report gives

- **batch invariance** per precision: max and median |Δ log-prob| and max |Δ margin| between the two, the decisions
  that differ, and whether batching moves margins less than the precision's own error against the more exact one
  (float32: less than 1e-4); where it moves them more, padding or batching changes results and the engine needs a fix;
- **agreement** of each precision with the more exact one (bfloat16 and float16 against float32; 8-bit, 4-bit and
  float16 against bfloat16): max and median |Δ margin| and the share of identical decisions, one prompt per batch;
- **float16**: whether its error against float32 stays within bfloat16's, or how many prompts came out NaN or inf
  (where its activations overflow; a scoring run refuses those with an error naming ``dtype``).

Weights are random (nothing is downloaded), so decisions carry no meaning, but their margins spread like a real
model's (standard deviation of about one nat), which is what precision noise is measured against.

    python benchmarks/gpu_checks.py --n 200 --out benchmarks/results/gpu-h100-checks-smollm2-1.7b.json

``--device cpu`` with ``--layers`` / ``--override`` shrinks it to a quick check of the script (the tests do this).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from gpu_scale import add_model_arguments, build_from_args, gpu_device, load_precision, score_all
from nbutils import artifacts
from nbutils.engine.choices import build_requests
from nbutils.studies.monotonicity.dataset import generate_prompts

REFERENCE = {"bfloat16": "float32", "float16": "bfloat16", "8bit": "bfloat16", "4bit": "bfloat16"}


def mixed_prompts(n: int, seed: int = 7) -> list[str]:
    """``n`` concept-learning prompts whose example counts cycle through 4, 8, 12, 16 and 20 (mixed lengths)."""
    counts = (4, 8, 12, 16, 20)
    texts: list[list[str]] = []
    for k, n_examples in enumerate(counts):
        per = -(-n // (len(counts) * 4)) * 2  # prompts per concept: even, enough for this count's share
        df = generate_prompts(["more than 1/2", "less than 1/3"], prompts_per_concept=per, n_examples=n_examples,
                              conditions=["concept_learning"], seed=seed + k)
        texts.append(df["text"].tolist())
    mixed = [t for group in zip(*texts) for t in group]  # interleaved, so any prefix mixes the lengths too
    return mixed[:n]


def margin(lp: np.ndarray) -> np.ndarray:
    """Yes − No log-prob per prompt."""
    return lp[:, 0] - lp[:, 1]


def batch_invariance(single: np.ndarray, batched: np.ndarray) -> dict:
    """How far batching moved the log-probs and margins, and the decisions it flipped (with the largest |margin|
    among them: a flip is only possible where the margin is within the batching noise)."""
    finite = np.isfinite(single).all(1) & np.isfinite(batched).all(1)
    if not finite.any():
        return {"n_finite": 0}
    d = np.abs(single[finite] - batched[finite])
    m1, m2 = margin(single[finite]), margin(batched[finite])
    flips = (m1 > 0) != (m2 > 0)
    return {"n_finite": int(finite.sum()), "max_abs_dlogp": float(d.max()), "median_abs_dlogp": float(np.median(d)),
            "max_abs_dmargin": float(np.abs(m1 - m2).max()), "decisions_differing": int(flips.sum()),
            "largest_abs_margin_among_differing": float(np.abs(m1[flips]).max()) if flips.any() else None}


FLOAT32_BATCH_TOLERANCE = 1e-4  # nats: float32 batched vs one by one (reduction order alone; TF32 is off for matmuls)


def within_noise(report: dict) -> dict:
    """Per precision: is batching's |Δ margin| within that precision's own error against the more exact one (for
    float32, within ``FLOAT32_BATCH_TOLERANCE``)? False means padding or batching changes results: fix the engine."""
    out = {}
    for precision, row in report["precisions"].items():
        moved = row["batch_invariance"].get("max_abs_dmargin")
        if moved is None:
            continue
        if precision == "float32":
            out[precision] = {"batching_max_abs_dmargin": moved, "bound": FLOAT32_BATCH_TOLERANCE,
                              "within": moved <= FLOAT32_BATCH_TOLERANCE}
            continue
        ref = report["agreement"].get(f"{precision}_vs_{REFERENCE[precision]}", {}).get("max_abs_dmargin")
        if ref is not None:
            out[precision] = {"batching_max_abs_dmargin": moved, "bound": ref, "within": moved <= ref}
    return out


def agreement(low: np.ndarray, ref: np.ndarray) -> dict:
    """|Δ margin| and decision agreement of one precision against a more exact one (finite prompts only)."""
    finite = np.isfinite(low).all(1) & np.isfinite(ref).all(1)
    out = {"n_prompts": int(len(low)), "n_non_finite": int((~finite).sum())}
    if finite.any():
        dm = np.abs(margin(low[finite]) - margin(ref[finite]))
        out.update(max_abs_dmargin=float(dm.max()), median_abs_dmargin=float(np.median(dm)),
                   decision_agreement=float(((margin(low[finite]) > 0) == (margin(ref[finite]) > 0)).mean()))
    return out


def run_precision(folder: Path, precision: str, device: str, texts: list[str], batched) -> tuple[dict, dict]:
    """Score the prompts one per batch and batched; the scores, times and what the load recorded."""
    t = time.perf_counter()
    lm = load_precision(folder, precision, device)
    load_s = time.perf_counter() - t
    req = build_requests(lm.tokenizer, texts)
    score_all(lm, build_requests(lm.tokenizer, texts[:2]), 1)  # warm-up
    out = {"load_seconds": round(load_s, 1), "token_budget": lm.meta.get("token_budget"),
           "quantization_details": lm.meta.get("quantization_details"),
           "prompt_tokens_min_max": [min(map(len, req.prompt_ids)), max(map(len, req.prompt_ids))]}
    scores = {}
    for name, bs in (("single", 1), ("batched", batched)):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        scores[name] = score_all(lm, req, bs)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        out[f"{name}_seconds"] = round(time.perf_counter() - t, 2)
    out["non_finite_prompts"] = int((~np.isfinite(scores["single"]).all(1)).sum())
    out["batch_invariance"] = batch_invariance(scores["single"], scores["batched"])
    del lm
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out, scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(ap)
    ap.add_argument("--precisions", default="float32,bfloat16,float16,8bit,4bit")
    ap.add_argument("--n", type=int, default=200, help="prompts")
    ap.add_argument("--batched", default="auto", help="the batched run's batch_size: auto (the run's token budget) or N")
    args = ap.parse_args()
    batched = args.batched if args.batched == "auto" else int(args.batched)
    device = gpu_device(args.device, "gpu_checks.py")
    texts = mixed_prompts(args.n)
    report = {"device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
              "n_prompts": len(texts), "batched": args.batched, "versions": artifacts.versions(),
              "created": artifacts.now_utc(), "precisions": {}, "agreement": {}}
    if device.startswith("cuda"):
        report["cuda"] = torch.version.cuda
    scores = {}
    with tempfile.TemporaryDirectory() as tmp:
        report["model"] = build_from_args(args, Path(tmp), device)
        for precision in args.precisions.split(","):
            row, scores[precision] = run_precision(Path(tmp), precision, device, texts, batched)
            report["precisions"][precision] = row
            print(precision, json.dumps(row["batch_invariance"]), f"non-finite {row['non_finite_prompts']}", flush=True)
    ref_margins = margin(scores["float32"]["single"]) if "float32" in scores else None
    if ref_margins is not None:
        report["float32_margin_sd"] = float(np.std(ref_margins))
    for low, ref in REFERENCE.items():
        if low in scores and ref in scores:
            report["agreement"][f"{low}_vs_{ref}"] = agreement(scores[low]["single"], scores[ref]["single"])
    if "float16" in scores and "bfloat16" in scores and "float32" in scores:
        f16 = agreement(scores["float16"]["single"], scores["float32"]["single"])
        b16 = agreement(scores["bfloat16"]["single"], scores["float32"]["single"])
        report["agreement"]["float16_vs_float32"] = f16
        report["float16"] = {
            "non_finite_prompts": f16["n_non_finite"],
            "within_bfloat16_error": bool(f16["n_non_finite"] == 0 and "max_abs_dmargin" in f16
                                          and f16["max_abs_dmargin"] <= b16.get("max_abs_dmargin", 0.0)),
            "max_abs_dmargin_vs_float32": f16.get("max_abs_dmargin"),
            "bfloat16_max_abs_dmargin_vs_float32": b16.get("max_abs_dmargin")}
    report["batching_within_precision_noise"] = within_noise(report)
    print(json.dumps({k: report.get(k) for k in ("agreement", "float16", "batching_within_precision_noise")}, indent=1))
    if args.out:
        artifacts.write_json(report, args.out)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
