"""Figures of the monotonicity study (seaborn/matplotlib), drawn from the tables in nbutils.stats."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from ..common.quantifier_stats import threshold_value

PALETTE = {"upward": "#1f77b4", "downward": "#d62728"}


def accuracy_grid(acc: pd.DataFrame) -> plt.Figure:
    """Figure-1 style: columns models, rows conditions, x thresholds, accuracy ± 95% CI, hue monotonicity, chance at 50%."""
    models, conditions = list(acc["model"].unique()), list(acc["condition"].unique())
    fig, axes = plt.subplots(len(conditions), len(models), figsize=(4.2 * len(models) + 0.5, 3.2 * len(conditions)),
                             squeeze=False, sharey=True)
    for r, cond in enumerate(conditions):
        for c, model in enumerate(models):
            ax = axes[r][c]
            d = acc[(acc.model == model) & (acc.condition == cond)].copy()
            order = sorted(d["threshold"].unique(), key=threshold_value)
            pos = {t: i for i, t in enumerate(order)}
            for k, (mono, g) in enumerate(d.groupby("monotonicity")):
                x = g["threshold"].map(pos) + (-0.12 if mono == "upward" else 0.12)
                lo, hi = (100 * (g["accuracy"] - g["ci_low"])).clip(lower=0), (100 * (g["ci_high"] - g["accuracy"])).clip(lower=0)
                ax.errorbar(x, 100 * g["accuracy"], yerr=[lo, hi],
                            fmt="o", capsize=3, color=PALETTE.get(mono), label={"upward": "more than p (upward)", "downward": "less than p (downward)"}[mono])
            ax.axhline(50, ls="--", color="grey", lw=1)
            ax.set_xticks(range(len(order)), order, rotation=45 if len(order) > 6 else 0)
            ax.set_ylim(0, 100)
            ax.set_title(f"{model}\n{cond.replace('_', ' ')}", fontsize=9)
            ax.set_xlabel("threshold p")
            if c == 0:
                ax.set_ylabel("accuracy (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, bbox_to_anchor=(0.5, -0.04), frameon=False)
    fig.tight_layout()
    return fig


def gap_forest(gaps: pd.DataFrame) -> plt.Figure:
    """Forest plot: upward − downward accuracy gap with its 95% CI, one row per model × condition."""
    d = gaps.assign(label=gaps["model"] + " · " + gaps["condition"].str.replace("_", " ")).iloc[::-1]
    fig, ax = plt.subplots(figsize=(6.5, 0.45 * len(d) + 1.2))
    colors = d["condition"].map({"concept_learning": "#2ca02c", "explicit": "#9467bd"}).fillna("black")
    for y, (r, color) in enumerate(zip(d.itertuples(index=False), colors)):
        ax.errorbar(100 * r.gap, y, xerr=[[max(0.0, 100 * (r.gap - r.gap_ci_low))], [max(0.0, 100 * (r.gap_ci_high - r.gap))]],
                    fmt="o", color=color, capsize=3)
    ax.axvline(0, color="grey", ls="--", lw=1)
    ax.set_yticks(range(len(d)), d["label"])
    ax.set_xlabel("accuracy gap, upward − downward (percentage points, 95% CI)")
    fig.tight_layout()
    return fig


def difficulty_curves(diff: pd.DataFrame) -> sns.FacetGrid:
    """Accuracy by distance of the query from the threshold, upward vs downward, per model and condition."""
    g = sns.relplot(data=diff, x="distance_mid", y="accuracy", hue="monotonicity", style="family", kind="line",
                    markers=True, col="model", row="condition", palette=PALETTE, height=3, aspect=1.3,
                    facet_kws={"sharex": False})
    for ax in g.axes.flat:
        ax.axhline(0.5, ls="--", color="grey", lw=1)
        ax.set_ylim(0, 1)
    g.set_axis_labels("|query − threshold| (proportion, or count for cardinal)", "accuracy")
    return g


def rule_agreement(rules: pd.DataFrame, best: pd.DataFrame) -> plt.Figure:
    """Heatmap of agreement with each candidate rule (rows) per concept (columns), one panel per model × condition;
    the best rule of each concept is outlined."""
    from matplotlib.patches import Rectangle

    models, conditions = list(rules["model"].unique()), list(rules["condition"].unique())
    order = list(rules.drop_duplicates("rule").sort_values("rule_order")["rule"])
    keys = rules.drop_duplicates("concept")
    concepts = [k.concept for k in sorted(keys.itertuples(index=False),
                                          key=lambda k: (k.family, threshold_value(k.threshold), k.monotonicity != "upward"))]
    fig, axes = plt.subplots(len(conditions), len(models), squeeze=False,
                             figsize=((0.45 * len(concepts) + 3) * len(models), (0.2 * len(order) + 2.2) * len(conditions)))
    for r, cond in enumerate(conditions):
        for c, model in enumerate(models):
            ax = axes[r][c]
            d = rules[(rules.model == model) & (rules.condition == cond)]
            grid = d.pivot_table(index="rule", columns="concept", values="agreement", aggfunc="first")
            grid = grid.reindex(index=order, columns=concepts)
            sns.heatmap(grid, ax=ax, vmin=0, vmax=1, center=0.5, cmap="RdBu_r", cbar=c == len(models) - 1,
                        cbar_kws={"label": "agreement with the model's answers"}, yticklabels=c == 0)
            b = best[(best.model == model) & (best.condition == cond)].set_index("concept")["best_rule"]
            for j, concept in enumerate(concepts):
                if concept in b.index:
                    ax.add_patch(Rectangle((j, order.index(b[concept])), 1, 1, fill=False, edgecolor="black", lw=1.5))
            ax.set_title(f"{model}\n{cond.replace('_', ' ')}", fontsize=9)
            ax.set_xlabel("concept")
            ax.set_ylabel("rule" if c == 0 else "")
            ax.tick_params(axis="y", labelsize=7)
            ax.tick_params(axis="x", labelrotation=90)
    fig.tight_layout()
    return fig
