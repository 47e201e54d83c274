"""Figures of a custom prompt set (seaborn/matplotlib), drawn from the tables in ``stats``."""
from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

MAX_HUES = 8  # gold answers coloured apart in the margin figure; beyond, colour by the gold option's position


def _panels(n: int, width: float = 4.5, height: float = 3.4):
    fig, axes = plt.subplots(1, n, figsize=(width * n + 0.5, height), squeeze=False, sharey=True)
    return fig, axes[0]


def _readable_groups(ax, width_chars: int = 36) -> None:
    """Tilt the group names when together they are longer than a panel is wide."""
    labels = ax.get_xticklabels()
    if sum(len(t.get_text()) for t in labels) > width_chars:
        plt.setp(labels, rotation=30, ha="right", rotation_mode="anchor")


def accuracy_by_group(acc: pd.DataFrame) -> plt.Figure:
    """Accuracy per group ± 95% Wilson CI, one panel per model; chance (1/k) dashed; normalised choices as crosses."""
    models = list(acc["model"].unique())
    fig, axes = _panels(len(models))
    for ax, model in zip(axes, models):
        d = acc[acc["model"] == model].reset_index(drop=True)
        x = range(len(d))
        ax.errorbar(x, 100 * d["accuracy"], yerr=[100 * (d["accuracy"] - d["ci_low"]).clip(lower=0),
                                                  100 * (d["ci_high"] - d["accuracy"]).clip(lower=0)],
                    fmt="o", capsize=3, color="#1f77b4", label="raw log-prob")
        ax.scatter(x, 100 * d["acc_norm_char"], marker="x", color="#ff7f0e", label="per-character normalised", zorder=3)
        for i, c in enumerate(d["chance"]):
            ax.hlines(100 * c, i - 0.4, i + 0.4, ls="--", color="grey", lw=1,
                      label="chance (1 / number of options)" if i == 0 else None)
        ax.set_xticks(list(x), d["group"], rotation=30 if len(d) > 3 else 0, ha="right" if len(d) > 3 else "center")
        ax.set_ylim(0, 100)
        ax.set_title(model, fontsize=9)
        ax.set_ylabel("accuracy (%, 95% Wilson CI)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def choice_distribution(dist: pd.DataFrame) -> plt.Figure:
    """Share of choices per option and group (bars) against the share of gold answers (black ticks): response bias."""
    models = list(dist["model"].unique())
    fig, axes = _panels(len(models))
    for ax, model in zip(axes, models):
        d = dist[dist["model"] == model]
        sns.barplot(d, x="group", y="share_chosen", hue="option", ax=ax, errorbar=None)
        groups, options = list(d["group"].unique()), list(d["option"].unique())
        width = 0.8 / len(options)
        for r in d.itertuples(index=False):
            x = groups.index(r.group) - 0.4 + width * (options.index(r.option) + 0.5)
            ax.hlines(r.share_gold, x - width / 2, x + width / 2, color="black", lw=2)
        ax.set_ylim(0, 1)
        ax.set_title(model, fontsize=9)
        ax.set_ylabel("share of choices (tick: share of gold)")
        _readable_groups(ax)
        ax.legend(fontsize=8, title="option", frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def margin_by_answer(df: pd.DataFrame) -> plt.Figure:
    """The decision margin of every prompt by group, coloured by its gold answer (two options: first − second); where
    rows have options of their own (more than ``MAX_HUES`` gold answers), by the gold option's position instead."""
    models = list(df["model"].unique())
    hue = "answer"
    if df["answer"].nunique() > MAX_HUES:
        position = [json.loads(s).index(a) + 1 for s, a in zip(df["scored"], df["answer"])]
        df = df.assign(gold_position=[f"option {p}" for p in position])
        hue = "gold_position"
    fig, axes = _panels(len(models))
    for ax, model in zip(axes, models):
        d = df[(df["model"] == model) & df["margin"].notna()]
        if d.empty:  # an imported log without log-likelihoods (Inspect) records no margins
            ax.text(0.5, 0.5, "no margins: the log records answers, not log-likelihoods", ha="center", va="center",
                    transform=ax.transAxes, fontsize=9)
            ax.set_title(model, fontsize=9)
            ax.set_axis_off()
            continue
        sns.boxplot(d, x="group", y="margin", hue=hue, ax=ax, fliersize=0, boxprops={"alpha": 0.35})
        state = np.random.get_state()  # seaborn jitters the points with numpy's global generator: seeded here, so
        np.random.seed(0)  # the figure is the same on every run, and the caller's random state is left as it was
        try:
            sns.stripplot(d, x="group", y="margin", hue=hue, ax=ax, dodge=True, size=3, legend=False)
        finally:
            np.random.set_state(state)
        ax.axhline(0, color="grey", lw=1, ls="--")
        ax.set_title(model, fontsize=9)
        ax.set_ylabel("log-prob margin, first − second option")
        _readable_groups(ax)
        ax.legend(fontsize=8, title="gold answer" if hue == "answer" else "gold option", frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig
