"""One call that turns a negation run's scores into tables, the interaction figure and summary.json."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import artifacts, paths
from ...engine.runs import excluded_notes, load_scores
from .. import get
from .plots import interaction_plot
from .stats import cell_means, lmm_tables, predicted_cells, seed_table


def load_negation_scores(run_dir, include_limited: bool = False) -> pd.DataFrame:
    """Every complete model's sentence scores joined with the stimuli (one row per model × sentence).

    Adds ``log_ppl`` and, per item and context, the token-length difference between the negated and affirmative
    sentence (``token_diff_neg_minus_aff``) for this model's tokenizer.
    """
    df = load_scores(run_dir, get("negation").spec, include_limited=include_limited)
    df["log_ppl"] = np.log(df["ppl"])
    lengths = df.pivot_table(index=["model", "item_id", "context"], columns="form", values="n_tokens", aggfunc="first")
    if {"negated", "affirmative"}.issubset(lengths.columns):
        diff = (lengths["negated"] - lengths["affirmative"]).rename("token_diff_neg_minus_aff").reset_index()
        df = df.merge(diff, on=["model", "item_id", "context"], how="left")
    else:
        df["token_diff_neg_minus_aff"] = np.nan
    return df


def analyze_negation(run_dir, include_limited: bool = False) -> dict:
    """All negation tables and the interaction figure for a run; writes them and summary.json; returns the tables."""
    import matplotlib.pyplot as plt

    scores = load_negation_scores(run_dir, include_limited=include_limited)
    coefs, agreement = lmm_tables(scores)
    tables = {"lmm_coefficients": coefs, "spec_agreement": agreement, "table1_ppl": seed_table(coefs, "ppl"),
              "table1_log_ppl": seed_table(coefs, "log_ppl"), "cell_means": cell_means(scores),
              "token_length": (scores.drop_duplicates(["model", "item_id", "context"])
                               .groupby("model")["token_diff_neg_minus_aff"]
                               .agg(mean_diff="mean", share_equal=lambda s: float((s == 0).mean())).reset_index())}
    for name, t in tables.items():
        artifacts.write_table(t, paths.tables_dir(run_dir) / name, latex=name.startswith("table1"), float_format="%.3g")
    pred = predicted_cells(coefs)
    tables["predicted"] = pred
    if not pred.empty:
        fig = interaction_plot(pred)
        artifacts.save_figure(fig, paths.figures_dir(run_dir) / "interaction")
        plt.close(fig)
    summary = {}
    for model, g in coefs.groupby("model", sort=False):
        summary[model] = {}
        for spec, s in g.groupby("spec", sort=False):
            inter = s[s["term"] == "context × form"]
            summary[model][spec] = None if inter.empty else {
                "interaction_coef": float(inter["coef"].iloc[0]), "p": float(inter["p"].iloc[0]),
                "ci95": [float(inter["ci_low"].iloc[0]), float(inter["ci_high"].iloc[0])],
                "converged": bool(inter["valid"].iloc[0])}
    for r in agreement.itertuples(index=False):
        summary[r.model]["conclusions_agree"] = bool(r.interaction_conclusions_agree)
    summary["_notes"] = excluded_notes(scores)
    artifacts.write_json(artifacts.json_clean(summary), paths.summary_path(run_dir))
    tables["summary"] = summary
    return tables
