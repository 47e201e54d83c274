"""The cue profile's parameters (``analysis.analyze_run``, ``notebooks/cues/01_profile.ipynb``, a sweep file's ``cues``
block): one frozen record, checked when it is built (``nbutils.analysis``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...analysis import AnalysisParams
from ...stats import ALPHA


@dataclass(frozen=True)
class CueParams(AnalysisParams):
    """``top_k``: cues probed and shown; ``min_count``: a feature must occur this often in both splits; ``alpha``: the
    familywise level (Holm) of the cue and model tests; ``study``: the run's study (None or empty: the one whose
    dataset the run holds); ``text_column``/``premise_column``: the text profiled (None: the study's prompt column) and
    an optional premise; ``train_fraction``: the training share of a random split; ``bigrams``: bigram features too;
    ``nearest_k``: the examples nearest the query whose majority is a structural cue of monotonicity prompts."""

    top_k: int = field(default=10, metadata={"min": 1, "help": "cues probed and shown"})
    min_count: int = field(default=5, metadata={"min": 1, "help": "occurrences in both splits"})
    alpha: float = field(default=ALPHA, metadata={"between": (0, 1), "help": "familywise level (Holm)"})
    study: str | None = field(default=None, metadata={"help": "the run's study; None: found from its dataset"})
    text_column: str | None = field(default=None, metadata={"help": "column profiled; None: the study's prompt"})
    premise_column: str | None = field(default=None, metadata={"help": "optional premise column (adds OVERLAP)"})
    train_fraction: float = field(default=0.5, metadata={"between": (0, 1), "help": "training share of a random split"})
    bigrams: bool = field(default=False, metadata={"help": "bigram features too"})
    nearest_k: int = field(default=5, metadata={"min": 1, "help": "examples nearest the query (monotonicity prompts)"})
