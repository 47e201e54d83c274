"""One call that turns a run directory's scores into tables, figures and summary.json."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from ... import artifacts, paths
from . import plots, rules, stats
from ...engine.runs import excluded_notes
from .scores import load_scores


@dataclass
class Analysis:
    """Every table of a run's analysis, plus the files written."""

    scores: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def compute(scores: pd.DataFrame, n_boot: int = 2000, seed: int = 0, rules_k: int = 5) -> Analysis:
    """All tables from a joined scores frame (see runs.load_scores)."""
    a = Analysis(scores)
    acc = stats.accuracy_table(scores)
    a.tables["accuracy"] = acc
    a.tables["appendix_b"] = stats.appendix_b(acc)
    a.tables["gap_by_threshold"] = stats.gap_by_threshold(scores)
    a.tables["gap_pooled"] = stats.pooled_gap(scores, n_boot=n_boot, seed=seed)
    a.tables["mixed_model"] = stats.mixed_model(scores)
    a.tables["mcnemar"] = stats.mcnemar_conditions(scores)
    sdt = stats.signal_detection(scores)
    a.tables["signal_detection"] = sdt
    a.tables["dprime_gap"] = stats.dprime_gap(sdt)
    a.tables["difficulty"] = stats.difficulty(scores)
    a.tables["calibration"] = stats.calibration(scores)
    a.tables["rules"], a.tables["best_rule"] = rules.rule_tables(scores, k=rules_k)  # what was learned instead
    a.tables["mirror_test"], a.tables["mirror_test_pooled"] = rules.mirror_test(a.tables["rules"])
    if a.tables["gap_pooled"].empty:
        a.notes.append("no threshold has both an upward and a downward concept: no gap can be computed")
    for model, g in scores.groupby("model"):
        if g["pred_yes"].nunique() == 1:
            a.notes.append(f"{model}: answers '{'Yes' if g['pred_yes'].iloc[0] else 'No'}' to every prompt (pure response bias)")
    a.notes += sorted({n for n in a.tables["mixed_model"].get("note", pd.Series(dtype=str)).dropna() if n})
    a.summary = stats.summary(a.tables["gap_pooled"], a.tables["mixed_model"], a.tables["dprime_gap"])
    a.summary["rules"] = rules.summary_records(a.tables["best_rule"])
    a.summary["rules_mirror_test"] = artifacts.json_clean(a.tables["mirror_test_pooled"].to_dict("records"))
    a.summary["_notes"] = a.notes
    return a


def write(a: Analysis, run_dir) -> list[Path]:
    """Tables as CSV (+ LaTeX for the paper tables), figures as PNG and PDF, summary.json."""
    tdir, fdir = paths.tables_dir(run_dir), paths.figures_dir(run_dir)
    files = []
    for name, t in a.tables.items():
        files += artifacts.write_table(t, tdir / name, index=name == "appendix_b",
                                       latex=name in ("appendix_b", "gap_pooled", "accuracy"))
    figs = {"accuracy_by_threshold": plots.accuracy_grid(a.tables["accuracy"])}
    if not a.tables["gap_pooled"].empty:
        figs["gap_forest"] = plots.gap_forest(a.tables["gap_pooled"])
    if not a.tables["difficulty"].empty:
        figs["difficulty_curves"] = plots.difficulty_curves(a.tables["difficulty"]).figure
    if not a.tables["rules"].empty:
        figs["rule_agreement"] = plots.rule_agreement(a.tables["rules"], a.tables["best_rule"])
    for name, fig in figs.items():
        files += artifacts.save_figure(fig, fdir / name)
        plt.close(fig)
    files.append(artifacts.write_json(a.summary, paths.summary_path(run_dir)))
    a.files = files
    return files


def analyze_run(run_dir, n_boot: int = 2000, seed: int = 0, include_limited: bool = False,
                rules_k: int = 5) -> Analysis:
    """Load every complete model's scores in ``run_dir`` (limited runs too when asked), compute all tables, write them."""
    scores = load_scores(run_dir, include_limited=include_limited)
    a = compute(scores, n_boot=n_boot, seed=seed, rules_k=rules_k)
    a.notes += excluded_notes(scores)  # score files left out (stale, unfinished, limited), never mixed in
    a.summary["_notes"] = a.notes
    write(a, run_dir)
    return a
