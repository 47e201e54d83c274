"""What a run store and a scorer need to know about a dataset: its file, id column, scorer and limit groups (no torch)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

SCORERS = ("choices", "sentences")
YES_NO = ("Yes", "No")  # the options of a Yes/No question, in the order scored (margin = Yes − No)
LETTERS = tuple("ABCDEFGHIJ")  # option letters of a multiple-choice question


def normalize_answer(value) -> str:
    """An answer as matched against the options: case-folded, surrounding spaces and one trailing full stop removed."""
    s = str(value).strip()
    if s.endswith("."):
        s = s[:-1].rstrip()
    return s.casefold()


def options_per_row(options, n: int) -> list[tuple[str, ...]]:
    """The option tuple of each of ``n`` rows, from one tuple (or list of strings) for every row or one per row."""
    if isinstance(options, tuple) or (isinstance(options, list) and options and isinstance(options[0], str)):
        opts = tuple(options)
        return [opts] * n
    if len(options) != n:
        raise ValueError(f"options: {len(options)} option sets for {n} prompts")
    return [tuple(o) for o in options]


def decisions(raw: np.ndarray, per: Sequence[tuple[str, ...]]) -> tuple[list[str], np.ndarray]:
    """The chosen option (the highest score; a tie goes to the first) and the margin of each row: with two options the
    first minus the second (Yes − No), with more the best minus the runner-up. ``raw``: [rows, most options], NaN past
    a row's own options. The one rule the score table is made with and its readers check it by."""
    raw = np.asarray(raw, dtype=float)
    if len(per) and len(set(per)) == 1 and len(per[0]) == raw.shape[1]:  # one option set: the same rule, vectorised
        idx = np.nanargmax(raw, axis=1)
        if raw.shape[1] == 2:
            margin = raw[:, 0] - raw[:, 1]
        else:
            top = np.sort(raw, axis=1)
            margin = top[:, -1] - top[:, -2]
        return [per[0][i] for i in idx], margin
    choice, margin = [], np.empty(len(per))
    for r, opts in enumerate(per):
        lp = raw[r, : len(opts)]
        choice.append(opts[int(np.nanargmax(lp))])
        top = np.sort(lp)
        margin[r] = lp[0] - lp[1] if len(opts) == 2 else top[-1] - top[-2]
    return choice, margin


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
