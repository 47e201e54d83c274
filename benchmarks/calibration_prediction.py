"""Calibration of the prediction interval for an unseen prompt variant (``nbutils.studies.monotonicity.prediction``),
by simulation where the truth is known.

Each simulated multiverse is one model × condition × axis with V variants. A variant has its own accuracy (a variant
main effect, N(0, 0.3²) on the log-odds scale) and its own upward − downward log odds ratio, N(log 2, τ²): τ is the
known between-variant spread of the gap (0, moderate, large). Each variant gets ``n`` upward and ``n`` downward prompts
(binomial answers). The interval is computed with the study's own function from the variants' gaps; a fresh variant
is then drawn from the same family and its true gap (upward minus downward accuracy, in expectation) checked against
the interval. Coverage is the share of multiverses whose interval holds the fresh variant's true gap; nominal 95%,
required 90–97% for the reported construction (``minimax_ci``, the plug-in of an upper Q-profile limit of τ²) in every
cell, beside the confidence-distribution interval and the plug-ins of the Paule–Mandel τ².

    python benchmarks/calibration_prediction.py --sims 400 --out benchmarks/results/calibration_prediction.json
    python benchmarks/calibration_prediction.py --fast      # few simulations, loose bounds; exit 1 on failure
    python benchmarks/calibration_prediction.py --table benchmarks/results/calibration_prediction.json  # docs table
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from nbutils import artifacts
from nbutils.studies.monotonicity import prediction

DEFAULT_SEED = 20240203  # not a seed a construction was chosen on (20240202 for ``cd``; 1 in prediction_limits.py)
LOW, HIGH = 0.90, 0.97
BASE, GAP, SD_VARIANT = 0.4, float(np.log(2.0)), 0.3


@dataclass(frozen=True)
class Design:
    """One axis of one model × condition: V variants, ``n`` upward and ``n`` downward prompts under each."""

    name: str
    v: int
    n: int
    crossed: tuple = ()  # levels of crossed axes (template, phrase, answer words): the spread from their main effects


# demo: params/monotonicity/datasets/robustness_demo.yaml (96 prompts per condition: 4 templates → 12 up / 12 down
# each, 3 phrases → 16 / 16, the 24 crossed cells → 2 / 2); study: the heterogeneity calibration's study size
# (384 prompts per condition: 4 templates → 48 / 48, 24 crossed cells → 8 / 8). "crossed": 24 variants of one axis (or
# combinations that do not share their spread); "crossed_axes": the 4 × 3 × 2 crossed cells whose spread comes from the
# templates and the phrases, where the cells are not independent variants (no interval is reported for them)
DESIGNS = {d.name: d for d in [Design("demo_templates", 4, 12), Design("demo_phrases", 3, 16),
                               Design("demo_crossed", 24, 2), Design("study_templates", 4, 48),
                               Design("study_phrases", 3, 64), Design("study_crossed", 24, 8),
                               Design("demo_crossed_axes", 24, 2, (4, 3, 2)),
                               Design("study_crossed_axes", 24, 8, (4, 3, 2))]}
TAUS = {"none": 0.0, "small": 0.2, "moderate": 0.4, "sizeable": 0.8, "large": 1.2}  # SD of the variants' log odds ratios


def expit(x):
    return 1 / (1 + np.exp(-x))


def draw(rng: np.random.Generator, tau: float, size: int) -> tuple[np.ndarray, np.ndarray]:
    """True downward and upward accuracies of ``size`` variants of the family."""
    base = BASE + rng.normal(0, SD_VARIANT, size)
    return expit(base), expit(base + GAP + rng.normal(0, tau, size))


def draw_crossed(rng: np.random.Generator, tau: float, levels: tuple) -> tuple[np.ndarray, np.ndarray]:
    """True downward and upward accuracies of the cells of crossed axes (template × phrase × answer words) whose
    spread comes from the templates' and the phrases' main effects (each N(0, τ²/2) on the log odds ratio)."""
    t, p = rng.normal(0, tau / np.sqrt(2), levels[0]), rng.normal(0, tau / np.sqrt(2), levels[1])
    shift = (t[:, None, None] + p[None, :, None] + np.zeros(levels)).ravel()
    base = BASE + rng.normal(0, SD_VARIANT, shift.size)
    return expit(base), expit(base + GAP + shift)


def one(rng: np.random.Generator, tau: float, ds: Design, methods=prediction.METHODS) -> dict:
    """One multiverse: whether each construction's interval holds a fresh variant's true gap, and its width. A crossed
    design: the 24 cells taken as variants, and a fresh cell with a new template and a new phrase."""
    p_down, p_up = draw_crossed(rng, tau, ds.crossed) if ds.crossed else draw(rng, tau, ds.v)
    k_up, k_down = rng.binomial(ds.n, p_up), rng.binomial(ds.n, p_down)
    gap, var = prediction.effects(ds.n, k_up, ds.n, k_down)
    new_down, new_up = draw_crossed(rng, tau, (1, 1, 1)) if ds.crossed else draw(rng, tau, 1)
    truth = float(new_up[0] - new_down[0])
    out = {}
    for m in methods:
        r = prediction.predict(gap, var, method=m)
        out[m] = (r["lo"] <= truth <= r["hi"], r["hi"] - r["lo"], r["tau2"])
    return out


def run(ds: Design, tau_name: str, sims: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, zlib.crc32(ds.name.encode()), zlib.crc32(tau_name.encode())])
    t0 = time.perf_counter()
    res = [one(rng, TAUS[tau_name], ds) for _ in range(sims)]
    out = {"design": asdict(ds), "tau": TAUS[tau_name], "tau_name": tau_name, "sims": sims,
           "reported": not ds.crossed}
    for m in prediction.METHODS:
        cov = np.array([r[m][0] for r in res], dtype=float)
        c = float(cov.mean())
        out[m] = {"coverage": c, "mc_se": float(np.sqrt(c * (1 - c) / sims)),
                  "median_width_points": float(100 * np.median([r[m][1] for r in res]))}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def failures_of(rows: list[dict], low: float, high: float) -> list[str]:
    """Cells where the reported construction's coverage is outside [low, high] (crossed designs, where no interval
    is reported, left out)."""
    m = prediction.METHODS[0]
    return [f"{m} {r['design']['name']}/tau={r['tau_name']}: coverage {r[m]['coverage']:.3f} outside [{low}, {high}]"
            for r in rows if r["reported"] and not low <= r[m]["coverage"] <= high]


LABELS = {"minimax_ci": "plug-in, Q-profile τ² (reported)", "cd": "confidence distribution",
          "hk_pm_adhoc": "HK, scale ≥ 1, t(k−1)", "hk_pm": "HK, t(k−1)",
          "hts_pm": "HTS, PM, t(k−2)", "hts_dl": "HTS, DL, t(k−2)"}


def markdown(res: dict) -> str:
    """The coverage table of docs/statistics.md from a results file: one row per design × τ, one column per
    construction (coverage in %), and the reported construction's median width in points."""
    methods = list(prediction.METHODS)
    head = ("| design | variants | prompts per direction and variant | τ (log OR) | "
            + " | ".join(LABELS[m] for m in methods) + " | median width (points) |")
    lines = [head, "|" + " --- |" * (5 + len(methods))]
    for r in res["results"]:
        d = r["design"]
        name = d["name"] + (" (no interval given)" if not r["reported"] else "")
        lines.append(f"| {name} | {d['v']} | {d['n']} | {r['tau']:g} | "
                     + " | ".join(f"{100 * r[m]['coverage']:.1f}%" for m in methods)
                     + f" | {r[res['reported']]['median_width_points']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=400, help="simulated multiverses per design × τ")
    ap.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--fast", action="store_true", help="few simulations, loose bounds; exit 1 when a bound fails")
    ap.add_argument("--table", type=Path, default=None, help="print the docs table of this results file and exit")
    a = ap.parse_args(argv)
    if a.table:
        print(markdown(json.loads(a.table.read_text())))
        return 0
    low, high = (LOW, HIGH) if not a.fast else (0.85, 1.0)
    taus = list(TAUS)
    if a.fast:
        a.sims, a.designs, taus = 200, ["demo_templates", "study_templates"], ["none", "moderate", "large"]
    rows = []
    for d in a.designs:
        for t in taus:
            r = run(DESIGNS[d], t, a.sims, a.seed)
            rows.append(r)
            print(f"{d:16s} tau={t:8s} " + "  ".join(f"{m} {r[m]['coverage']:.3f}" for m in prediction.METHODS),
                  flush=True)
    failures = failures_of(rows, low, high)
    if a.out:
        meta = {"level": prediction.LEVEL, "coverage_bounds": [LOW, HIGH], "reported": prediction.METHODS[0],
                "seed": a.seed, "sims": a.sims, "gap_log_or": GAP, "base_log_odds": BASE, "sd_variant": SD_VARIANT,
                "host": {"platform": platform.platform(), "cpus": os.cpu_count()}, "versions": artifacts.versions(),
                "created": artifacts.now_utc(), "results": rows, "failures": failures}
        a.out.write_text(json.dumps(artifacts.json_clean(meta), indent=1) + "\n")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
