"""Figures of the persona study (matplotlib/seaborn), drawn from the tables in ``stats``."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

NULL_STYLE = {"null_random": ("#7f7f7f", "random 10-letter strings"), "null_word": ("#bcbd22", "irrelevant words")}


def persona_bias(dif: pd.DataFrame) -> plt.Figure:
    """Per model: each real persona's bias (1 − DIF) coloured by category, hollow when its ratio is unstable, against
    the null personas' range (shaded min–max band, dashed mean) of each null kind."""
    models = list(dif["model"].unique())
    real = dif[dif["persona_kind"] == "real"]
    cats = sorted(real["category"].unique())
    colors = dict(zip(cats, sns.color_palette("tab10", len(cats))))
    n_rows = max(real.groupby("model").size().max() if len(real) else 1, 1)
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models) + 1.5, 0.26 * n_rows + 1.8), squeeze=False,
                             sharey=False)
    for ax, model in zip(axes[0], models):
        g = dif[dif["model"] == model]
        r = g[g["persona_kind"] == "real"].sort_values(["category", "bias"])
        y = np.arange(len(r))
        for kind, (color, label) in NULL_STYLE.items():
            b = g.loc[g["persona_kind"] == kind, "bias"].dropna()
            if len(b):
                ax.axvspan(b.min(), b.max(), color=color, alpha=0.18, label=f"{label}: range")
                ax.axvline(b.mean(), color=color, ls="--", lw=1, label=f"{label}: mean")
        for cat in cats:
            m = (r["category"] == cat).to_numpy()
            stable = m & ~r["unstable"].to_numpy()
            unstable = m & r["unstable"].to_numpy()
            ax.scatter(r["bias"].to_numpy()[stable], y[stable], color=colors[cat], label=cat.replace("_", "/"), zorder=3)
            ax.scatter(r["bias"].to_numpy()[unstable], y[unstable], facecolors="none", edgecolors=colors[cat], zorder=3)
        ax.set_yticks(y, r["persona"].tolist(), fontsize=8)
        ax.set_xlabel("bias = 1 − DIF (Jaccard distance of correct sets)")
        ax.set_xlim(left=0)
        ax.set_title(model, fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    fig.legend(seen.values(), seen.keys(), loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, fontsize=8)
    fig.suptitle("Persona bias against the null personas (hollow: |Ci ∩ Cb| too small for a stable ratio)", fontsize=9)
    fig.tight_layout()
    return fig


def accuracy_vs_bias(models: pd.DataFrame, fit: pd.DataFrame) -> plt.Figure:
    """The seed's Figure 1: DIF score against baseline accuracy, one point per model, the OLS line when fitted."""
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(models["baseline_accuracy"], models["dif_real"], color="#1f77b4", zorder=3)
    for r in models.itertuples(index=False):
        ax.annotate(str(r.model), (r.baseline_accuracy, r.dif_real), fontsize=7, xytext=(4, 4), textcoords="offset points")
    f = fit.iloc[0]
    if bool(f["valid"]):
        xs = np.linspace(models["baseline_accuracy"].min(), models["baseline_accuracy"].max(), 50)
        ax.plot(xs, f["intercept"] + f["slope"] * xs, color="grey", ls="--", label=f"OLS, R² = {f['r2']:.2f}")
        ax.legend(frameon=False, fontsize=8)
    else:
        ax.text(0.02, 0.02, f["note"], transform=ax.transAxes, fontsize=7, color="grey", wrap=True)
    ax.set_xlabel("baseline accuracy")
    ax.set_ylabel("DIF score (mean over real personas; 1 = no bias)")
    fig.tight_layout()
    return fig


def accuracy_by_persona(acc: pd.DataFrame) -> plt.Figure:
    """Accuracy per persona with 95% Wilson intervals, one panel per model; the baseline as a vertical line."""
    models = list(acc["model"].unique())
    n = acc.groupby("model").size().max()
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models) + 1.0, 0.2 * n + 1.5), squeeze=False)
    kinds = {"baseline": "black", "real": "#1f77b4", "null_random": "#7f7f7f", "null_word": "#bcbd22"}
    for ax, model in zip(axes[0], models):
        g = acc[acc["model"] == model].reset_index(drop=True)
        y = np.arange(len(g))
        for kind, color in kinds.items():
            m = (g["persona_kind"] == kind).to_numpy()
            if m.any():
                ax.errorbar(g.loc[m, "accuracy"], y[m], xerr=[(g.loc[m, "accuracy"] - g.loc[m, "ci_low"]).clip(lower=0),
                                                               (g.loc[m, "ci_high"] - g.loc[m, "accuracy"]).clip(lower=0)],
                            fmt="o", ms=3, capsize=2, color=color, label=kind)
        base = g.loc[g["persona_kind"] == "baseline", "accuracy"]
        if len(base):
            ax.axvline(base.iloc[0], color="black", lw=0.8, ls=":")
        ax.set_yticks(y, [p or "(baseline)" for p in g["persona"]], fontsize=6)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.set_xlabel("accuracy (95% Wilson CI)")
        ax.set_title(model, fontsize=9)
    axes[0][0].legend(frameon=False, fontsize=7)
    fig.tight_layout()
    return fig
