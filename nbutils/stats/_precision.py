"""Precision sensitivity: did scoring a model in lower precision (bf16, float16, 8-bit, 4-bit) change its results?

A run may hold the same model scored at several precisions (``scores/{slug}.8bit.parquet`` beside
``scores/{slug}.parquet``). For each such model, every lower precision is compared with the most exact one, on the
rows both scored:

- decision agreement (same chosen option) with a 95% Wilson interval, and Cohen's κ of the two decisions;
- max and median |Δ margin| (the margin is Yes − No, or best − runner-up with more options);
- the share of flipped decisions among close calls (reference |margin| < ``CLOSE_CALL`` nats), where precision
  matters first;
- an exact McNemar test of the two precisions' correctness (rows with a gold answer): does accuracy change?
- and, given the study's headline function, its estimate at each precision, so a reader sees whether the
  headline moves.

The most exact precision of each model is the one its main analysis uses (``runstore.split_precisions``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ._inference import claim, record, wilson

ORDER = ("float32", "bfloat16", "float16", "8bit", "4bit")  # most exact first
CLOSE_CALL = 0.5  # nats: a reference decision this close is a close call


def precision_label(meta: dict) -> str:
    """What a score file was computed in: ``8bit``/``4bit`` for bitsandbytes weights, else the dtype."""
    q = meta.get("quantization")
    return q if q in ("8bit", "4bit") else str(meta.get("dtype") or "float32")


def rank(label: str) -> int:
    """Position of a precision label in ``ORDER`` (unknown labels last)."""
    return ORDER.index(label) if label in ORDER else len(ORDER)


def cohens_kappa(a, b) -> float:
    """Cohen's κ of two raters' labels (NaN when chance agreement is 1: both gave one same label throughout)."""
    a, b = pd.Series(list(a), dtype=object), pd.Series(list(b), dtype=object)
    cats = sorted(set(a) | set(b), key=str)
    table = pd.crosstab(pd.Categorical(a, cats), pd.Categorical(b, cats), dropna=False).to_numpy(dtype=float)
    n = table.sum()
    po = np.trace(table) / n
    pe = float((table.sum(0) * table.sum(1)).sum() / n**2)
    return float("nan") if pe >= 1 else float((po - pe) / (1 - pe))


def mcnemar_exact(ref_correct, other_correct) -> tuple[int, int, float]:
    """Discordant pairs (reference right only, other right only) and the exact two-sided McNemar p-value."""
    from statsmodels.stats.contingency_tables import mcnemar

    r, o = np.asarray(ref_correct, dtype=bool), np.asarray(other_correct, dtype=bool)
    b, c = int((r & ~o).sum()), int((~r & o).sum())
    table = [[int((r & o).sum()), b], [c, int((~r & ~o).sum())]]
    return b, c, float(mcnemar(table, exact=True).pvalue)


def compare(scores: pd.DataFrame, id_column: str, headline=None, close_call: float = CLOSE_CALL
            ) -> tuple[pd.DataFrame, list[dict]]:
    """One row per model × lower precision against that model's most exact precision (see the module docstring).

    ``scores``: a run's scores (``runstore.load_scores``) with ``model``, ``precision``, ``id_column``, ``choice``,
    ``margin`` and, where known, ``correct``. ``headline``: optional callable(scores of one model at one precision)
    → dict with ``estimate``, ``ci_low``, ``ci_high``, ``p`` (the study's headline test). Returns the table and
    ``summary.json`` records. Models scored at one precision give no rows.
    """
    rows, recs = [], []
    for model, g in scores.groupby("model", sort=True):
        labels = sorted(g["precision"].unique(), key=rank)
        if len(labels) < 2:
            continue
        ref_label = labels[0]
        ref = g[g["precision"] == ref_label].set_index(id_column)
        ref_head = headline(g[g["precision"] == ref_label]) if headline else None
        for label in labels[1:]:
            other = g[g["precision"] == label].set_index(id_column)
            common = ref.index.intersection(other.index)
            r, o = ref.loc[common], other.loc[common]
            n = len(common)
            agree = int((r["choice"].to_numpy() == o["choice"].to_numpy()).sum())
            lo, hi = wilson(agree, n)
            dm = np.abs(o["margin"].to_numpy(float) - r["margin"].to_numpy(float))
            close = np.abs(r["margin"].to_numpy(float)) < close_call
            flipped_close = int((r["choice"].to_numpy()[close] != o["choice"].to_numpy()[close]).sum())
            row = {"model": model, "precision": label, "reference": ref_label, "n": n, "agree": agree,
                   "agreement": agree / n if n else np.nan, "agreement_ci_low": lo, "agreement_ci_high": hi,
                   "kappa": cohens_kappa(r["choice"], o["choice"]) if n else np.nan,
                   "max_abs_dmargin": float(dm.max()) if n else np.nan,
                   "median_abs_dmargin": float(np.median(dm)) if n else np.nan,
                   "n_close": int(close.sum()), "flipped_close": flipped_close,
                   "flipped_close_share": flipped_close / close.sum() if close.sum() else np.nan}
            term = f"{model}: {label} vs {ref_label}"
            recs.append(record("precision_agreement", term, row["agreement"], ci_low=lo, ci_high=hi, n=n,
                               kappa=None if np.isnan(row["kappa"]) else row["kappa"],
                               note="share of rows with the same decision (Wilson 95% CI)"))
            if "correct" in g.columns and r["correct"].notna().all() and o["correct"].notna().all() and n:
                b, c, p = mcnemar_exact(r["correct"], o["correct"])
                diff = (c - b) / n
                row.update(accuracy_reference=float(r["correct"].mean()), accuracy=float(o["correct"].mean()),
                           accuracy_change=diff, mcnemar_reference_only=b, mcnemar_other_only=c, mcnemar_p=p)
                recs.append(record("precision_mcnemar_exact", term, diff, p=p, n=n, reference_only=b, other_only=c,
                                   note="accuracy at this precision minus the reference's; exact McNemar p",
                                   hypothesis=claim(f"accuracy at {label} minus at {ref_label} ({model})",
                                                    f"{model} was more accurate at {label} than at {ref_label}",
                                                    f"{model} was less accurate at {label} than at {ref_label}",
                                                    f"{model}'s accuracy changes between {ref_label} and {label}",
                                                    scale="points")))
            else:
                row.update(accuracy_reference=np.nan, accuracy=np.nan, accuracy_change=np.nan,
                           mcnemar_reference_only=np.nan, mcnemar_other_only=np.nan, mcnemar_p=np.nan)
                recs.append(record("precision_mcnemar_exact", term, valid=False, n=n,
                                   note="not estimable: the rows have no gold answer"))
            if headline is not None:
                h = headline(g[(g["precision"] == label) & g[id_column].isin(common)])
                row.update(headline_reference=ref_head.get("estimate"), headline_reference_p=ref_head.get("p"),
                           headline=h.get("estimate"), headline_ci_low=h.get("ci_low"), headline_ci_high=h.get("ci_high"),
                           headline_p=h.get("p"))
            rows.append(row)
    return pd.DataFrame(rows), recs


def margin_figure(scores: pd.DataFrame, id_column: str):
    """Each lower precision's margin against the most exact one's, per model (points on the diagonal: no change)."""
    import matplotlib.pyplot as plt

    pairs = []
    for model, g in scores.groupby("model", sort=True):
        labels = sorted(g["precision"].unique(), key=rank)
        ref = g[g["precision"] == labels[0]].set_index(id_column)["margin"]
        for label in labels[1:]:
            other = g[g["precision"] == label].set_index(id_column)["margin"]
            common = ref.index.intersection(other.index)
            pairs.append((f"{model}\n{label} vs {labels[0]}", ref.loc[common].to_numpy(float), other.loc[common].to_numpy(float)))
    fig, axes = plt.subplots(1, max(1, len(pairs)), figsize=(4 * max(1, len(pairs)), 4), squeeze=False)
    for ax, (title, x, y) in zip(axes[0], pairs):
        ax.scatter(x, y, s=12, alpha=0.7)
        lim = [min(x.min(), y.min()), max(x.max(), y.max())] if len(x) else [0, 1]
        ax.plot(lim, lim, color="grey", lw=1, ls="--")
        ax.axhline(0, color="grey", lw=0.5)
        ax.axvline(0, color="grey", lw=0.5)
        ax.set(title=title, xlabel="margin, most exact precision (nats)", ylabel="margin, lower precision (nats)")
    fig.tight_layout()
    return fig
