"""Calibration of the model comparison (``nbutils.studies.common.model_comparison``) by simulation.

Two models answer the same prompts: each prompt has one difficulty both models share (random intercepts for
threshold and prompt, as in ``calibration.py``), each model its own accuracy and its own answers. Scenarios
(``SCENARIOS``): ``equal_gaps`` (both gaps log 1.5, the thresholds' own deviations from it shared; the models differ
in accuracy), ``different_gaps`` (the first model's gap larger by ``--or``) and ``equal_accuracy`` (the two models
alike: McNemar's null, for its exact test and its mid-p). Every simulated run is analysed with ``model_comparison.compare`` (with ``--r``, the GLMMs of
``--batch`` runs in one R session); the share of p < .05 is reported per test and condition with its Monte-Carlo SE,
and saved after every batch.

    python benchmarks/calibration_models.py --n-sims 200 --thresholds 5 --prompts 6    # the demo's size
    python benchmarks/calibration_models.py --n-sims 200 --thresholds 10 --prompts 100 # the paper's size
    python benchmarks/calibration_models.py --r --n-sims 200 --batch 50 --thresholds 5 --prompts 6  # with lme4
    python benchmarks/calibration_models.py --r --n-sims 200 --thresholds 10 --prompts 100 \
        --conditions concept_learning --scenarios equal_gaps different_gaps    # the GLMM at the paper's size
    python benchmarks/calibration_models.py --gap --n-sims 200 --thresholds 5 --prompts 6  # the gap's Firth fallback
    python benchmarks/calibration_models.py --tables   # the tables of docs/statistics.md, from the results files

Each call adds its rows to ``benchmarks/results/calibration_models.json`` (``calibration_firth.json`` with
``--gap``; rows of the same design, test, condition, scenario and R setting are replaced). Run with one BLAS thread
(``OMP_NUM_THREADS=1``): the fits are small, and threads only contend.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from nbutils import artifacts
from nbutils.stats import mean_over_strata
from nbutils.studies.common import model_comparison
from nbutils.studies.common.quantifier_stats import threshold_units

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "calibration_models.json"
OUT_GAP = ROOT / "benchmarks" / "results" / "calibration_firth.json"
ALPHA = 0.05
LOG15 = float(np.log(1.5))


SCENARIOS = {  # (the reference's base log-odds, the other's, whether the reference's gap is larger by --or)
    "equal_gaps": (0.85, 0.4, False),       # the gap tests' null; the models differ in accuracy (McNemar's power)
    "different_gaps": (0.85, 0.4, True),    # the gap tests' power
    "equal_accuracy": (0.625, 0.625, False),  # McNemar's null (and the gap tests'): the two models alike
}
CONDITIONS = ("concept_learning", "explicit")


def simulate(k: int, n: int, rng: np.random.Generator, extra_gap: float = 0.0, sd_gap: float = 0.3,
             sd_threshold: float = 0.5, sd_pair: float = 0.5, bases: tuple[float, float] = (0.85, 0.4),
             conditions: tuple[str, ...] = CONDITIONS) -> pd.DataFrame:
    """Two models (A, B) on one set of prompts: k thresholds × up/down × ``n`` prompts × ``conditions``."""
    thr, gap_t = rng.normal(0, sd_threshold, k), LOG15 + rng.normal(0, sd_gap, k)
    t = np.repeat(np.arange(k), 2 * n)
    up = np.tile(np.repeat([1, 0], n), k)
    label = np.tile(np.arange(n) % 2 == 0, 2 * k)
    pair = rng.normal(0, sd_pair, 2 * k * n)
    frames = []
    for model, base, extra in (("A", bases[0], extra_gap), ("B", bases[1], 0.0)):
        for cond in conditions:
            eta = base + thr[t] + up * (gap_t[t] + extra) + pair
            correct = rng.random(len(eta)) < 1 / (1 + np.exp(-eta))
            frames.append(pd.DataFrame({
                "model": model, "condition": cond, "family": "proportional", "threshold": np.char.add("t", t.astype(str)),
                "monotonicity": np.where(up == 1, "upward", "downward"), "correct": correct, "label": label,
                "prompt_id": np.char.add(np.char.add("p", np.arange(2 * k * n).astype(str)), "_" + cond)}))
    return pd.concat(frames, ignore_index=True)


def compare_batch(runs: list[pd.DataFrame], use_r: bool) -> list[pd.DataFrame]:
    """``model_comparison.compare`` of each simulated run, the GLMMs of all of them fitted in one R session."""
    prepared, units = [], []
    for d in runs:
        rows, own = model_comparison.prepare(d, use_r=use_r)
        first = len(units)
        units += [u.assign(unit=f"u{first + i}") for i, u in enumerate(own)]
        prepared.append((rows, [f"u{first + i}" for i in range(len(own))]))
    fits = model_comparison.glmm(model_comparison.glmm_input(units)) if use_r and units else None
    return [model_comparison.finish(rows, units, None if fits is None else fits[fits["unit"].isin(names)])
            for rows, names in prepared]


def rows_of(hits: dict, invalid: dict, scenario: str, k: int, n: int, use_r: bool, odds_ratio: float) -> list[dict]:
    """The calibration rows of one scenario and design: rejection rate per test and condition."""
    rows = []
    for (test, cond), h in sorted(hits.items()):
        rate = float(np.mean(h))
        null = scenario == "equal_accuracy" if test.startswith("mcnemar") else scenario != "different_gaps"
        rows.append({"test": test, "condition": cond, "scenario": scenario, "thresholds": k, "prompts_per_concept": n,
                     "n_sims": len(h), "rejections": int(np.sum(h)), "rate": rate,
                     "mc_se": float(np.sqrt(rate * (1 - rate) / len(h))), "n_invalid": invalid.get((test, cond), 0),
                     "null_true": null, "odds_ratio": odds_ratio if scenario == "different_gaps" else 1.0,
                     "bases": list(SCENARIOS[scenario][:2]), "r": use_r})
    return rows


def run(scenario: str, n_sims: int, k: int, n: int, seed: int, use_r: bool, odds_ratio: float,
        conditions: tuple[str, ...] = CONDITIONS, batch: int = 20, save=None,
        only: tuple[str, ...] = ()) -> list[dict]:
    """Rejection rate per test and condition over ``n_sims`` simulated runs of one scenario, ``batch`` runs per R
    session (``only``: just these of McNemar's test and Firth's comparison); ``save(rows)`` is called after each batch
    with the rows so far."""
    first, second, different = SCENARIOS[scenario]
    extra = float(np.log(odds_ratio)) if different else 0.0
    rng = np.random.default_rng([seed, k, n, int(extra * 1000)] + ([1] if scenario == "equal_accuracy" else []))
    hits: dict[tuple, list[bool]] = {}
    invalid: dict[tuple, int] = {}
    t0 = time.perf_counter()
    done = 0
    while done < n_sims:
        runs = [simulate(k, n, rng, extra, bases=(first, second), conditions=conditions)
                for _ in range(min(batch, n_sims - done))]
        if only:
            for d in runs:
                tally_only(d, only, hits)
        else:
            for d, t in zip(runs, compare_batch(runs, use_r)):
                tally(d, t, hits, invalid, use_r)
        done += len(runs)
        rows = rows_of(hits, invalid, scenario, k, n, use_r, odds_ratio)
        if save:
            save(rows)
        print(f"[models] {scenario} k={k} n={n} r={use_r}: {done} sims in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    return rows


def tally_only(d: pd.DataFrame, only: tuple[str, ...], hits: dict) -> None:
    """One simulated run's rejections by McNemar's tests (exact, mid-p) and Firth's comparison alone (``--only``: no
    GEE, no GLMM)."""
    for first, second, both in model_comparison.pairs(d):
        for cond, g in both.groupby("condition", sort=False):
            row, _ = model_comparison.mcnemar_row(g, first, second)
            for test, p in (("mcnemar_models", row["p"]), ("mcnemar_midp_models", row["p_midp"])):
                if test in only:
                    hits.setdefault((test, cond), []).append(p < ALPHA)
    if "firth_models_always" in only:
        for key, hit in firth_every_time(d).items():
            hits.setdefault(key, []).append(hit)


def tally(d: pd.DataFrame, t: pd.DataFrame, hits: dict, invalid: dict, use_r: bool) -> None:
    """One simulated run's rejections, per test and condition, and its headline's as the report gives it."""
    for r in t.itertuples(index=False):
        key = (r.test, r.condition)
        hits.setdefault(key, []).append(bool(r.valid) and bool(r.p < ALPHA))
        invalid[key] = invalid.get(key, 0) + (not bool(r.valid))
    if not use_r:
        for key, hit in firth_every_time(d).items():
            hits.setdefault(key, []).append(hit)
    heads = model_comparison.records(t)
    for cond in d["condition"].unique():  # the headline as the report says it: fallback included
        said = [r for r in heads if r.get("headline") and r["condition"] == cond and r.get("valid")
                and not (r["test"] != "firth_models" and any(h.get("fallback_for") == r["test"] for h in heads
                                                             if h["condition"] == cond))]
        hits.setdefault(("headline", cond), []).append(bool(said) and said[-1]["p"] < ALPHA)


def firth_every_time(d: pd.DataFrame) -> dict[tuple, bool]:
    """Firth's comparison on every simulated run, separated or not: its own false-positive rate and power."""
    out = {}
    for first, second, both in model_comparison.pairs(d):
        for cond, g in both.groupby("condition", sort=False):
            r = model_comparison.firth(model_comparison._frame(g, first))
            out[("firth_models_always", cond)] = bool(r["ok"]) and r["p"] < ALPHA
    return out


def run_gap(scenario: str, n_sims: int, k: int, n: int, seed: int) -> list[dict]:
    """The per-model gap's Firth fallback (``quantifier_mixed_models``' Firth fit, here on every run, separated or
    not) on ``calibration.py``'s scenarios: its false-positive rate where the gap is 0 and its power where it is not."""
    import calibration

    sc = calibration.SCENARIOS[scenario]
    rng = np.random.default_rng([seed, k, n, list(calibration.SCENARIOS).index(scenario)])
    hits: dict[str, list[bool]] = {}
    for _ in range(n_sims):
        d = calibration.simulate(sc, k, n, rng)
        for cond, g in d.groupby("condition", sort=False):
            u = (g["monotonicity"] == "upward").astype(float).to_numpy()
            r = mean_over_strata({"u": u}, threshold_units(g).to_numpy(), g["correct"].astype(float).to_numpy(), "u")
            hits.setdefault(cond, []).append(bool(r["converged"]) and r["p"] < ALPHA)
    null = scenario.startswith("null") or scenario == "chance"
    return [{"test": "firth_plr", "condition": c, "scenario": scenario, "thresholds": k, "prompts_per_concept": n,
             "n_sims": len(h), "rejections": int(np.sum(h)), "rate": float(np.mean(h)),
             "mc_se": float(np.sqrt(np.mean(h) * (1 - np.mean(h)) / len(h))), "n_invalid": 0,
             "null_true": null and not (c == "explicit" and sc.interaction), "odds_ratio": float(np.exp(sc.gap)),
             "r": False} for c, h in hits.items()]


def save(rows: list[dict], out: Path) -> None:
    """Merge ``rows`` into ``out``: rows of the same test, condition, scenario, design and R setting are replaced."""
    old = json.loads(out.read_text())["rows"] if out.exists() else []
    key = ("test", "condition", "scenario", "thresholds", "prompts_per_concept", "r")
    new = {tuple(r[c] for c in key) for r in rows}
    kept = [r for r in old if tuple(r.get(c) for c in key) not in new]
    artifacts.write_json({"created": artifacts.now_utc(), "alpha": ALPHA, "versions": artifacts.versions(),
                          "rows": kept + rows}, out)


def pct(row: dict | None) -> str:
    return "—" if row is None else f"{100 * row['rate']:.1f}%"


def cell(rows: list[dict], test: str, scenario: str, r: bool, k: int, n: int) -> str:
    """"concept learning / stated" rates of one test, scenario and design ("—" where not run)."""
    got = {x["condition"]: x for x in rows if (x["test"], x["scenario"], x["r"], x["thresholds"],
                                                x["prompts_per_concept"]) == (test, scenario, r, k, n)}
    return " / ".join(pct(got.get(c)) for c in CONDITIONS)


COMPARISON_TESTS = [  # (record, its rows' test and R setting, when it is used, its null, the scenario for power)
    ("`glmm_models`: binomial GLMM `correct ~ upward × model`, a random intercept per prompt, likelihood-ratio test "
     "(lme4)", "glmm_models", True, "**headline, with R**; hands over to the GEE when not valid (no convergence, "
     "separation)", "equal_gaps", "different_gaps"),
    ("`gee_models`: logistic GEE of the same terms clustered by prompt, bias-reduced sandwich SE, Wald z",
     "gee_models", False, "**headline without R** (always computed); stands in for an invalid GLMM; hands over to "
     "Firth where a model answers one direction all right or all wrong", "equal_gaps", "different_gaps"),
    ("`firth_models`: Firth's penalised regression of the same terms per threshold, their mean tested with t(K−1) "
     "on their spread (fitted here to every simulated run, separated or not)", "firth_models_always", False,
     "where a model answers one direction all right or all wrong; stands in for a GLMM or GEE left without a finite "
     "estimate", "equal_gaps", "different_gaps"),
    ("the headline as the report gives it, without R (the GEE or its stand-in)", "headline", False, "—",
     "equal_gaps", "different_gaps"),
    ("the headline as the report gives it, with R (the GLMM or its stand-in)", "headline", True, "—", "equal_gaps",
     "different_gaps"),
    ("`mcnemar_models`: exact McNemar test of the two models' **accuracy** on the same prompts (not of the gap)",
     "mcnemar_models", False, "beside the headline, always; its null is equal accuracy (`equal_accuracy`); its "
     "power is for accuracies of log-odds 0.85 vs 0.4 (`equal_gaps`)", "equal_accuracy", "equal_gaps"),
    ("`mcnemar_midp_models`: McNemar's mid-p test of the same (the exact p less the probability of the observed "
     "split)", "mcnemar_midp_models", False, "beside the exact test, always: less conservative on correlated items",
     "equal_accuracy", "equal_gaps"),
]


def comparison_table(rows: list[dict]) -> str:
    """The model comparison's calibration table of ``docs/statistics.md``, from the rows of its results file."""
    out = ["| test (`summary.json` name) | when it is used | false-positive rate, 5 × 6 (the demo's size) | "
           "10 × 100 (the paper's) | power, 5 × 6 | 10 × 100 |", "| --- | --- | --- | --- | --- | --- |"]
    for name, test, r, when, null, power in COMPARISON_TESTS:
        out.append(f"| {name} | {when} | {cell(rows, test, null, r, 5, 6)} | {cell(rows, test, null, r, 10, 100)} | "
                   f"{cell(rows, test, power, r, 5, 6)} | {cell(rows, test, power, r, 10, 100)} |")
    return "\n".join(out) + "\n"


def firth_table(rows: list[dict]) -> str:
    """The gap's Firth fallback calibration table of ``docs/statistics.md``, from ``calibration_firth.json``'s rows."""
    out = ["| scenario | 5 thresholds × 6 prompts (the demo's size): concept learning / stated | 10 × 100 "
           "(the paper's size) |", "| --- | --- | --- |"]
    for scenario, what in (("null", "no gap, the same at every threshold (`null`)"),
                           ("null_varying_gap", "no gap on average, varying between thresholds (SD 0.3, "
                                                "`null_varying_gap`)"),
                           ("gap_or2", "power: a gap of OR 2 (`gap_or2`)")):
        out.append(f"| {what} | {cell(rows, 'firth_plr', scenario, False, 5, 6)} | "
                   f"{cell(rows, 'firth_plr', scenario, False, 10, 100)} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-sims", type=int, default=200)
    ap.add_argument("--thresholds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=6, help="prompts per concept and condition")
    ap.add_argument("--or", dest="odds_ratio", type=float, default=3.0, help="ratio of the two gaps' ORs for power")
    ap.add_argument("--r", action="store_true", help="fit the lme4 GLMM too (one R session per --batch runs)")
    ap.add_argument("--batch", type=int, default=20, help="simulated runs per R session (results saved after each)")
    ap.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    ap.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
    ap.add_argument("--only", nargs="+", choices=["mcnemar_models", "mcnemar_midp_models", "firth_models_always"],
                    default=[],
                    help="just these tests, fast at any size (no GEE, no GLMM, no headline)")
    ap.add_argument("--gap", action="store_true", help="calibrate the per-model gap's Firth fallback instead")
    ap.add_argument("--tables", action="store_true", help="print the tables of docs/statistics.md and stop")
    ap.add_argument("--seed", type=int, default=20240101)
    ap.add_argument("--out", type=Path, default=None, help=f"default {OUT.name}, with --gap {OUT_GAP.name}")
    args = ap.parse_args(argv)
    args.out = args.out or (OUT_GAP if args.gap else OUT)
    if args.tables:
        print(comparison_table(json.loads(OUT.read_text())["rows"]) + "\n"
              + firth_table(json.loads(OUT_GAP.read_text())["rows"]), end="")
        return 0
    rows = []
    if args.gap:
        for scenario in ("null", "null_varying_gap", "gap_or2"):
            rows += run_gap(scenario, args.n_sims, args.thresholds, args.prompts, args.seed)
            save(rows, args.out)
    else:
        for scenario in args.scenarios:
            rows += run(scenario, args.n_sims, args.thresholds, args.prompts, args.seed, args.r, args.odds_ratio,
                        tuple(args.conditions), args.batch, save=lambda part: save(part, args.out),
                        only=tuple(args.only))
    for r in rows:
        print(f"{r['scenario']:15s} k={r['thresholds']:2d} n={r['prompts_per_concept']:3d} r={r['r']!s:5s} "
              f"{r['test']:15s} {r['condition']:17s} {r['rate']:.3f} ± {r['mc_se']:.3f} (invalid {r['n_invalid']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
