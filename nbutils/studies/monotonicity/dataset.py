"""Prompt datasets for in-context concept learning of quantifiers (Wang's concept-learning papers)."""
from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from ... import artifacts
from ...score_settings import check_int
from ..common.quantifiers import Concept, example_space, nouns, parse_concept, render_line
from ..common import variants
from . import twins as twin_kinds

CONDITIONS = ("concept_learning", "explicit")
COLUMNS = [
    "prompt_id", "pair_id", "concept", "family", "quantifier", "threshold", "monotonicity",
    "condition", "n_examples", "text", "label", "query_total", "query_count", "query_noun",
    "query_distance", "seed", "template", "phrase", "answer_words",
]
TWIN_COLUMNS = ["twin", "twin_of", "twin_threshold"]  # only in a dataset with twins
DEFAULT_VARIANTS = {v: [n] for v, n in variants.DEFAULTS.items()}  # the papers' wording: one variant per axis


MAX_ROWS = 2_000_000  # prompts in one dataset: ~3 kB of text each, so ~6 GB in memory at the limit


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
    ppc = check_int("prompts_per_concept", prompts_per_concept, 2)
    rows = ppc * len(parsed) * len(conditions)
    if rows > MAX_ROWS:
        raise ValueError(f"prompts_per_concept: {ppc} gives {rows:,} prompts ({len(parsed)} concepts × {len(conditions)} "
                         f"conditions), about {rows * 3e3 / 1e9:,.1f} GB of text before scoring; at most {MAX_ROWS:,} "
                         "prompts per dataset (the paper design has 34,000)")
    if ppc % 2:
        raise ValueError(f"prompts_per_concept: must be even (half the queries true, half false), got {ppc}")
    n = check_int("n_examples", n_examples, 2)
    if n % 2:
        raise ValueError(f"n_examples: must be even (half positive, half negative examples), got {n}")
    check_int("seed", seed, 0, artifacts.SEED_MAX)
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


def _concept_rows(concept: Concept, conditions, ppc: int, n: int, seed: int, chosen: dict | None = None,
                  twins=(), design=()) -> list[dict]:
    """All prompts of one concept; its own RNG stream so adding concepts never changes the others. ``chosen`` maps
    each axis to its variant names; a pair's variants come from their own streams, so one variant per axis (the
    papers' design) gives exactly the prompts it always gave. ``twins``: the twin kinds asked for
    (``twins.KINDS``), each concept-learning prompt's twins drawn from a stream of their own (``design``: every
    concept of the dataset, where a threshold-shifted twin finds its other threshold)."""
    chosen = chosen or DEFAULT_VARIANTS
    trng = twin_kinds.rng_for(concept, seed)
    pick = {axis: variants.assign(ppc, [i % 2 == 0 for i in range(ppc)], chosen[axis], seed,
                                  f"{concept.name}|{axis}") for axis in variants.AXES}
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
        tpl, ph, aw = (pick[axis][i] for axis in variants.AXES)  # the explicit twin keeps them: pairs stay paired
        template, words = variants.template(tpl), variants.words(aw)
        for condition in conditions:
            phrase = variants.phrase(ph) if condition == "concept_learning" else concept.phrase
            lines = [render_line(int(t), int(c), vocab[k], phrase, bool(a), template, words)
                     for (t, c, a), k in zip(examples, line_nouns)]
            lines.append(render_line(qt, qc, vocab[line_nouns[-1]], phrase, None, template, words))
            rows.append({
                "prompt_id": f"{pair_id}__{condition}", "pair_id": pair_id, "concept": concept.name,
                "family": concept.family, "quantifier": concept.quantifier, "threshold": concept.threshold,
                "monotonicity": concept.monotonicity, "condition": condition, "n_examples": n,
                "text": "\n".join(lines), "label": bool(label), "query_total": qt, "query_count": qc,
                "query_noun": vocab[line_nouns[-1]], "query_distance": distance, "seed": seed,
                "template": tpl, "phrase": ph, "answer_words": aw,
            })
            if condition == "concept_learning" and twins:
                rows += _twin_rows(rows[-1], concept, examples, (qt, qc), [vocab[k] for k in line_nouns], phrase,
                                   template, words, twins, design, trng)
    return rows


def _twin_rows(orig: dict, concept: Concept, examples, query, line_nouns, phrase, template, words, twins, design,
               rng) -> list[dict]:
    """The twins of one concept-learning prompt (``twins`` module): each a row like ``orig`` with ``twin`` and
    ``twin_of`` set, its own text and its own gold answer."""
    out = []
    qt, qc = query

    def row(kind, lines, label, **extra):
        return {**orig, "prompt_id": f"{orig['prompt_id']}__{kind}", "text": "\n".join(lines), "label": bool(label),
                "twin": kind, "twin_of": orig["prompt_id"], **extra}

    def render(exs, nouns, q, qnoun):
        lines = [render_line(int(t), int(c), k, phrase, bool(a), template, words) for (t, c, a), k in zip(exs, nouns)]
        return lines + [render_line(int(q[0]), int(q[1]), qnoun, phrase, None, template, words)]

    for kind in twins:
        if kind == "label_flip":
            flipped = [(t, c, not a) for t, c, a in examples]
            out.append(row(kind, render(flipped, line_nouns, query, line_nouns[-1]), not orig["label"]))
        elif kind == "threshold_shift":
            other = twin_kinds.shifted_concept(concept, design, qt, qc)
            if other is None:  # no threshold of the design puts the query on its other side: no twin here
                continue
            exs = twin_kinds.draw_examples(other, len(examples), rng, (qt, qc))
            out.append(row(kind, render(exs, line_nouns, query, line_nouns[-1]), other.holds(qt, qc),
                           twin_threshold=other.threshold))
        elif kind == "copy":
            # the copied example has the original query's label, so copy probes are half Yes and half No as the
            # queries are: a responder with a bias toward one answer is then right on half of them
            same = [k for k, e in enumerate(examples) if bool(e[2]) == bool(orig["label"])]
            j = same[int(rng.integers(len(same)))]
            t, c, a = examples[j]
            out.append(row(kind, render(examples, line_nouns, (t, c), line_nouns[j]), a, query_total=int(t),
                           query_count=int(c), query_noun=line_nouns[j]))
    return out


def generate_prompts(concepts, conditions=CONDITIONS, prompts_per_concept: int = 500,
                     n_examples: int = 20, seed: int = 0, templates=("paper",), phrases=("desired_quantity",),
                     answer_words=("yes_no",), twins=()) -> pd.DataFrame:
    """Build the paired prompt dataset; the same parameters always give the same rows.

    ``templates``, ``phrases`` and ``answer_words`` name variants of the catalogue (``variants.yaml``; ``"all"``: every
    one): each prompt pair gets one per axis, balanced within concept × condition, so the number of prompts does not
    grow. The defaults are the papers' wording and give the dataset prompt for prompt as before the variants.

    ``twins`` (``label_flip``, ``threshold_shift``, ``copy``; see ``twins``) adds, after each concept-learning prompt,
    its twins as rows of their own (columns ``twin``, ``twin_of``, ``twin_threshold``); without twins the dataset
    has none of those columns and is the same, row for row, as one made before twins existed.
    """
    kinds = twin_kinds.check(twins)
    chosen = {axis: variants.resolve(axis, list(v) if isinstance(v, tuple) else v)
              for axis, v in zip(variants.AXES, (templates, phrases, answer_words))}
    parsed = validate_parameters(concepts, list(conditions), prompts_per_concept, n_examples, seed)
    if kinds and "concept_learning" not in conditions:
        raise ValueError(f"twins: twins are made of concept-learning prompts, and conditions {list(conditions)!r} "
                         "has none; add concept_learning or leave twins empty")
    rows = [r for c in parsed for r in _concept_rows(c, list(conditions), prompts_per_concept, n_examples, seed, chosen,
                                                     kinds, parsed)]
    df = pd.DataFrame(rows, columns=COLUMNS + (TWIN_COLUMNS if kinds else []))
    return df.astype({"label": bool, "query_total": "int64", "query_count": "int64", "n_examples": "int64", "seed": "int64"})


def choice_items(prompts: pd.DataFrame):
    """The engine's view of the prompts: each prompt is answered with its answer words (Yes or No unless the dataset
    varies them; a dataset made before the variants has no ``answer_words`` column and is Yes/No); gold is its label."""
    from ...spec import ChoiceItems

    names = prompts["answer_words"] if "answer_words" in prompts else pd.Series("yes_no", index=prompts.index)
    per = [variants.words(n) for n in names] or [variants.words("yes_no")]
    gold = [w[0] if b else w[1] for w, b in zip(per, prompts["label"])]
    return ChoiceItems(per[0] if len(set(per)) == 1 else per, gold)


def parameters(concepts, conditions, prompts_per_concept, n_examples, seed, templates=("paper",),
               phrases=("desired_quantity",), answer_words=("yes_no",), twins=()) -> dict:
    """What made the dataset, for its sidecar; the variant axes only where they differ from the papers' wording, so a
    dataset made before the variants existed is still recognised as the same dataset."""
    out = dict(concepts=list(concepts), conditions=list(conditions), prompts_per_concept=prompts_per_concept,
               n_examples=n_examples, seed=seed)
    for axis, value in zip(variants.AXES, (templates, phrases, answer_words)):
        value = value if isinstance(value, str) else list(value)
        if value != DEFAULT_VARIANTS[axis]:
            out[variants.PARAMETERS[axis]] = value
    if twins:  # recorded only where asked, so a dataset without twins keeps the parameters it always had
        out["twins"] = list(twins)
    return out


def variant_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Prompts per concept × condition and variant of each axis (one column per axis × variant): the balance dealt."""
    axes = [a for a in variants.AXES if a in df]
    return pd.concat({a: df.groupby(["concept", "condition"])[a].value_counts().unstack(fill_value=0) for a in axes},
                     axis=1, names=["axis", "variant"])


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
