"""Figures of the negation probe."""
from __future__ import annotations


def interaction_plot(pred: pd.DataFrame):
    """Predicted perplexity by context, lines by form (solid affirmative, dashed negated), one panel per model."""
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
        ax.set_ylabel("predicted perplexity")
    axes[0][0].legend(frameon=False)
    fig.tight_layout()
    return fig
