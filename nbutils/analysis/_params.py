"""An analysis's parameters as one frozen record: every parameter a field, its default spelled once, its range in the
field's metadata, all of them checked once, when the record is built.

Each study's record (``nbutils/studies/<study>/params.py``) and the cue profile's (``nbutils/analyses/cues/params.py``)
derive from ``AnalysisParams``; ``analysis.run_analysis`` takes the record, and the study's steps read its attributes. The
notebooks (through the study's ``analyze_run``), the sweep (its ``analyze`` block, before anything is written) and
``nbutils run`` build it with the same call, ``from_mapping``. Adding a parameter is adding a field::

    n_boot: int = field(default=N_BOOT, metadata={"min": 1, "help": "bootstrap resamples of the gap's CI"})

Metadata: ``min``/``max`` (an integer's range, or a number's from ``min`` to ``max``), ``between`` (a number strictly
inside), ``choices`` (one of these), ``true`` (what true means, for a boolean), ``help`` (one line for a reader). A
field's annotation says its kind: ``int``, ``float``, ``bool``, ``str``; ``| None`` allows None. This module imports
no torch, scipy or statsmodels (the statistics load those when a test runs), so the sweep checks a sweep file's
``analyze`` block without them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..checks import KIND_WORDS, int_words, is_int, is_number, must_be, number_words
from ..stats import N_BOOT, N_BOOT_MIN


def n_boot_field():
    """The ``n_boot`` field of a study that bootstraps (one default, one range)."""
    return field(default=N_BOOT, metadata={"min": N_BOOT_MIN, "help": "bootstrap resamples"})


def use_r_field():
    """The ``use_r`` field of a study that fits a model in R (``nbutils.analysis``'s ``_run`` says what it means)."""
    return field(default=True, metadata={"true": "R's fit when R has its packages",
                                         "help": "fit with R's packages when R has them, else the Python stand-in"})


def _kind(f: dataclasses.Field) -> tuple[str, bool]:
    """(kind, None allowed) from a field's annotation, e.g. ``int | None`` → ("int", True)."""
    parts = [p.strip() for p in str(f.type).split("|")]
    return next(p for p in parts if p != "None"), "None" in parts


def allowed(f: dataclasses.Field) -> str:
    """What a field takes, in words (the end of its error message)."""
    kind, optional = _kind(f)
    m = f.metadata
    if "choices" in m:
        text = f"one of {list(m['choices'])}"
    elif kind == "bool":
        text = KIND_WORDS["bool"] + (f" (true: {m['true']})" if "true" in m else "")
    elif kind == "int":
        text = int_words(m.get("min"), m.get("max"))
    elif kind == "float":
        text = (number_words(*m["between"], strict=True) if "between" in m
                else number_words(m.get("min"), m.get("max")))
    else:
        text = KIND_WORDS["str"]
    return text + (" or null" if optional and kind != "str" else "")


def _ok(f: dataclasses.Field, v) -> bool:
    kind, optional = _kind(f)
    m = f.metadata
    if v is None:
        return optional
    if "choices" in m:
        return isinstance(v, str) and v in m["choices"]
    if kind == "bool":
        return isinstance(v, bool)
    if isinstance(v, bool):
        return False
    if kind == "int":
        return is_int(v, m.get("min"), m.get("max"))
    if kind == "float":
        return is_number(v, *m.get("between", (None, None)), strict=True) and is_number(v, m.get("min"), m.get("max"))
    return isinstance(v, str)


@dataclass(frozen=True)
class AnalysisParams:
    """What every analysis of a run takes: ``seed`` (its random draws) and ``include_limited`` (analyse the score files
    of quick-look runs made with ``limit`` too; never mixed into full runs unless asked)."""

    seed: int = field(default=0, metadata={"min": 0, "help": "seed of the analysis's random draws"})
    include_limited: bool = field(default=False, metadata={
        "true": "the limited runs' score files are analysed too", "help": "analyse runs made with `limit` too"})

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not _ok(f, v):
                raise must_be(f.name, allowed(f), v)
            kind, _ = _kind(f)
            if kind == "str" and v == "" and _kind(f)[1]:
                object.__setattr__(self, f.name, None)  # a notebook's "" (its cell cannot say None for a text)
            elif kind == "int" and v is not None and type(v) is not int:
                object.__setattr__(self, f.name, int(v))  # a numpy integer, as a plain int
            elif kind == "float" and v is not None and type(v) is not float:
                object.__setattr__(self, f.name, float(v))

    @classmethod
    def names(cls) -> list[str]:
        """The parameters this record accepts, in the order they are declared."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None, where: str = ""):
        """The record from a mapping of parameters (a sweep file's ``analyze`` block, a notebook's keywords): an
        unknown name is an error naming it and the accepted ones; a bad value names the parameter, the value and what
        is allowed, prefixed with ``where`` (the sweep file and its block) when given."""
        values = dict(values or {})
        unknown = sorted(set(values) - set(cls.names()))
        try:
            if unknown:
                raise ValueError(f"unknown parameter(s) {unknown}; accepted: {sorted(cls.names())}")
            return cls(**values)
        except ValueError as err:
            if not where:
                raise
            name, _, rest = str(err).partition(": ")
            if unknown or name not in cls.names():
                raise ValueError(f"{where}: {err}") from None
            raise ValueError(f"{name}: {where}: {rest}") from None

    @classmethod
    def of(cls, params=None, options: Mapping[str, Any] | None = None):
        """What an ``analyze_run(run_dir, params=None, **options)`` runs with: the record given, else the record built
        from the keywords (``from_mapping``); both at once is an error."""
        if params is None:
            return cls.from_mapping(options)
        if options:
            raise TypeError(f"params: give a {cls.__name__} or keywords ({sorted(options)}), not both")
        if not isinstance(params, cls):
            raise TypeError(f"params: must be a {cls.__name__}, got {type(params).__name__}")
        return params

    def as_dict(self) -> dict:
        """The parameters by name (what the analysis ran with)."""
        return dataclasses.asdict(self)

    def replace(self, **changes):
        """A copy with ``changes``, checked as a new record is."""
        return dataclasses.replace(self, **changes)
