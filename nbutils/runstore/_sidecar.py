"""A score file's sidecar as a typed, versioned record (no torch here): ``ScoreSidecar``, beside ``ScoreSettings``.

``scores/{slug}.json`` says how its score file was made: the scoring's identity (``score_settings.ScoreIdentity``, what
must match for two score files to be the same scoring), what loading and the host decided, the scorer's and the
calibration's findings, timing, and the file's content fields (sha256, rows, ids). The run loop gathers these as it
goes; ``ScoreSidecar.of`` makes them a record (a key it does not know, or a value of the wrong kind, is an error naming
it) and ``write`` is the one place a sidecar becomes a file, flat, with ``schema_version``. ``read`` opens one: a
sidecar written before the layout was versioned (no ``schema_version``) is read as the same flat layout, with the keys
it lacks at their meaning then, or refused with a message naming what to score again; so is one of another version.
``nbutils/schemas/score_sidecar.schema.json`` is the JSON Schema of the file (``json_schema`` makes it).

A record reads as a mapping of the flat keys (``meta["model"]``, ``meta.get("accuracy")``), so a reader does not care
whether it came from the run loop or from the file.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import artifacts, checks
from ..score_settings import ScoreIdentity

SCHEMA_VERSION = 1


class _Unset:
    """The value of a field the scoring did not record (left out of the file)."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET = _Unset()


class SidecarError(ValueError):
    """A score sidecar this version of the suite cannot read, with what to score again."""


# what each kind of value is: JSON Schema type(s) and the Python check
KINDS = {"str": ("string",), "int": ("integer",), "number": ("number",), "bool": ("boolean",), "list": ("array",),
         "dict": ("object",), "int|str": ("integer", "string"), "number|str": ("number", "string")}


def _f(kind: str, nullable: bool = True, doc: str = ""):
    """A field of the record: its kind, whether it may be null, what it means; unset (left out) by default."""
    return field(default=UNSET, metadata={"kind": kind, "nullable": nullable, "doc": doc})


IDENTITY_KINDS = {"model": ("str", False), "adapter": ("str", True), "adapter_sha256": ("str", True),
                  "adapter_scale": ("number", True), "revision": ("str", True), "quantization": ("str", True),
                  "dtype": ("str", True), "dataset_file": ("str", False), "dataset_sha256": ("str", False),
                  "scorer": ("str", False), "used_chat_template": ("bool", True), "options_sha256": ("str", True),
                  "limit": ("int", True), "limit_seed": ("int", False), "rescore_margin": ("number|str", True),
                  "num_shards": ("int", False), "shard_index": ("int", False), "masked": ("bool", False),
                  "pll_variant": ("str", True)}


@dataclass(frozen=True)
class ScoreSidecar(Mapping):
    """Everything a score file's sidecar records; ``identity`` is the scoring's identity, the rest describes it.
    Unset fields are left out of the file (an adapter's fields without an adapter, the calibration without one)."""

    identity: ScoreIdentity
    # the settings as asked for and as this host decided them (``engine.settings.EngineSettings.sidecar``)
    device: str = _f("str", False, "the device scored on")
    dtype_requested: str = _f("str", False)
    dtype_reason: str = _f("str", doc="why this dtype")
    cpu_native_bf16: bool = _f("bool")
    quantization_requested: str = _f("str", False)
    quantization_reason: str = _f("str")
    rescore_margin_requested: float = _f("number|str")
    rescore_margin_note: str = _f("str")
    settings: dict = _f("dict", doc="every scoring setting as asked for, and under resolved as this host decided it")
    # the loaded model
    model_file: str = _f("str", doc="an embedded model's GGUF file")
    model_file_sha256: str = _f("str")
    dequantized_cache: str = _f("str")
    source_precision: str = _f("str")
    adapter_base_model: str = _f("str")
    adapter_rank: int = _f("int")
    adapter_alpha: float = _f("number")
    adapter_layers: int = _f("int")
    adapter_merged: bool = _f("bool")
    quantization_details: dict = _f("dict", doc="what bitsandbytes loaded")
    token_budget: int = _f("int")
    load_seconds: float = _f("number")
    threads: int = _f("int")
    n_parameters: int = _f("int")
    chat_template_available: bool = _f("bool")
    # the dataset, the run and its batches
    id_column: str = _f("str", False)
    limit_by: list = _f("list")
    limit_unit: str = _f("str")
    limit_strata: str = _f("str")
    batch_size: int = _f("int|str", False)
    batch_rows: int = _f("int")
    label: str = _f("str", doc="the name results print for this model")
    resumed_rows: int = _f("int")
    # what the scorer decided
    sentence_scorer: str = _f("str")
    system_in_user_turn: bool = _f("bool")
    single_forward_pass: bool = _f("bool")
    answer_strings: list = _f("list")
    answer_token_ids: list = _f("list")
    float32_tail_tokens: int = _f("int")
    float32_tail_group_rows: int = _f("int")
    # the calibration of the re-scoring margin (``engine.calibration.Calibration``)
    calibration_size: int = _f("int")
    calibration_error_max: float = _f("number")
    calibration_error_p50: float = _f("number")
    calibration_non_finite: int = _f("int")
    calibration_safety_factor: float = _f("number")
    calibration_seconds: float = _f("number")
    calibration_rule: str = _f("str")
    rescore_margin_used: float = _f("number")
    # progress, timing and results
    complete: bool = _f("bool", False, "false for a checkpoint")
    n_done: int = _f("int", doc="a checkpoint's rows scored so far")
    n_planned: int = _f("int")
    elapsed_seconds: float = _f("number")
    rows_per_second: float = _f("number")
    tokens_per_second: float = _f("number")
    rescored_ids: list = _f("list", doc="the rows re-scored in float32")
    accuracy: float = _f("number")
    merged_from: list = _f("list", doc="the shard sidecars merged into this file")
    imported_from: dict = _f("dict", doc="scores imported from another tool's log: the tool, its version, the log "
                                         "file and its sha256, the task")
    created: str = _f("str")
    versions: dict = _f("dict")
    # the score file's content (``runstore.write_scores``)
    n_rows: int = _f("int", False)
    scores_sha256: str = _f("str", False)
    ids_sha256: str = _f("str", False)

    def __post_init__(self):
        for f in dataclasses.fields(self)[1:]:
            _check(f.name, getattr(self, f.name), f.metadata["kind"], f.metadata["nullable"])
        for k, (kind, nullable) in IDENTITY_KINDS.items():
            _check(k, getattr(self.identity, k), kind, nullable)
        for name in REQUIRED_FIELDS:
            if getattr(self, name) is UNSET:
                raise ValueError(f"{name}: every score sidecar records it ({REQUIRED_FIELDS[name]})")

    @classmethod
    def of(cls, meta: Mapping) -> "ScoreSidecar":
        """The record of a flat mapping of sidecar keys (what the run loop gathered, or a sidecar of this layout); a
        key that is no field is an error naming it."""
        meta = dict(meta)
        version = meta.pop("schema_version", SCHEMA_VERSION)
        if type(version) is not int or version != SCHEMA_VERSION:
            raise ValueError(f"schema_version: this suite writes score sidecars of schema_version {SCHEMA_VERSION}, "
                             f"got {version!r}")
        unknown = sorted(set(meta) - set(KEYS))
        if unknown:
            raise ValueError(f"{unknown[0]}: not a key of a score sidecar (ScoreSidecar); the keys are {sorted(KEYS)}")
        missing = [k for k in ("model", "dataset_file", "dataset_sha256", "scorer") if k not in meta]
        if missing:
            raise ValueError(f"{missing[0]}: every score sidecar records it (the scoring's identity)")
        ident = ScoreIdentity(**{k: meta.pop(k) for k in IDENTITY_KINDS if k in meta})
        return cls(ident, **meta)

    def replace(self, **changes) -> "ScoreSidecar":
        """This record with other values of flat keys (identity keys included), checked again."""
        return ScoreSidecar.of(dict(self, **changes)) if changes else self

    def to_json(self) -> dict:
        """The flat JSON object the file holds: ``schema_version``, the identity's keys and every set field."""
        out = {"schema_version": SCHEMA_VERSION, **dataclasses.asdict(self.identity)}
        out.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self)[1:]
                    if getattr(self, f.name) is not UNSET})
        return out

    def describe(self) -> str:
        """Every recorded key and its value, the identity's first: what the score notebook prints of a run."""
        def line(k: str, v) -> str:
            said = json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else repr(v)
            return f"  {k}: {said}"

        flat = self.to_json()
        return "\n".join([f"score sidecar (schema_version {flat.pop('schema_version')})",
                          "identity (what must match for two score files to be the same scoring):",
                          *(line(k, flat.pop(k)) for k in IDENTITY_KINDS), "how it was made:",
                          *(line(k, v) for k, v in flat.items())])

    def _repr_pretty_(self, p, cycle) -> None:
        """A notebook shows a sidecar as ``describe`` says it."""
        p.text(self.describe())

    # the mapping view: the flat keys of the file
    def __getitem__(self, key):
        if key == "schema_version":
            return SCHEMA_VERSION
        if key in IDENTITY_KINDS:
            return getattr(self.identity, key)
        value = getattr(self, key, UNSET) if key in KEYS else UNSET
        if value is UNSET:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_json())

    def __len__(self) -> int:
        return len(self.to_json())


REQUIRED_FIELDS = {"id_column": "the dataset's id column", "complete": "whether its score file is finished"}
KEYS = (*IDENTITY_KINDS, *(f.name for f in dataclasses.fields(ScoreSidecar)[1:]))
# what a sidecar written before the layout was versioned means by a key it lacks (the suite's behaviour then)
OLDER_DEFAULTS = {"adapter": None, "adapter_scale": None, "adapter_sha256": None, "revision": None,
                  "quantization": None, "dtype": None, "used_chat_template": None, "options_sha256": None,
                  "limit": None, "limit_seed": 0, "rescore_margin": None, "num_shards": 1, "shard_index": 0,
                  "masked": False, "pll_variant": None}
NEEDED = ("model", "dataset_file", "dataset_sha256", "scorer", "id_column", "complete")  # no older meaning


def _check(name: str, value, kind: str, nullable: bool) -> None:
    if value is not UNSET:
        checks.check_kind(name, value, kind, nullable, "in a score sidecar")


def write(sidecar: ScoreSidecar | Mapping, path: str | Path) -> ScoreSidecar:
    """Write a score sidecar (the one place one becomes a file), atomically; returns the record written."""
    record = sidecar if isinstance(sidecar, ScoreSidecar) else ScoreSidecar.of(sidecar)
    artifacts.write_json(record.to_json(), path)
    return record


def read(path: str | Path) -> ScoreSidecar:
    """The sidecar at ``path`` as a record. One written before the layout was versioned is read with the keys it lacks
    at their meaning then (``OLDER_DEFAULTS``; keys no longer recorded are dropped); one that lacks a key with no such
    meaning, records a value of the wrong kind, or has another ``schema_version`` is a ``SidecarError`` saying to
    score that model again."""
    path = Path(path)
    meta = artifacts.read_json(path)
    if not isinstance(meta, dict):
        raise SidecarError(f"{path}: not a score sidecar (a JSON object); {_again(path)}")
    version = meta.get("schema_version")
    if version is None:
        missing = [k for k in NEEDED if k not in meta]
        if missing:
            raise SidecarError(f"{path} was written by an older version of the suite and lacks {', '.join(missing)} "
                               f"(score sidecars now have schema_version {SCHEMA_VERSION}); {_again(path)}")
        meta = {**OLDER_DEFAULTS, **{k: v for k, v in meta.items() if k in KEYS}}
    elif type(version) is not int or version != SCHEMA_VERSION:
        raise SidecarError(f"{path} has schema_version {version!r}; this version of the suite reads score sidecars of "
                           f"schema_version {SCHEMA_VERSION} (or older ones without it): the file was edited or made "
                           f"by a newer version of the suite; {_again(path)}")
    try:
        return ScoreSidecar.of(meta)
    except (ValueError, TypeError) as err:
        raise SidecarError(f"{path}: {err}; {_again(path)}") from None


def read_meta(path: str | Path) -> dict:
    """The sidecar at ``path`` as its flat keys (``read``, then ``to_json``): what the readers of a run's files get."""
    return read(path).to_json()


def _again(path: Path) -> str:
    stem = path.name.removesuffix(".json")
    return (f"score that model again into this run (the score notebook with the model of {stem}, or `python -m "
            "nbutils sweep` on the run's sweep), or move the file away")


def json_schema() -> dict:
    """The JSON Schema of a score sidecar (``nbutils/schemas/score_sidecar.schema.json`` is this, written out)."""
    def prop(kind: str, nullable: bool, doc: str = "") -> dict:
        types = list(KINDS[kind]) + (["null"] if nullable else [])
        return {"type": types[0] if len(types) == 1 else types, **({"description": doc} if doc else {})}

    props = {"schema_version": {"const": SCHEMA_VERSION, "description": "the layout of this file"}}
    props.update({k: prop(kind, nullable, "the scoring's identity") for k, (kind, nullable) in IDENTITY_KINDS.items()})
    props.update({f.name: prop(f.metadata["kind"], f.metadata["nullable"], f.metadata["doc"])
                  for f in dataclasses.fields(ScoreSidecar)[1:]})
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "the sidecar of a score file (scores/{slug}.json)",
            "description": "How a score file was made: the scoring's identity, what loading and the host decided, the "
                           "scorer's and the calibration's findings, timing and the file's content fields. Written "
                           "by nbutils.runstore.write_sidecar; docs/run-directory.md says what it holds.",
            "type": "object", "required": ["schema_version", *IDENTITY_KINDS, *REQUIRED_FIELDS],
            "additionalProperties": False, "properties": props}
