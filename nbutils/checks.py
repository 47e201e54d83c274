"""The one vocabulary of the records' fields (the scoring settings, the score sidecar, the analysis parameters, a
notebook's parameters): what an integer or a number field takes, its check, and one phrasing of the error,
``{name}: must be an integer ≥ 1, got 0``."""
from __future__ import annotations

import numbers
from collections.abc import Mapping


# what a field of each kind takes, in words (the records' kinds: a sidecar's ``int|str`` is "an integer or a text")
KIND_WORDS = {"int": "an integer", "float": "a number", "number": "a number", "str": "a text", "bool": "true or false",
              "list": "a list", "dict": "a mapping"}


def kind_words(kind: str, nullable: bool = False) -> str:
    """What a field of ``kind`` (``int``, ``number``, ``int|str``, …) takes, in words, ``null or`` first if it may be
    null."""
    return ("null or " if nullable else "") + " or ".join(KIND_WORDS[k] for k in kind.split("|"))


def is_kind(kind: str, value) -> bool:
    """Whether ``value`` is of ``kind`` (``str``, ``int``, ``number``, ``bool``, ``list``, ``dict``, or two joined by
    ``|``); a bool is only a ``bool``."""
    if isinstance(value, bool):
        return kind == "bool"
    return any({"str": isinstance(value, str), "int": is_int(value), "number": isinstance(value, numbers.Real),
                "float": isinstance(value, numbers.Real), "bool": False, "list": isinstance(value, (list, tuple)),
                "dict": isinstance(value, Mapping)}[k] for k in kind.split("|"))


def check_kind(name: str, value, kind: str, nullable: bool = False, where: str = "") -> None:
    """A ValueError in the one phrasing unless ``value`` is of ``kind`` (or None where ``nullable``); ``where`` names
    the record (``in a score sidecar``)."""
    if (value is None and nullable) or (value is not None and is_kind(kind, value)):
        return
    raise must_be(name, kind_words(kind, nullable) + (f" {where}" if where else ""), value)


def is_int(value, lo: int | None = None, hi: int | None = None) -> bool:
    """Whether ``value`` is an integer (never a bool) from ``lo`` (to ``hi``; either bound may be None)."""
    return (not isinstance(value, bool) and isinstance(value, numbers.Integral)
            and (lo is None or value >= lo) and (hi is None or value <= hi))


def int_words(lo: int | None = None, hi: int | None = None) -> str:
    """What an integer field takes, in words: ``an integer``, ``an integer ≥ 1``, ``an integer from 0 to 9``."""
    if lo is None:
        return KIND_WORDS["int"]
    return f"an integer ≥ {lo}" if hi is None else f"an integer from {lo} to {hi}"


def is_number(value, lo: float | None = None, hi: float | None = None, strict: bool = False) -> bool:
    """Whether ``value`` is a real number (never a bool or NaN) from ``lo`` to ``hi`` (either may be None; ``strict``:
    strictly between them)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value:
        return False
    if strict:
        return (lo is None or value > lo) and (hi is None or value < hi)
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def number_words(lo: float | None = None, hi: float | None = None, strict: bool = False) -> str:
    """What a number field takes, in words: ``a number``, ``a number ≥ 0``, ``a number from 0 to 1``, ``a number
    strictly between 0 and 1``."""
    if lo is None and hi is None:
        return KIND_WORDS["float"]
    if lo is None or hi is None:
        return f"a number {'>' if strict else '≥'} {lo}" if hi is None else f"a number {'<' if strict else '≤'} {hi}"
    return f"a number strictly between {lo} and {hi}" if strict else f"a number from {lo} to {hi}"


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
