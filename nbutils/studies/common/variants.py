"""The robustness multiverse's catalogue of prompt variants (``data/variants.yaml``): sentence templates, phrases for
the hidden concept and answer-word pairs, and their balanced, seeded assignment to a dataset's prompts. Shared by the
quantifier code (the generator writes them, the rule analysis reads the examples back)."""
from __future__ import annotations

import string
import zlib
from functools import lru_cache
from importlib import resources

import numpy as np

AXES = ("template", "phrase", "answer_words")  # the dataset columns, one per axis
PARAMETERS = {"template": "templates", "phrase": "phrases", "answer_words": "answer_words"}  # axis → parameter
CATALOGUE_KEYS = {"template": "templates", "phrase": "phrases", "answer_words": "answer_words"}  # axis → YAML key
DEFAULTS = {"template": "paper", "phrase": "desired_quantity", "answer_words": "yes_no"}  # the papers' design
FIELDS = {"T", "N", "obj", "phrase"}  # what every template must use


@lru_cache(maxsize=1)
def catalogue() -> dict:
    """The shipped catalogue: ``{"templates": {name: text}, "phrases": {name: text}, "answer_words": {name: (yes, no)}}``."""
    import yaml

    raw = yaml.safe_load(resources.files(__package__).joinpath("data/variants.yaml").read_text())
    out = {"templates": {k: v["text"] for k, v in raw["templates"].items()},
           "phrases": {k: v["text"] for k, v in raw["phrases"].items()},
           "answer_words": {k: tuple(v["words"]) for k, v in raw["answer_words"].items()}}
    for name, text in out["templates"].items():  # a broken entry is the package's bug: fail loudly at first use
        used = {f for _, f, _, _ in string.Formatter().parse(text) if f}
        if used != FIELDS:
            raise ValueError(f"variants.yaml: template {name!r} must use exactly {sorted(FIELDS)}, uses {sorted(used)}")
    for name, words in out["answer_words"].items():
        if len(words) != 2 or len(set(words)) != 2:
            raise ValueError(f"variants.yaml: answer_words {name!r} must be two different words, got {words!r}")
    return out


def names(axis: str) -> list[str]:
    """The catalogue's variant names on ``axis``, in catalogue order."""
    return list(catalogue()[CATALOGUE_KEYS[axis]])


def resolve(axis: str, value) -> list[str]:
    """A generate parameter (a list of catalogue names, or ``"all"``) as the list of names; a clear ValueError else."""
    param, allowed = PARAMETERS[axis], names(axis)
    if value == "all":
        return allowed
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{param}: must be 'all' or a non-empty list of names from {allowed}, got {value!r}")
    bad = [v for v in value if v not in allowed]
    if bad:
        raise ValueError(f"{param}: unknown {axis} variant(s) {bad}; allowed: {allowed} (or 'all')")
    if len(set(value)) != len(value):
        raise ValueError(f"{param}: duplicates are not allowed, got {list(value)}")
    return list(value)


def template(name: str) -> str:
    """The sentence template called ``name``."""
    return catalogue()["templates"][name]


def phrase(name: str) -> str:
    """The hidden concept's phrase called ``name``."""
    return catalogue()["phrases"][name]


def words(name: str) -> tuple[str, str]:
    """The (affirmative, negative) answer words called ``name``; the affirmative one is scored first."""
    return catalogue()["answer_words"][name]


def wording(axis: str, name) -> str:
    """What a variant says, for a table: a template's text, a phrase in quotes, an answer-word pair as "Yes / No"
    (a name the catalogue lacks is returned as it is)."""
    entries = catalogue()[CATALOGUE_KEYS[axis]] if axis in CATALOGUE_KEYS else {}
    if name not in entries:
        return str(name)
    if axis == "answer_words":
        return " / ".join(entries[name])
    return f"“{entries[name]}”" if axis == "phrase" else entries[name]


def assign(n: int, labels, variants: list[str], seed: int, stream: str) -> list[str]:
    """One variant for each of ``n`` prompt pairs, balanced (counts differ by at most one overall and within each
    label) and seeded by ``seed`` and ``stream``; a single variant draws nothing from any random stream."""
    if len(variants) == 1:
        return [variants[0]] * n
    rng = np.random.default_rng([seed, zlib.crc32(stream.encode())])
    labels = np.asarray(labels, dtype=bool)
    # pairs sorted by label, shuffled within it, then dealt the variants in a shuffled cycle: balanced per label too
    order = np.lexsort((rng.random(n), labels))
    cycle = rng.permutation(len(variants))
    out = np.empty(n, dtype=object)
    out[order] = [variants[cycle[i % len(variants)]] for i in range(n)]
    return out.tolist()
