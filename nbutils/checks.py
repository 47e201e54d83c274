"""The one vocabulary of the records' fields (the scoring settings, the score sidecar, the analysis parameters, a
notebook's parameters): what an integer field takes, its check, and one phrasing of the error,
``{name}: must be an integer ≥ 1, got 0``."""
from __future__ import annotations

import numbers


# what a field of each kind takes, in words (the records' kinds: a sidecar's ``int|str`` is "an integer or a text")
KIND_WORDS = {"int": "an integer", "float": "a number", "number": "a number", "str": "a text", "bool": "true or false",
              "list": "a list", "dict": "a mapping"}


def kind_words(kind: str, nullable: bool = False) -> str:
    """What a field of ``kind`` (``int``, ``number``, ``int|str``, …) takes, in words, ``null or`` first if it may be
    null."""
    return ("null or " if nullable else "") + " or ".join(KIND_WORDS[k] for k in kind.split("|"))


def is_int(value, lo: int | None = None, hi: int | None = None) -> bool:
    """Whether ``value`` is an integer (never a bool) from ``lo`` (to ``hi``; either bound may be None)."""
    return (not isinstance(value, bool) and isinstance(value, numbers.Integral)
            and (lo is None or value >= lo) and (hi is None or value <= hi))


def int_words(lo: int | None = None, hi: int | None = None) -> str:
    """What an integer field takes, in words: ``an integer``, ``an integer ≥ 1``, ``an integer from 0 to 9``."""
    if lo is None:
        return KIND_WORDS["int"]
    return f"an integer ≥ {lo}" if hi is None else f"an integer from {lo} to {hi}"


def must_be(name: str, allowed: str, value) -> ValueError:
    """The one phrasing of a field's error: the field, what it takes, what it got."""
    return ValueError(f"{name}: must be {allowed}, got {value!r}")


def check_int(name: str, value, lo: int, hi: int | None = None) -> int:
    """``value`` as an int if it is an integer (not a bool) from ``lo`` (to ``hi``); else a ValueError naming the
    field (below ``lo``: what the least value is; above ``hi``: the whole range)."""
    if not is_int(value, lo):
        raise must_be(name, int_words(lo), value)
    if not is_int(value, lo, hi):
        raise must_be(name, int_words(lo, hi), value)
    return int(value)
