"""One call that turns a run directory's scores into tables, figures and summary.json."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...analysis import Analysis, Steps, run_analysis, write_analysis
from ... import artifacts, paths
from ...results import models_applies, models_forest, models_frame, models_latex
from ...stats import precision_margin_figure
from ..common import model_comparison, option_mass, quantifier_stats, rules, verdicts
from . import prediction, results, plots, robustness, stats, twin_summary, twins
from .params import MonotonicityParams
from .scores import load_scores
from .twins import originals


def compute(scores: pd.DataFrame, params: MonotonicityParams | None = None, *, order: list[str] | None = None,
            parameters: dict | None = None, **options) -> Analysis:
    """All tables from a joined scores frame (see ``runstore.load_scores``); ``use_r`` fits the headline GLMM with lme4
    when R is installed (the GEE, always fitted, is the headline otherwise); ``rules_k`` None: 5, or the prompts'
    number of examples when it is smaller. With several models, each is compared with the first of ``order`` (default:
    the order of the frame) on the prompts both scored. ``parameters``: each model's number of parameters, where
    known (the models table prints it). ``params``: the analysis's parameter record (``n_boot``, ``seed``, ``rules_k``,
    ``use_r``), or its fields as keywords."""
    params = MonotonicityParams.of(params, options)
    n_boot, seed, rules_k, use_r = params.n_boot, params.seed, params.rules_k, params.use_r
    all_scores, scores = scores, originals(scores)  # twin prompts are read beside their originals, not as prompts
    a = Analysis(scores)
    models = _tables(a, scores, all_scores, order, n_boot, seed, rules_k, use_r)
    unpaired = model_comparison.unpaired(scores, models) if len(models) > 1 else []
    _notes(a, scores, use_r)
    _summary(a, scores, models, unpaired, parameters)
    a.text = results.results_text(a.summary)
    return a


def _tables(a: Analysis, scores: pd.DataFrame, all_scores: pd.DataFrame, order, n_boot: int, seed: int, rules_k,
            use_r: bool) -> list[str]:
    """Every table of the analysis into ``a.tables``; returns the models in their order (the scored one)."""
    a.tables["twins"] = twins.table(all_scores)
    acc = stats.accuracy_table(scores)
    if order:  # every table and figure lists the models in one order: the scored one
        acc = acc.sort_values("model", key=lambda m: m.map({x: i for i, x in enumerate(order)}), kind="stable",
                              ignore_index=True)
    a.tables["accuracy"] = acc
    a.tables["appendix_b"] = stats.appendix_b(acc)
    a.tables["gap_by_threshold"] = stats.gap_by_threshold(scores)
    a.tables["gap_pooled"] = stats.pooled_gap(scores, n_boot=n_boot, seed=seed)
    a.tables["gap_difference"] = stats.gap_difference(scores, seed=seed)
    a.tables["mixed_model"] = stats.mixed_model(scores, use_r=use_r)
    a.tables["mcnemar"] = stats.mcnemar_conditions(scores)
    sdt = stats.signal_detection(scores)
    a.tables["signal_detection"] = sdt
    a.tables["dprime_gap"] = stats.dprime_gap(sdt, seed=seed)
    a.tables["difficulty"] = stats.difficulty(scores)
    a.tables["calibration"] = stats.calibration(scores)
    a.tables["rules"], a.tables["best_rule"] = rules.rule_tables(scores, k=rules_k)  # what was learned instead
    a.tables["mirror_test"], a.tables["mirror_test_pooled"] = rules.mirror_test(a.tables["rules"])
    a.tables["verdicts"] = verdicts.table(scores)  # the task floor, the use of the examples, near-constant answers
    varied = robustness.varied_axes(scores)
    a.tables["prediction"] = prediction.table(scores, varied)  # the gap a new variant would show
    a.tables["robustness"] = prediction.with_intervals(robustness.variant_table(scores), a.tables["prediction"])
    a.tables["robustness_tests"] = robustness.heterogeneity(scores, use_r=use_r, seed=seed)
    models = [m for m in (order or []) if m in set(scores["model"])] or list(dict.fromkeys(scores["model"]))
    a.tables["model_comparison"] = (model_comparison.compare(scores, models, use_r=use_r) if len(models) > 1
                                    else pd.DataFrame())
    return models


def _notes(a: Analysis, scores: pd.DataFrame, use_r: bool) -> None:
    """What a reader must know beside the tables: no gap to compute, answers all alike, the fits' notes, no R."""
    if a.tables["gap_pooled"].empty:
        a.notes.append("no threshold has both an upward and a downward concept: no gap can be computed")
    for model, g in scores.groupby("model"):
        if g["pred_yes"].nunique() == 1:
            a.notes.append(f"{model}: answers '{'Yes' if g['pred_yes'].iloc[0] else 'No'}' to every prompt (pure response bias)")
    a.notes += sorted({n for n in a.tables["mixed_model"].get("note", pd.Series(dtype=str)).dropna() if n})
    if use_r and not (a.tables["mixed_model"].get("test", pd.Series(dtype=str)) == "glmm_lrt").any() and len(scores):
        a.notes.append("R with lme4 not found: the headline mixed-effects test is the GEE (bias-reduced SE, t(K−1))")


def _summary(a: Analysis, scores: pd.DataFrame, models: list[str], unpaired, parameters: dict | None) -> None:
    """``summary.json``'s blocks: each model's headline, verdicts, option mass, twins and prediction; the records; the
    rules; the design; the models side by side."""
    a.summary = {"models": stats.summary(a.tables["gap_pooled"], a.tables["mixed_model"], a.tables["dprime_gap"])}
    add_verdicts(a.summary["models"], verdicts.summary_blocks(a.tables["verdicts"]),
                 stats.per_threshold(a.tables["gap_by_threshold"]))
    mass = option_mass.table(scores)  # how much probability Yes and No hold, per condition
    if len(mass):  # score files that record it
        a.tables["option_mass"] = mass
        option_mass.add_blocks(a.summary["models"], mass)
    twin_summary.summary_blocks(a.summary["models"], a.tables["twins"])  # what the twin prompts show, per model
    twin_summary.design_blocks(a.summary["models"], scores)  # without twins: what they would have shown at this size
    prediction.model_blocks(a.summary["models"], a.tables["prediction"])  # with variants: each model's intervals
    for m, n in (parameters or {}).items():
        if m in a.summary["models"] and n:
            a.summary["models"][m]["n_parameters"] = int(n)
    a.summary["records"] = (stats.records(a.tables) + verdicts.records(a.tables["verdicts"]) + robustness.records(a.tables["robustness"],
                                                                         a.tables["robustness_tests"])
                            + prediction.records(a.tables["prediction"]) + twin_summary.records(a.tables["twins"])
                            + (model_comparison.records(a.tables["model_comparison"])
                               if len(a.tables["model_comparison"]) else []))
    a.summary["rules"] = rules.summary_records(a.tables["best_rule"])
    a.summary["rules_mirror_test"] = artifacts.json_clean(a.tables["mirror_test_pooled"].to_dict("records"))
    a.summary["design"] = design(scores, a.tables["mcnemar"])
    a.summary["design"]["model_order"] = models
    d = a.summary["design"]  # the models in the order they were scored (the sweep file's), as every list of them
    d["models"] = [m for m in models if m in set(d["models"])]
    d["n_prompts"] = {m: d["n_prompts"][m] for m in models if m in d["n_prompts"]}
    a.summary["design"]["not_compared"] = unpaired  # models that share no prompt with the reference, in words
    a.summary["_notes"] = a.notes
    if models_applies(a.summary):  # the models side by side (tables/models.csv and .tex, results.md)
        a.tables["models"] = models_frame(a.summary)


def add_verdicts(models: dict, blocks: dict, counts: dict) -> None:
    """Each model's floor, examples test and near-constant answers (``verdicts.summary_blocks``) and its correct answers
    per threshold into its conditions in ``summary["models"]``; over both conditions under ``overall``."""
    for model, per in blocks.items():
        entry = models.setdefault(model, {"conditions": {}})
        for cond, block in per.items():
            if cond == "overall":
                entry["overall"] = artifacts.json_clean(block)
            else:
                entry["conditions"].setdefault(cond, {}).update(artifacts.json_clean(block))
    for (model, cond), cells in counts.items():
        models.setdefault(model, {"conditions": {}})["conditions"].setdefault(cond, {})["per_threshold"] = cells


def design(scores: pd.DataFrame, mcnemar: pd.DataFrame) -> dict:
    """What the results paragraph says of the run: models, concepts, thresholds, prompts, conditions, and per model
    whether it answered every prompt pair the same in both conditions (then the paired tests have nothing to compare)."""
    out = {"models": sorted(scores["model"].unique().tolist()) if len(scores) else [],
           "conditions": sorted(scores["condition"].unique().tolist()) if len(scores) else [],
           "n_concepts": int(scores["concept"].nunique()) if len(scores) else 0,
           "n_prompts": {m: int(n) for m, n in scores.groupby("model").size().items()},
           "identical_conditions": {}}
    if "threshold" in scores:
        out["n_thresholds"] = int(scores.groupby(["family", "threshold"]).ngroups) if "family" in scores \
            else int(scores["threshold"].nunique())
    if len(out["conditions"]) == 2 and not mcnemar.empty:
        for m, g in mcnemar.groupby("model"):
            out["identical_conditions"][m] = bool((g["only_cl_correct"] + g["only_explicit_correct"]).sum() == 0)
    return out


def write(a: Analysis, run_dir, variants: pd.DataFrame | None = None) -> list[Path]:
    """Tables as CSV (+ LaTeX for the paper tables), figures as PNG and PDF, summary.json; with ``variants`` (a model
    scored at several precisions) the margin-vs-margin figure of the precision sensitivity section too."""
    figs = {"accuracy_by_threshold": plots.accuracy_grid(a.tables["accuracy"])}
    if variants is not None:
        figs["precision_margins"] = precision_margin_figure(variants, "prompt_id")
    if not a.tables["gap_pooled"].empty:
        figs["gap_forest"] = plots.gap_forest(a.tables["gap_pooled"])
    if not a.tables.get("model_comparison", pd.DataFrame()).empty:
        figs["model_gaps"] = plots.model_gaps(a.summary["records"], a.summary["design"]["model_order"])
    if not a.tables["difficulty"].empty:
        figs["difficulty_curves"] = plots.difficulty_curves(a.tables["difficulty"]).figure
    if not a.tables["robustness"].empty:
        figs["robustness"] = robustness.figure(a.tables["robustness"], a.tables["gap_pooled"])
        varied = robustness.varied_axes(a.scores)
        spec = prediction.specifications(a.scores, varied)
        if len(spec):  # no crossed cell with both directions (a tiny multiverse): no curve to draw
            figs["specification_curve"] = prediction.curve(spec, a.tables["prediction"], varied)
    if not a.tables["rules"].empty:
        figs["rule_agreement"] = plots.rule_agreement(a.tables["rules"], a.tables["best_rule"])
    several = "models" in a.tables and len(a.tables["models"]) > 1
    if several:
        figs["forest_models"] = models_forest(a.summary)
    return write_analysis(a, run_dir, figs, latex=PAPER_TABLES, index=("appendix_b",),
                                    tex={"models": models_latex(a.summary)} if "models" in a.tables else {})


# the tables written as LaTeX too, each as a paper shows it (``results.latex_table``'s options): the CSV keeps every column
PAPER_TABLES = {
    "appendix_b": {"decimals": "auto", "keys": 4, "max_columns": 10},  # percentages as 33.3, thresholds together
    "gap_pooled": {"columns": ["model", "condition", "acc_up", "acc_down", "gap", "gap_ci_low", "gap_ci_high", "or_mh",
                               "or_mh_ci_low", "or_mh_ci_high", "p_cmh", "p_signflip"], "ci": True,
                   "formats": {"or_mh": "%.3g"}},
    "accuracy": {"columns": ["model", "condition", "concept", "n", "n_correct", "accuracy", "ci_low", "ci_high",
                             "p_binom", "p_holm"], "ci": True},
    "mixed_model": {"columns": ["model", "test", "condition", "term", "odds_ratio", "or_ci_low", "or_ci_high", "p",
                                "n", "valid"], "ci": True, "formats": {"odds_ratio": "%.3g"}},
}


def _compute(scores: pd.DataFrame, run_dir, params: MonotonicityParams) -> Analysis:
    order = model_comparison.scored_order(run_dir, scores["model"].unique(), scores.attrs.get("slugs")) \
        if len(scores) else None
    return compute(scores, params, order=order, parameters=parameters(run_dir, scores))


def parameters(run_dir, scores: pd.DataFrame) -> dict:
    """Each model's number of parameters as its score file's sidecar recorded it (``n_parameters``); the file is
    found by its slug (the ``slug`` column where the frame has one, else the model's own column), never by parsing
    a name."""
    key = "slug" if "slug" in scores.columns else "model"
    names = dict(zip(scores[key].astype(str), scores["model"])) if len(scores) else {}
    out = {}
    for side in paths.score_sidecars(run_dir):
        try:
            n = artifacts.read_json(side).get("n_parameters")
        except ValueError:
            continue
        if side.stem in names and isinstance(n, int) and not isinstance(n, bool):
            out[names[side.stem]] = n
    return out


STEPS = Steps(
    params=MonotonicityParams,
    load=lambda run_dir, params: load_scores(run_dir, include_limited=params.include_limited, twins=True),
    compute=_compute, write=write, id_column="prompt_id",
    headline=lambda d, params: quantifier_stats.headline_gap(originals(d), n_boot=params.n_boot, seed=params.seed))


def analyze_run(run_dir, params: MonotonicityParams | None = None, **options) -> Analysis:
    """Load every complete model's scores in ``run_dir`` (limited runs too when asked), compute all tables, write them
    (``analysis.run_analysis``: precision sensitivity with the pooled gap as the headline at each precision). ``params``: a
    ``MonotonicityParams``, or its fields as keywords (``n_boot``, ``seed``, ``include_limited``, ``rules_k``,
    ``use_r``; the record holds their defaults), checked before anything in the run changes."""
    return run_analysis(run_dir, STEPS, MonotonicityParams.of(params, options))
