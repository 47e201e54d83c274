"""Figures of a cue profile: the top cues by cueness, and for flagged (else the top) cues the model's predicted-label
distribution on the flattened test subset beside the training subset's label distribution."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def top_cues(cues: pd.DataFrame, top_k: int):
    """Horizontal bars of cueness for the ``top_k`` features, labelled with the label each skews toward; features
    significant after Holm are drawn dark."""
    f = cues.drop_duplicates("feature")
    f = f[f["rank"] <= top_k].iloc[::-1]
    fig, ax = plt.subplots(figsize=(6, 0.35 * len(f) + 1.2))
    colors = np.where(f["significant"], "#1f4e79", "#9dc3e6")
    ax.barh([f"{a}  → {b}" for a, b in zip(f["feature"], f["cue_label"])], f["cueness"], color=colors)
    ax.set_xlabel("cueness = MSE(R_f) / exp(JSD(R_f, S_f))")
    ax.set_title("Top cues (dark: label skew significant, Holm)")
    fig.tight_layout()
    return fig


def distributions(dist: pd.DataFrame, max_panels: int = 6):
    """Per (model, feature): predicted-label shares on flattened S_f against R_f's label shares and uniform. Cues used
    by the model (both tests) come first; without any, the best-ranked ones."""
    d = dist.dropna(subset=["jsd_pred_train"])
    d = pd.concat([d[d["used"]], d[~d["used"]]]).head(max_panels)
    labels = [c[len("pred_"):] for c in dist.columns if c.startswith("pred_")]
    n = max(len(d), 1)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3), squeeze=False)
    x = np.arange(len(labels))
    for ax, r in zip(axes[0], d.itertuples(index=False)):
        rd = r._asdict()
        pred = [rd.get(f"pred_{lab}", np.nan) for lab in labels]
        train = [rd.get(f"train_{lab}", np.nan) for lab in labels]
        ax.bar(x - 0.2, train, 0.4, label="R_f (training)", color="#bbbbbb")
        ax.bar(x + 0.2, pred, 0.4, label="model on flattened S_f", color="#c0504d" if r.used else "#4f81bd")
        ax.axhline(1 / len(labels), color="k", lw=0.8, ls=":")
        ax.set_xticks(x, labels)
        ax.set_ylim(0, 1)
        ax.set_title(f"{r.feature}\n{r.model}{' · USED' if r.used else ''}", fontsize=8)
    axes[0][0].legend(fontsize=7)
    axes[0][0].set_ylabel("share")
    fig.tight_layout()
    return fig
