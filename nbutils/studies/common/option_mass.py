"""How much of the model's next-token probability the answer options hold (the score files' ``option_mass``).

A likelihood probe reads the answer as whichever option gets more probability; that reading says what the model
would answer only where the options hold most of the probability. An instruct model asked through its chat template
may give Yes and No a small share and prefer to start with something else ("The", "Based", a code fence): its
answers are then read from a small part of what it would say. Each model and condition gets the mean, the median and
the share of prompts below one half; the results say so in words where the mean is below one half."""
from __future__ import annotations

import numpy as np
import pandas as pd

LOW = 0.5  # below this mean share the options are not what the model mostly wants to say next


def table(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per model and condition: n, mean, median and the share of prompts whose options hold less than
    ``LOW`` (empty where the score files have no ``option_mass``, e.g. files scored before it was recorded)."""
    cols = ["model", "condition", "n", "mean", "median", "share_below_half"]
    if "option_mass" not in scores or scores["option_mass"].isna().all():
        return pd.DataFrame(columns=cols)
    rows = []
    for (model, cond), g in scores.groupby(["model", "condition"], sort=False):
        m = g["option_mass"].astype(float).dropna().to_numpy()
        if len(m):
            rows.append([model, cond, int(len(m)), float(m.mean()), float(np.median(m)), float((m < LOW).mean())])
    return pd.DataFrame(rows, columns=cols)


def add_blocks(models: dict, mass: pd.DataFrame) -> None:
    """Each model's condition blocks in ``summary["models"]`` get ``option_mass`` {n, mean, median,
    share_below_half}."""
    for r in mass.itertuples(index=False):
        block = models.setdefault(r.model, {"conditions": {}}).setdefault("conditions", {}).setdefault(r.condition, {})
        block["option_mass"] = {"n": r.n, "mean": round(r.mean, 4), "median": round(r.median, 4),
                                "share_below_half": round(r.share_below_half, 4)}


def sentences(summary: dict, names: dict | None = None, options: str = "the answer options") -> list[str]:
    """One sentence per model and condition whose options hold less than half of the next-token probability on
    average; nothing where they hold more (the reading then stands on what the model would say)."""
    out = []
    for model, entry in (summary.get("models") or {}).items():
        for cond, block in (entry.get("conditions") or {}).items():
            om = block.get("option_mass") if isinstance(block, dict) else None
            if not om or not isinstance(om.get("mean"), (int, float)) or om["mean"] >= LOW:
                continue
            where = (names or {}).get(cond, cond)
            out.append(f"{model}, {where}: {options} hold only {100 * om['mean']:.0f}% of the next-token probability "
                       f"on average (median {100 * om['median']:.0f}%; {100 * om['share_below_half']:.0f}% of "
                       f"{om['n']} prompts below one half): the model mostly wants to say something else first, so "
                       "its answers are read from a small part of what it would say")
    return out
