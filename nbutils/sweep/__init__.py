"""The sweep wing: a study's notebooks run in order, here or as cluster jobs.

Its face (the names below) is what the command line and the scripts use; the modules behind it are private, in
four rooms from top to bottom:

- ``_sweep``: the sweep, checked whole before it writes anything (``check_sweep``), then run (``run_sweep``: generate
  once, score once per model here or through the cluster jobs, analyse, write the report);
- ``_cluster``: the score step as one job array through submitit: plan the (model, shard) jobs, submit, watch, merge;
- ``_executors`` and ``_scheduler``: where score notebooks run (``local``, ``submitit-local``, ``slurm``; the
  ``cluster:`` block's checks) and what SLURM answers (the partition, job states with or without accounting);
- ``_papermill`` and ``_parameters``: the papermill runner (``run_notebook``: parameters checked against the notebook's
  ``parameters`` cell, the notebook executed, a failed notebook's error in one line, ``error_line``) and a notebook's
  declared parameters with the values given for them checked.
"""
from __future__ import annotations

from ._papermill import check_parameters, error_line, run_notebook
from ._parameters import declared as declared_parameters, from_cli as parameter_from_cli
from ._sweep import SweepFailed, check_sweep, run_sweep

__all__ = ["SweepFailed", "check_parameters", "check_sweep", "declared_parameters", "error_line", "parameter_from_cli",
           "run_notebook", "run_sweep"]
