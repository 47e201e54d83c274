"""The statistics wing: inference shared by every study and what checks it.

Its face (the names below) is what the rest of the suite uses; the modules behind it are private:

- ``_levels``: α (``ALPHA``) and the bootstrap's default number of resamples (``N_BOOT``), spelled once;
- ``_inference``: Wilson intervals, Holm's correction, a sign-flip test, a t interval, a result's record (``record``)
  and what it claims (``claim``), the checks of a fit that did not work (``fit_problems``, ``fallback_headlines``);
- ``_firth``: Firth's penalised logistic regression, and an effect's mean over strata tested against its spread;
- ``_rbridge``: R as a reference implementation (an ``Rscript`` process, data as CSV both ways);
- ``_precision``: precision sensitivity (a model scored at several precisions compared with its most exact one).
"""
from __future__ import annotations

from ._firth import firth_fit, mean_over_strata
from ._inference import (RECORD_KEYS, can_reject, claim, fallback_headlines, fit_problems, holm, record,
                         sign_flip_test, stars, t_interval, wilson)
from ._levels import ALPHA, N_BOOT, N_BOOT_MIN
from ._precision import compare as compare_precisions, margin_figure as precision_margin_figure
from ._precision import precision_label, rank as precision_rank
from ._rbridge import RError, r_available, r_versions, run_r

__all__ = ["ALPHA", "N_BOOT", "N_BOOT_MIN", "RECORD_KEYS", "RError", "can_reject", "claim", "compare_precisions", "fallback_headlines",
           "firth_fit", "fit_problems", "holm", "mean_over_strata", "precision_label", "precision_margin_figure",
           "precision_rank", "r_available", "r_versions", "record", "run_r", "sign_flip_test", "stars", "t_interval",
           "wilson"]
