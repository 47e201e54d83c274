"""Calibration of the tests behind a verdict's meaning (``nbutils.studies.common.verdicts``), by simulation.

Simulated responders answer the real prompts of a design (made by the study's own generator), one answer per prompt:

- responders that **ignore the examples** (the examples test's null): a fair coin, a coin that says Yes 80% of the
  time, a soft prior on the query (P(Yes) = logistic(7.1 · (proportion − ½)), the slope measured on the control
  adapter), a sharp prior (Yes above ½, 5% of answers flipped) and the soft prior with a random shift per prompt;
- responders that **use** them: a learner right 85% and one right 65% of the time on every concept, and one that
  learns upward concepts (90% right) but not downward ones (50%).

For each responder, design and condition it reports how often the examples test (Rao score test of the gold labels
beyond a cubic in the query's position) rejects at α = .05, and how often the task floor's one-sided exact binomial
test finds the responder above chance, each with its Monte-Carlo SE. Bounds: the examples test's false-positive rate
≤ 7.5% for every responder that ignores the examples; the floor's ≤ 7.5% for the responders at chance (the coins).

    python benchmarks/calibration_verdicts.py --n-sims 200 --out benchmarks/results/calibration_verdicts.json
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from nbutils import artifacts
from nbutils.studies.common import verdicts
from nbutils.studies.monotonicity import dataset

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.05
FPR_MAX = 0.075
PROPORTIONS = ["1/4", "1/3", "1/2", "2/3", "3/4"]
PAPER = [f"{k}/10" for k in range(1, 10)] + ["1/3", "1/4", "1/6"]
DESIGNS = {  # name → (concepts, prompts per concept and condition)
    "demo": ([f"{q} {t}" for t in PROPORTIONS for q in ("more than", "less than")], 6),
    "study": ([f"{q} {t}" for t in PAPER for q in ("more than", "less than")], 50),
}
NULL = ("coin", "coin_yes80", "soft_prior", "sharp_prior", "prior_noise")
AT_CHANCE = ("coin", "coin_yes80")
LEARNERS = ("learner85", "learner65", "upward_learner")


def design(name: str) -> pd.DataFrame:
    """The design's prompts, both conditions, from the study's generator (seed 0)."""
    concepts, ppc = DESIGNS[name]
    return dataset.generate_prompts(concepts, prompts_per_concept=ppc, n_examples=4, seed=0)


def respond(kind: str, d: pd.DataFrame, rng: np.random.Generator) -> np.ndarray:
    """One simulated responder's Yes answers to the prompts of ``d``."""
    n = len(d)
    q = verdicts.query_position(d).to_numpy(dtype=float)
    label = d["label"].to_numpy(dtype=bool)
    up = (d["monotonicity"] == "upward").to_numpy()

    def right_with(p):
        return np.where(rng.random(n) < p, label, ~label)

    if kind == "coin":
        return rng.random(n) < 0.5
    if kind == "coin_yes80":
        return rng.random(n) < 0.8
    if kind == "soft_prior":
        return rng.random(n) < 1 / (1 + np.exp(-7.1 * (q - 0.5)))
    if kind == "sharp_prior":
        return (q > 0.5) ^ (rng.random(n) < 0.05)
    if kind == "prior_noise":
        return rng.random(n) < 1 / (1 + np.exp(-(7.1 * (q - 0.5) + rng.normal(0, 1, n))))
    if kind == "learner85":
        return right_with(0.85)
    if kind == "learner65":
        return right_with(0.65)
    if kind == "upward_learner":
        return right_with(np.where(up, 0.9, 0.5))
    raise ValueError(f"responder: one of {NULL + LEARNERS}, got {kind!r}")


def run(n_sims: int, seed: int, designs=tuple(DESIGNS), kinds=NULL + LEARNERS) -> list[dict]:
    """The rejection rates per design × responder × condition."""
    rows = []
    for name in designs:
        prompts = design(name)
        for ki, kind in enumerate(kinds):
            rng = np.random.default_rng([seed, ki, len(prompts)])
            hits: dict[tuple[str, str], list[bool]] = {}
            for _ in range(n_sims):
                yes = respond(kind, prompts, rng)
                d = prompts.assign(pred_yes=yes, correct=yes == prompts["label"].to_numpy(dtype=bool))
                for cond, g in d.groupby("condition"):
                    ex = verdicts.examples_test(g)
                    fl = verdicts.floor_test(g["correct"], g["label"])
                    hits.setdefault((cond, "examples"), []).append(bool(np.isfinite(ex["p"]) and ex["p"] < ALPHA))
                    hits.setdefault((cond, "floor"), []).append(bool(fl["p"] < ALPHA))
            for (cond, test), h in hits.items():
                rate = float(np.mean(h))
                rows.append({"design": name, "n_per_condition": int((prompts["condition"] == cond).sum()),
                             "responder": kind, "uses_examples": kind in LEARNERS, "at_chance": kind in AT_CHANCE,
                             "condition": cond, "test": test, "n_sims": len(h), "rate": rate,
                             "mc_se": float(np.sqrt(rate * (1 - rate) / len(h)))})
    return rows


def check(rows: list[dict], bound: float = FPR_MAX) -> list[str]:
    """The bounds that fail: the examples test on responders that ignore the examples, the floor on the coins."""
    bad = []
    for r in rows:
        if r["test"] == "examples" and not r["uses_examples"] and r["rate"] > bound:
            bad.append(f"examples test rejects {r['rate']:.3f} for {r['responder']} ({r['design']}, {r['condition']})")
        if r["test"] == "floor" and r["at_chance"] and r["rate"] > bound:
            bad.append(f"floor test rejects {r['rate']:.3f} for {r['responder']} ({r['design']}, {r['condition']})")
    return bad


def markdown(rows: list[dict]) -> str:
    """The rates as the statistics page prints them: one row per design and responder, pooled over conditions."""
    df = pd.DataFrame(rows)
    out = ["| design (prompts per condition) | responder | uses the examples | examples test rejects | floor test "
           "rejects |", "| --- | --- | --- | --- | --- |"]
    for (dz, kind), g in df.groupby(["design", "responder"], sort=False):
        def rate(test):
            s = g[g["test"] == test]
            return f"{100 * s['rate'].mean():.1f}%"
        out.append(f"| {dz} ({int(g['n_per_condition'].iloc[0])}) | {kind} | {'yes' if g['uses_examples'].iloc[0] else 'no'} "
                   f"| {rate('examples')} | {rate('floor')} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-sims", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20261127)
    ap.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    ap.add_argument("--bound", type=float, default=FPR_MAX)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = run(args.n_sims, args.seed, tuple(args.designs))
    bad = check(rows, args.bound)
    result = {"n_sims": args.n_sims, "seed": args.seed, "alpha": ALPHA, "bound": args.bound, "rows": rows,
              "failures": bad, "seconds": round(time.perf_counter() - t0, 1),
              "host": {"machine": platform.machine(), "python": platform.python_version()}}
    if args.out:
        artifacts.write_json(artifacts.json_clean(result), args.out)
    print(markdown(rows))
    for b in bad:
        print("FAIL:", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
