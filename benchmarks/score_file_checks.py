"""What the run store's score-file checks cost: reading a 38,000-row score file for analysis with and without them.

    python benchmarks/score_file_checks.py --out benchmarks/results/score-file-checks.json

The paper design is 34,000 prompts per model; this file is a little larger. The prompts file is generated (19 concepts × 2 conditions × 1,000
prompts, 20 examples each); the score file is synthetic but consistent (log-probs drawn at random, every derived
column computed from them) and written by the run store, so its sidecar holds the sha256, row count and ids digest.
Timed: ``runstore.load_scores`` as analyses call it (sha256 of the file, coverage of the planned rows, derived columns
recomputed), against the same read with the checks switched off.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from nbutils import artifacts, paths, runstore, studies
from nbutils.studies.monotonicity import dataset as mono

CONCEPTS = [f"{d} than {t}" for d in ("more", "less") for t in
            ("1/2", "1/3", "2/3", "1/4", "3/4", "1/5", "2/5", "3/5", "4/5", "1/6")][:19]


def synthetic_scores(prompts: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    yes, no = rng.normal(-1, 1, len(prompts)), rng.normal(-1.2, 1, len(prompts))
    choice = np.where(yes >= no, "Yes", "No")
    label = prompts["label"].to_numpy(bool)
    return pd.DataFrame({"prompt_id": prompts["prompt_id"].to_numpy(), "logp_yes": yes, "logp_no": no,
                         "margin": yes - no, "choice": choice, "pred_yes": choice == "Yes", "label": label,
                         "correct": (choice == "Yes") == label, "n_tokens": 700, "rescored": False})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-concept", type=int, default=1000, help="prompts per concept and condition (even)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", help="write the report here (JSON)")
    args = ap.parse_args()
    spec = studies.get("monotonicity").spec
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        params = dict(concepts=CONCEPTS, conditions=["concept_learning", "explicit"],
                      prompts_per_concept=args.per_concept, n_examples=20, seed=0)
        prompts = mono.generate_prompts(**params)
        mono.write_prompts(prompts, run, params)
        meta = dict(model="synthetic", scorer="choices", id_column="prompt_id", complete=True, limit=None, limit_seed=0,
                    num_shards=1, shard_index=0,
                    dataset_file=spec.dataset_file, dataset_sha256=artifacts.sha256_file(paths.prompts_path(run)))
        runstore.write_scores(synthetic_scores(prompts), meta, paths.score_file(run, "synthetic"))

        def timed(fn) -> float:
            best = float("inf")
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t0)
            return best

        checked = timed(lambda: runstore.load_scores(run, spec))
        saved = (runstore.check_scores_file, runstore.coverage_problem, runstore.derived_problem)
        runstore.check_scores_file = runstore.coverage_problem = runstore.derived_problem = lambda *a, **k: None
        try:
            unchecked = timed(lambda: runstore.load_scores(run, spec))
        finally:
            runstore.check_scores_file, runstore.coverage_problem, runstore.derived_problem = saved
    report = {"rows": len(prompts), "repeats": args.repeats, "load_scores_seconds_checked": round(checked, 3),
              "load_scores_seconds_unchecked": round(unchecked, 3), "checks_seconds": round(checked - unchecked, 3),
              "versions": artifacts.versions()}
    print(report)
    if args.out:
        artifacts.write_json(report, args.out)


if __name__ == "__main__":
    main()
