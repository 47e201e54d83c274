"""The twin prompts' results as ``summary.json`` holds them: each model's twin block (``summary_blocks``), the twin
tests as records (``records``), and, for a run without twins, what they would show at its size (``design_blocks``)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...stats import ALPHA
from .twins import EQUIVALENCE_MARGIN, power_block, shifted_concept


def _clean(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, (np.integer,)):
            v = int(v)
        elif isinstance(v, (np.floating, float)):
            v = float(v) if math.isfinite(v) else None
        out[k] = v
    return out


def summary_blocks(models: dict, tab: pd.DataFrame, alpha: float = ALPHA) -> None:
    """Each model's twin evidence into ``summary["models"][model]["conditions"]["concept_learning"]["twins"]``:
    ``labels``, ``threshold`` (``upward``, ``downward``, ``both``), ``prior`` and ``copy`` as their table rows, and
    ``power``: the power the label and threshold tests had against a learner and the mirror right
    ``REFERENCE_ACCURACY`` of the time, with the pairs at which both reach 80%."""
    if tab is None or tab.empty:
        return
    for model, g in tab.groupby("model", sort=False):
        block: dict = {}
        for r in g.to_dict("records"):
            r = _clean({k: v for k, v in r.items() if k != "model" and not (isinstance(v, float) and math.isnan(v))})
            if r["component"] == "threshold":
                block.setdefault("threshold", {})[r.get("direction") or "both"] = r
            else:
                block[r["component"]] = r
        n_lab = block["labels"]["n"] if "labels" in block else 0
        n_thr = block["threshold"]["both"]["n"] if "threshold" in block else 0
        block["power"] = {**power_block(n_lab, n_thr, alpha), "margin": EQUIVALENCE_MARGIN}
        entry = models.setdefault(model, {"conditions": {}})
        entry["conditions"].setdefault("concept_learning", {})["twins"] = block


def records(tab: pd.DataFrame) -> list[dict]:
    """The twin tests as ``summary.json`` records: ``twin_mcnemar`` (labels; threshold per direction),
    ``twin_threshold_exact`` (both directions together), ``twin_prior_gap`` and ``copy_binomial``."""
    from ...stats import claim, record

    out = []
    if tab is None or tab.empty:
        return out
    for r in tab.to_dict("records"):
        comp, d, model = r["component"], r.get("direction"), r["model"]
        common = dict(condition="concept_learning", model=model, n=int(r["n"]))
        if comp == "labels":
            out.append(record("twin_mcnemar", "labels", r["estimate"], r["se"], r["ci_low"], r["ci_high"], r["p"],
                              follow=int(r["follow"]), against=int(r["against"]), **common,
                              note="label-flipped twins: net share of pairs whose answer follows the labels' "
                                   "direction; exact McNemar test, Agresti–Min CI",
                              hypothesis=claim("the net share of label-flipped pairs whose answer follows the labels",
                                               "the answers follow the labels' direction",
                                               "the answers go against the labels' direction", scale="points")))
        elif comp == "threshold" and d in ("upward", "downward"):
            out.append(record("twin_mcnemar", f"threshold@{d}", r["estimate"], r["se"], r["ci_low"], r["ci_high"],
                              r["p"], follow=int(r["follow"]), against=int(r["against"]), **common,
                              note=f"threshold-shifted twins of {d} concepts: net share of pairs whose answer moves "
                                   "the way the gold answer moved; exact McNemar test, Agresti–Min CI",
                              hypothesis=claim(f"the net share of threshold-shifted {d} pairs whose answer moves "
                                               "with the gold answer",
                                               f"the answers to {d} concepts move with the examples' threshold, in "
                                               "the concept's own direction",
                                               f"the answers to {d} concepts move against the gold answer when the "
                                               "examples' threshold moves", scale="points")))
        elif comp == "threshold":
            out.append(record("twin_threshold_exact", "threshold", r.get("upward_reading"), None,
                              r.get("upward_reading_ci_low"), r.get("upward_reading_ci_high"), r["p"], **common,
                              note="threshold-shifted twins, both directions: the sum of the two directions' squared "
                                   "McNemar statistics against its exact null distribution; the estimate is the net "
                                   "share moving as 'more than the examples' threshold' (the mirror's reading)",
                              hypothesis=claim("whether the answers move with the examples' threshold", "", "",
                                               "the answers move with the examples' threshold", sided="none",
                                               symbol="")))
        elif comp == "prior" and math.isfinite(r.get("estimate", math.nan)):
            out.append(record("twin_prior_gap", "prior", r["estimate"], None, r["ci_low"], r["ci_high"], r["p"],
                              **common,
                              note="right answers that did not move with the threshold, upward minus downward: the "
                                   "part of the gap the query alone carries; Agresti–Caffo CI and test",
                              hypothesis=claim("the part of the gap carried by answers that ignore the examples' "
                                               "threshold", "a prior on the query favours upward concepts",
                                               "a prior on the query favours downward concepts", scale="points")))
        elif comp == "copy":
            out.append(record("copy_binomial", "copy", r["estimate"], None, r["ci_low"], r["ci_high"], r["p"],
                              **common, note="copy probes (the query repeats a labelled example): accuracy against "
                                             "one half, one-sided exact binomial test, Wilson CI",
                              hypothesis=claim("accuracy on copy probes", "the model copies the label it was shown",
                                               "", scale="proportion", null=0.5, sided="greater")))
    return out


def threshold_share(scores: pd.DataFrame) -> dict:
    """Per model, the share of its concept-learning prompts that would get a threshold-shifted twin: those whose query
    another threshold of the design (same quantifier and family) puts on its other side."""
    from ..common.quantifiers import parse_concept

    cl = scores[scores["condition"] == "concept_learning"] if "condition" in scores else scores.iloc[:0]
    if cl.empty:
        return {}
    design = [parse_concept(c) for c in cl["concept"].astype(str).unique()]
    by_name = {c.name: c for c in design}
    first = cl.drop_duplicates("prompt_id")
    has = {pid: shifted_concept(by_name[c], design, int(t), int(k)) is not None
           for pid, c, t, k in zip(first["prompt_id"], first["concept"].astype(str), first["query_total"],
                                   first["query_count"])}
    return {m: float(np.mean([has[p] for p in g["prompt_id"]])) for m, g in cl.groupby("model", sort=False)}


def design_blocks(models: dict, scores: pd.DataFrame) -> None:
    """Each model's concept-learning block without twins gets ``twin_design``: the power twin prompts would have at
    its number of prompts (a label-flipped twin of each, a threshold-shifted one where the design allows), and the
    prompts at which both tests reach 80%, for the sentence that says what would decide."""
    share = None
    for model, entry in models.items():
        cond = (entry.get("conditions") or {}).get("concept_learning")
        if not isinstance(cond, dict) or cond.get("twins") or not isinstance(cond.get("n"), int) or cond["n"] < 4:
            continue
        share = threshold_share(scores) if share is None else share
        n, f = cond["n"], share.get(model, 0.0)
        cond["twin_design"] = power_block(n, int(n * f), ALPHA, share=f)
