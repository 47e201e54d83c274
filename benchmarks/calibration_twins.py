"""Calibration and power of the twin-prompt tests (``nbutils.studies.monotonicity.twins``), by simulation.

Simulated responders answer the real prompts of a design with twins (made by the study's own generator, a fresh
prompt set every run), one answer per prompt:

- responders that **ignore the examples** (every component's null): a fair coin, a coin that says Yes 80% of the
  time, a soft prior on the query (P(Yes) = logistic(7.1 · (proportion − ½)), the slope measured on the control
  adapter) and a sharp prior (Yes above ½, 10% of answers flipped);
- a responder that copies **the last example's label** (it uses the labels, not the threshold: the threshold
  components' null);
- responders that **use** them: a learner right 65% and one right 85% of the time on every prompt, and a mirror
  learner that answers "more than the examples' threshold" right 65% and 85% of the time (the papers' signature).

For each responder and design: how often each component's test rejects at α = .05 (labels; threshold, both
directions and the upward reading; prior; copy), and how often each reading (``readings.twin_evidence``) results.
Bounds: false positives ≤ 7.5% for every component whose null the responder satisfies; the learner 65% told from the
prior and the mirror (its reading ``learned``), and the mirror 65% from the prior (the threshold test) with ≥ 80%
power at the control's size.

    python benchmarks/calibration_twins.py --n-sims 200 --out benchmarks/results/calibration_twins.json
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from nbutils import artifacts
from nbutils.results._readings import twin_evidence
from nbutils.studies.common import verdicts
from nbutils.studies.monotonicity import dataset, twin_summary, twins

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.05
FPR_MAX = 0.075
POWER_MIN = 0.80
PROPORTIONS = ["1/4", "1/3", "1/2", "2/3", "3/4"]
CONCEPTS = [f"{q} {t}" for t in PROPORTIONS for q in ("more than", "less than")]
DESIGNS = {"control": 12, "study400": 40}  # prompts per concept: 120 and 400 concept-learning prompts, 4 examples
KINDS = ("label_flip", "threshold_shift", "copy")
NULL = ("coin", "coin_yes80", "soft_prior", "sharp_prior")
RESPONDERS = NULL + ("last_label", "learner65", "learner85", "mirror65", "mirror85")
# which components' null each responder satisfies (its false positives are counted there)
NULL_OF = {**{k: ("labels", "threshold", "upward_reading", "threshold_up", "threshold_down") for k in NULL},
           "last_label": ("threshold", "upward_reading", "threshold_up", "threshold_down")}
NULL_OF.update({k: NULL_OF[k] + ("copy",) for k in ("coin", "coin_yes80")})
NULL_OF["coin"] += ("prior",)
NULL_OF["coin_yes80"] += ("prior",)


def design(name: str, seed: int) -> pd.DataFrame:
    """The design's concept-learning prompts with every twin, from the study's generator."""
    return dataset.generate_prompts(CONCEPTS, conditions=["concept_learning"], prompts_per_concept=DESIGNS[name],
                                    n_examples=4, seed=seed, twins=list(KINDS))


def features(d: pd.DataFrame) -> dict:
    """Per prompt: the query's position, the gold answer, the threshold the examples are drawn around, and the last
    example's label."""
    q = verdicts.query_position(d).to_numpy(dtype=float)
    thr = d["twin_threshold"].where(d["twin"] == "threshold_shift", d["threshold"])
    t_ex = np.array([float(Fraction(str(t))) for t in thr])
    last = d["text"].str.split("\n").str[-2].str.rstrip(".").str.endswith("Yes").to_numpy()
    return {"q": q, "gold": d["label"].to_numpy(dtype=bool), "t_ex": t_ex, "last": last}


def respond(kind: str, f: dict, rng: np.random.Generator) -> np.ndarray:
    """One simulated responder's Yes answers."""
    n = len(f["q"])

    def right_with(p, truth):
        return np.where(rng.random(n) < p, truth, ~truth)

    if kind == "coin":
        return rng.random(n) < 0.5
    if kind == "coin_yes80":
        return rng.random(n) < 0.8
    if kind == "soft_prior":
        return rng.random(n) < 1 / (1 + np.exp(-7.1 * (f["q"] - 0.5)))
    if kind == "sharp_prior":
        return right_with(0.9, f["q"] > 0.5)
    if kind == "last_label":
        return right_with(0.9, f["last"])
    if kind.startswith("learner"):
        return right_with(int(kind[-2:]) / 100, f["gold"])
    if kind.startswith("mirror"):
        return right_with(int(kind[-2:]) / 100, f["q"] > f["t_ex"])
    raise ValueError(kind)


def one_run(d: pd.DataFrame, f: dict, kind: str, rng) -> dict:
    s = d[["prompt_id", "label", "monotonicity", "concept", "threshold", "twin", "twin_of"]].copy()
    s["model"] = kind
    s["pred_yes"] = respond(kind, f, rng)
    s["correct"] = s["pred_yes"] == s["label"]
    tab = twins.table(s)
    models: dict = {}
    twin_summary.summary_blocks(models, tab)
    block = models[kind]["conditions"]["concept_learning"]["twins"]
    thr = block["threshold"]
    out = {"labels": block["labels"]["p"], "threshold": thr["both"]["p"],
           "upward_reading": thr["both"].get("upward_reading_p", np.nan),
           "threshold_up": thr["upward"]["p"], "threshold_down": thr["downward"]["p"],
           "prior": block["prior"]["p"], "copy": block["copy"]["p"]}
    out = {k: bool(v < ALPHA) for k, v in out.items()}
    out["reading"] = twin_evidence(block, ALPHA)["kind"]
    out["n_threshold_pairs"] = thr["both"]["n"]
    return out


def run(n_sims: int, seed: int = 0, designs=tuple(DESIGNS), kinds=RESPONDERS, prompt_sets: int = 20) -> list[dict]:
    """Rejection rates per design × responder × component, and how often each reading results."""
    rows = []
    for name in designs:
        sets = [design(name, 1000 + i) for i in range(prompt_sets)]
        feats = [features(d) for d in sets]
        for kind in kinds:
            rng = np.random.default_rng([seed, RESPONDERS.index(kind), list(DESIGNS).index(name)])
            runs = [one_run(sets[i % prompt_sets], feats[i % prompt_sets], kind, rng) for i in range(n_sims)]
            frame = pd.DataFrame(runs)
            for comp in ("labels", "threshold", "upward_reading", "threshold_up", "threshold_down", "prior", "copy"):
                rate = float(frame[comp].mean())
                rows.append({"design": name, "responder": kind, "component": comp, "rate": rate,
                             "mc_se": float(np.sqrt(rate * (1 - rate) / n_sims)), "n_sims": n_sims,
                             "null": comp in NULL_OF.get(kind, ()),
                             "n_threshold_pairs": float(frame["n_threshold_pairs"].mean())})
            for rd in ("learned", "mirror", "prior", "undetermined"):
                rows.append({"design": name, "responder": kind, "component": f"reading:{rd}",
                             "rate": float((frame["reading"] == rd).mean()), "n_sims": n_sims, "null": False})
    return rows


def check(rows: list[dict]) -> list[str]:
    """The bounds the docstring states; each failure in words."""
    bad = []
    for r in rows:
        if r["null"] and r["rate"] > FPR_MAX:
            bad.append(f"{r['design']}/{r['responder']}/{r['component']}: false positives {r['rate']:.3f} > {FPR_MAX}")
    get = {(r["design"], r["responder"], r["component"]): r["rate"] for r in rows}
    for want, resp, comp in [("learned", "learner65", "reading:learned"), ("mirror", "mirror65", "upward_reading")]:
        rate = get.get(("control", resp, comp))
        if rate is not None and rate < POWER_MIN:
            bad.append(f"control/{resp}: {comp} {rate:.3f} < {POWER_MIN}")
    return bad


def markdown(rows: list[dict]) -> str:
    """The calibration and power table of the statistics page: one row per design × responder."""
    comps = ["labels", "threshold", "upward_reading", "prior", "copy"]
    reads = ["learned", "mirror", "prior", "undetermined"]
    head = ("| design | responder | labels | threshold | upward reading | prior | copy | reads learned | mirror | "
            "prior | undetermined |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    get = {(r["design"], r["responder"], r["component"]): r for r in rows}
    lines = [head]
    for d in dict.fromkeys(r["design"] for r in rows):
        for k in dict.fromkeys(r["responder"] for r in rows if r["design"] == d):
            cells = []
            for c in comps:
                r = get.get((d, k, c))
                cells.append("" if r is None else f"{100 * r['rate']:.1f}%" + ("*" if r["null"] else ""))
            cells += [f"{100 * get[(d, k, 'reading:' + x)]['rate']:.1f}%" for x in reads]
            lines.append(f"| {d} | {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-sims", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "calibration_twins.json")
    a = ap.parse_args(argv)
    t0 = time.time()
    rows = run(a.n_sims, a.seed)
    bad = check(rows)
    artifacts.write_json({"n_sims": a.n_sims, "seed": a.seed, "alpha": ALPHA, "fpr_max": FPR_MAX,
                                 "power_min": POWER_MIN, "margin": twins.EQUIVALENCE_MARGIN,
                                 "seconds": round(time.time() - t0, 1), "host": platform.processor() or platform.machine(),
                                 "rows": rows, "failures": bad}, a.out)
    print(markdown(rows))
    print("\n".join(bad) or "every bound holds", f"({time.time() - t0:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
