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
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models) + 0.5, 0.26 * n_rows + 1.8), squeeze=False,
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
        values = g["bias"].dropna()
        top = float(values.max()) if len(values) else 0.0
        ax.set_xlim(-0.02 * max(top, 0.1), 1.08 * max(top, 0.1))  # points at 0 sit inside the axes, not on its edge
        if len(values) and values.nunique() == 1:
            ax.text(0.97, 0.5, f"no variance across personas:\nevery persona's bias is {values.iloc[0]:.3g}\n"
                    "(each answers the same questions\ncorrectly as the baseline)" if values.iloc[0] == 0 else
                    f"no variance across personas:\nevery persona's bias is {values.iloc[0]:.3g}",
                    transform=ax.transAxes, ha="right", va="center", fontsize=8, color="dimgrey",
                    bbox={"facecolor": "white", "edgecolor": "lightgrey"})
        ax.set_title(model, fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    seen = dict(zip(labels, handles))
    fig.legend(seen.values(), seen.keys(), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, frameon=False,
               fontsize=7)
    fig.suptitle("Persona bias against the null personas\n(hollow: |Ci ∩ Cb| too small for a stable ratio)", fontsize=9)
    fig.tight_layout()
    return fig


def accuracy_vs_bias(models: pd.DataFrame, fit: pd.DataFrame) -> plt.Figure:
    """The paper's Figure 1: DIF score against baseline accuracy, one point per model, the OLS line when fitted."""
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


def chance_level(acc: pd.DataFrame) -> float | None:
    """The accuracy a random guess gets on these questions: the mean over questions of 1 / number of options
    (``chance`` of the accuracy table), e.g. 0.375 for half four-option and half two-option questions."""
    values = acc["chance"].dropna() if "chance" in acc else pd.Series(dtype=float)
    return float(values.iloc[0]) if len(values) else None


def accuracy_by_persona(acc: pd.DataFrame) -> plt.Figure:
    """Accuracy per persona with 95% Wilson intervals, one panel per model; the baseline's accuracy (dotted) and the
    chance level computed from the options (dashed) as labelled vertical lines; the legend below the panels."""
    models = list(acc["model"].unique())
    n = acc.groupby("model").size().max()
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models) + 1.0, 0.24 * n + 1.6), squeeze=False)
    kinds = {"baseline": ("black", "no persona (baseline)"), "real": ("#1f77b4", "real persona"),
             "null_random": ("#7f7f7f", "null: random string"), "null_word": ("#bcbd22", "null: irrelevant word")}
    for ax, model in zip(axes[0], models):
        g = acc[acc["model"] == model].reset_index(drop=True)
        y = np.arange(len(g))
        pct = {c: 100 * g[c] for c in ("accuracy", "ci_low", "ci_high")}
        for kind, (color, label) in kinds.items():
            m = (g["persona_kind"] == kind).to_numpy()
            if m.any():
                ax.errorbar(pct["accuracy"][m], y[m], xerr=[(pct["accuracy"][m] - pct["ci_low"][m]).clip(lower=0),
                                                             (pct["ci_high"][m] - pct["accuracy"][m]).clip(lower=0)],
                            fmt="o", ms=3, capsize=2, color=color, label=label, zorder=3)
        base = g.loc[g["persona_kind"] == "baseline", "accuracy"]
        if len(base):
            ax.axvline(100 * base.iloc[0], color="black", lw=0.8, ls=":",
                       label=f"baseline accuracy ({base.iloc[0]:.0%})")
        chance = chance_level(g)
        if chance is not None:
            ax.axvline(100 * chance, color="#d62728", lw=1, ls="--", label=f"chance ({100 * chance:.3g}%)")
        ax.set_yticks(y, [p or "(baseline)" for p in g["persona"]], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_xlabel("accuracy (%, 95% Wilson CI)")
        ax.set_title(model, fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, frameon=False, fontsize=7)
    fig.tight_layout()
    return fig
