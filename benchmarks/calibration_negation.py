"""Calibration of the negation study's mixed-model tests by simulation.

Simulates log-perplexity-like data with the study's design — roots × items × 2 contexts × 2 forms, root and item
intercepts — and counts, per scenario, how often each reported test rejects at α = .05:

- ``null``: no fixed effect and no random slopes (every test's false-positive rate);
- ``null_varying``: no fixed effect on average, but context, form and their interaction vary by root (SD 0.15, as
  large as the residual): a test that ignores the varying slopes over-rejects here;
- ``planted_small`` / ``planted``: interaction −0.05 / −0.10 and main effects +0.05 / +0.10, slopes varying (power).

Tests: the lmerTest Satterthwaite fit with the automatic random-structure ladder (the headline; deviation-coded
main effects and interaction, and the seed's treatment-coded simple effects) when R is present, and the pure-Python
statsmodels MixedLM (Wald z) path. Every R dataset of a scenario is fitted in one Rscript call.

    python benchmarks/calibration_negation.py [--n-sims 200] [--seed 1] [--scenarios null,...] [--out PATH]

writes benchmarks/results/calibration_negation.json (rows of ``run``); benchmarks/calibration.py merges them.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nbutils.stats import r_available, r_versions  # noqa: E402
from nbutils.studies.negation import stats as nstats  # noqa: E402

SCENARIOS = {  # fixed effects (context, form, interaction) and random-slope SD by root
    "null": {"beta": (0.0, 0.0, 0.0), "slope_sd": 0.0},
    "null_varying": {"beta": (0.0, 0.0, 0.0), "slope_sd": 0.15},
    "planted_small": {"beta": (0.05, 0.05, -0.05), "slope_sd": 0.15},
    "planted": {"beta": (0.10, 0.10, -0.10), "slope_sd": 0.15},
}
TERM_INDEX = {"context": 0, "form": 1, "context × form": 2}
REPORTED = [("deviation", "context"), ("deviation", "form"), ("deviation", "context × form"),
            ("treatment", "context"), ("treatment", "form")]  # the treatment interaction is the deviation one


def simulate(scenario: str, n_sims: int, seed: int, n_roots: int = 20, n_items: int = 4,
             root_sd: float = 0.3, item_sd: float = 0.1, resid_sd: float = 0.15) -> pd.DataFrame:
    """``n_sims`` datasets (column ``unit``) in the layout ``stats.design`` returns; outcome on the log-ppl scale."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: expected one of {sorted(SCENARIOS)}, got {scenario!r}")
    sc = SCENARIOS[scenario]
    rng = np.random.default_rng(seed)
    c = np.tile(np.repeat([0.5, -0.5], 2), n_roots * n_items)
    f = np.tile([0.5, -0.5], 2 * n_roots * n_items)
    root = np.repeat(np.arange(n_roots), n_items * 4)
    item = np.repeat(np.arange(n_roots * n_items), 4)
    frames = []
    for s in range(n_sims):
        u = rng.normal(0, root_sd, n_roots)
        slopes = rng.normal(0, sc["slope_sd"], (n_roots, 3)) if sc["slope_sd"] else np.zeros((n_roots, 3))
        bc, bf, bcf = (np.array(sc["beta"])[None, :] + slopes).T
        y = (4.0 + u[root] + rng.normal(0, item_sd, n_roots * n_items)[item] + bc[root] * c + bf[root] * f
             + bcf[root] * c * f + rng.normal(0, resid_sd, len(c)))
        frames.append(pd.DataFrame({"unit": f"s{s}", "y": y, "c": c, "f": f, "cf": c * f,
                                    "root": [f"r{r}" for r in root], "item": [f"i{i}" for i in item]}))
    return pd.concat(frames, ignore_index=True)


def _true(scenario: str, coding: str, term: str) -> float:
    bc, bf, bcf = SCENARIOS[scenario]["beta"]
    if coding == "deviation":
        return (bc, bf, bcf)[TERM_INDEX[term]]
    return {"context": bc - 0.5 * bcf, "form": bf - 0.5 * bcf, "context × form": bcf}[term]


def _rows(coefs: pd.DataFrame, info: pd.DataFrame, scenario: str, n_sims: int, test: str, headline: bool) -> list[dict]:
    out = []
    valid_units = set(info.loc[info["valid"].astype(bool), "unit"].astype(str))
    for coding, term in REPORTED:
        sel = coefs[(coefs["coding"] == coding) & (coefs["term"] == term)] if len(coefs) else coefs
        ok = sel[sel["unit"].astype(str).isin(valid_units)]
        rej = int((ok["p"] < 0.05).sum())
        rate = rej / n_sims
        true = _true(scenario, coding, term)
        out.append({"study": "negation", "test": test, "term": f"{term} [{coding}]", "scenario": scenario,
                    "n_sims": n_sims, "n_valid": len(ok), "rejections": rej, "rate": rate,
                    "mc_se": float(np.sqrt(max(rate * (1 - rate), 1e-12) / n_sims)),
                    "true_effect": true, "null_true": true == 0.0,
                    "headline": headline and coding == "deviation",
                    "mean_estimate": float(ok["estimate"].mean()) if len(ok) else None,
                    "structures": "; ".join(f"{k}: {v}" for k, v in info["random"].value_counts().head(3).items())})
    return out


def run(n_sims: int = 200, seed: int = 1, scenarios: list[str] | None = None, python: bool = True,
        use_r: bool | None = None, n_roots: int = 20, n_items: int = 4) -> list[dict]:
    """Rejection rates at α = .05 of every negation test in each scenario (rows as the module docstring says)."""
    use_r = r_available("lme4", "lmerTest") if use_r is None else use_r
    rows = []
    for scenario in scenarios or list(SCENARIOS):
        if scenario not in SCENARIOS:
            raise ValueError(f"scenarios: expected names among {sorted(SCENARIOS)}, got {scenario!r}")
        data = simulate(scenario, n_sims, seed + 1000 * list(SCENARIOS).index(scenario), n_roots=n_roots, n_items=n_items)
        if use_r:
            info, coefs = nstats.fit_r(data, covariate=False, seed=seed)
            rows += _rows(coefs, info, scenario, n_sims, nstats.R_TEST, headline=True)
        if python:
            infos, tabs = [], []
            for u, g in data.groupby("unit", sort=False):
                t, i = nstats.fit_python(g.reset_index(drop=True))
                infos.append({"unit": u, **i})
                if len(t):
                    tabs.append(t.assign(unit=u))
            coefs = pd.concat(tabs, ignore_index=True) if tabs else pd.DataFrame(columns=["unit", "coding", "term", "p"])
            rows += _rows(coefs, pd.DataFrame(infos), scenario, n_sims, nstats.PY_TEST, headline=not use_r)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-sims", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--no-python", action="store_true", help="only the R path")
    ap.add_argument("--no-r", action="store_true", help="only the Python path")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "calibration_negation.json")
    ap.add_argument("--merge", action="store_true", help="add to the rows already in --out (other scenarios/paths)")
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = run(args.n_sims, args.seed, args.scenarios.split(","), python=not args.no_python,
               use_r=False if args.no_r else None)
    old = json.loads(args.out.read_text())["rows"] if args.merge and args.out.exists() else []
    keys = {(r["test"], r["term"], r["scenario"]) for r in rows}
    rows = [r for r in old if (r["test"], r["term"], r["scenario"]) not in keys] + rows
    result = {"study": "negation", "design": "20 roots × 4 items × 2 contexts × 2 forms (320 sentences), log-ppl scale; "
                                               "root SD 0.3, item SD 0.1, residual SD 0.15",
              "alpha": 0.05, "versions": r_versions("lme4", "lmerTest"), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    for r in rows:
        print(f"{r['test']:28s} {r['term']:28s} {r['scenario']:14s} {r['rate']:.3f} ± {r['mc_se']:.3f} "
              f"(n={r['n_sims']}, valid {r['n_valid']})")
    print(f"{time.time() - t0:.0f} s", file=sys.stderr)
    bad = [r for r in rows if r["headline"] and r["null_true"] and r["rate"] > 0.075]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
