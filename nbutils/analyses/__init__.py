"""Run analyses: analyses that read the run of any study whose dataset fits them (its dataset and score files, found
through the study registry) instead of scoring a dataset of their own.

Each is a folder ``nbutils/analyses/<name>/`` whose ``analysis.analyze_run(run_dir, ...)`` returns an ``Analysis``
written by ``analysis.write_analysis``, and a notebook listed in ``nbutils.studies.RUN_ANALYSES`` (a sweep file's
block of the same name runs it after the study's analysis). A run analysis may import the base modules, the registry
and the shared study code (``nbutils.studies.common``), never a study's own modules or the engine.
"""
