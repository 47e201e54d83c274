"""Is a reading a property of the model, or of the prompt set it was read on? Several prompt sets of one design (the
validation study's seeds) each give every model a reading; this module sets them side by side and reads the model
once more from a test over all the sets together.

The pooled reading comes from the sets' own results, combined as independent evidence (each set draws its prompts
afresh):

- **the gap**: Stouffer's signed z over the sets' headline tests (each set's two-sided p as a z with the sign of its
  estimate), referred to the normal; the estimate is the mean accuracy gap over the sets;
- **the use of the examples**: with twins, every twin component's follow and against counts summed over the sets and
  tested again (the pairs of different sets are independent pairs); without twins, the sets' score tests combined by
  Fisher's method;
- **the task floor**: the correct answers and prompts summed over the sets, one-sided exact binomial test.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from ...results import reading
from ...stats import ALPHA, wilson
from ..common import claims
from . import twins

CONDITION = "concept_learning"


def _z(p: float, est: float) -> float:
    p = min(max(p, 1e-300), 1.0)
    return math.copysign(float(sps.norm.isf(p / 2)), est) if est != 0 else 0.0


def _pooled_twins(blocks: list[dict]) -> dict | None:
    """The twin components of several prompt sets, counts summed and tested again."""
    if not blocks or not all(b.get("labels") for b in blocks):
        return None

    def summed(parts: list[dict], name: str, direction: str | None = None) -> dict:
        f, a, n = (sum(int(x[k]) for x in parts) for k in ("follow", "against", "n"))
        return twins.counts_component(f, a, n, name, direction)

    out: dict = {"labels": summed([b["labels"] for b in blocks], "labels")}
    dirs = {}
    for d in ("upward", "downward"):
        parts = [(b.get("threshold") or {}).get(d) for b in blocks]
        if all(parts):
            dirs[d] = summed(parts, "threshold", d)
    if len(dirs) == 2:
        out["threshold"] = {**dirs, "both": twins.joint_component(dirs, dirs["upward"]["n"] + dirs["downward"]["n"])}
    copies = [b.get("copy") for b in blocks]
    if all(copies):
        out["copy"] = twins.copy_component(sum(int(c["follow"]) for c in copies), sum(int(c["n"]) for c in copies))
    n_thr = (out.get("threshold") or {}).get("both", {}).get("n", 0)
    out["power"] = {**twins.power_block(out["labels"]["n"], n_thr), "margin": twins.EQUIVALENCE_MARGIN}
    return out


def pooled_summary(model: str, sets: list[dict], alpha: float = ALPHA) -> dict | None:
    """A summary of ``model`` under concept learning over the prompt sets ``sets`` (each set's summary.json), in the
    shape a reading reads: the pooled gap as its headline record, the pooled floor, use of the examples and twins."""
    conds, heads = [], []
    for s in sets:
        cond = ((s.get("models") or {}).get(model) or {}).get("conditions", {}).get(CONDITION)
        head = next((r for r in s.get("headline") or [] if r.get("model") == model and r.get("condition") == CONDITION
                     and r.get("term") == "upward" and not r.get("models")), None)
        if not cond or head is None:
            return None
        conds.append(cond)
        heads.append(head)
    valid = [h for h in heads if h.get("valid") and isinstance(h.get("p"), (int, float)) and
             isinstance(h.get("estimate"), (int, float))]
    gaps = [c.get("gap") for c in conds if isinstance(c.get("gap"), (int, float))]
    gap = float(np.mean(gaps)) if gaps else math.nan
    rec = {"test": "stouffer_sets", "term": "upward", "model": model, "condition": CONDITION, "headline": True,
           "estimate": gap, "se": None, "ci_low": None, "ci_high": None, "valid": len(valid) == len(heads) > 1,
           "note": f"Stouffer's signed z over {len(heads)} prompt sets' headline tests",
           "p": None, "hypothesis": claims.gap(CONDITION, "points", "mean gap")}
    if rec["valid"]:
        z = sum(_z(h["p"], h["estimate"]) for h in valid) / math.sqrt(len(valid))
        rec["p"] = float(2 * sps.norm.sf(abs(z)))
        if rec["p"] < alpha and np.sign(z) != np.sign(gap):  # the tests and the accuracies point different ways
            rec["valid"] = False
            rec["note"] += "; the combined tests and the mean accuracy gap point different ways"
    fl = [c.get("floor") or {} for c in conds]
    k = sum(int(round(f.get("accuracy", 0) * f.get("n", 0))) for f in fl)
    n = sum(int(f.get("n", 0)) for f in fl)
    chance = float(np.mean([f.get("chance", 0.5) for f in fl]))
    lo, hi = wilson(k, n) if n else (math.nan, math.nan)
    floor = {"accuracy": k / n if n else math.nan, "ci_low": lo, "ci_high": hi, "n": n, "chance": chance,
             "p": float(sps.binomtest(k, n, chance, alternative="greater").pvalue) if n else math.nan}
    floor["above"] = bool(floor["p"] < alpha) if n else None
    block = {"acc_up": float(np.mean([c.get("acc_up", math.nan) for c in conds])),
             "acc_down": float(np.mean([c.get("acc_down", math.nan) for c in conds])), "gap": gap,
             "n": sum(int(c.get("n") or 0) for c in conds), "floor": floor}
    tw = _pooled_twins([c.get("twins") or {} for c in conds])
    if tw:
        block["twins"] = tw
    else:
        ps = [(c.get("uses_examples") or {}).get("p") for c in conds]
        ps = [p for p in ps if isinstance(p, (int, float)) and math.isfinite(p)]
        if len(ps) == len(conds):
            p = float(sps.combine_pvalues(ps, method="fisher").pvalue)
            ups = [(c.get("uses_examples") or {}).get("score_upward") for c in conds]
            downs = [(c.get("uses_examples") or {}).get("score_downward") for c in conds]
            uses = {"uses": p < alpha, "p": p, "note": f"Fisher's combination of {len(ps)} prompt sets' score tests"}
            if all(isinstance(v, (int, float)) for v in ups + downs):
                uses.update(score_upward=float(sum(ups)), score_downward=float(sum(downs)))
            block["uses_examples"] = uses
        else:
            block["uses_examples"] = {"uses": None, "note": "a prompt set's examples test could not run"}
    return {"records": [rec], "models": {model: {"conditions": {CONDITION: block}}}}


def table(sets: dict, models: list[str] | None = None, alpha: float = ALPHA) -> list[dict]:
    """Per model: its reading on each prompt set (``sets``: set name → summary.json), how many sets agree with the
    commonest, and the pooled reading with its sentence."""
    names = list(sets)
    models = models or list(dict.fromkeys(m for s in sets.values() for m in (s.get("models") or {})))
    out = []
    for m in models:
        per = {}
        for name, s in sets.items():
            if m in (s.get("models") or {}) and CONDITION in s["models"][m].get("conditions", {}):
                try:
                    per[name] = reading(s, m, CONDITION, alpha)["reading"]
                except (KeyError, TypeError):
                    per[name] = None
        if not per:
            continue
        kinds = [k for k in per.values() if k]
        top = max(dict.fromkeys(kinds), key=kinds.count) if kinds else None
        pooled = pooled_summary(m, [sets[n] for n in names if n in per], alpha)
        rd = reading(pooled, m, CONDITION, alpha) if pooled else None
        out.append({"model": m, "per_set": per, "n_sets": len(per), "commonest": top,
                    "agree": kinds.count(top) if top else 0, "pooled": rd["reading"] if rd else None,
                    "pooled_floor_state": rd["floor_state"] if rd else None,
                    "pooled_sentence": rd["sentence"] if rd else None})
    return out


def sentence(row: dict) -> str:
    """One model's stability in words: how many prompt sets gave which reading, and the pooled reading."""
    counts: dict = {}
    for k in row["per_set"].values():
        counts[k] = counts.get(k, 0) + 1
    said = ", ".join(f"{str(k).replace('_', ' ')} on {c}" for k, c in sorted(counts.items(), key=lambda x: -x[1]))
    pooled = str(row.get("pooled") or "no pooled reading").replace("_", " ")
    return (f"{row['model']}: read {said} of {row['n_sets']} prompt sets ({row['agree']} of {row['n_sets']} agree); "
            f"over all sets together: {pooled}.")
