"""The run store: a run directory's datasets and score files, read and written without a model (no torch here).

Its face (the names below) is what the rest of the suite uses; the modules behind it are private:

- ``_handle``: ``Run(run_dir)``, a run directory resolved once, each of its files named once, and what is read of it
  read once;
- ``_dataset``: ``read_dataset`` (a run's dataset, verified against the sha256 its sidecar recorded) and
  ``select_limit`` (the seeded, stratified sample a ``limit`` run scores);
- ``_sidecar``: ``ScoreSidecar`` (a score file's sidecar as a typed, versioned record), its one writer
  (``write_sidecar``) and reader (``read_sidecar``: an older one read or refused with what to score again);
- ``_score_files``: ``check_existing`` / ``is_done`` / ``set_aside_changed`` (the rule "is this the same scoring?",
  ``score_settings.identity``, applied to a run's files and to the sweep's skip: a file another scoring made is set
  aside, and scored again), ``ScoreFiles`` (one scoring run's score file, checkpoint and progress file),
  ``merge_shards`` (the shards of one model joined into the file an unsharded run writes);
- ``_reading``: ``score_inventory`` / ``load_scores`` / ``excluded_notes`` / ``split_precisions`` (a run's scores read
  back for analysis, with every file left out named and the reason given).

File names come from ``paths``; writes are atomic (``artifacts``); the scoring settings and their identity are
``score_settings``'s.
"""
from __future__ import annotations

from ._dataset import read_dataset, select_limit
from ._handle import Run
from ._reading import (EXCLUDED_WHY, check_label_free, derived_problem, excluded_notes, load_scores, misnamed,
                       score_inventory, split_precisions)
from ._score_files import (ScoreFiles, check_existing, check_scores_file, coverage_problem, ids_digest, is_done,
                           merge_shards, rates, set_aside_changed, write_scores)
from ._sidecar import SCHEMA_VERSION, ScoreSidecar, SidecarError, read as read_sidecar, write as write_sidecar

__all__ = ["EXCLUDED_WHY", "Run", "SCHEMA_VERSION", "ScoreFiles", "ScoreSidecar", "SidecarError", "check_existing",
           "check_label_free", "check_scores_file", "coverage_problem", "derived_problem", "excluded_notes",
           "ids_digest", "is_done", "load_scores", "merge_shards", "misnamed", "rates", "read_dataset",
           "read_sidecar", "score_inventory", "select_limit", "set_aside_changed", "split_precisions",
           "write_scores", "write_sidecar"]
