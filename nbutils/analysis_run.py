"""The one shape of every analysis of a run: each study's ``analyze_run`` is ``run(run_dir, STEPS, params)``.

``params`` is the study's parameter record (``nbutils.analysis_params``: frozen, every value checked when it was
built, so before anything in the run changes; the steps read its attributes). ``run`` removes the run's earlier results,
reads the scores, splits off the lower precisions of a model scored at several, has the study compute its tables,
compares the precisions (precision sensitivity), adds the notes on score files left out, and has the study write
its files. What differs between studies is what ``Steps`` holds: how they read their scores, what they compute and
write, and what their headline is at one precision.

Precision sensitivity is the same in every study that compares decisions (``id_column``): each lower precision of a
model against its most exact one, on the rows both scored (``precision.compare``), with the study's headline estimate
at each precision where the study has one (``headline``); a study without a headline to recompute, and a study that
cannot compare decisions at all (a perplexity study, the cue profile), says so in a note.

``use_r`` means the same wherever a study fits a model in R: True (the default) fits it with R's packages when R has
them, else with the Python fit that stands in for it; False always uses Python.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from . import artifacts, precision
from .analysis_params import AnalysisParams
from .runstore import excluded_notes, split_precisions

Analysis = artifacts.Analysis


@dataclass(frozen=True)
class Steps:
    """What a study's analysis supplies to ``run``.

    ``params``: the study's parameter record (a subclass of ``AnalysisParams``); every callback gets the record.
    ``load(run_dir, params)``: the run's scores (``runstore.load_scores``, joined with the dataset; the limited runs'
    too when ``params.include_limited``); ``compute(scores, run_dir, params)``: the ``Analysis`` (tables, summary,
    notes, text) of the main scores; ``write(analysis, run_dir, variants)``: its files (``artifacts.write_analysis``),
    ``variants`` being the scores of the models scored at several precisions (or None). ``id_column``: the row id two
    precisions are compared on, None when the study cannot compare decisions (``cannot_compare`` then says why); ``headline(scores, params)``: the study's headline
    (estimate, ci_low, ci_high, p) on one model at one precision, None when it has none to recompute
    (``no_headline`` says why); ``source_notes(run_dir)``: the study's notes on its inputs; ``clears``: False for an
    analysis that adds to the study's results instead of replacing them (the cue profile).
    """

    params: type[AnalysisParams]
    load: Callable[[Any, AnalysisParams], pd.DataFrame]
    compute: Callable[[pd.DataFrame, Any, AnalysisParams], Analysis]
    write: Callable[[Analysis, Any, pd.DataFrame | None], list[Path]]
    id_column: str | None = None
    cannot_compare: str = ""
    headline: Callable[[pd.DataFrame, AnalysisParams], dict] | None = None
    no_headline: str = ""
    source_notes: Callable[[Any], list[str]] | None = None
    clears: bool = True


def several_precisions(scores: pd.DataFrame) -> dict[str, list[str]]:
    """The models of a run scored at several precisions: model → the score files' stems (``load_scores``'s
    ``attrs["precision"]``)."""
    by_model: dict[str, list[str]] = {}
    for stem, v in (scores.attrs.get("precision") or {}).items():
        by_model.setdefault(v["model"], []).append(stem)
    return {m: sorted(stems) for m, stems in by_model.items() if len(stems) > 1}


def run(run_dir, steps: Steps, params: AnalysisParams) -> Analysis:
    """Analyse ``run_dir`` with a study's ``steps`` and its parameter record ``params`` (see the module docstring);
    returns the ``Analysis`` whose files were written."""
    if not isinstance(params, steps.params):
        raise TypeError(f"params: this analysis takes a {steps.params.__name__} (built with "
                        f"{steps.params.__name__}.from_mapping), got {type(params).__name__}")
    if steps.clears:
        artifacts.clear_results(run_dir)
    scores = steps.load(run_dir, params)
    variants, precision_notes = None, []
    if steps.id_column is not None:
        scores, variants, precision_notes = split_precisions(scores)
    else:
        precision_notes = [f"precision sensitivity: {m} was scored at several precisions ({', '.join(stems)}); "
                           f"{steps.cannot_compare}" for m, stems in several_precisions(scores).items()]
    a = steps.compute(scores, run_dir, params)
    if variants is not None:  # a model scored at several precisions: did the lower ones change its result?
        head = None if steps.headline is None else (lambda d: steps.headline(d, params))
        a.tables["precision"], recs = precision.compare(variants, steps.id_column, headline=head)
        a.summary.setdefault("records", []).extend(recs)
        if steps.headline is None:
            precision_notes.append(f"precision sensitivity: {steps.no_headline}")
    a.notes += precision_notes
    a.notes += excluded_notes(scores)  # score files left out (stale, unfinished, limited), never mixed in
    if steps.source_notes is not None:
        a.notes += steps.source_notes(run_dir)
    a.summary["_notes"] = a.notes
    slugs = scores.attrs.get("slugs") or {}
    if slugs:  # labels are what results print; a model's score files go by its slug
        a.summary["labels"] = dict(slugs)
        for label, slug in slugs.items():
            if isinstance((a.summary.get("models") or {}).get(label), dict):
                a.summary["models"][label]["slug"] = slug
    steps.write(a, run_dir, variants)
    return a
