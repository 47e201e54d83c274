"""Quantifier concepts ("more than 1/2", "less than 20"), the example space they split, and the sentence template
("There are 12 shells. Alice has 5 of the 12 shells. Does Alice have …?") with the nouns it is filled with."""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from importlib import resources

PHRASE = "the desired quantity"  # the hidden concept, as the papers write it
TEMPLATE = "There are {T} {obj}. Alice has {N} of the {T} {obj}. Does Alice have {phrase} of the {obj}?"
MIN_TOTAL = 5  # smallest number of objects in a scenario (Wang, concept learning dataset paper, footnote 2)
MAX_TOTAL = 100  # largest number of objects in a scenario

_CONCEPT_RE = re.compile(r"^\s*(more|less)\s+than\s+(\d+)(?:\s*/\s*(\d+))?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Concept:
    """A parsed quantifier concept; ``threshold`` keeps the string as written ("3/10")."""

    quantifier: str  # "more_than" | "less_than"
    threshold: str  # as written, e.g. "3/10" or "20"
    value: Fraction  # exact threshold value

    @property
    def family(self) -> str:
        """``proportional`` for fractions, ``cardinal`` for whole numbers."""
        return "proportional" if "/" in self.threshold else "cardinal"

    @property
    def monotonicity(self) -> str:
        """"more than" is upward monotone, "less than" downward."""
        return "upward" if self.quantifier == "more_than" else "downward"

    @property
    def name(self) -> str:
        """Canonical spelling, e.g. ``more than 1/2``."""
        return f"{self.quantifier.replace('_', ' ')} {self.threshold}"

    @property
    def phrase(self) -> str:
        """The concept in plain words, as it replaces "the desired quantity"."""
        return self.name

    def holds(self, total: int, count: int) -> bool:
        """True iff having ``count`` of ``total`` objects satisfies the concept (exact arithmetic)."""
        ref = self.value * total if self.family == "proportional" else self.value
        return count > ref if self.quantifier == "more_than" else count < ref


def parse_concept(text: str, parameter: str = "concepts") -> Concept:
    """Parse "more than 1/2" / "less than 20"; raise ValueError naming ``parameter`` otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"{parameter}: each concept must be a string like 'more than 1/2', got {text!r}")
    m = _CONCEPT_RE.match(text)
    if not m:
        raise ValueError(
            f"{parameter}: cannot parse concept {text!r}; allowed forms are 'more than P/Q' or "
            "'less than P/Q' (a proportion strictly between 0 and 1) and 'more than N' or 'less than N' "
            "(a cardinal number)"
        )
    quant = "more_than" if m.group(1).lower() == "more" else "less_than"
    num, den = int(m.group(2)), m.group(3)
    if den is not None:
        den = int(den)
        if den == 0 or not (0 < Fraction(num, den) < 1):
            raise ValueError(f"{parameter}: proportion in {text!r} must lie strictly between 0 and 1")
        concept = Concept(quant, f"{num}/{den}", Fraction(num, den))
    else:
        concept = Concept(quant, str(num), Fraction(num))
    pos, neg = example_space(concept)
    if not pos or not neg:
        raise ValueError(
            f"{parameter}: concept {text!r} leaves {len(pos)} positive and {len(neg)} negative examples "
            f"among scenarios with {MIN_TOTAL}..{MAX_TOTAL} objects; both must be non-empty"
        )
    return concept


@lru_cache(maxsize=None)
def example_space(concept: Concept) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
    """All (total, count) with MIN_TOTAL ≤ total ≤ MAX_TOTAL, 0 ≤ count ≤ total, split into (positives, negatives)."""
    pos, neg = [], []
    for total in range(MIN_TOTAL, MAX_TOTAL + 1):
        for count in range(total + 1):
            (pos if concept.holds(total, count) else neg).append((total, count))
    return tuple(pos), tuple(neg)


@lru_cache(maxsize=1)
def nouns() -> tuple[str, ...]:
    """The 100 plural nouns shipped with the package (see scripts/build_nouns.py for how they were chosen)."""
    text = resources.files(__package__).joinpath("data/nouns.tsv").read_text()
    rows = [line.split("\t") for line in text.strip().splitlines()[1:]]
    return tuple(r[1] for r in rows)


def render_line(total: int, count: int, noun: str, phrase: str, answer: bool | None, template: str = TEMPLATE,
                words: tuple[str, str] = ("Yes", "No")) -> str:
    """One example line of ``template`` (the papers' by default) labeled with ``words`` (affirmative, negative);
    ``answer=None`` gives the unanswered query."""
    line = template.format(T=total, N=count, obj=noun, phrase=phrase)
    return line if answer is None else f"{line} {words[0] if answer else words[1]}."
