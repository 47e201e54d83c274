"""Generation rules of the concept-learning dataset (seeds 000/001)."""
from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from nbutils import artifacts
from nbutils.studies.common.quantifiers import PHRASE, example_space, nouns, parse_concept
from nbutils.studies.monotonicity.dataset import COLUMNS, CONDITIONS, generate_prompts, validate_parameters

LINE = re.compile(r"^There are (\d+) (\w+)\. Alice has (\d+) of the \1 \2\. Does Alice have (.+) of the \2\?(?: (Yes|No)\.)?$")
CONCEPTS = ["more than 1/2", "less than 3/10", "more than 20", "less than 20"]


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return generate_prompts(CONCEPTS, prompts_per_concept=40, n_examples=20, seed=7)


def parse(text: str):
    rows = [LINE.match(line) for line in text.split("\n")]
    assert all(rows), text
    return [(int(m[1]), int(m[3]), m[2], m[4], m[5]) for m in rows]


def test_required_columns_and_sizes(df):
    assert list(df.columns[: len(COLUMNS)]) == COLUMNS
    assert len(df) == len(CONCEPTS) * 40 * 2
    assert df["prompt_id"].is_unique


def test_labels_follow_the_concept_in_exact_arithmetic(df):
    for r in df.itertuples():
        c = parse_concept(r.concept)
        lines = parse(r.text)
        for total, count, _, _, answer in lines[:-1]:
            assert (answer == "Yes") == c.holds(total, count)
        assert r.label == c.holds(r.query_total, r.query_count)
        assert lines[-1][4] is None and r.text.endswith("?")


def test_exact_rational_boundary():
    c = parse_concept("more than 3/10")
    assert not c.holds(10, 3) and c.holds(10, 4)  # 3 = 0.3 × 10 exactly is not "more than"
    d = parse_concept("less than 1/3")
    assert not d.holds(30, 10) and d.holds(30, 9)
    assert parse_concept("more than 20").family == "cardinal" and parse_concept("less than 1/2").monotonicity == "downward"


def test_balance_ranges_uniqueness_unseen_query(df):
    for _, g in df.groupby(["concept", "condition"]):
        assert g["label"].sum() == len(g) / 2
    for r in df.itertuples():
        lines = parse(r.text)
        examples = [(t, n) for t, n, *_ in lines[:-1]]
        assert len(examples) == r.n_examples == 20
        assert sum(a == "Yes" for *_, a in lines[:-1]) == 10
        assert len(set(examples)) == 20, "examples are sampled without replacement"
        assert (r.query_total, r.query_count) not in examples, "the query is unseen"
        assert all(5 <= t <= 100 and 0 <= n <= t for t, n in examples + [(r.query_total, r.query_count)])
        assert all(noun in nouns() for _, _, noun, _, _ in lines)


def test_conditions_are_paired_and_differ_only_in_the_phrase(df):
    for pair_id, g in df.groupby("pair_id"):
        assert set(g["condition"]) == {"concept_learning", "explicit"}
        cl = g[g.condition == "concept_learning"].iloc[0]
        ex = g[g.condition == "explicit"].iloc[0]
        assert cl["text"].count(PHRASE) == 21 and PHRASE not in ex["text"]
        assert cl["text"].replace(PHRASE, cl["concept"]) == ex["text"]
        assert "Does Alice have " + cl["concept"] + " of the" in ex["text"]
        for col in ("label", "query_total", "query_count", "query_noun"):
            assert cl[col] == ex[col]


def test_deterministic_byte_identical_files(tmp_path):
    a = generate_prompts(CONCEPTS, prompts_per_concept=10, seed=1)
    b = generate_prompts(CONCEPTS, prompts_per_concept=10, seed=1)
    artifacts.write_parquet(a, tmp_path / "a.parquet")
    artifacts.write_parquet(b, tmp_path / "b.parquet")
    assert artifacts.sha256_file(tmp_path / "a.parquet") == artifacts.sha256_file(tmp_path / "b.parquet")
    c = generate_prompts(CONCEPTS, prompts_per_concept=10, seed=2)
    assert not a["text"].equals(c["text"])
    # adding a concept leaves the others' prompts unchanged
    d = generate_prompts(CONCEPTS + ["more than 1/3"], prompts_per_concept=10, seed=1)
    assert d[d.concept.isin(CONCEPTS)].reset_index(drop=True).equals(a)


def test_noun_list_has_100_distinct_plurals():
    assert len(nouns()) == 100 and len(set(nouns())) == 100


def test_example_space_covers_every_scenario():
    pos, neg = example_space(parse_concept("more than 1/2"))
    assert len(pos) + len(neg) == sum(t + 1 for t in range(5, 101))
    assert all(Fraction(n, t) > Fraction(1, 2) for t, n in pos)


@pytest.mark.parametrize("kwargs, parameter", [
    (dict(concepts=["most of them"]), "concepts"),
    (dict(concepts=["more than 3/2"]), "concepts"),
    (dict(concepts=["less than 0/5"]), "concepts"),
    (dict(concepts=["more than 1/0"]), "concepts"),
    (dict(concepts=["more than 100"]), "concepts"),   # no positives: nobody has more than 100 of ≤ 100
    (dict(concepts=["less than 0"]), "concepts"),     # no positives
    (dict(concepts="more than 1/2"), "concepts"),     # a string, not a list
    (dict(concepts=["more than 1/2", "more than 1/2"]), "concepts"),
    (dict(n_examples=7), "n_examples"),
    (dict(n_examples=0), "n_examples"),
    (dict(concepts=["less than 1"], n_examples=200), "n_examples"),  # 96 positives cannot give 100 distinct ones
    (dict(prompts_per_concept=5), "prompts_per_concept"),
    (dict(conditions=["implicit"]), "conditions"),
    (dict(seed=-1), "seed"),
])
def test_bad_input_names_the_parameter(kwargs, parameter):
    args = dict(concepts=["more than 1/2"], prompts_per_concept=4, n_examples=20, seed=0) | kwargs
    with pytest.raises(ValueError, match=f"^{parameter}:"):
        generate_prompts(**args)


def test_existing_dataset_is_never_silently_replaced(tmp_path):
    path = tmp_path / "prompts.parquet"
    p1 = dict(concepts=["more than 1/2"], prompts_per_concept=4)
    artifacts.write_dataset(generate_prompts(**p1), path, {"parameters": p1})
    before = artifacts.sha256_file(path)
    artifacts.write_dataset(generate_prompts(**p1), path, {"parameters": p1})  # same parameters: kept
    p2 = dict(concepts=["less than 1/2"], prompts_per_concept=4)
    with pytest.raises(artifacts.OverwriteError, match="run_dir"):
        artifacts.write_dataset(generate_prompts(**p2), path, {"parameters": p2})
    assert artifacts.sha256_file(path) == before
    artifacts.write_dataset(generate_prompts(**p2), path, {"parameters": p2}, overwrite=True)
    assert pd.read_parquet(path)["concept"].unique().tolist() == ["less than 1/2"]


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[3] / "params" / "monotonicity" / "datasets").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_shipped_dataset_file_is_valid(path):
    """Each dataset file the project ships passes the checks a user's file gets (no concept given twice by value)."""
    import yaml

    p = yaml.safe_load(path.read_text())
    concepts = validate_parameters(p["concepts"], p.get("conditions", CONDITIONS), p["prompts_per_concept"],
                                   p["n_examples"], p["seed"])
    assert len(concepts) == len(p["concepts"])
