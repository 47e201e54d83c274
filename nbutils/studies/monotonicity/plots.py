"""Figures of the monotonicity study (matplotlib), drawn from the tables in ``stats`` and ``common.rules``."""
from __future__ import annotations

import math
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ...results import headline_records
from ..common.quantifier_stats import threshold_value

PALETTE = {"upward": "#1f77b4", "downward": "#d62728"}
MONO_LABEL = {"upward": "more than p (upward)", "downward": "less than p (downward)"}
MIN_BIN_N = 10  # a difficulty bin with fewer prompts is drawn hollow: its interval is too wide to read much into
DISTANCE_AXIS = {"proportional": ("|query − threshold| (proportion of the set)", 0.5),  # the axis reaches at least this
                 "cardinal": ("|query − threshold| (number of objects)", 30)}
MAX_GRID_RULES = 12  # grid rows kept in the rule heatmap (the best-agreeing grid rules); the full grid is in rules.csv


def _chance(ax, y: float = 50, label: str = "chance (50%)") -> None:
    ax.axhline(y, ls="--", color="grey", lw=1, label=label, zorder=1)


def _title(model: str, condition: str, extra: str = "") -> str:
    name = textwrap.shorten(str(model), 60, placeholder="…")
    where = {"explicit": "concept stated"}.get(condition, str(condition).replace("_", " "))
    return f"{name}\n{where}" + (f" · {extra}" if extra else "")


def accuracy_grid(acc: pd.DataFrame) -> plt.Figure:
    """Figure-1 style: columns models, rows conditions (more than two models: a row per model, a column per
    condition, so that a page shows each panel at a readable size), x thresholds, accuracy ± 95% Wilson CI, hue
    monotonicity, chance at 50%."""
    models, conditions = list(acc["model"].unique()), list(acc["condition"].unique())
    tall = len(models) > 2
    shape = (len(models), len(conditions)) if tall else (len(conditions), len(models))
    fig, axes = plt.subplots(*shape, figsize=(4.2 * shape[1] + 0.5, 3.2 * shape[0]), squeeze=False, sharey=True)
    for r, cond in enumerate(conditions):
        for c, model in enumerate(models):
            ax = axes[c][r] if tall else axes[r][c]
            d = acc[(acc.model == model) & (acc.condition == cond)].copy()
            order = sorted(d["threshold"].unique(), key=threshold_value)
            pos = {t: i for i, t in enumerate(order)}
            for mono, g in sorted(d.groupby("monotonicity"), key=lambda kv: kv[0] != "upward"):
                x = g["threshold"].map(pos) + (-0.12 if mono == "upward" else 0.12)
                lo, hi = (100 * (g["accuracy"] - g["ci_low"])).clip(lower=0), (100 * (g["ci_high"] - g["accuracy"])).clip(lower=0)
                ax.errorbar(x, 100 * g["accuracy"], yerr=[lo, hi], fmt="o", capsize=3, color=PALETTE.get(mono),
                            label=MONO_LABEL[mono])
            _chance(ax)
            ax.set_xticks(range(len(order)), order, rotation=45 if len(order) > 6 else 0)
            ax.set_ylim(0, 100)
            ax.set_title(_title(model, cond), fontsize=9)
            ax.set_xlabel("threshold p")
            if (r if tall else c) == 0:
                ax.set_ylabel("accuracy (%, 95% Wilson CI)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=3, bbox_to_anchor=(0.5, 0.0), frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def gap_forest(gaps: pd.DataFrame) -> plt.Figure:
    """Forest plot, one row per model × condition, two panels: first the inference about thresholds in general (the
    mean per-threshold log odds ratio with its t(K−1) 95% CI and the sign-flip p), then the accuracy gap (upward −
    downward) with its threshold-bootstrap interval, which is descriptive (too narrow with few thresholds)."""
    d = gaps.iloc[::-1].reset_index(drop=True)
    colors = d["condition"].map({"concept_learning": "#2ca02c", "explicit": "#9467bd"}).fillna("black").tolist()
    labels = []
    fig, (right, left) = plt.subplots(1, 2, figsize=(7.2, 0.6 * len(d) + 1.7), sharey=True)  # the inference first
    for y, r in d.iterrows():
        gap, lo, hi = 100 * r.gap, 100 * r.gap_ci_low, 100 * r.gap_ci_high
        xerr = [[max(0.0, gap - lo)], [max(0.0, hi - gap)]] if np.isfinite([lo, hi]).all() else None
        left.errorbar(gap, y, xerr=xerr, fmt="o", color=colors[y], capsize=3)
        m, tlo, thi = r.log_or_mean, r.log_or_ci_low, r.log_or_ci_high
        if np.isfinite(m):
            xerr = [[max(0.0, m - tlo)], [max(0.0, thi - m)]] if np.isfinite([tlo, thi]).all() else None
            right.errorbar(m, y, xerr=xerr, fmt="s", color=colors[y], capsize=3)
        k = int(r.n_thresholds)
        p = f"sign-flip p = {r.p_signflip:.2g}" if k >= 2 and np.isfinite(r.p_signflip) else "no interval or test"
        labels.append(f"{r.model}\n{r.condition.replace('_', ' ')}\nK = {k} threshold{'s' if k != 1 else ''}, {p}")
    for ax in (left, right):
        ax.axvline(0, color="grey", ls="--", lw=1)
        ax.margins(y=0.35 if len(d) < 3 else 0.12)
        ax.tick_params(axis="x", labelsize=8)
    right.set_yticks(range(len(d)), labels, fontsize=7)
    left.set_xlabel("upward − downward accuracy (pp)\nthreshold bootstrap 95% CI: descriptive,\n"
                    "too narrow with few thresholds", fontsize=7)
    right.set_xlabel("mean per-threshold log odds ratio\nt(K−1) 95% CI: the inference\nabout thresholds in general",
                     fontsize=7)
    left.set_title("accuracy gap", fontsize=9)
    right.set_title("log odds ratio (> 0: upward easier)", fontsize=9)
    fig.tight_layout()
    return fig


def model_gaps(records: list[dict], order: list[str]) -> plt.Figure:
    """The gap of each model, in ``order`` (the order the models were scored in), one marker per condition: the
    headline test's odds ratio (upward vs downward) with its 95% CI on a log axis; a model whose headline is not
    estimable is named without a marker."""
    heads = {(r.get("model"), r.get("condition")): r for r in headline_records({"records": records})
             if r.get("term") == "upward" and r.get("model") is not None}
    conditions = [c for c in ("concept_learning", "explicit") if any(k[1] == c for k in heads)]
    fig, ax = plt.subplots(figsize=(6.4, 0.55 * len(order) * max(1, len(conditions)) + 1.4))
    ticks, labels = [], []
    for i, model in enumerate(order[::-1]):
        for j, cond in enumerate(conditions):
            y = i * (len(conditions) + 1) + j
            r = heads.get((model, cond))
            ok = r is not None and r.get("valid") and all(np.isfinite([r.get(k) or np.nan for k in
                                                                       ("estimate", "ci_low", "ci_high")]))
            if ok:
                est, lo, hi = np.exp([r["estimate"], r["ci_low"], r["ci_high"]])
                ax.errorbar(est, y, xerr=[[est - lo], [hi - est]], fmt="o", capsize=3,
                            color={"concept_learning": "#2ca02c", "explicit": "#9467bd"}[cond])
            ticks.append(y)
            labels.append(f"{model}\n{cond.replace('_', ' ')}" + ("" if ok else " (not estimable)")
                          + (f"\n{r['test'].replace('_', ' ')}" if ok else ""))
    ax.axvline(1, color="grey", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.set_xlabel("odds ratio upward vs downward, headline test, 95% CI (> 1: upward easier)", fontsize=8)
    ax.set_title("the gap per model, in the order scored", fontsize=9)
    fig.tight_layout()
    return fig


def difficulty_curves(diff: pd.DataFrame, min_n: int = MIN_BIN_N) -> plt.Figure:
    """Accuracy by the query's distance from the threshold (quantile bins), upward vs downward, ± 95% Wilson CI with
    each bin's count; a column per distance kind (proportions and counts never share an axis), a row per model ×
    condition; bins with fewer than ``min_n`` prompts are hollow."""
    families = [f for f in ("proportional", "cardinal") if (diff["family"] == f).any()]
    rows = list(diff[["model", "condition"]].drop_duplicates().itertuples(index=False, name=None))
    wrap = 2 if len(families) == 1 and len(rows) > 1 else 1  # one distance kind: two model × condition panels a row
    fig, axes = plt.subplots(math.ceil(len(rows) / wrap), len(families) * wrap, squeeze=False, sharey=True,
                             figsize=(3.7 * len(families) * wrap + 0.4, 3.0 * math.ceil(len(rows) / wrap) + 0.4))
    for ax in axes.flat[len(rows) * len(families):]:
        ax.set_visible(False)
    for r, (model, cond) in enumerate(rows):
        for c, family in enumerate(families):
            ax = axes[r // wrap][(r % wrap) * len(families) + c]
            d = diff[(diff.model == model) & (diff.condition == cond) & (diff.family == family)]
            span = d["distance_mid"].max() if len(d) else 1.0
            by_mono = sorted(d.sort_values("distance_mid").groupby("monotonicity"), key=lambda kv: kv[0] != "upward")
            for mono, g in by_mono:
                color = PALETTE.get(mono)
                x = g["distance_mid"].to_numpy() + (-1 if mono == "upward" else 1) * 0.012 * (span or 1.0)
                acc, lo, hi = (100 * g[c].to_numpy() for c in ("accuracy", "ci_low", "ci_high"))
                ax.plot(x, acc, color=color, lw=1, alpha=0.6)
                ax.errorbar(x, acc, yerr=[np.clip(acc - lo, 0, None), np.clip(hi - acc, 0, None)], fmt="none",
                            ecolor=color, capsize=2, lw=1)
                small = g["n"].to_numpy() < min_n
                ax.scatter(x[~small], acc[~small], color=color, zorder=3, s=22, label=MONO_LABEL[mono])
                ax.scatter(x[small], acc[small], facecolors="white", edgecolors=color, zorder=3, s=22)
                for xi, yi, n in zip(x, lo, g["n"]):
                    ax.annotate(str(n), (xi, yi), xytext=(0, -8), textcoords="offset points", ha="center",
                                fontsize=6, color=color)
            _chance(ax)
            label, reach = DISTANCE_AXIS[family]
            family_max = diff.loc[diff["family"] == family, "distance_mid"].max()
            ax.set_xlim(0, max(reach, 1.06 * family_max))
            ax.set_ylim(-8, 100)
            ax.set_yticks(range(0, 101, 20))
            ax.set_title(_title(model, cond, family), fontsize=9)
            ax.set_xlabel(label, fontsize=8)
            if c == 0 and r % wrap == 0:
                ax.set_ylabel("accuracy (%, 95% Wilson CI)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], marker="o", ls="none", markerfacecolor="white", markeredgecolor="grey"))
    labels.append(f"hollow: bin of < {min_n} prompts (small numbers: prompts per bin)")
    fig.legend(handles, labels, loc="upper center", ncol=2, bbox_to_anchor=(0.5, 0.0), frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def shown_rules(rules: pd.DataFrame, best: pd.DataFrame, max_grid: int = MAX_GRID_RULES) -> list[str]:
    """The rows of the rule heatmap, in display order: every named rule (true concept, mirror, constants, memory) and
    the grid rules that matter: each concept's best rule and its best-agreeing grid rule, at most ``max_grid`` of
    them (those best for the most concepts first)."""
    named = rules[rules["rule_kind"] != "grid"]
    grid = rules[rules["rule_kind"] == "grid"]
    order = rules.drop_duplicates("rule").set_index("rule")["rule_order"]
    top = grid.sort_values(["agreement", "rule_order"], ascending=[False, True]).drop_duplicates(
        ["model", "condition", "concept"])["rule"]
    wins = pd.concat([best["best_rule"], best["runner_up"].dropna(), top]) if len(best) else top
    wins = wins[wins.isin(grid["rule"])]
    keep = list(wins.value_counts(sort=True).index[:max_grid])
    return sorted(set(named["rule"]) | set(keep), key=lambda r: order[r])


def rule_agreement(rules: pd.DataFrame, best: pd.DataFrame, max_grid: int = MAX_GRID_RULES) -> plt.Figure:
    """Heatmap of agreement with the rules that matter (see ``shown_rules``) per concept, one panel per model ×
    condition stacked vertically (more than two: two a row); rules are rows and concepts columns, or the other way round when there are more
    concepts than rules (so the figure grows downwards, not sideways); each concept's best rule is outlined; every
    rule is in tables/rules.csv."""
    from matplotlib.patches import Rectangle

    order = shown_rules(rules, best, max_grid)
    n_hidden = rules["rule"].nunique() - len(order)
    keys = rules.drop_duplicates("concept")
    concepts = [k.concept for k in sorted(keys.itertuples(index=False),
                                          key=lambda k: (k.family, threshold_value(k.threshold), k.monotonicity != "upward"))]
    flip = len(concepts) > len(order)  # concepts as rows
    n_rows, n_cols = (len(concepts), len(order)) if flip else (len(order), len(concepts))
    panels = list(rules[["model", "condition"]].drop_duplicates().itertuples(index=False, name=None))
    wrap = 2 if len(panels) > 2 else 1  # more than two panels: two a row, so that a page shows each readably
    rows_ = math.ceil(len(panels) / wrap)
    fig, axes = plt.subplots(rows_, wrap, squeeze=False,
                             figsize=((0.32 * n_cols + 3.4) * wrap, (0.21 * n_rows + 0.7) * rows_ + 1.2 + 0.5 * flip))
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for i, (model, cond) in enumerate(panels):
        ax = axes[i // wrap][i % wrap]
        d = rules[(rules.model == model) & (rules.condition == cond)]
        grid = d.pivot_table(index="rule", columns="concept", values="agreement", aggfunc="first")
        grid = grid.reindex(index=order, columns=concepts)
        if flip:
            grid = grid.T
        last = i >= len(panels) - wrap
        sns.heatmap(100 * grid, ax=ax, vmin=0, vmax=100, center=50, cmap="RdBu_r",
                    cbar_kws={"label": "agreement with the\nmodel's answers (%)", "shrink": 0.8},
                    yticklabels=True, xticklabels=last or flip)
        b = best[(best.model == model) & (best.condition == cond)].set_index("concept")["best_rule"]
        for j, concept in enumerate(concepts):
            if concept in b.index and b[concept] in order:
                k = order.index(b[concept])
                ax.add_patch(Rectangle((k, j) if flip else (j, k), 1, 1, fill=False, edgecolor="black", lw=1.5))
        ax.set_title(_title(model, cond), fontsize=9)
        ax.set_xlabel(("rule" if flip else "concept") if last or flip else "")
        ax.set_ylabel("concept" if flip else "rule")
        ax.tick_params(axis="both", labelsize=7)
        ax.tick_params(axis="x", labelrotation=90)
    note = "outlined: each concept's best rule"
    if n_hidden > 0:
        note += f"; {n_hidden} other grid rules not shown (every rule is in tables/rules.csv)"
    fig.text(0.01, 0.0, note, fontsize=7, color="dimgrey", va="top")
    fig.tight_layout()
    return fig
