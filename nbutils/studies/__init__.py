"""The study registry: every probe the suite carries, as one record each, read by the sweep and the notebooks.

A study is a folder ``nbutils/studies/<name>/`` with the same role files (``dataset.py`` builds and writes the
dataset, ``stats.py``, ``plots.py``, ``analysis.py``) and notebooks under ``notebooks/<name>/``. Scoring goes
through the engine with the shared ``notebooks/score.ipynb``. Adding a study is a folder plus one entry below.
Studies never import each other: what several use lives in ``nbutils/studies/common/``, which any study imports and
which imports no study. The registry imports nothing heavy: a record's own ``choice_items`` function is imported only
when its ``spec`` is asked for.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from .. import paths
from ..spec import DatasetSpec

SCORE_NOTEBOOK = "notebooks/score.ipynb"
DEFAULT = "monotonicity"  # the suite's core study: what a sweep file without `study:` runs
# Analyses that read any choices study's run (dataset + scores) rather than scoring their own: a sweep file's key of the
# same name, a mapping of the notebook's parameters, runs the notebook on the run after the study's analysis.
RUN_ANALYSES = {"cues": "notebooks/cues/01_profile.ipynb"}  # ICQ cue profiling (Huang and Zhu), nbutils/analyses/cues/
RUN_ANALYSIS_PARAMS = {"cues": "nbutils.analyses.cues.params:CueParams"}  # each one's parameter record
RUN_ANALYSIS_DESCRIPTIONS = {"cues": "cue profiling: which surface cues predict a dataset's labels, and does a model "
                                     "follow them (an analysis of any run with answer options)"}


@dataclass(frozen=True)
class AcrossRuns:
    """A study that scores nothing of its own: it reads the analyses of several runs of another study (the
    instrument's validation: one monotonicity run per prompt seed) into a run folder of its own, which holds its
    ``record`` file (what it read), ``summary.json``, ``results.md``, its executed notebook and ``report.html``."""

    name: str
    description: str
    notebook: str
    record: str  # the file that marks its run folder
    reads: str  # the notebook's parameter naming the folder of the runs it reads
    runs: str  # the pattern of the folders of the runs it reads (``seed-*``)

    @property
    def notebooks(self) -> dict:
        return {"analyze": self.notebook}


ACROSS_RUNS = {"validation": AcrossRuns(
    "validation", "how small a planted bias the headline finds, and whether a decoy stays null (the positive control "
                  "at several strengths, read across prompt sets)", "notebooks/validation/power.ipynb",
    "validation.json", "root", "seed-*")}


def across_runs_for(run_dir) -> AcrossRuns | None:
    """The study read across runs whose record ``run_dir`` holds, else None."""
    return next((s for s in ACROSS_RUNS.values() if (paths.resolve(run_dir) / s.record).is_file()), None)


def across_runs_of_notebook(notebook) -> AcrossRuns | None:
    """The study read across runs whose notebook ``notebook`` is, else None."""
    try:
        nb = paths.resolve(notebook).resolve()
    except (OSError, ValueError, TypeError):
        return None
    return next((s for s in ACROSS_RUNS.values() if paths.resolve(s.notebook).resolve() == nb), None)


@dataclass(frozen=True)
class Study:
    """One probe: its notebooks, the dataset file it writes into a run, how the engine scores it and how
    ``limit`` groups its rows."""

    name: str
    description: str
    notebooks: dict  # step ("generate", "score", "analyze") -> notebook path from the repository root
    dataset_file: str
    id_column: str
    scorer: str  # "choices" | "sentences"
    text_column: str
    choice_items: str | None = None  # "module:function" giving ChoiceItems for a choices dataset
    limit_by: tuple[str, ...] = ()
    limit_unit: str | None = None
    limit_strata: str | None = None
    score_defaults: dict = field(default_factory=dict)  # score parameters a study sets for every model (a model file overrides them)
    design: tuple[str, ...] = ()  # the dataset's columns that say which cell of the design an item is (those present)
    params: str = ""  # "module:Class": the analysis's parameter record (an ``analysis.AnalysisParams``)

    @property
    def analysis_params(self) -> type:
        """The record of this study's analysis parameters (its module imports nothing heavy)."""
        return _resolve(self.params)

    @property
    def spec(self) -> DatasetSpec:
        """What the engine needs to score this study's dataset."""
        fn = _resolve(self.choice_items) if self.choice_items else None
        return DatasetSpec(self.dataset_file, self.id_column, self.scorer, self.text_column, fn, self.limit_by,
                           self.limit_unit, self.limit_strata, what_makes_it=self.notebooks["generate"])


REGISTRY: dict[str, Study] = {s.name: s for s in (
    Study(name="monotonicity", params="nbutils.studies.monotonicity.params:MonotonicityParams",
          description="in-context concept learning of quantifiers: upward vs downward monotone (Wang, concept learning)",
          notebooks={"generate": "notebooks/monotonicity/01_generate.ipynb", "score": SCORE_NOTEBOOK,
                     "analyze": "notebooks/monotonicity/03_analyze.ipynb"},
          dataset_file="prompts.parquet", id_column="prompt_id", scorer="choices", text_column="text",
          choice_items="nbutils.studies.monotonicity.dataset:choice_items",
          limit_by=("concept",), limit_unit="pair_id", limit_strata="label",
          design=("concept", "threshold", "monotonicity", "condition", "template", "phrase", "answer_words")),
    Study(name="negation", params="nbutils.studies.negation.params:NegationParams",
          description="negation bias by sentence perplexity, stereotype-consistent vs -inconsistent (Wang, Sommerauer and Bloem)",
          notebooks={"generate": "notebooks/negation/01_stimuli.ipynb", "score": SCORE_NOTEBOOK,
                     "analyze": "notebooks/negation/03_analyze.ipynb"},
          dataset_file="stimuli.parquet", id_column="stimulus_id", scorer="sentences", text_column="sentence",
          limit_unit="item_id", design=("item_id", "category", "context", "form")),
    Study(name="custom", params="nbutils.studies.custom.params:CustomParams",
          description="a user's own prompt file (CSV, TSV, JSONL, Parquet) with Yes/No or multiple-choice answers, by group",
          notebooks={"generate": "notebooks/custom/01_load.ipynb", "score": SCORE_NOTEBOOK,
                     "analyze": "notebooks/custom/03_analyze.ipynb"},
          dataset_file="items.parquet", id_column="row_id", scorer="choices", text_column="text",
          choice_items="nbutils.studies.custom.dataset:choice_items",
          limit_by=("group",), limit_strata="answer",  # 01_load joins the group_by columns into `group`
          design=("group",)),  # and the file's own group_by columns, as its dataset's sidecar records them
    Study(name="personas", params="nbutils.studies.personas.params:PersonasParams",
          description="implicit bias as answer-level variance under sociodemographic vs null personas (DIF)",
          notebooks={"generate": "notebooks/personas/01_generate.ipynb", "score": SCORE_NOTEBOOK,
                     "analyze": "notebooks/personas/03_analyze.ipynb"},
          dataset_file="personas.parquet", id_column="prompt_id", scorer="choices", text_column="text",
          choice_items="nbutils.studies.personas.dataset:choice_items",
          limit_unit="question_id", limit_strata="question_type",  # `limit` questions, each under every persona
          design=("persona_id", "persona_kind", "category", "question_id", "question_type")),
)}


def _resolve(ref: str):
    """The object a record names as ``"module:name"`` (a study's ``choice_items`` or parameter record)."""
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)


def run_analysis_params(name: str) -> type:
    """The parameter record of the run analysis ``name`` (a key of ``RUN_ANALYSES``)."""
    return _resolve(RUN_ANALYSIS_PARAMS[name])


def params_of_notebook(notebook) -> type | None:
    """The parameter record of an analysis notebook of the suite (a study's ``analyze`` notebook or a run analysis's),
    None for any other notebook."""
    try:
        nb = paths.resolve(notebook).resolve()
    except (OSError, ValueError, TypeError):
        return None
    for s in REGISTRY.values():
        if paths.resolve(s.notebooks["analyze"]).resolve() == nb:
            return s.analysis_params
    return next((run_analysis_params(k) for k, v in RUN_ANALYSES.items() if paths.resolve(v).resolve() == nb), None)


def get(name: str) -> Study:
    """The registered study called ``name``; a ValueError lists the registered ones."""
    if name not in REGISTRY:
        raise ValueError(f"study: must be one of {list(REGISTRY)}, got {name!r}")
    return REGISTRY[name]


def for_run(run_dir) -> Study:
    """The study whose dataset file is in ``run_dir`` (exactly one must be)."""
    from ..runstore import Run

    run = Run.of(run_dir)
    found = [s for s in REGISTRY.values() if run.dataset_path(s.dataset_file).exists()]
    if len(found) != 1:
        what = "no study's dataset" if not found else f"datasets of several studies ({[s.name for s in found]})"
        raise ValueError(f"study: {run} holds {what}; pass study= one of {list(REGISTRY)}")
    return found[0]


def listing() -> list[str]:
    """``python -m nbutils studies``: every study (its scorer, dataset file and what it asks), then every analysis of
    any run (the cue profile), as the README's table of studies lists them."""
    lines = [f"{s.name:14s} {s.scorer:9s} {s.dataset_file:18s} {s.description}" for s in REGISTRY.values()]
    return lines + [f"{name:14s} {'analysis':9s} {'any run':18s} {RUN_ANALYSIS_DESCRIPTIONS.get(name, nb)}"
                    for name, nb in RUN_ANALYSES.items()]
