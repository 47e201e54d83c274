"""What a run store and a scorer need to know about a dataset: its file, id column, scorer and limit groups (no torch)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

SCORERS = ("choices", "sentences")
YES_NO = ("Yes", "No")  # the options of a Yes/No question, in the order scored (margin = Yes − No)
LETTERS = tuple("ABCDEFGHIJ")  # option letters of a multiple-choice question


def normalize_answer(value) -> str:
    """An answer as matched against the options: case-folded, surrounding spaces and one trailing full stop removed."""
    s = str(value).strip()
    if s.endswith("."):
        s = s[:-1].rstrip()
    return s.casefold()


@dataclass(frozen=True)
class ChoiceItems:
    """The answer options of every row and, where known, the gold option.

    ``options`` is one tuple for every row, or a list of tuples (one per row; sets may differ). ``gold`` holds
    the gold option's text per row (None: no gold, so no ``correct`` column). ``systems`` is an optional system
    message per row.
    """

    options: tuple[str, ...] | list[tuple[str, ...]]
    gold: list[str] | None = None
    systems: list[str | None] | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset file under a run directory, the column that identifies its rows, and how to score and limit it.

    - ``scorer``: ``choices`` (log-prob of each answer option after a prompt) or ``sentences`` (sentence log-probs).
    - ``text_column``: the prompt (choices) or sentence (sentences).
    - ``choice_items``: for ``choices``, a function from the dataset frame to its ``ChoiceItems``.
    - ``limit_by``: columns whose groups each get at most ``limit`` units; ``limit_unit``: a column whose rows
      are kept or dropped together (e.g. a pair seen in two conditions); ``limit_strata``: the column a limited
      sample is balanced on (e.g. the gold answer).
    """

    dataset_file: str
    id_column: str
    scorer: str
    text_column: str
    choice_items: Callable | None = None
    limit_by: tuple[str, ...] = ()
    limit_unit: str | None = None
    limit_strata: str | None = None
    what_makes_it: str = "the dataset notebook"

    def __post_init__(self):
        if self.scorer not in SCORERS:
            raise ValueError(f"scorer: must be one of {list(SCORERS)}, got {self.scorer!r}")
        if self.scorer == "choices" and self.choice_items is None:
            raise ValueError("choice_items: a choices dataset needs a function that gives each row's options")
