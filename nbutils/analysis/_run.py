"""The one shape of every analysis of a run: each study's ``analyze_run`` is ``run(run_dir, STEPS, params)``; the
``Analysis`` it returns, and ``write_analysis``, the one writer of an analysis's files.

``params`` is the study's parameter record (``nbutils.analysis``: frozen, every value checked when it was
built, so before anything in the run changes; the steps read its attributes). ``run`` removes the run's earlier results,
reads the scores, splits off the lower precisions of a model scored at several, has the study compute its tables,
compares the precisions (precision sensitivity), adds the notes on score files left out, and has the study write
its files. What differs between studies is what ``Steps`` holds: how they read their scores, what they compute and
write, and what their headline is at one precision.

Precision sensitivity is the same in every study that compares decisions (``id_column``): each lower precision of a
model against its most exact one, on the rows both scored (``stats.compare_precisions``), with the study's headline estimate
at each precision where the study has one (``headline``); a study without a headline to recompute, and a study that
cannot compare decisions at all (a perplexity study, the cue profile), says so in a note.

``use_r`` means the same wherever a study fits a model in R: True (the default) fits it with R's packages when R has
them, else with the Python fit that stands in for it; False always uses Python.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from .. import artifacts, labels, paths, runlock
from ..stats import compare_precisions
from ._params import AnalysisParams
from ..runstore import Run, excluded_notes, split_precisions


@dataclass
class Analysis:
    """Every table of a run's analysis, plus the files written (each study's ``analysis.compute`` fills one)."""

    scores: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    text: str = ""  # the results in words (Markdown, ``nbutils.results``), written to results.md


def write_analysis(a: Analysis, run_dir, figures: dict, latex=(), index=(), skip=(),
                   float_format: str = "%.3f", replaces: bool = True, tex: dict | None = None) -> list[Path]:
    """The one writer of a run's analysis outputs: every table as CSV under ``tables/`` (plus LaTeX for the names in
    ``latex``, a dict where some take options of ``results.latex_table``, numbers written with ``float_format``; the row index kept for those in ``index``; the names in ``skip``
    stay in ``a.tables`` for the reader but are not written; ``tex``: name → a table's own LaTeX, written as
    ``tables/<name>.tex`` beside its CSV), each of ``figures`` (name → matplotlib figure) as PNG
    and PDF under ``figures/`` (then closed), ``results.md`` and ``summary.json``. Sets and returns ``a.files``.

    The files that say a run's results (``summary.json``, ``results.md``, ``report.html``) are removed first and
    written last, ``summary.json`` the very last: a study's analysis that fails on its way (a full disk, an error)
    leaves none of them rather than ones that look complete. An analysis that adds to the study's summary instead
    (``replaces`` False: the cue profile) removes only the report and leaves the study's files as they were until its
    own are written. ``summary["headline"]`` is the headline tests for scripts (``nbutils.results.entries``);
    ``summary["inputs"]`` records the sha256 of every score file in the run then, so a report can
    tell when they changed or disappeared since. ``records.summary_json`` makes the summary JSON (its
    ``schema_version``, the records as objects). Everything is written under the run's lock."""
    with runlock.hold(run_dir, "writing its analysis"):
        return _write_analysis(a, run_dir, figures, latex, index, skip, float_format, replaces, tex or {})


def _write_analysis(a: Analysis, run_dir, figures: dict, latex, index, skip, float_format: str,
                    replaces: bool, tex: dict) -> list[Path]:
    import matplotlib.pyplot as plt

    from ..records import summary_json

    run = Run.of(run_dir)
    if replaces:
        clear_results(run)
    else:
        run.report_path.unlink(missing_ok=True)
    tdir, fdir = run.tables_dir, run.figures_dir
    for folder in (tdir, fdir):
        paths.check_inside(run, folder / "x", "run_dir")
    names = model_names(a.summary)
    files = []
    for name, t in a.tables.items():
        if name not in skip:
            tex_of = (latex.get(name) or True) if isinstance(latex, dict) and name in latex else name in latex
            files += artifacts.write_table(t, tdir / name, index=name in index, latex=tex_of,
                                           float_format=float_format)
    for name, text in tex.items():
        files.append(artifacts.write_text(text, tdir / f"{name}.tex"))  # names the study chose, never a model name
    for name, fig in figures.items():
        files += artifacts.save_figure(fig, fdir / name)
        plt.close(fig)
    tex, drawn = any(f.suffix == ".tex" for f in files), bool(figures)
    for m in names:  # said when the tables and figures are written, not found when a paper fails to compile
        lines = [f"LaTeX tables: the model label {m!r} has {' and '.join(s)} letters, which pdflatex cannot set with "
                 "the packages the tables use; they are written as their code points ([U+…]). For a paper, give the "
                 "model a `label:` in Latin letters, or set those cells in XeLaTeX or LuaLaTeX with a font that has "
                 "them" for s in [labels.latex_unset(m) if tex else []] if s]
        lines += [f"figures: the model label {m!r} has {' and '.join(s)} letters, which no font the figures use has; "
                  "they are drawn as empty boxes. Install a font that has them and name it first in matplotlib's "
                  "font.family, or give the model a `label:` in letters the figures have"
                  for s in [labels.figure_unset(m) if drawn else []] if s]
        for line in lines:
            warnings.warn(line, stacklevel=3)
            a.notes.append(line)
            a.summary["_notes"] = list(dict.fromkeys([*(a.summary.get("_notes") or []), line]))
    if a.text:  # model labels are display text: Markdown shows them as they are, never as HTML, links or math
        a.text = labels.markdown_text(a.text, names)
        files.append(artifacts.write_text(a.text, run.results_path))
    if replaces and a.summary.get("records") is not None:  # the headline for scripts (the cue profile adds none)
        from ..results import entries

        a.summary["headline"] = artifacts.json_clean(entries(a.summary))
        a.summary["analysed"] = artifacts.now_utc()  # a report refuses an executed notebook older than this
    a.summary["inputs"] = analysis_inputs(run)
    files.append(artifacts.write_json(summary_json(a.summary), run.summary_path))
    a.files = files
    return files


def model_names(summary: dict) -> list[str]:
    """The model labels an analysis's summary holds (its models, its label → slug map, the design's list)."""
    design = (summary.get("design") or {}).get("models") or []
    return list(dict.fromkeys([*(summary.get("labels") or {}), *(summary.get("models") or {}),
                               *(m for m in design if isinstance(m, str))]))


def figures_as_text():
    """A context in which figures draw every text as it is, never as mathtext: a label's ``$…$`` or an unknown
    macro in it is its characters in every figure, not math in one and an error in another."""
    import matplotlib

    return matplotlib.rc_context({"text.parse_math": False})


def clear_results(run_dir) -> None:
    """Remove a run's ``summary.json``, ``results.md`` and ``report.html``: every study's analysis does so first, so
    one that fails on its way (an error, a full disk) leaves no results of an earlier analysis that look like its own."""
    run = Run.of(run_dir)
    for done in (run.summary_path, run.results_path, run.report_path):
        done.unlink(missing_ok=True)


def analysis_inputs(run_dir) -> dict:
    """What an analysis could read, for ``summary["inputs"]``: the sha256 of every score file in the run that an
    analysis reads (``paths.analysable_score_files``), so that a report can tell when they changed since."""
    return {"score_files": {p.name: artifacts.sha256_file(p) for p in paths.analysable_score_files(run_dir)}}


@dataclass(frozen=True)
class Steps:
    """What a study's analysis supplies to ``run``.

    ``params``: the study's parameter record (a subclass of ``AnalysisParams``); every callback gets the record.
    ``load(run_dir, params)``: the run's scores (``runstore.load_scores``, joined with the dataset; the limited runs'
    too when ``params.include_limited``); ``compute(scores, run_dir, params)``: the ``Analysis`` (tables, summary,
    notes, text) of the main scores; ``write(analysis, run_dir, variants)``: its files (``write_analysis``),
    ``variants`` being the scores of the models scored at several precisions (or None). ``id_column``: the row id two
    precisions are compared on, None when the study cannot compare decisions (``cannot_compare`` then says why);
    ``headline(scores, params)``: the study's headline (estimate, ci_low, ci_high, p) on one model at one precision,
    None when it has none to recompute (``no_headline`` says why); ``source_notes(run_dir)``: the study's notes on its inputs; ``clears``: False for an
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
    run_dir = Run.of(run_dir)  # resolved once: every step takes the handle
    if steps.clears:
        clear_results(run_dir)
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
        a.tables["precision"], recs = compare_precisions(variants, steps.id_column, headline=head)
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
    with figures_as_text():
        steps.write(a, run_dir, variants)
    return a
