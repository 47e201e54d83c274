"""The run store: a run directory's datasets and score files, read and written without a model (no torch here).

Everything that touches a run's files on the way in and out of scoring is named here (a re-export of the modules
that hold it), so analyses read scores without importing the engine:

- ``score_settings`` — ``ScoreSettings`` (every scoring parameter, its default and its check), ``check_int`` (the
  one check of an integer parameter), ``identity`` / ``matches`` (the one rule for "is this the same run?");
- ``run_dataset`` — ``read_dataset`` (a run's dataset, verified against the sha256 its sidecar recorded) and
  ``select_limit`` (the seeded, stratified sample a ``limit`` run scores);
- ``score_files`` — ``check_existing`` / ``is_done`` / ``set_aside_changed`` (that rule applied to a run's files and
  to the sweep's skip: a file another scoring made is set aside, and scored again),
  ``ScoreFiles`` (one scoring run's score file, checkpoint and progress file), ``merge_shards`` (the shards of one
  model joined into the file an unsharded run writes);
- ``score_sidecar`` — ``ScoreSidecar`` (a score file's sidecar as a typed, versioned record: written in one place,
  an older one read or refused with what to score again);
- ``score_reading`` — ``score_inventory`` / ``load_scores`` / ``excluded_notes`` / ``split_precisions`` (a run's
  scores read back for analysis, with every file left out named and the reason given).

File names come from ``paths``; writes are atomic (``artifacts``).
"""
from __future__ import annotations

from .artifacts import OverwriteError  # noqa: F401
from .run_dataset import read_dataset, select_limit  # noqa: F401
from .score_files import (ScoreFiles, check_existing, check_scores_file, coverage_problem, ids_digest,  # noqa: F401
                          is_done, merge_shards, rates, set_aside_changed, write_scores)
from .score_settings import (IDENTITY_KEYS, SHARD_KEYS, ScoreSettings, check_int, describe_mismatch,  # noqa: F401
                             identity, matches, recorded)
from .score_sidecar import SCHEMA_VERSION, ScoreSidecar, SidecarError  # noqa: F401
from .score_reading import (EXCLUDED_WHY, check_label_free, derived_problem, excluded_notes,  # noqa: F401
                            load_scores, score_inventory, split_precisions)
