"""Models compared on the same items of a custom run: does one answer more items right than another?

Each model after the reference (the first of the run's model order: an import's first log, else the model scored
first) is compared with it on the items both answered, overall and in each group: the difference of accuracies in
points, with a 95% t interval of the paired differences, and McNemar's exact test on the items the two answer
differently (statsmodels), with the mid-p beside it (Fagerland, Lydersen and Laake, "The McNemar test for binary
matched-pairs data: mid-p and asymptotic are better than exact conditional"). The p-values of the groups of one
comparison are Holm-adjusted; with several comparisons, so are their overall p-values.

One direction everywhere: ``first`` is the model compared, ``second`` the reference, and the estimate is the first's
accuracy minus the second's, as the sentence names them ("B answered more items right than A").
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...artifacts import json_clean
from ...stats import claim, holm, record
from ..common.model_comparison import midp
from .stats import ALL, paired_accuracy

NOTE = ("exact McNemar test on the items the two models answer differently (mid-p beside it); 95% CI: t interval of "
        "the paired differences")


def claim_models(first: str, second: str, group, n: int, n_differ: int) -> dict:
    """The words of a comparison: the first model's accuracy minus the second's on the ``n`` items both answered, of
    which they answered ``n_differ`` differently."""
    where = "" if group == ALL else f" in group {group!r}"
    return claim(f"{first}'s accuracy minus {second}'s on the {n} items both answered{where}, {n_differ} of them "
                 "answered differently", f"{first} answered more items right than {second}{where}",
                 f"{first} answered fewer items right than {second}{where}",
                 f"{first} and {second} differ in accuracy{where}", scale="points")


def compare(df: pd.DataFrame, order: list[str] | None = None) -> pd.DataFrame:
    """One row per comparison (each model after the reference, with the reference) and group (``(all)`` pooled, when
    there are several groups): ``first``, ``second``, ``group``, ``n_items`` (answered by both), both accuracies, the
    difference with its CI, the discordant counts (``only_first``: items only the first answered right), exact p,
    mid-p and ``p_holm``. Empty with fewer than two models."""
    models = [m for m in (order or list(dict.fromkeys(df["model"]))) if m in set(df["model"])]
    rows = []
    for other in models[1:]:
        ref = models[0]
        wide = df[df["model"].isin([ref, other])].pivot_table(index=["item_id", "group"], columns="model",
                                                              values="correct", aggfunc="first").dropna()
        groups = list(dict.fromkeys(wide.index.get_level_values("group")))
        for group in ([ALL] if len(groups) > 1 else []) + groups:
            g = wide if group == ALL else wide.xs(group, level="group", drop_level=False)
            r = paired_accuracy(g[other].astype(bool), g[ref].astype(bool))
            rows.append({"first": other, "second": ref, "group": group, "n_items": len(g),
                         "acc_first": float(g[other].astype(bool).mean()), "acc_second": float(g[ref].astype(bool).mean()),
                         **r, "p_midp": midp(r["only_first"], r["only_second"])})
    out = pd.DataFrame(rows)
    if len(out):
        out["p_holm"] = np.nan
        for _, m in out.groupby("first", sort=False):
            fam = m.index[m["group"] != ALL]
            out.loc[fam, "p_holm"] = holm(out.loc[fam, "p"].to_numpy())
        overall = out.index[out["group"] == ALL] if (out["group"] == ALL).any() else out.index
        if out["first"].nunique() > 1:
            out.loc[overall, "p_holm"] = holm(out.loc[overall, "p"].to_numpy())
        elif not (out["group"] == ALL).any():
            out.loc[overall, "p_holm"] = out.loc[overall, "p"]
    return out


def records(t: pd.DataFrame) -> list[dict]:
    """The comparisons as ``summary.json`` records (test ``mcnemar_models``, ``models`` [compared, reference]); the
    overall comparison of each model is a headline."""
    out = []
    several = t["first"].nunique() > 1 if len(t) else False
    for r in t.itertuples(index=False):
        overall = r.group == ALL or (t["group"] != ALL).all()
        p = r.p_holm if (r.group != ALL or several) else r.p
        holm_note = "; p Holm-adjusted over " + ("the comparisons" if overall else "the groups") if (
            several or not overall) else ""
        rec = record("mcnemar_models", r.group, r.diff, ci_low=r.ci_low, ci_high=r.ci_high, p=p,
                     valid=bool(np.isfinite(r.diff)), group=r.group, models=[r.first, r.second], reference=r.second,
                     note=f"{NOTE}{holm_note}; {r.n_items} items both answered, {r.only_first + r.only_second} "
                          f"answered differently ({r.first} alone right on {r.only_first}, {r.second} alone right on "
                          f"{r.only_second})", hypothesis=claim_models(r.first, r.second, r.group, int(r.n_items),
                                                                 int(r.only_first + r.only_second)),
                     headline=True, n=int(r.n_items), only_first=int(r.only_first),
                     only_second=int(r.only_second), p_midp=float(r.p_midp), p_unadjusted=float(r.p))
        out.append(rec)
    return json_clean(out)
