"""The results of a run's analysis as typed values: ``Record`` (one inferential result) and ``summary.json``'s layout.

Every study's analysis makes its records with ``stats.record`` (a ``Record``); ``analysis.write_analysis`` writes
them, with ``schema_version``, through ``summary_json`` (the one place a summary becomes JSON).
``artifacts.read_summary`` is how every reader opens a ``summary.json``: its records as ``Record`` s (``typed``), and
``Summary`` names each top-level field; one made by an older version of the suite (no ``schema_version``, or another
one) is a ``SummaryVersionError`` (``check_version``) that says to run the analysis again.
``nbutils/schemas/summary.schema.json`` is the JSON Schema of the file; ``docs/run-directory.md`` says what each field
means.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, fields
import numpy as np

from .checks import check_kind

SCHEMA_VERSION = 2
# the standard keys every record has, in the order a record lists them
RECORD_KEYS = ("test", "condition", "term", "estimate", "se", "ci_low", "ci_high", "p", "valid", "note")
OPTIONAL_KEYS = ("model", "headline", "hypothesis")  # written only when set
_FIELDS = frozenset(RECORD_KEYS + OPTIONAL_KEYS)  # the keys a record holds as fields (the rest: ``extra``)
# what each of those keys holds in ``summary.json`` (checked as a record is read back): kind, and whether null is allowed
RECORD_KINDS = {"test": ("str", False), "term": ("str", False), "estimate": ("number", True), "se": ("number", True),
                "ci_low": ("number", True), "ci_high": ("number", True), "p": ("number", True),
                "valid": ("bool", False), "note": ("str", False), "condition": ("str", True), "model": ("str", True),
                "headline": ("bool", True), "hypothesis": ("dict", True)}


def number(x) -> float | None:
    """A finite float, or None (NaN, ±inf and None alike)."""
    if x is None:
        return None
    x = float(x)
    return x if np.isfinite(x) else None


def clean(obj):
    """Nested data with numpy scalars made plain and NaN made None, so it is valid JSON (a ``Record`` as itself)."""
    if isinstance(obj, Record):
        return obj
    if isinstance(obj, Mapping):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return None if np.isnan(obj) else float(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


@dataclass(eq=False)
class Record(MutableMapping):
    """One inferential result as ``summary["records"]`` lists it.

    ``test`` names the procedure (``glmm_lrt``, ``cmh``, ``accuracy_vs_chance``…), ``term`` what it is about,
    ``model`` and ``condition`` where it belongs; ``estimate``, ``se``, ``ci_low``, ``ci_high`` and ``p`` are finite
    floats or None; ``valid`` is False when the result must not be read and ``note`` then says why; ``headline``
    marks the tests a run's headline reports; ``hypothesis`` (``stats.claim``) is what the sentence engine needs to
    put it in words. A study's own keys (``df``, ``n``, ``p_holm``, ``models``…) are in ``extra`` and sit beside the
    standard ones in JSON, as flat as the rest. A record also reads as a mapping (``r["test"]``, ``r.get("n")``),
    so code that reads a record does not care whether it came from memory or from ``summary.json``.
    """

    test: str
    term: str
    estimate: float | None = None
    se: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p: float | None = None
    valid: bool = True
    note: str = ""
    condition: str | None = None
    model: str | None = None
    headline: bool | None = None
    hypothesis: dict | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.test, self.term, self.valid, self.note = str(self.test), str(self.term), bool(self.valid), str(self.note)
        for k in ("estimate", "se", "ci_low", "ci_high", "p"):
            setattr(self, k, number(getattr(self, k)))
        self.extra = clean(dict(self.extra))
        if self.hypothesis is not None:
            self.hypothesis = clean(self.hypothesis)

    def to_json(self) -> dict:
        """The record as ``summary.json`` holds it: the standard keys, ``model`` and ``headline`` when set, the
        study's extras, ``hypothesis`` last."""
        out = {k: getattr(self, k) for k in RECORD_KEYS}
        out.update({k: getattr(self, k) for k in ("model", "headline") if getattr(self, k) is not None})
        out.update(self.extra)
        if self.hypothesis is not None:
            out["hypothesis"] = self.hypothesis
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> "Record":
        """A record read back from ``summary.json`` (keys it does not know go to ``extra``)."""
        known = {f.name for f in fields(cls)} - {"extra"}
        for key, (kind, nullable) in RECORD_KINDS.items():
            if key in d:
                check_kind(key, d[key], kind, nullable, "in a summary.json record")
        return cls(**{k: v for k, v in d.items() if k in known},
                   extra={k: v for k, v in d.items() if k not in known})

    # the mapping view: the flat JSON keys
    def _fields(self) -> frozenset[str]:
        return _FIELDS

    def __getitem__(self, key):
        if key in self._fields():
            value = getattr(self, key)
            if value is None and key in OPTIONAL_KEYS:
                raise KeyError(key)
            return value
        return self.extra[key]

    def __setitem__(self, key, value):
        if key in self._fields():
            setattr(self, key, value)
            self.__post_init__()
        else:
            self.extra[key] = clean(value)

    def __delitem__(self, key):
        if key in OPTIONAL_KEYS:
            setattr(self, key, None)
        elif key in self._fields():
            raise KeyError(f"{key} is a standard key of every record")
        else:
            del self.extra[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())


def summary_json(summary: Mapping) -> dict:
    """``summary`` as it is written: ``schema_version`` set, records as JSON objects, numpy values plain."""
    out = {k: v for k, v in summary.items() if k != "records"}
    if "records" in summary:
        out["records"] = [r.to_json() if isinstance(r, Record) else clean(r) for r in summary["records"]]
    out["schema_version"] = SCHEMA_VERSION
    out.setdefault("models", {})
    return clean(out)


class SummaryVersionError(ValueError):
    """A ``summary.json`` this version of the suite cannot read (no ``schema_version``, or another one)."""


def check_version(summary: Mapping, source) -> dict:
    """``summary`` when its ``schema_version`` is this suite's; else a ``SummaryVersionError`` naming ``source``."""
    version = summary.get("schema_version") if isinstance(summary, Mapping) else None
    if version == SCHEMA_VERSION:
        return dict(summary)
    made = "without a schema_version" if version is None else f"with schema_version {version!r}"
    if version is not None and (type(version) is not int or version > SCHEMA_VERSION):
        raise SummaryVersionError(
            f"{source} has schema_version {version!r}, not one this version of the suite reads (it writes the whole "
            f"number {SCHEMA_VERSION}): the file was edited, or made by a newer version of the suite; run the analysis "
            "again (the study's 03_analyze notebook, or `python -m nbutils run` on it) to write it in this layout")
    raise SummaryVersionError(
        f"{source} was made by an older version of the suite ({made}; this version reads schema_version "
        f"{SCHEMA_VERSION}): run the analysis again (the study's 03_analyze notebook, or `python -m nbutils run` "
        "on it) to write it in the current layout")


def typed(summary: dict, source) -> dict:
    """``summary`` (read from ``source``) with its records as ``Record`` s, so that its readers read each field by
    name; a record that is not one of this layout is a ``SummaryVersionError`` naming ``source``."""
    out = []
    for i, r in enumerate(summary.get("records") or []):
        try:
            out.append(Record.from_json(r))
        except (TypeError, ValueError) as err:
            raise SummaryVersionError(f"{source}: record {i} is not a record of schema_version {SCHEMA_VERSION} "
                                      f"({type(err).__name__}: {err}): the file was edited; run the analysis again "
                                      "to write it anew") from None
    return dict(summary, records=out) if "records" in summary else summary


def model_block(summary: Mapping, model) -> dict:
    """The per-model block of ``summary`` (``summary["models"][model]``), empty when it has none."""
    block = (summary.get("models") or {}).get(model) if model is not None else None
    return block if isinstance(block, dict) else {}


def as_record(r: Mapping) -> Record:
    """A record of ``summary.json`` as a ``Record`` (itself when it is one)."""
    return r if isinstance(r, Record) else Record.from_json(r)


@dataclass(frozen=True)
class Summary:
    """A ``summary.json`` (or an analysis's summary in memory) read through its schema
    (``nbutils/schemas/summary.schema.json``): each top-level field as a property with its empty value where the file
    has none, so that a reader names the field, not a raw key. ``records`` are the summary's own record objects (a
    ``Record``, or a mapping of the same keys); ``typed_records`` the same as ``Record`` s, for a reader of a file."""

    data: Mapping

    @property
    def records(self) -> list:
        return list(self.data.get("records") or [])

    @property
    def typed_records(self) -> list[Record]:
        return [as_record(r) for r in self.records]

    @property
    def headline(self) -> list[dict]:
        """The headline entries (``results.entries``), as written."""
        return list(self.data.get("headline") or [])

    @property
    def models(self) -> dict:
        """The per-model blocks, by model."""
        return self.data.get("models") or {}

    def model_block(self, model) -> dict:
        return model_block(self.data, model)

    @property
    def design(self) -> dict:
        return self.data.get("design") or {}

    @property
    def model_order(self) -> list:
        """The models in the order the study names them (``design.model_order``), empty where it names none."""
        return list(self.design.get("model_order") or [])

    @property
    def notes(self) -> list[str]:
        """What the analysis noted (``_notes``)."""
        return list(self.data.get("_notes") or [])

    @property
    def score_files(self) -> dict | None:
        """The sha256 of every score file the analysis could read (``inputs.score_files``); None where not recorded."""
        return (self.data.get("inputs") or {}).get("score_files")

    @property
    def rules(self) -> list[dict]:
        """Quantifier studies: the best-fitting rule per model, condition and concept."""
        return list(self.data.get("rules") or [])

    @property
    def rules_mirror_test(self) -> list[dict]:
        return list(self.data.get("rules_mirror_test") or [])

    @property
    def labels(self) -> dict:
        return self.data.get("labels") or {}

    @property
    def analysed(self) -> str | None:
        return self.data.get("analysed")


# each property of ``Summary`` and the field of the schema it reads
SUMMARY_FIELDS = {"records": "records", "typed_records": "records", "headline": "headline", "models": "models",
                  "design": "design", "model_order": "design", "notes": "_notes", "score_files": "inputs",
                  "labels": "labels", "rules": "rules", "rules_mirror_test": "rules_mirror_test",
                  "analysed": "analysed"}
