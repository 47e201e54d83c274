"""Calibration of the robustness multiverse's heterogeneity test (does the upward − downward gap differ across
prompt variants?), by simulation where the truth is known.

Each simulated dataset is one model × condition: K thresholds × up/down × ``n`` prompts per concept, the prompts
dealt V variants balanced within each concept (as the generator deals templates), random intercepts for threshold
and the query's noun, a variant main effect (templates move accuracy) and an upward − downward gap. Under the null
the gap is the same under every variant; under the alternative it is present under one template only. Each dataset
is analysed with the study's own functions (``nbutils.studies.monotonicity.robustness``): the GEE Wald test for every
simulation, the lme4 GLMM likelihood-ratio test (one ``Rscript`` per batch) on a subset when R is installed.

    python benchmarks/calibration_robustness.py --sims 200 --r-sims 60 --out gee.json     # GEE: both designs; GLMM: demo
    python benchmarks/calibration_robustness.py --sims 0 --r-sims 60 --designs study --r-designs study --out glmm.json
    python benchmarks/calibration_robustness.py --merge gee.json glmm.json --out benchmarks/results/calibration_robustness.json
    python benchmarks/calibration_robustness.py --fast        # few simulations, loose bounds; exit 1 on failure
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
import pandas as pd

from nbutils import artifacts
from nbutils.stats import r_available, r_versions
from nbutils.studies.monotonicity import robustness

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.05
FPR_MAX = 0.075
DEFAULT_SEED = 20240101
THRESHOLDS = ["1/2", "1/4", "1/5", "3/4", "3/10", "7/10", "2/5", "3/5"]


@dataclass(frozen=True)
class Design:
    """The size of one simulated model × condition."""

    name: str
    k: int          # thresholds (each with an upward and a downward concept)
    n: int          # prompts per concept
    v: int = 4      # variants on the axis (templates)


@dataclass(frozen=True)
class Scenario:
    """Log-odds of a correct answer and the effects around it."""

    name: str
    gap: float = float(np.log(1.5))      # upward − downward log odds ratio (under every variant, or under one only)
    only_first: bool = False             # the gap is present under the first variant only
    base: float = 0.4                    # log-odds of a correct answer, downward concept (≈ 60%)
    sd_threshold: float = 0.5
    sd_noun: float = 0.3
    sd_variant: float = 0.3              # variant main effects: templates move accuracy, not the gap


DESIGNS = {d.name: d for d in [Design("demo", k=1, n=48), Design("study", k=4, n=96)]}  # demo: robustness_demo.yaml
SCENARIOS = {s.name: s for s in [Scenario("null_common_gap"), Scenario("null_no_gap", gap=0.0),
                                 Scenario("gap_under_one_template", gap=float(np.log(3.0)), only_first=True)]}


def simulate(sc: Scenario, ds: Design, rng: np.random.Generator, model: str = "sim") -> pd.DataFrame:
    """One model × condition in the analysis's column layout, with a ``template`` column."""
    thr = rng.normal(0, sc.sd_threshold, ds.k)
    noun_eff = rng.normal(0, sc.sd_noun, 100)
    var_eff = rng.normal(0, sc.sd_variant, ds.v)
    rows = []
    for t in range(ds.k):
        for up in (1, 0):
            labels = np.arange(ds.n) % 2 == 0
            order = np.lexsort((rng.random(ds.n), labels))  # balanced per concept and label, as the generator deals
            var = np.empty(ds.n, dtype=int)
            var[order] = rng.permutation(ds.v)[np.arange(ds.n) % ds.v]
            noun = rng.integers(0, 100, ds.n)
            gap = sc.gap * ((var == 0) if sc.only_first else 1.0)
            eta = sc.base + thr[t] + up * gap + var_eff[var] + noun_eff[noun]
            correct = rng.random(ds.n) < 1 / (1 + np.exp(-eta))
            rows.append(pd.DataFrame({"threshold": THRESHOLDS[t], "monotonicity": "upward" if up else "downward",
                                      "label": labels, "correct": correct, "template": np.char.add("t", var.astype(str)),
                                      "query_noun": np.char.add("n", noun.astype(str))}))
    d = pd.concat(rows, ignore_index=True)
    quant = np.where(d["monotonicity"] == "upward", "more_than", "less_than")
    return d.assign(model=model, condition="concept_learning", family="proportional", quantifier=quant,
                    concept=np.char.add(np.char.add(np.char.replace(quant, "_", " "), " "), d["threshold"].to_numpy(str)),
                    pred_yes=d["correct"] == d["label"])


def rate(p: np.ndarray) -> dict:
    """Share of p < α among valid p-values, its Monte-Carlo SE and how many were valid."""
    p = np.asarray(p, dtype=float)
    ok = p[np.isfinite(p)]
    r = float((ok < ALPHA).mean()) if len(ok) else float("nan")
    return {"rate": r, "mc_se": float(np.sqrt(r * (1 - r) / len(ok))) if len(ok) else float("nan"),
            "n_valid": int(len(ok)), "n_sims": int(len(p))}


def run_gee(sc: Scenario, ds: Design, sims: int, seed: int) -> dict:
    """The GEE Wald test over ``sims`` seeded datasets."""
    rng = np.random.default_rng([seed, zlib.crc32(sc.name.encode()), zlib.crc32(ds.name.encode())])
    ps = []
    t0 = time.perf_counter()
    for _ in range(sims):
        r = robustness.gee_wald(simulate(sc, ds, rng), "template")
        ps.append(r["p"] if r["valid"] else np.nan)
    return {**rate(np.array(ps)), "seconds": round(time.perf_counter() - t0, 1)}


def run_glmm(sc: Scenario, ds: Design, sims: int, seed: int) -> dict:
    """The lme4 GLMM likelihood-ratio test over ``sims`` seeded datasets, in one ``Rscript``."""
    rng = np.random.default_rng([seed, 7, zlib.crc32(sc.name.encode()), zlib.crc32(ds.name.encode())])
    units = {f"s{i}|concept_learning|template": (simulate(sc, ds, rng, model=f"s{i}"), "template") for i in range(sims)}
    t0 = time.perf_counter()
    out = robustness.glmm_lrt(units, seed=seed)
    ps = [out[k]["p"] if out.get(k, {}).get("valid") else np.nan for k in units]
    return {**rate(np.array(ps)), "seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=400, help="simulations per scenario × design for the GEE Wald test")
    ap.add_argument("--r-sims", type=int, default=100, help="simulations per scenario × design for the GLMM LRT (0: skip)")
    ap.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    ap.add_argument("--r-designs", nargs="+", default=["demo"], choices=list(DESIGNS),
                    help="designs the GLMM is also fitted on (it is the slow part: about 1 s a fit on 2 cores)")
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--fast", action="store_true", help="few simulations, loose bounds; exit 1 when a bound fails")
    ap.add_argument("--merge", nargs="+", type=Path, default=None,
                    help="join result files of separate runs (e.g. the GEE and the GLMM parts) into --out")
    a = ap.parse_args(argv)
    if a.merge:
        return merge(a.merge, a.out)
    if a.fast:
        a.sims, a.r_sims, a.designs = 60, 0, ["demo"]
    use_r = a.r_sims > 0 and r_available("lme4")
    results = []
    for dname in a.designs:
        for sname, sc in ((n, SCENARIOS[n]) for n in a.scenarios):
            ds = DESIGNS[dname]
            row = {"design": asdict(ds), "scenario": asdict(sc), "null": not sc.only_first}
            if a.sims:
                row["gee_wald"] = run_gee(sc, ds, a.sims, a.seed)
            if use_r and dname in a.r_designs:
                row["glmm_lrt"] = run_glmm(sc, ds, a.r_sims, a.seed)
            results.append(row)
            print(f"{dname:6s} {sname:24s}" + (f" GEE {row['gee_wald']['rate']:.3f} ({row['gee_wald']['n_valid']} valid)"
                                                 if "gee_wald" in row else "")
                  + (f"  GLMM {row['glmm_lrt']['rate']:.3f} ({row['glmm_lrt']['n_valid']} valid)" if "glmm_lrt" in row else ""),
                  flush=True)
    failures = failures_of(results, FPR_MAX if not a.fast else 0.15)
    if a.out:
        meta = {"alpha": ALPHA, "fpr_max": FPR_MAX, "seed": a.seed, "sims": a.sims, "r_sims": a.r_sims if use_r else 0,
                "host": {"platform": platform.platform(), "cpus": os.cpu_count()},
                "versions": {**artifacts.versions(), **(r_versions("lme4") if use_r else {})},
                "created": artifacts.now_utc(), "results": results, "failures": failures}
        a.out.write_text(json.dumps(artifacts.json_clean(meta), indent=1) + "\n")
    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    return 1 if failures else 0


def min_cell(design: dict) -> int:
    """Prompts per variant × direction in a design: the size that decides whether the LRT is reported."""
    return design["k"] * design["n"] // design["v"]


def failures_of(results: list[dict], bound: float) -> list[str]:
    """Null rows where the reported test (the GEE Wald test; the GLMM LRT is a cross-check) rejects more often than
    ``bound``."""
    out = []
    for r in results:
        for test in ("gee_wald",):
            if r["null"] and test in r and r[test]["rate"] > bound:
                out.append(f"{test} {r['design']['name']}/{r['scenario']['name']}: false-positive rate "
                           f"{r[test]['rate']:.3f} > {bound}")
    return out


def pool(a: dict, b: dict) -> dict:
    """Two runs' rejection rates of one test and cell as one, over all their valid simulations."""
    hits = sum(round(x["rate"] * x["n_valid"]) for x in (a, b) if x["n_valid"])
    valid = a["n_valid"] + b["n_valid"]
    r = hits / valid if valid else float("nan")
    return {"rate": r, "mc_se": float(np.sqrt(r * (1 - r) / valid)) if valid else float("nan"), "n_valid": valid,
            "n_sims": a["n_sims"] + b["n_sims"], "seconds": round(a["seconds"] + b["seconds"], 1)}


def merge(files: list[Path], out: Path | None) -> int:
    """One results file from several runs: each design × scenario's tests side by side, the metadata of the first,
    the failures recomputed over the joined rows."""
    parts = [json.loads(f.read_text()) for f in files]
    rows: dict = {}
    for part in parts:
        for r in part["results"]:
            key = (r["design"]["name"], r["scenario"]["name"])
            rows.setdefault(key, {k: v for k, v in r.items() if k not in ("gee_wald", "glmm_lrt")})
            for k in ("gee_wald", "glmm_lrt"):
                if k in r:  # the same test in two runs (other seeds): their simulations pooled
                    rows[key][k] = pool(rows[key][k], r[k]) if k in rows[key] else r[k]
    for r in rows.values():
        r["min_cell"] = min_cell(r["design"])
    meta = {**parts[0], "sims": max(p["sims"] for p in parts), "r_sims": max(p["r_sims"] for p in parts),
            "results": list(rows.values()), "failures": failures_of(list(rows.values()), FPR_MAX),
            "merged_from": [str(f) for f in files]}
    text = json.dumps(artifacts.json_clean(meta), indent=1) + "\n"
    if out:
        out.write_text(text)
    else:
        print(text)
    return 1 if meta["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
