"""Can a prediction interval for an unseen prompt variant hold a new variant's gap 90–97% of the time in every cell of
the calibration (``calibration_prediction.py``)? Where the reported one (``cd``, the confidence-distribution interval)
over-covers, and what no interval of a sensible kind can avoid.

Normal theory. With equal within-variances σ² (equal prompts per variant), k variants and r = τ²/σ², the pooled gap
is the variants' mean, the generalised Q statistic at τ² = 0 is Q = (1 + r)·χ²(k−1) independent of it, the
Hartung–Knapp SE is σ·√(Q/(k(k−1))) at every τ², the Q-profile draws of τ² are σ²·max(Q/c − 1, 0) with c a χ²(k−1)
quantile, and a new variant's true gap minus the pooled gap is N(0, σ²(r + (1 + r)/k)). An interval centred on the
pooled gap with half-width σ·H(Q) then covers with a probability that depends only on k and r, computed here without
simulation (``coverage``). Three uses:

- ``cd``: the reported interval's curve over r (its over-coverage where the variants agree is in the construction,
  not in the binomial data);
- ``minimax``: the plug-in μ̂ ± √(a²·SE_HK² + b²·τ²_q), τ²_q the upper limit of the one-sided Q-profile interval at
  level q, with (q, a, b) chosen per k so that the worst coverage over every r is as close to 95% as possible;
  ``minimax_ci`` the same with a = t(k−1), centred on the Paule–Mandel pooled gap with its Hartung–Knapp SE (so it
  holds the pooled gap's own 95% CI; in normal theory the SE is the same at every τ²): the reported interval;
- ``bound``: by a linear programme over randomised half-widths H(Q) ≥ t(k−1)·SE_HK, the widest margin inside
  90–97% over r ≤ r_max that any interval centred on the pooled gap and never narrower than that CI can keep.

Simulation, on the calibration's designs and τ grid (``prediction_alternatives.py``'s vectorised multiverses):
``cd``; ``cd_pooled`` the same with each direction's within-variant variance pooled across the variants (the one-way
analysis of variance's within mean square) in place of per-variant Agresti–Caffo variances; ``cd_model`` with the
model SE at each τ² draw and a normal draw in place of t(k−1)·SE_HK; ``cd_beran`` at the level that gives 95%
coverage averaged over its own τ² draws (Beran, "Calibrating prediction regions"; the coverage at each level from the
normal theory); ``minimax`` and ``minimax_ci``.

    python benchmarks/prediction_limits.py --sims 400 --seeds 1 20240203 20240205 \
        --out benchmarks/results/prediction_limits.json
    python benchmarks/prediction_limits.py --table benchmarks/results/prediction_limits.json
    python benchmarks/prediction_limits.py --constants nbutils/studies/monotonicity/data/prediction_constants.json

``--constants`` tabulates ``minimax_ci``'s (q, b) for k = 3 to 100 variants with each k's lowest and highest
normal-theory coverage over r: the reported prediction interval reads them (``nbutils.studies.monotonicity.
prediction``), and a test recomputes k = 3 and 4.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import stats as sps
from scipy.optimize import brentq, linprog
from scipy.special import ndtr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibration_prediction import DESIGNS, draw  # noqa: E402
from prediction_alternatives import NAMES, TAUS, fit, profile, tau2_at  # noqa: E402

from nbutils import artifacts  # noqa: E402
from nbutils.studies.monotonicity.prediction import effects  # noqa: E402

R = np.concatenate([[0.0], np.geomspace(1e-3, 1e3, 50)])  # r = τ²/σ²
S = 300  # χ²(k−1) quantiles the coverage averages over
LEVELS = np.array([0.80, 0.85, 0.88, 0.90, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98])  # cd_beran's candidate levels
METHODS = ("cd", "cd_pooled", "cd_model", "cd_beran", "minimax", "minimax_ci")
DRAWS = 1000


def _q0(k: int, r) -> np.ndarray:
    """Q at τ² = 0 (in units where σ = 1): S quantiles of (1 + r)·χ²(k−1), one row per r."""
    return sps.chi2.ppf((np.arange(S) + 0.5) / S, k - 1)[None, :] * (1 + np.atleast_1d(r)[:, None])


def coverage(k: int, half, r=R) -> np.ndarray:
    """Normal-theory coverage of a new variant's true gap by pooled gap ± σ·half(Q), per r."""
    r = np.atleast_1d(r)
    return (2 * ndtr(half(_q0(k, r)) / np.sqrt(r[:, None] + (1 + r[:, None]) / k)) - 1).mean(1)


def plugin(k: int, q: float, a: float, b: float):
    c = sps.chi2.ppf(1 - q, k - 1)
    return lambda Q: np.sqrt(a ** 2 * Q / (k * (k - 1)) + b ** 2 * np.maximum(Q / c - 1, 0))


@lru_cache(maxsize=None)
def cd_halves(k: int, draws: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    """The confidence-distribution interval's half-widths (σ = 1) on a grid of Q, at each of ``LEVELS``."""
    rng = np.random.default_rng(k)
    grid = np.geomspace(sps.chi2.ppf(1e-5, k - 1), sps.chi2.ppf(1 - 1e-5, k - 1) * 1001, 400)
    c, t, e = sps.chi2.isf(rng.random(draws), k - 1), rng.standard_t(k - 1, draws), rng.standard_normal(draws)
    new = np.sqrt(np.maximum(grid[:, None] / c - 1, 0)) * e - t * np.sqrt(grid[:, None] / (k * (k - 1)))
    return grid, np.quantile(new, 0.5 + LEVELS / 2, axis=1).T - np.quantile(new, 0.5 - LEVELS / 2, axis=1).T


def cd_half(k: int, j: int = 7):
    grid, h = cd_halves(k)
    return lambda Q: np.interp(np.log(Q), np.log(grid), h[:, j] / 2)


@lru_cache(maxsize=None)
def beran_table(k: int) -> np.ndarray:
    """Normal-theory coverage of the confidence-distribution interval at each level (columns) per r (rows)."""
    return np.stack([coverage(k, cd_half(k, j)) for j in range(len(LEVELS))], 1)


@lru_cache(maxsize=None)
def minimax(k: int, ci_floor: bool = False) -> tuple[float, float, float, float, float]:
    """(q, a, b, lowest, highest coverage over r) of the plug-in whose worst coverage is nearest 95%; a = t(k−1)
    when ``ci_floor``."""
    best = None
    ratios = [None] if ci_floor else np.geomspace(0.4, 2.5, 15)
    for q in np.round(np.arange(0.50, 0.99, 0.02), 2):
        for ratio in ratios:
            ab = (lambda s: (sps.t.ppf(0.975, k - 1), s)) if ci_floor else (lambda s: (s * ratio, s))
            gap = lambda s: (lambda c: c.max() + c.min() - 1.9)(coverage(k, plugin(k, q, *ab(s))))  # noqa: E731
            if gap(1e-3) > 0 or gap(100) < 0:
                continue
            s = brentq(gap, 1e-3, 100, xtol=1e-5)
            c = coverage(k, plugin(k, q, *ab(s)))
            if best is None or c.max() < best[4]:  # max + min = 1.9: the band is centred on 95%
                best = (float(q), *map(float, ab(s)), float(c.min()), float(c.max()))
    return best


def bound(k: int, r_max: float, bins: int = 150, widths: int = 50) -> float:
    """The largest m such that some randomised interval pooled gap ± σ·H(Q), H(Q) ≥ t(k−1)·SE_HK, covers between
    90% + m and 97% − m at every r ≤ r_max (a linear programme; m < 0: none stays inside 90–97%)."""
    rs = np.concatenate([[0.0], np.geomspace(1e-3, r_max, 30)])
    edges = np.concatenate([[0.0], np.geomspace(sps.chi2.ppf(1e-5, k - 1), sps.chi2.ppf(1 - 1e-5, k - 1)
                                                * (1 + r_max), bins - 1), [np.inf]])
    p = np.diff(sps.chi2.cdf(edges[None, :] / (1 + rs[:, None]), k - 1), axis=1)  # r × bin
    t, cols = sps.t.ppf(0.975, k - 1), []
    for j in range(bins):  # the floor at the bin's lower edge: a relaxation, so m is an upper bound
        h = t * np.sqrt(edges[j] / (k * (k - 1))) + np.concatenate([[0], np.geomspace(1e-3, 30 * np.sqrt(1 + r_max),
                                                                                       widths - 1)])
        cols.append(p[:, j:j + 1] * (2 * ndtr(h[None, :] / np.sqrt(rs[:, None] + (1 + rs[:, None]) / k)) - 1))
    a = np.hstack(cols)
    n, one = a.shape[1], np.ones((len(rs), 1))
    eq = np.kron(np.eye(bins), np.ones(widths))
    res = linprog(np.r_[np.zeros(n), -1], A_ub=np.vstack([np.hstack([-a, one]), np.hstack([a, one])]),
                  b_ub=np.r_[np.full(len(rs), -0.90), np.full(len(rs), 0.97)],
                  A_eq=np.hstack([eq, np.zeros((bins, 1))]), b_eq=np.ones(bins),
                  bounds=[(0, None)] * n + [(None, 0.05)], method="highs")
    return float(res.x[-1])


def pooled_within(n: int, k_up, k_down) -> np.ndarray:
    """Each direction's within-variant variance of the answers pooled across the variants, per multiverse."""
    s2 = lambda x: (x * (n - x) / n).sum(1) / ((n - 1) * x.shape[1])  # noqa: E731
    v = np.maximum((s2(k_up) + s2(k_down)) / n, 1e-6)
    return np.repeat(v[:, None], k_up.shape[1], 1)


def cell(name: str, tau: float, sims: int, seed: int) -> dict:
    ds = DESIGNS[name]
    k, n = ds.v, ds.n
    rng = np.random.default_rng([seed, zlib.crc32(name.encode()), int(round(100 * tau)), 7])
    down, up = (x.reshape(sims, k) for x in draw(rng, tau, sims * k))
    k_up, k_down = rng.binomial(n, up), rng.binomial(n, down)
    gap, var = effects(n, k_up, n, k_down)
    new_down, new_up = draw(rng, tau, sims)
    truth = new_up - new_down
    out = {}
    for m, v in (("cd", var), ("cd_pooled", pooled_within(n, k_up, k_down))):
        t2 = tau2_at(profile(gap, v), sps.chi2.isf(rng.random((sims, DRAWS)), k - 1))
        mu, hk = fit(gap, v, t2)
        dev = rng.standard_normal((sims, DRAWS)) * np.sqrt(t2)
        new = mu + dev - rng.standard_t(k - 1, (sims, DRAWS)) * np.sqrt(hk)
        lo, hi = np.quantile(new, 0.5 - LEVELS / 2, axis=1).T, np.quantile(new, 0.5 + LEVELS / 2, axis=1).T
        out[m] = lo[:, 7], hi[:, 7]
        if m == "cd":
            model = 1 / (1 / (var[:, None, :] + t2[:, :, None])).sum(2)
            out["cd_model"] = tuple(np.quantile(mu + dev - rng.standard_normal((sims, DRAWS)) * np.sqrt(model),
                                                [0.025, 0.975], axis=1))
            avg = np.stack([np.interp(t2 / var.mean(1, keepdims=True), R, beran_table(k)[:, j]).mean(1)
                            for j in range(len(LEVELS))], 1)
            at = np.array([np.interp(0.95, x, np.arange(len(LEVELS))) for x in avg])
            j0 = np.clip(np.floor(at).astype(int), 0, len(LEVELS) - 2)
            f, s = at - j0, np.arange(sims)
            out["cd_beran"] = ((1 - f) * lo[s, j0] + f * lo[s, j0 + 1], (1 - f) * hi[s, j0] + f * hi[s, j0 + 1])
    q0 = profile(gap, var)
    pm = fit(gap, var, tau2_at(q0, k - 1.0)[:, 0])  # the Paule–Mandel fit: the reported pooled gap and its HK SE
    for m, floor in (("minimax", False), ("minimax_ci", True)):
        q, a, b, *_ = minimax(k, floor)
        t2 = tau2_at(q0, sps.chi2.ppf(1 - q, k - 1))[:, 0]
        mu, hk = pm if floor else fit(gap, var, t2)  # minimax_ci: centred on the pooled gap, holding its CI
        half = np.sqrt(a ** 2 * hk[:, 0] + b ** 2 * t2)
        out[m] = mu[:, 0] - half, mu[:, 0] + half
        if not floor:  # how often it is narrower than the pooled gap's own 95% CI (t(k−1)·SE_HK at Paule–Mandel τ²)
            se = np.sqrt(pm[1][:, 0])
            narrower = float(np.mean(half < sps.t.ppf(0.975, k - 1) * se))
    res = {"design": name, "v": k, "n": n, "tau": tau, "sims": sims, "minimax_narrower_than_ci": narrower}
    for m, (lo, hi) in out.items():
        lo, hi = np.maximum(lo, -1), np.minimum(hi, 1)
        res[m] = {"coverage": float(np.mean((lo <= truth) & (truth <= hi))),
                  "median_width_points": float(100 * np.median(hi - lo))}
    return res


def normal_theory() -> dict:
    out = {"r": R.tolist(), "k": {}}
    for k in (3, 4, 24):
        mm, mc = minimax(k), minimax(k, True)
        out["k"][str(k)] = {"cd": coverage(k, cd_half(k)).tolist(),
                            "minimax": dict(zip(("q", "a", "b", "lowest", "highest"), mm)),
                            "minimax_ci": dict(zip(("q", "a", "b", "lowest", "highest"), mc)),
                            "bound_margin": {"1": bound(k, 1.0), "1000": bound(k, 1000.0)}}
    return out


def spans(rows: list[dict], m: str) -> dict:
    """Lowest and highest coverage of ``m`` over the cells of 3–4 variants and of 24."""
    few = [r[m]["coverage"] for r in rows if r["v"] <= 4]
    many = [r[m]["coverage"] for r in rows if r["v"] > 4]
    return {"few": [min(few), max(few)], "many": [min(many), max(many)],
            "outside": sum(not 0.90 <= r[m]["coverage"] <= 0.97 for r in rows)}


def markdown(res: dict) -> str:
    """Per construction and seed: coverage over the cells of 3–4 variants and of 24 (lowest–highest, %), the cells
    outside 90–97% of 30, and the median width (points) over all cells."""
    seeds = [run["seed"] for run in res["runs"]]
    lines = ["| construction | " + " | ".join(f"seed {s}: 3–4 variants; 24; outside" for s in seeds)
             + " | median width (points) |", "|" + " --- |" * (2 + len(seeds))]
    pct = lambda lo, hi: f"{100 * lo:.1f}–{100 * hi:.1f}%"  # noqa: E731
    for m in METHODS:
        cells = []
        for run in res["runs"]:
            s = spans(run["results"], m)
            cells.append(f"{pct(*s['few'])}; {pct(*s['many'])}; {s['outside']}")
        width = np.median([r[m]["median_width_points"] for run in res["runs"] for r in run["results"]])
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {width:.0f} |")
    return "\n".join(lines)


K_MAX = 100  # the constants' table runs from 3 to K_MAX variants


def _constants_row(k: int) -> dict:
    q, a, b, lowest, highest = minimax(k, ci_floor=True)
    return {"q": q, "b": round(b, 6), "lowest": round(lowest, 5), "highest": round(highest, 5)}


def constants(path: Path, jobs: int = 1) -> dict:
    """``minimax_ci``'s (q, b) per number of variants, 3 to ``K_MAX``, written to ``path``."""
    from multiprocessing import Pool

    ks = list(range(3, K_MAX + 1))
    with Pool(jobs) as pool:
        rows = pool.map(_constants_row, ks, chunksize=1)
    out = {"about": "the reported prediction interval's constants per number of variants k: pooled gap ± "
                    "sqrt(t(k-1)^2 * SE_HK^2 + b^2 * tau2_q), tau2_q the upper limit of the one-sided Q-profile "
                    "interval for tau2 at level q; lowest and highest: its normal-theory coverage of a new "
                    "variant's true gap over every tau2/sigma2 (made by benchmarks/prediction_limits.py --constants)",
           "r_grid": [float(R[1]), float(R[-1]), len(R)], "chi2_quantiles": S,
           "q_grid": [0.50, 0.98, 0.02], "k": {str(k): row for k, row in zip(ks, rows)}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 20240203, 20240205])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--table", type=Path, default=None, help="print the docs table of this results file and exit")
    ap.add_argument("--constants", type=Path, default=None,
                    help="write the reported interval's (q, b) for 3 to 100 variants to this file and exit")
    ap.add_argument("--jobs", type=int, default=1, help="processes for --constants")
    a = ap.parse_args(argv)
    if a.constants:
        constants(a.constants, a.jobs)
        return 0
    if a.table:
        print(markdown(json.loads(a.table.read_text())))
        return 0
    t0 = time.perf_counter()
    theory = normal_theory()
    print(json.dumps({k: {m: v for m, v in d.items() if m != "cd"} for k, d in theory["k"].items()}), flush=True)
    runs = []
    for seed in a.seeds:
        rows = []
        for name in NAMES:
            for tau in TAUS:
                rows.append(cell(name, tau, a.sims, seed))
                print(f"{seed} {name:16s} tau={tau:<4g} " + "  ".join(f"{m} {rows[-1][m]['coverage']:.3f}"
                                                                   for m in METHODS), flush=True)
        runs.append({"seed": seed, "results": rows})
    res = {"sims": a.sims, "draws": DRAWS, "methods": list(METHODS), "normal_theory": theory, "runs": runs,
           "seconds": round(time.perf_counter() - t0, 1), "versions": artifacts.versions(),
           "created": artifacts.now_utc()}
    print(markdown(res))
    if a.out:
        a.out.write_text(json.dumps(artifacts.json_clean(res), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
