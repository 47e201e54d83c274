"""The positive control read by its twin prompts at study size: what the twins of a scored run show, as a results file.

Score the control on 400 concept-learning prompts with their label-flipped and threshold-shifted twins (the sweep of
``benchmarks/configs/control_twins_400.yaml``'s header), then

    python benchmarks/control_twins.py outputs/control_twins_400 --out benchmarks/results/control-twins-400.json

writes its headline test, its reading with the sentence, and every twin component (net share of pairs that follow,
95% and 90% CIs, p), with the scoring's wall time from the score file's sidecar.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nbutils import artifacts, paths
from nbutils.results import reading

ROOT = Path(__file__).resolve().parents[1]


def summarise(run) -> dict:
    """The run's concept-learning readings and twin components, per model."""
    summary = artifacts.read_json(paths.summary_path(run))
    out = {}
    for model, block in summary["models"].items():
        cond = (block.get("conditions") or {}).get("concept_learning") or {}
        if not cond.get("twins"):
            continue
        rd = reading(summary, model, "concept_learning")
        head = next(h for h in summary["headline"] if h["model"] == model and h["condition"] == "concept_learning"
                    and h["term"] == "upward" and not h.get("models"))
        out[model] = {"reading": rd["reading"], "sentence": rd["sentence"], "acc_up": cond["acc_up"],
                      "acc_down": cond["acc_down"], "n": cond["n"],
                      "headline": {k: head.get(k) for k in ("test", "estimate", "ci_low", "ci_high", "p", "valid")},
                      "twins": cond["twins"]}
    sides = {side.stem: artifacts.read_json(side) for side in paths.score_sidecars(run)}
    return {"models": out, "scoring": {k: {"rows": v.get("n_rows"), "seconds": v.get("elapsed_seconds"),
                                           "rows_per_second": v.get("rows_per_second")} for k, v in sides.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "control-twins-400.json")
    a = ap.parse_args(argv)
    res = summarise(a.run_dir)
    artifacts.write_json(res, a.out)
    for m, r in res["models"].items():
        print(f"{m}: {r['reading']}\n  {r['sentence']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
