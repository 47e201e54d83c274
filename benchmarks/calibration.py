"""Calibration of every inferential test the monotonicity analysis reports, by simulation where the truth is known.

For each scenario, ``n_sims`` datasets are drawn from a logistic model with random intercepts for threshold, noun and
prompt pair (both conditions of a prompt share one), optionally a gap that varies by threshold and a yes-bias;
each is analysed with the study's own functions (``nbutils.studies.monotonicity.stats`` and the shared
``nbutils.studies.common.quantifier_stats`` and ``quantifier_mixed_models``) and the share of p < .05 (or, for the cluster bootstrap, of 95% CIs
excluding 0) is reported with its Monte-Carlo SE. The GLMM (lme4 through R) is fitted for all simulations of a
scenario in ONE ``Rscript`` call. A power table for the headline gap tests covers prompts per concept × number of
thresholds.

The run is split into parts so that each process stays short (every part writes its own JSON under
``--parts-dir``; ``--merge`` joins them into the results file and prints the markdown tables):

    python benchmarks/calibration.py --part python            # pure-Python tests, every scenario
    python benchmarks/calibration.py --part r --scenario null  # lme4 GLMM, one scenario per call
    python benchmarks/calibration.py --part power --or 1.5     # power grid (GEE, sign-flip)
    python benchmarks/calibration.py --part negation           # benchmarks/calibration_negation.py's run(), if present
    python benchmarks/calibration.py --merge --out benchmarks/results/calibration.json
    python benchmarks/calibration.py --rules --parts-dir DIR --out FILE  # what the degenerate-fit rules change
    python benchmarks/calibration.py --fast                    # every part (negation: its null scenarios), few simulations, loose bounds; exit 1 on failure
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from nbutils import artifacts
from nbutils.stats import r_available, r_versions
from nbutils.studies.common import quantifier_mixed_models as qmixed
from nbutils.studies.monotonicity import stats

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.05
HEADLINE_FPR_MAX = 0.075
DEFAULT_SEED = 20240101
THRESHOLDS = [str(Fraction(k, 20)) for k in (10, 5, 4, 15, 6, 14, 8, 12, 2, 18, 3, 17, 7, 13, 9, 11, 1, 19, 16)]
CL, EX = "concept_learning", "explicit"


@dataclass(frozen=True)
class Scenario:
    """A data-generating model: log-odds of a correct answer and the random-effect SDs around them."""

    name: str
    base: float = 0.85          # log-odds of a correct answer, downward concept, concept learning (≈ 70%)
    gap: float = 0.0            # upward − downward log odds ratio under concept learning
    explicit: float = 0.0       # explicit − concept learning, downward concepts
    interaction: float = 0.0    # change of the gap when explicit
    sd_threshold: float = 0.5   # random intercept per threshold
    sd_gap: float = 0.0         # the gap's variation from threshold to threshold (mean 0 around ``gap``)
    sd_noun: float = 0.3        # random intercept per query noun (100 nouns, crossed with thresholds)
    sd_pair: float = 0.5        # random intercept per prompt, shared by its two conditions
    yes_bias: float = 0.0       # log-odds added to saying Yes, whatever the label


LOG15, LOG2 = float(np.log(1.5)), float(np.log(2.0))
SCENARIOS = {s.name: s for s in [
    Scenario("chance", base=0.0, sd_threshold=0.0, sd_noun=0.0, sd_pair=0.0),
    Scenario("null"),
    Scenario("null_varying_gap", sd_gap=0.3),
    Scenario("null_yes_bias", yes_bias=1.0),
    Scenario("gap_or1.5", gap=LOG15),
    Scenario("gap_or2", gap=LOG2),
    Scenario("gap_or1.5_interaction", gap=LOG15, explicit=LOG15, interaction=-LOG15),
    Scenario("gap_or2_interaction", gap=LOG2, explicit=LOG2, interaction=-LOG2),
]}
NULL_SCENARIOS = ["chance", "null", "null_varying_gap", "null_yes_bias"]


def simulate(sc: Scenario, k: int, n: int, rng: np.random.Generator, conditions=(CL, EX), model: str = "sim") -> pd.DataFrame:
    """One dataset in the analysis's column layout: k thresholds × up/down × ``n`` prompts per concept × conditions."""
    thr = rng.normal(0, sc.sd_threshold, k)
    gap_t = sc.gap + rng.normal(0, sc.sd_gap, k)
    noun_eff = rng.normal(0, sc.sd_noun, 100)
    t_idx = np.repeat(np.arange(k), 2 * n)
    up = np.tile(np.repeat([1, 0], n), k)
    label = np.tile(np.arange(n) % 2 == 0, 2 * k)
    noun = rng.integers(0, 100, size=2 * k * n)
    pair = rng.normal(0, sc.sd_pair, 2 * k * n)
    pair_id = np.char.add("p", np.arange(2 * k * n).astype(str))
    frames = []
    for cond in conditions:
        e = float(cond == EX)
        eta = (sc.base + thr[t_idx] + up * gap_t[t_idx] + e * sc.explicit + up * e * sc.interaction
               + noun_eff[noun] + pair)
        p_yes = 1 / (1 + np.exp(-(sc.yes_bias + np.where(label, eta, -eta))))
        pred = rng.random(len(eta)) < p_yes
        frames.append(pd.DataFrame({"condition": cond, "t": t_idx, "up": up, "label": label, "pred_yes": pred,
                                    "pair_id": pair_id, "query_noun": np.char.add("n", noun.astype(str))}))
    d = pd.concat(frames, ignore_index=True)
    thresholds = np.array(THRESHOLDS[:k])[d["t"]]
    quant = np.where(d["up"] == 1, "more_than", "less_than")
    d = d.assign(model=model, family="proportional", threshold=thresholds, quantifier=quant,
                 monotonicity=np.where(d["up"] == 1, "upward", "downward"),
                 concept=np.char.add(np.char.add(np.char.replace(quant, "_", " "), " "), thresholds),
                 correct=d["pred_yes"] == d["label"], margin=np.where(d["pred_yes"], 1.0, -1.0))
    return d.drop(columns=["t", "up"])


# --- which null each reported test is about, per scenario ---------------------------------------------------------

def _gap(sc: Scenario, cond: str) -> float:
    return sc.gap + (sc.interaction if cond == EX else 0.0)


def truth(test: str, sc: Scenario) -> tuple[bool, bool]:
    """(null of the claim about thresholds in general is true, the test's own null is true) for a test id."""
    name, _, where = test.partition("@")
    fixed = sc.sd_gap == 0
    if name in ("glmm_lrt:upward", "gee_bias_reduced:upward", "signflip_gap", "cluster_bootstrap", "signflip_dprime_gap"):
        null = _gap(sc, where) == 0
        return null, null
    if name in ("cmh", "fisher_holm_any"):
        return _gap(sc, where) == 0, _gap(sc, where) == 0 and fixed
    if name == "breslow_day":
        return fixed, fixed
    if name in ("glmm_lrt:upward:explicit", "gee_bias_reduced:upward:explicit", "signflip_gap_difference"):
        return sc.interaction == 0, sc.interaction == 0
    if name in ("glmm_lrt:explicit", "gee_bias_reduced:explicit"):
        return sc.explicit == 0, sc.explicit == 0
    if name == "mcnemar_holm_any":
        null = sc.explicit == 0 and sc.interaction == 0
        return null, null
    if name == "binomial_holm_any":
        null = sc.base == 0 and sc.sd_threshold == 0 and sc.sd_noun == 0 and sc.sd_pair == 0 and sc.gap == 0
        return null, null
    raise KeyError(test)


HEADLINE = {"glmm_lrt:upward@concept_learning", "glmm_lrt:upward@explicit", "glmm_lrt:upward:explicit",
            "glmm_lrt:explicit", "gee_bias_reduced:upward@concept_learning", "gee_bias_reduced:upward@explicit",
            "gee_bias_reduced:upward:explicit", "gee_bias_reduced:explicit"}


# --- the pure-Python tests, as the analysis computes them ----------------------------------------------------------

def _model_rejections(t: pd.DataFrame, prefix: str) -> dict[str, bool]:
    out = {}
    for r in t.itertuples(index=False):
        if not isinstance(r.term, str):
            continue
        key = f"{prefix}:{r.term}" + (f"@{r.condition}" if isinstance(r.condition, str) else "")
        flagged = bool(getattr(r, "degenerate", ""))
        out[key] = bool(r.valid) and bool(r.p < ALPHA)
        out[key + "#invalid"] = not bool(r.valid)
        out[key + "#flagged"] = flagged  # a degenerate fit (nbutils.stats.fit_problems): invalid by that rule alone
        out[key + "#unruled"] = (bool(r.valid) or flagged) and bool(r.p < ALPHA)  # the verdict without that rule
    return out


def python_tests(d: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> dict[str, bool]:
    """Reject (True) or not, for every pure-Python test the analysis reports, on one simulated dataset."""
    out = _model_rejections(qmixed.gee_model(d), "gee_bias_reduced")
    for r in stats.pooled_gap(d, n_boot=n_boot, seed=seed).itertuples(index=False):
        out[f"signflip_gap@{r.condition}"] = r.p_signflip < ALPHA
        out[f"cluster_bootstrap@{r.condition}"] = not (r.gap_ci_low <= 0 <= r.gap_ci_high)
        out[f"cmh@{r.condition}"] = r.p_cmh < ALPHA
        out[f"breslow_day@{r.condition}"] = r.p_breslow_day < ALPHA
    for r in stats.gap_difference(d, seed=seed).itertuples(index=False):
        out["signflip_gap_difference"] = r.p_signflip < ALPHA
    fisher = stats.gap_by_threshold(d)
    for cond, g in fisher.groupby("condition"):
        out[f"fisher_holm_any@{cond}"] = bool((g["p_holm"] < ALPHA).any())
    mc = stats.mcnemar_conditions(d)
    if len(mc):
        out["mcnemar_holm_any"] = bool((mc["p_holm"] < ALPHA).any())
    out["binomial_holm_any"] = bool((stats.accuracy_table(d)["p_holm"] < ALPHA).any())
    for r in stats.dprime_gap(stats.signal_detection(d), seed=seed).itertuples(index=False):
        out[f"signflip_dprime_gap@{r.condition}"] = r.p_signflip < ALPHA
    return out


def _rows(study: str, scenario: Scenario, outcomes: list[dict], design: dict, part: str) -> list[dict]:
    rows = []
    keys = sorted({k for o in outcomes for k in o if "#" not in k})
    for key in keys:
        hits = [o[key] for o in outcomes if key in o]
        n, rej = len(hits), int(np.sum(hits))
        rate = rej / n if n else float("nan")
        null, own_null = truth(key, scenario)
        rows.append({"study": study, "test": key, "scenario": scenario.name, "n_sims": n, "rejections": rej,
                     "rate": rate, "mc_se": float(np.sqrt(rate * (1 - rate) / n)) if n else None,
                     "null_true": null, "own_null_true": own_null, "headline": key in HEADLINE,
                     "n_invalid": int(sum(o.get(key + "#invalid", False) for o in outcomes)), "part": part, **design})
        if any(key + "#flagged" in o for o in outcomes):
            rows[-1]["n_flagged"] = int(sum(o.get(key + "#flagged", False) for o in outcomes))
            rows[-1]["rejections_without_rules"] = int(sum(o.get(key + "#unruled", False) for o in outcomes))
    return rows


def run_python(scenarios: list[str], n_sims: int, k: int, n: int, seed: int, n_boot: int) -> list[dict]:
    rows = []
    for name in scenarios:
        sc = SCENARIOS[name]
        rng = np.random.default_rng([seed, list(SCENARIOS).index(name)])
        t0 = time.perf_counter()
        outcomes = [python_tests(simulate(sc, k, n, rng), n_boot=n_boot, seed=seed + i) for i in range(n_sims)]
        rows += _rows("monotonicity", sc, outcomes, {"thresholds": k, "prompts_per_concept": n}, "python")
        print(f"[python] {name}: {n_sims} sims in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return rows


def run_r(scenarios: list[str], n_sims: int, k: int, n: int, seed: int) -> list[dict]:
    """The lme4 GLMM with its likelihood-ratio tests: all simulations of a scenario in one Rscript call."""
    rows = []
    for name in scenarios:
        sc = SCENARIOS[name]
        rng = np.random.default_rng([seed, 100 + list(SCENARIOS).index(name)])
        t0 = time.perf_counter()
        data = pd.concat([qmixed.glmm_input(simulate(sc, k, n, rng, model=f"s{i}")) for i in range(n_sims)])
        info, terms = qmixed.run_glmm(data, seed=seed)
        sd_text = info.set_index("unit")["sd"]
        outcomes = []
        for i in range(n_sims):
            t = terms[terms["unit"] == f"s{i}"]
            d = data[data["unit"] == f"s{i}"].rename(columns={"pair": "pair_id"})
            separated, alike, sds = qmixed.separated_cells(d), qmixed.pairs_alike(d), qmixed.parse_sd(sd_text[f"s{i}"])
            o = {}
            for r in t.itertuples(index=False):
                term, cond = qmixed.TERM_NAMES[r.key], qmixed._term_condition(r.key, [CL, EX])
                key = f"glmm_lrt:{term}" + (f"@{cond}" if cond else "")
                # the degenerate-fit rules glmm_model applies (nbutils.stats.fit_problems and the data's separation)
                flagged = bool(qmixed.term_problems(r.key, r.estimate, r.se, r.estimate - 1.96 * r.se,
                                                    r.estimate + 1.96 * r.se, separated, sds, alike))
                o[key] = bool(r.valid) and not flagged and bool(r.p < ALPHA)
                o[key + "#invalid"] = not bool(r.valid) or flagged
                o[key + "#flagged"] = flagged
                o[key + "#unruled"] = bool(r.valid) and bool(r.p < ALPHA)
            outcomes.append(o)
        simplified = float(info["note"].fillna("").str.contains("singular fit: dropped").mean())
        rs = _rows("monotonicity", sc, outcomes, {"thresholds": k, "prompts_per_concept": n}, "r")
        for r in rs:
            r["share_simplified"] = simplified
        rows += rs
        print(f"[r] {name}: {n_sims} sims in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return rows


def run_power(odds_ratio: float, ks: list[int], ns: list[int], n_sims: int, seed: int, sd_gap: float) -> list[dict]:
    """Power of the pure-Python headline gap tests (concept learning only) over thresholds × prompts per concept."""
    sc = Scenario(f"power_or{odds_ratio:g}", gap=float(np.log(odds_ratio)), sd_gap=sd_gap)
    rows = []
    for k in ks:
        for n in ns:
            rng = np.random.default_rng([seed, k, n, int(100 * odds_ratio)])
            t0 = time.perf_counter()
            gee, sf, flagged, unruled = [], [], [], []
            for i in range(n_sims):
                d = simulate(sc, k, n, rng, conditions=(CL,))
                g = qmixed.gee_model(d)
                g = g[g["term"] == "upward"].iloc[0]
                gee.append(bool(g["valid"]) and g["p"] < ALPHA)
                flagged.append(bool(g.get("degenerate", "")))
                unruled.append((bool(g["valid"]) or flagged[-1]) and g["p"] < ALPHA)
                sf.append(stats.pooled_gap(d, n_boot=10, seed=i)["p_signflip"].iloc[0] < ALPHA)
            for test, hits in (("gee_bias_reduced:upward", gee), ("signflip_gap", sf)):
                rate = float(np.mean(hits))
                rows.append({"study": "monotonicity", "test": test, "odds_ratio": odds_ratio, "sd_gap": sd_gap,
                             "thresholds": k, "prompts_per_concept": n, "n_sims": n_sims, "rejections": int(np.sum(hits)),
                             "rate": rate, "mc_se": float(np.sqrt(rate * (1 - rate) / n_sims))})
                if test.startswith("gee"):
                    rows[-1].update(n_flagged=int(np.sum(flagged)), rejections_without_rules=int(np.sum(unruled)))
            print(f"[power] OR {odds_ratio} K={k} n={n}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return rows


def run_negation(n_sims: int, seed: int, scenarios: list[str] | None = None) -> list[dict] | None:
    """Rows of benchmarks/calibration_negation.py's ``run(n_sims, seed, scenarios)`` (the negation study; every
    scenario by default), if that file exists."""
    path = Path(__file__).with_name("calibration_negation.py")
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("calibration_negation", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["calibration_negation"] = mod
    spec.loader.exec_module(mod)
    return [{"part": "negation", **r} for r in mod.run(n_sims=n_sims, seed=seed, scenarios=scenarios)]


# --- merging and reporting -----------------------------------------------------------------------------------------

def check(rows: list[dict], bound: float = HEADLINE_FPR_MAX, min_power: float | None = None) -> list[str]:
    """Violations: a headline test above ``bound`` where its null is true (and, if asked, below ``min_power`` at OR 2)."""
    bad = []
    for r in rows:
        if r.get("headline") and r.get("null_true") and r["rate"] > bound:
            bad.append(f"{r['test']} in {r['scenario']}: false-positive rate {r['rate']:.3f} > {bound}")
        if (min_power is not None and r.get("headline") and not r.get("null_true") and r["scenario"] == "gap_or2"
                and r["test"].endswith("upward@concept_learning") and r["rate"] < min_power):
            bad.append(f"{r['test']} in gap_or2: power {r['rate']:.3f} < {min_power}")
    return bad


def markdown(rows: list[dict], power: list[dict]) -> str:
    """The calibration table (rate ± MC SE, tests × scenarios; * marks cells where the test's claim is false) and
    the power table."""
    lines = []
    if rows:
        df = pd.DataFrame(rows)
        head = df["headline"].fillna(False).astype(bool) if "headline" in df else pd.Series(False, index=df.index)
        term = (":" + df["term"].astype(str)).where(df["term"].notna(), "") if "term" in df else ""
        df["name"] = df["study"] + ": " + df["test"] + term + np.where(head, " (headline)", "")
        scen = [s for s in list(SCENARIOS) + sorted(set(df["scenario"]) - set(SCENARIOS)) if s in set(df["scenario"])]
        lines += ["| test | " + " | ".join(scen) + " |", "|---" * (len(scen) + 1) + "|"]
        for name, g in df.groupby("name", sort=False):
            cells = []
            for s in scen:
                r = g[g["scenario"] == s]
                if r.empty:
                    cells.append("")
                    continue
                r = r.iloc[0]
                mark = "*" if r.get("null_true") is False or r.get("null_true") == 0 else ""
                cells.append(f"{r['rate']:.3f} ± {r['mc_se']:.3f}{mark}")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("\n`*`: the claim the test is about is false in that scenario (the rate is power); unmarked cells are "
                     "false-positive rates. Fixed-threshold tests (CMH, Fisher, Breslow–Day) test the thresholds in the "
                     "data, so in `null_varying_gap` their own null is false.")
    if power:
        p = pd.DataFrame(power)
        for (test, odds, sd), g in p.groupby(["test", "odds_ratio", "sd_gap"], sort=False):
            ns = sorted(g["prompts_per_concept"].unique())
            lines += ["", f"Power of {test} (concept learning, OR {odds:g}, gap SD {sd:g} log-odds between thresholds; "
                      f"{int(g['n_sims'].iloc[0])} sims per cell)", "",
                      "| thresholds \\ prompts per concept | " + " | ".join(map(str, ns)) + " |",
                      "|---" * (len(ns) + 1) + "|"]
            for k, gk in g.groupby("thresholds"):
                vals = {r.prompts_per_concept: f"{r.rate:.2f}" for r in gk.itertuples()}
                lines.append(f"| {k} | " + " | ".join(vals.get(n, "") for n in ns) + " |")
    return "\n".join(lines)


def pool(rows: list[dict]) -> list[dict]:
    """Join the rows of one cell (same study, test, scenario and design) run in several parts with different seeds
    (e.g. a confirmation run with a fresh seed): rejections and simulations are summed, the rate and its MC SE
    recomputed, and ``seeds`` lists every part's seed. Rows of one part pass unchanged."""
    key = ("part", "study", "test", "term", "scenario", "thresholds", "prompts_per_concept")
    out: dict[tuple, dict] = {}
    for r in rows:
        k = tuple(str(r.get(c)) for c in key)
        if k not in out or "rejections" not in r:
            out[k if k not in out else k + (len(out),)] = dict(r)
            continue
        o = out[k]
        o["n_sims"] += r["n_sims"]
        o["rejections"] += r["rejections"]
        o["n_invalid"] = o.get("n_invalid", 0) + r.get("n_invalid", 0)
        o["seeds"] = list(o.get("seeds") or []) + list(r.get("seeds") or [])
        o["rate"] = o["rejections"] / o["n_sims"]
        o["mc_se"] = float(np.sqrt(o["rate"] * (1 - o["rate"]) / o["n_sims"]))
    return list(out.values())


def merge(parts_dir: Path, out: Path) -> dict:
    parts = sorted(parts_dir.glob("*.json"))
    rows, power, meta = [], [], {}
    negation = parts_dir.parent / "calibration_negation.json"  # written by calibration_negation.py itself
    if not any(f.stem.startswith("negation") for f in parts) and negation.exists():
        parts.append(negation)
    for f in parts:
        part = json.loads(f.read_text())
        rows += [{"part": "negation", **r} if f == negation else {**r, "seeds": [part.get("seed")]}
                 for r in part.get("rows", [])]
        power += part.get("power", [])
        meta[f.stem] = {k: v for k, v in part.items() if k not in ("rows", "power")}
    rows = pool(rows)
    result = {"alpha": ALPHA, "headline_fpr_max": HEADLINE_FPR_MAX, "scenarios": {k: asdict(v) for k, v in SCENARIOS.items()},
              "rows": rows, "power": power, "parts": meta, "violations": check(rows), "created": artifacts.now_utc(),
              "versions": artifacts.versions(), "r_versions": r_versions("lme4")}
    artifacts.write_json(result, out)
    print(markdown(rows, power))
    return result


def rules_table(parts_dir: Path, out: Path | None = None) -> str:
    """What the degenerate-fit rules (``nbutils.stats.fit_problems`` and the data's separation checks) change, from
    the parts run into ``parts_dir``: per headline cell the rejection rate with the rules ± MC SE, the rate of the
    same simulations without them, and the share of simulations the rules flag invalid. The simulations are those of
    the committed cells (same seeds and designs), so the two rates differ only where a flagged fit rejected."""
    rows, power = [], []
    for f in sorted(parts_dir.glob("*.json")):
        part = json.loads(f.read_text())
        rows += [r for r in part.get("rows", []) if r.get("headline") and "n_flagged" in r]
        power += [p for p in part.get("power", []) if "n_flagged" in p]
    lines = ["| test | scenario | thresholds × prompts per concept | simulations | rate with the rules | without | "
             "flagged invalid |", "|---|---|---|---|---|---|---|"]
    for r in rows + power:
        scen = r.get("scenario") or f"power, OR {r['odds_ratio']:g}, gap SD {r['sd_gap']:g}"
        kind = "" if "scenario" not in r else ("*" if not r["null_true"] else "")
        design = f"{r['thresholds']} × {r['prompts_per_concept']}"
        lines.append(f"| {r['test']} | {scen}{kind} | {design} | {r['n_sims']} | "
                     f"{r['rate']:.3f} ± {r['mc_se']:.3f} | {r['rejections_without_rules'] / r['n_sims']:.3f} | "
                     f"{r['n_flagged'] / r['n_sims']:.3f} |")
    text = "\n".join(lines)
    if out is not None:
        artifacts.write_json({"rows": rows, "power": power, "created": artifacts.now_utc(),
                              "versions": artifacts.versions(), "r_versions": r_versions("lme4"), "table": text}, out)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["python", "r", "power", "negation"])
    ap.add_argument("--scenario", action="append", help="scenario(s) for --part python/r (default: all)")
    ap.add_argument("--n-sims", type=int, default=200)
    ap.add_argument("--thresholds", type=int, default=10, help="thresholds in the simulated design")
    ap.add_argument("--prompts", type=int, default=None,
                    help="prompts per concept and condition (default 100 for python, 20 for r)")
    ap.add_argument("--or", dest="odds_ratio", type=float, default=1.5, help="odds ratio for --part power")
    ap.add_argument("--power-thresholds", default="5,10,19")
    ap.add_argument("--power-prompts", default="50,100,200,500")
    ap.add_argument("--sd-gap", type=float, default=0.3, help="gap SD between thresholds for --part power")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED,
                    help="a part run with another seed is pooled with the default one's cells at --merge")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--parts-dir", type=Path, default=ROOT / "benchmarks" / "results" / "calibration-parts")
    ap.add_argument("--merge", action="store_true")
    ap.add_argument("--rules", action="store_true", help="with --parts-dir and --out: the table of what the "
                    "degenerate-fit rules change in the parts run there (rate with and without them, share flagged)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "calibration.json")
    ap.add_argument("--fast", action="store_true", help="every part with few simulations and small designs, loose "
                    "bounds (headline false-positive rate ≤ 0.2, power at OR 2 ≥ 0.5); exit 1 when a bound fails")
    args = ap.parse_args(argv)
    if args.fast:
        return fast(args)
    if args.rules:  # written only to an --out named on the command line, never over calibration.json
        named = any(a == "--out" or a.startswith("--out=") for a in (argv if argv is not None else sys.argv[1:]))
        print(rules_table(args.parts_dir, args.out if named else None))
        return 0
    if args.merge:
        merge(args.parts_dir, args.out)
        return 0
    if not args.part:
        ap.error("--part, --merge or --fast is required")
    scen = args.scenario or list(SCENARIOS)
    t0 = time.perf_counter()
    meta = {"created": artifacts.now_utc(), "seed": args.seed, "n_sims": args.n_sims, "host": platform.node(),
            "cpu_count": os.cpu_count(), "versions": artifacts.versions()}
    if args.part == "python":
        n = args.prompts or 100
        part = {"rows": run_python(scen, args.n_sims, args.thresholds, n, args.seed, args.n_boot)}
        name = "python-" + "+".join(scen) if args.scenario else "python"
    elif args.part == "r":
        if not r_available("lme4"):
            print("R with lme4 is not installed: no GLMM part", file=sys.stderr)
            return 0
        part = {"rows": run_r(scen, args.n_sims, args.thresholds, args.prompts or 20, args.seed)}
        name = "r-" + "+".join(scen) + (f"-seed{args.seed}" if args.seed != DEFAULT_SEED else "")
    elif args.part == "power":
        ks = [int(x) for x in args.power_thresholds.split(",")]
        ns = [int(x) for x in args.power_prompts.split(",")]
        part = {"power": run_power(args.odds_ratio, ks, ns, args.n_sims, args.seed, args.sd_gap)}
        name = f"power-or{args.odds_ratio:g}-k{args.power_thresholds.replace(',', '_')}-n{args.power_prompts.replace(',', '_')}"
    else:
        rows = run_negation(args.n_sims, args.seed)
        if rows is None:
            print("benchmarks/calibration_negation.py not found: no negation part", file=sys.stderr)
            return 0
        part = {"rows": rows}
        name = "negation"
    part.update(meta, seconds=round(time.perf_counter() - t0, 1))
    args.parts_dir.mkdir(parents=True, exist_ok=True)
    artifacts.write_json(part, args.parts_dir / f"{name}.json")
    print(markdown(part.get("rows", []), part.get("power", [])))
    return 0


def fast(args) -> int:
    """Every part on small designs with few simulations; bounds loose enough for the Monte-Carlo error at that size."""
    n_sims = min(args.n_sims, 40)
    null_and_power = ["null", "null_varying_gap", "null_yes_bias", "gap_or2", "gap_or2_interaction"]
    rows = run_python(null_and_power, n_sims, 8, 40, args.seed, 200)
    if r_available("lme4"):
        rows += run_r(["null", "gap_or2"], min(n_sims, 30), 8, 20, args.seed)
    # negation: only the scenarios whose null is true, the ones the fast bounds below check (power is the full run's)
    neg = run_negation(min(n_sims, 40), args.seed, scenarios=["null", "null_varying"])
    rows += neg or []
    print(markdown(rows, []))
    bad = check([r for r in rows if r.get("part") != "negation"], bound=0.2, min_power=0.5)
    bad += [f"negation {r['test']} in {r['scenario']}: {r['rate']:.3f} > 0.2" for r in neg or []
            if r.get("headline") and r.get("null_true") and r["rate"] > 0.2]
    result = {"fast": True, "rows": rows, "violations": bad}
    if args.out and args.out != ROOT / "benchmarks" / "results" / "calibration.json":
        artifacts.write_json(result, args.out)
    print("\n".join(bad) or "fast calibration: every bound holds", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
