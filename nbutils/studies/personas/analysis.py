"""One call that turns a persona run's scores into tables, figures and summary.json."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...analysis import Analysis, Steps, run_analysis, write_analysis
from ... import studies
from ...stats import precision_margin_figure
from ...results import generic_text, plural
from ...runstore import load_scores
from . import plots, stats
from .params import PersonasParams

LATEX_TABLES = ("accuracy", "dif", "null_comparison", "categories", "models", "accuracy_vs_dif")




def compute(scores: pd.DataFrame, params: PersonasParams | None = None, **options) -> Analysis:
    """All tables from a joined scores frame (see ``runstore.load_scores``); ``params``: a ``PersonasParams``, or its
    fields as keywords."""
    params = PersonasParams.of(params, options)
    min_overlap, alternative = params.min_overlap, params.alternative
    a = Analysis(scores)
    t = a.tables
    t["accuracy"] = stats.accuracy_table(scores)
    t["dif"] = stats.dif_table(scores, min_overlap)
    t["null_comparison"] = stats.null_comparison(t["dif"], params.n_resamples, params.seed, alternative)
    t["categories"] = stats.category_summary(t["dif"], t["accuracy"])
    t["models"] = stats.model_table(t["dif"], t["accuracy"])
    t["accuracy_vs_dif"] = stats.accuracy_vs_dif(t["models"])
    for r in t["models"].itertuples(index=False):
        if r.n_unstable_real:
            a.notes.append(f"{r.model}: {plural(r.n_unstable_real, 'real persona')} "
                           f"{'shares' if r.n_unstable_real == 1 else 'share'} fewer than {min_overlap} correctly "
                           "answered questions with the baseline; "
                           f"{'its ratio is' if r.n_unstable_real == 1 else 'their ratios are'} unstable (flagged `unstable`)")
    for r in t["null_comparison"].itertuples(index=False):
        if r.note:
            a.notes.append(f"{r.model}, real vs {r.null_kind}: {r.note}")
    a.notes += [n for n in t["accuracy_vs_dif"]["note"] if n and not t["accuracy_vs_dif"]["valid"].iloc[0]]
    for model, g in scores.groupby("model"):
        if g["choice"].nunique() == 1:
            a.notes.append(f"{model}: answers {g['choice'].iloc[0]!r} to every question (pure letter bias)")
    a.summary = {"records": stats.summary_records(t),
                 "definitions": {"ratio": "|Ci ⊕ Cb| / |Ci ∩ Cb| (DIF paper, Eq. 1)",
                                 "dif": "1 / (1 + ratio) = |Ci ∩ Cb| / |Ci ∪ Cb| (Jaccard similarity): 1 no bias, 0 maximal",
                                 "bias": "1 − dif", "min_overlap": min_overlap, "alternative": alternative,
                                 "answer": "the option letter with the highest log-probability"}}
    a.summary["_notes"] = a.notes
    models = sorted(scores["model"].unique().tolist()) if len(scores) else []
    a.text = generic_text(
        a.summary, "Does a sociodemographic persona change which questions a model answers correctly?",
        f"{plural(len(models), 'model')} ({', '.join(models)}); "
        f"{plural(scores['question_id'].nunique() if 'question_id' in scores else None, 'question')} under "
        f"{plural(scores['persona_id'].nunique() if 'persona_id' in scores else None, 'persona')} (real and null); "
        "the headline compares the bias (1 − DIF) of real personas with that of null personas (Welch's t, "
        + {"greater": "one-sided: real above null", "less": "one-sided: real below null"}.get(alternative, alternative)
        + ").",
        lambda r: str(r.get("test", "")).startswith("welch_real_vs_"))
    return a


def write(a: Analysis, run_dir, variants: pd.DataFrame | None = None) -> list[Path]:
    """Tables as CSV + LaTeX, figures as PNG + PDF, summary.json; with ``variants`` (a model scored at several
    precisions) the margin-vs-margin figure of the precision sensitivity section too."""
    figs = {"accuracy_by_persona": plots.accuracy_by_persona(a.tables["accuracy"]),
            "persona_bias": plots.persona_bias(a.tables["dif"]),
            "accuracy_vs_bias": plots.accuracy_vs_bias(a.tables["models"], a.tables["accuracy_vs_dif"])}
    if variants is not None:
        figs["precision_margins"] = precision_margin_figure(variants, studies.get("personas").spec.id_column)
    return write_analysis(a, run_dir, figs, latex=LATEX_TABLES)


def headline(scores: pd.DataFrame, params: PersonasParams) -> dict:
    """The headline at one precision: the bias of real personas minus that of the first null kind (Welch's t)."""
    dif = stats.dif_table(scores, params.min_overlap)
    t = stats.null_comparison(dif, params.n_resamples, params.seed, params.alternative)
    if t.empty:
        return {}
    r = t.iloc[0]
    return {"estimate": r["estimate"], "ci_low": r["ci_low"], "ci_high": r["ci_high"], "p": r["p_welch"]}


STEPS = Steps(
    params=PersonasParams,
    load=lambda run_dir, params: load_scores(run_dir, studies.get("personas").spec,
                                             include_limited=params.include_limited),
    compute=lambda scores, run_dir, params: compute(scores, params),
    write=lambda a, run_dir, variants: write(a, run_dir, variants),
    id_column=studies.get("personas").spec.id_column, headline=headline)


def analyze_run(run_dir, params: PersonasParams | None = None, **options) -> Analysis:
    """Load every complete model's scores in ``run_dir`` (limited runs too when asked), compute all tables, write them
    (``analysis.run_analysis``: precision sensitivity with the real − null bias as the headline at each precision).
    ``params``: a ``PersonasParams``, or its fields as keywords (``min_overlap``, ``n_resamples``, ``alternative``,
    ``seed``, ``include_limited``; the record holds their defaults), checked before anything in the run changes."""
    return run_analysis(run_dir, STEPS, PersonasParams.of(params, options))
