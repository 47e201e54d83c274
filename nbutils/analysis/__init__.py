"""The analysis wing: the one shape of every analysis of a run, and its parameters.

Its face (the names below) is what the studies, the run analyses and the command line use; the modules behind it are
private:

- ``_params``: ``AnalysisParams``, the base of every analysis's parameter record (frozen, each parameter a field with
  its default and its range in the field's metadata, checked once when built; ``from_mapping`` builds it from a
  notebook's, the sweep's or ``nbutils run``'s values), and the shared fields (``n_boot_field``, ``use_r_field``);
- ``_run``: the skeleton every analysis runs through (``run_analysis(run_dir, steps, params)`` with the study's
  ``Steps``: the record taken, scores read, precisions split and compared, excluded files noted, results written),
  the ``Analysis`` record (tables, summary, notes, text, files) and ``write_analysis``, the one writer of an
  analysis's files.
"""
from __future__ import annotations

from ._params import AnalysisParams, n_boot_field, use_r_field
from ._run import Analysis, Steps, figures_as_text, model_names as analysis_model_names, run as run_analysis
from ._run import write_analysis

__all__ = ["Analysis", "AnalysisParams", "Steps", "analysis_model_names", "figures_as_text", "n_boot_field",
           "run_analysis", "use_r_field", "write_analysis"]
