"""Prompt datasets for in-context concept learning of quantifiers (Wang's concept-learning papers)."""
from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from ... import artifacts
from ..common.quantifiers import PHRASE, Concept, example_space, nouns, parse_concept, render_line

CONDITIONS = ("concept_learning", "explicit")
COLUMNS = [
    "prompt_id", "pair_id", "concept", "family", "quantifier", "threshold", "monotonicity",
    "condition", "n_examples", "text", "label", "query_total", "query_count", "query_noun",
    "query_distance", "seed",
]


MAX_ROWS = 2_000_000  # prompts in one dataset: ~3 kB of text each, so ~6 GB in memory at the limit


def _check_int(name: str, value, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}: must be an integer ≥ {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name}: must be an integer from {minimum} to {maximum}, got {value!r}")
    return int(value)


def validate_parameters(concepts, conditions, prompts_per_concept, n_examples, seed) -> list[Concept]:
    """Check every generation parameter; return the parsed concepts or raise one clear ValueError."""
    if isinstance(concepts, str) or not concepts:
        raise ValueError(f"concepts: must be a non-empty list of strings like 'more than 1/2', got {concepts!r}")
    parsed = [parse_concept(c) for c in concepts]
    names = [c.name for c in parsed]
    if len(set(names)) != len(names):
        raise ValueError(f"concepts: duplicates are not allowed, got {names}")
    by_value: dict = {}
    for c in parsed:  # concepts are compared by value: "more than 2/4" is "more than 1/2"
        key = (c.quantifier, c.family, c.value)
        if key in by_value:
            raise ValueError(f"concepts: {by_value[key].name!r} and {c.name!r} are the same concept (threshold "
                             f"{c.value}); give it once")
        by_value[key] = c
    spelled: dict = {}
    for c in parsed:  # an upward and a downward concept are paired by their threshold, so it must read the same
        other = spelled.setdefault((c.family, c.value), c)
        if other.threshold != c.threshold:
            raise ValueError(f"concepts: {other.name!r} and {c.name!r} write one threshold two ways "
                             f"({other.threshold!r}, {c.threshold!r}); write it one way, or their gap cannot be paired")
    if isinstance(conditions, str) or not conditions or any(c not in CONDITIONS for c in conditions):
        raise ValueError(f"conditions: must be a non-empty list drawn from {list(CONDITIONS)}, got {conditions!r}")
    if len(set(conditions)) != len(conditions):
        raise ValueError(f"conditions: duplicates are not allowed, got {conditions!r}")
    ppc = _check_int("prompts_per_concept", prompts_per_concept, 2)
    rows = ppc * len(parsed) * len(conditions)
    if rows > MAX_ROWS:
        raise ValueError(f"prompts_per_concept: {ppc} gives {rows:,} prompts ({len(parsed)} concepts × {len(conditions)} "
                         f"conditions), about {rows * 3e3 / 1e9:,.1f} GB of text before scoring; at most {MAX_ROWS:,} "
                         "prompts per dataset (the paper design has 34,000)")
    if ppc % 2:
        raise ValueError(f"prompts_per_concept: must be even (half the queries true, half false), got {ppc}")
    n = _check_int("n_examples", n_examples, 2)
    if n % 2:
        raise ValueError(f"n_examples: must be even (half positive, half negative examples), got {n}")
    _check_int("seed", seed, 0, artifacts.SEED_MAX)
    for c in parsed:
        pos, neg = example_space(c)
        need = n // 2 + 1  # n/2 labeled examples plus one unseen query of the same label
        if min(len(pos), len(neg)) < 3:
            raise ValueError(
                f"concepts: {c.name!r} has {len(pos)} positive and {len(neg)} negative scenarios with "
                f"5 ≤ total ≤ 100; it needs at least 3 of each (2 examples and a query); choose another threshold"
            )
        if len(pos) < need or len(neg) < need:
            raise ValueError(
                f"n_examples: {n} needs at least {need} positive and {need} negative scenarios for "
                f"{c.name!r}, which has {len(pos)} and {len(neg)}; choose n_examples ≤ "
                f"{2 * (min(len(pos), len(neg)) - 1)}"
            )
    return parsed


def _slug(concept: Concept) -> str:
    return concept.name.replace(" ", "_").replace("/", "-")


def _concept_rows(concept: Concept, conditions, ppc: int, n: int, seed: int) -> list[dict]:
    """All prompts of one concept; its own RNG stream so adding concepts never changes the others."""
    rng = np.random.default_rng([seed, zlib.crc32(concept.name.encode())])
    pos, neg = (np.array(s) for s in example_space(concept))
    vocab = nouns()
    rows = []
    for i in range(ppc):
        label = i % 2 == 0  # alternate, so exactly half of the queries are true
        pi = rng.choice(len(pos), n // 2 + (1 if label else 0), replace=False)
        ni = rng.choice(len(neg), n // 2 + (0 if label else 1), replace=False)
        if label:
            query, pi = pos[pi[-1]], pi[:-1]
        else:
            query, ni = neg[ni[-1]], ni[:-1]
        examples = [(*pos[j], True) for j in pi] + [(*neg[j], False) for j in ni]
        order = rng.permutation(len(examples))
        examples = [examples[j] for j in order]
        line_nouns = rng.choice(len(vocab), len(examples) + 1)
        qt, qc = int(query[0]), int(query[1])
        distance = abs(qc / qt - float(concept.value)) if concept.family == "proportional" else abs(qc - float(concept.value))
        pair_id = f"{_slug(concept)}__{i:05d}"
        for condition in conditions:
            phrase = PHRASE if condition == "concept_learning" else concept.phrase
            lines = [render_line(int(t), int(c), vocab[k], phrase, bool(a)) for (t, c, a), k in zip(examples, line_nouns)]
            lines.append(render_line(qt, qc, vocab[line_nouns[-1]], phrase, None))
            rows.append({
                "prompt_id": f"{pair_id}__{condition}", "pair_id": pair_id, "concept": concept.name,
                "family": concept.family, "quantifier": concept.quantifier, "threshold": concept.threshold,
                "monotonicity": concept.monotonicity, "condition": condition, "n_examples": n,
                "text": "\n".join(lines), "label": bool(label), "query_total": qt, "query_count": qc,
                "query_noun": vocab[line_nouns[-1]], "query_distance": distance, "seed": seed,
            })
    return rows


def generate_prompts(concepts, conditions=CONDITIONS, prompts_per_concept: int = 500,
                     n_examples: int = 20, seed: int = 0) -> pd.DataFrame:
    """Build the paired prompt dataset; the same parameters always give the same rows."""
    parsed = validate_parameters(concepts, list(conditions), prompts_per_concept, n_examples, seed)
    rows = [r for c in parsed for r in _concept_rows(c, list(conditions), prompts_per_concept, n_examples, seed)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.astype({"label": bool, "query_total": "int64", "query_count": "int64", "n_examples": "int64", "seed": "int64"})


def choice_items(prompts: pd.DataFrame):
    """The engine's view of the prompts: every prompt is answered Yes or No; gold is its label."""
    from ...spec import ChoiceItems

    return ChoiceItems(("Yes", "No"), ["Yes" if b else "No" for b in prompts["label"]])


def write_prompts(df: pd.DataFrame, run_dir, parameters: dict, overwrite: bool = False) -> dict:
    """``{run_dir}/prompts.parquet`` + sidecar; refuses to replace a dataset made with other parameters."""
    from ...paths import prompts_path

    return artifacts.write_dataset(df, prompts_path(run_dir), {"parameters": parameters, "nouns": len(nouns())},
                                   overwrite)


def estimate_tokens(df: pd.DataFrame) -> pd.Series:
    """A rough token count per prompt (characters / 3, on the high side for English BPE vocabularies); the score
    step checks the exact count against the model's window."""
    return (df["text"].str.len() / 3).round().astype(int)


def warn_if_long(df: pd.DataFrame, warn_tokens: int) -> str | None:
    """A warning line when the longest prompt may exceed ``warn_tokens`` tokens (None otherwise)."""
    if isinstance(warn_tokens, bool) or not isinstance(warn_tokens, int) or warn_tokens < 1:
        raise ValueError(f"warn_tokens: must be a positive integer, got {warn_tokens!r}")
    est = estimate_tokens(df)
    if est.max() <= warn_tokens:
        return None
    return (f"warning: the longest prompt is about {int(est.max())} tokens (estimate), above warn_tokens={warn_tokens}; "
            "models with a shorter context window will refuse it at the score step")
