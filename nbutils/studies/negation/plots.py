"""Figures of the negation probe."""
from __future__ import annotations

import pandas as pd


def interaction_plot(pred: pd.DataFrame):
    """Perplexity the mixed model predicts for each cell (fixed effects only), by context, lines by form (solid
    affirmative, dashed negated), one panel per model, the axis from 0 so that a difference of slopes (the
    interaction) is drawn to scale; the legend below the panels."""
    import matplotlib.pyplot as plt

    models = list(pred["model"].unique())
    fig, axes = plt.subplots(1, len(models), figsize=(3.6 * len(models), 3.2), squeeze=False)
    for ax, model in zip(axes[0], models):
        d = pred[pred.model == model]
        for form, style in (("affirmative", "-"), ("negated", "--")):
            f = d[d.form == form].set_index("context").loc[["consistent", "inconsistent"]]
            ax.plot([0, 1], f["predicted"], style, marker="o", label=form)
        ax.set_xticks([0, 1], ["consistent", "inconsistent"])
        ax.set_title(model + ("" if d["converged"].all() else " (fit not valid)"), fontsize=9)
        ax.set_xlabel("context of the sentence")
        ax.set_xlim(-0.3, 1.3)
        ax.set_ylim(0, 1.12 * float(d["predicted"].max()))  # from 0: the slopes are not magnified
        ax.set_ylabel("perplexity predicted by the LMM\n(fixed effects)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, frameon=False, fontsize=8)
    fig.tight_layout()
    return fig
