"""The persona study's dataset: personas file, seeded nulls, generated questions, a researcher's file, the paired design."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from nbutils import artifacts, paths, studies
from nbutils.runstore import read_dataset, select_limit
from nbutils.studies.personas import dataset

KINDS = ("baseline", "real", "null_random", "null_word")


def test_personas_file_has_22_personas_over_five_categories_with_sources():
    p = dataset.load_personas()
    assert len(p) == 22 and p["persona_id"].is_unique and p["persona"].is_unique
    assert set(p["category"]) == {"race_ethnicity", "religion", "gender", "sexuality", "disability"}
    assert p.groupby("category").size().min() >= 4
    assert p["source"].str.len().min() > 10 and p["persona"].str.match(r"^(a|an) ").all()


def test_null_strings_are_ten_letters_distinct_and_seeded():
    a, b, c = dataset.null_strings(20, 0), dataset.null_strings(20, 0), dataset.null_strings(20, 1)
    assert a == b and a != c and len(set(a)) == 20
    assert all(re.fullmatch(r"[a-z]{10}", s) for s in a + c)
    assert dataset.null_strings(5, 0) == a[:5]  # a longer draw extends a shorter one
    letters = np.array([ch for s in dataset.null_strings(400, 3) for ch in s])
    counts = pd.Series(letters).value_counts()
    assert len(counts) == 26 and counts.max() < 3 * counts.min()  # uniform over the alphabet, not a fixed pattern


def test_null_words_are_real_words_seeded_and_as_many_as_the_strings():
    w = dataset.null_words(20, 0)
    assert w == dataset.null_words(20, 0) and w != dataset.null_words(20, 5)
    assert len(set(w)) == 20 and set(w) <= set(dataset.word_pool())
    t = dataset.persona_table(7, seed=2)
    assert t["persona_kind"].value_counts().to_dict() == {"real": 22, "null_random": 7, "null_word": 7, "baseline": 1}
    with pytest.raises(ValueError, match=r"n_null_personas: at most 36"):
        dataset.null_words(37)


def test_questions_are_deterministic_sized_and_well_formed():
    q = dataset.generate_questions(40, logic_share=0.5, seed=4)
    assert q.equals(dataset.generate_questions(40, logic_share=0.5, seed=4))
    assert not q.equals(dataset.generate_questions(40, logic_share=0.5, seed=5))
    assert len(q) == 40 and q["question_id"].is_unique and q["question"].is_unique
    assert q["question_type"].value_counts().to_dict() == {"arithmetic": 20, "quantifier": 10, "syllogism": 10}
    for r in q.itertuples():
        assert r.answer in r.options and len(set(r.options)) == len(r.options)
        assert len(r.options) == (4 if r.question_type == "arithmetic" else 2)
    logic = q[q["question_type"] != "arithmetic"]
    assert logic["answer"].value_counts().to_dict() == {"Yes": 10, "No": 10}
    gold_pos = [r.options.index(r.answer) for r in q[q["question_type"] == "arithmetic"].itertuples()]
    assert sorted(set(gold_pos)) == [0, 1, 2, 3] and max(np.bincount(gold_pos)) - min(np.bincount(gold_pos)) <= 1


def _arith(question: str) -> int:
    n = [int(x) for x in re.findall(r"\d+", question)]
    if "more" in question and "gets" in question:
        return n[0] + n[1]
    if "gives away" in question:
        return n[0] - n[1]
    if "boxes" in question:
        return n[0] * n[1]
    return n[0] // n[1]


def test_arithmetic_gold_is_right_and_distractors_are_plausible():
    q = dataset.generate_questions(80, logic_share=0.0, seed=0)
    off_by_one = wrong_op = 0
    for r in q.itertuples():
        ans = _arith(r.question)
        assert int(r.answer) == ans, r.question
        d = [int(o) for o in r.options if o != r.answer]
        assert all(x > 0 for x in d)
        off_by_one += any(abs(x - ans) == 1 for x in d)
        n = [int(x) for x in re.findall(r"\d+", r.question)]
        wrong_op += any(x in (n[0] + n[1], n[0] - n[1]) for x in d)
    assert off_by_one == len(q) and wrong_op == len(q)


def test_quantifier_and_syllogism_answers_are_right():
    q = dataset.generate_questions(60, logic_share=1.0, seed=2)
    for r in q[q["question_type"] == "quantifier"].itertuples():
        total, count, num, den = map(int, re.findall(r"\d+", r.question)[:2] + list(re.search(r"(\d+)/(\d+)", r.question).groups()))
        truth = count * den > num * total if "more than" in r.question else count * den < num * total
        assert r.answer == ("Yes" if truth else "No")
    syl = q[q["question_type"] == "syllogism"]
    assert len(syl) == 30
    for r in syl.itertuples():
        assert r.answer == ("Yes" if _follows(r.question) else "No"), r.question


def _holds(statement: tuple[str, str, str], world: list[dict]) -> bool:
    q, x, y = statement
    has = [t for t in world if t[x]]
    if q == "all":
        return all(t[y] for t in has)
    if q == "no":
        return not any(t[y] for t in has)
    return any(t[y] for t in has)  # some


def _follows(question: str) -> bool:
    """Independent reference: the conclusion holds in every world (which of the 8 kinds of individual over three
    predicates exist) where both premises hold."""
    import itertools

    stmts = [(q.lower(), a, b) for q, a, b in re.findall(r"(All|No|Some|all|no|some) (\w+) are (\w+)", question)]
    assert len(stmts) == 3, question
    names = sorted({s[1] for s in stmts} | {s[2] for s in stmts})
    kinds = [dict(zip(names, bits)) for bits in itertools.product([False, True], repeat=3)]
    keyed = [tuple(sorted(k.items())) for k in kinds]
    for mask in itertools.product([False, True], repeat=len(kinds)):
        world = frozenset(k for k, m in zip(keyed, mask) if m)
        w = [dict(k) for k in world]
        if _holds(stmts[0], w) and _holds(stmts[1], w) and not _holds(stmts[2], w):
            return False
    return True


def test_every_persona_sees_exactly_the_same_questions():
    df = dataset.make_dataset(n_questions=10, n_null_personas=3, seed=1)
    n_personas = 1 + 22 + 3 + 3
    assert len(df) == 10 * n_personas and df["prompt_id"].is_unique
    assert df.groupby("question_id")["persona_id"].nunique().eq(n_personas).all()
    assert df.groupby("persona_id")["question_id"].nunique().eq(10).all()
    same = df.groupby("question_id")[["text", "gold", "answer"]].nunique()
    assert (same == 1).all().all()  # same rendered question, options and gold under every persona
    assert set(df["persona_kind"]) == set(KINDS)
    for col in ("prompt_id", "question_id", "persona", "persona_kind", "category", "text", "options", "answer"):
        assert col in df.columns
    base = df[df["persona_kind"] == "baseline"]
    assert base["system"].isna().all()
    real = df[df["persona_kind"] == "real"]
    assert (real["system"] == "You are " + real["persona"] + ".").all()
    assert df.loc[df["persona_kind"] == "null_random", "system"].str.fullmatch(r"You are [a-z]{10}\.").all()


def test_template_is_a_parameter_and_bad_ones_are_refused():
    df = dataset.make_dataset(n_questions=2, n_null_personas=0, template="Imagine you are {persona}. Solve it.")
    assert df.loc[df["persona_id"] == "woman", "system"].iloc[0] == "Imagine you are a woman. Solve it."
    for bad in ("You are a person.", "{persona} and {persona}", "You are {persona} {other}", 3):
        with pytest.raises(ValueError, match=r"^template: must be a string with exactly one \{persona\}"):
            dataset.make_dataset(n_questions=2, template=bad)


@pytest.mark.parametrize("kw, match", [
    (dict(n_questions=0), r"^n_questions: must be an integer ≥ 1"),
    (dict(logic_share=1.5), r"^logic_share: must be a number in \[0, 1\]"),
    (dict(n_null_personas=-1), r"^n_null_personas: must be an integer ≥ 0"),
    (dict(categories=["age"]), r"^categories: must be None or a non-empty list drawn from"),
    (dict(seed=-2), r"^seed: must be an integer ≥ 0"),
])
def test_bad_parameters_name_themselves(kw, match):
    with pytest.raises(ValueError, match=match):
        dataset.make_dataset(**kw)


def test_the_dataset_file_is_deterministic_and_limit_keeps_every_persona(tmp_path):
    params = dict(n_questions=12, n_null_personas=2, seed=3)
    for d in ("a", "b"):
        dataset.write(dataset.make_dataset(**params), tmp_path / d, params)
    pa, pb = (paths.dataset_path(tmp_path / d, dataset.DATASET_FILE) for d in ("a", "b"))
    assert artifacts.sha256_file(pa) == artifacts.sha256_file(pb)
    spec = studies.get("personas").spec
    df, _ = read_dataset(tmp_path / "a", spec)
    kept = select_limit(df, spec, 4, seed=0)
    assert kept["question_id"].nunique() == 4 and kept.groupby("question_id").size().eq(27).all()
    assert set(kept.drop_duplicates("question_id")["question_type"]) == {"arithmetic", "quantifier", "syllogism"} or \
        kept.drop_duplicates("question_id")["question_type"].value_counts().max() <= 2
    items = spec.choice_items(df)
    assert items.systems[0] is None and items.systems[-1].startswith("You are ")
    assert [tuple(o) for o in items.options[:1]] == [tuple(df["scored"].iloc[0])]
    assert items.gold == df["gold"].tolist()


def test_a_researchers_jsonl_and_csv_files_load(tmp_path):
    rows = [{"question": "What is 2 + 2?", "options": ["3", "4", "5", "22"], "answer": "4", "id": "gsm1", "type": "sum"},
            {"question": "Which is prime?", "options": ["4", "6", "7", "9"], "answer": "C", "id": "gsm2"}]
    j = tmp_path / "mc.jsonl"
    j.write_text("".join(json.dumps(r) + "\n" for r in rows))
    q = dataset.load_questions(j)
    assert q["question_id"].tolist() == ["gsm1", "gsm2"] and q["answer"].tolist() == ["4", "7"]
    assert q["question_type"].tolist() == ["sum", "file"] and q["source"].eq("mc.jsonl").all()
    c = tmp_path / "mc.csv"
    pd.DataFrame({"question": [r["question"] for r in rows], "options": ["3 | 4 | 5 | 22", '["4", "6", "7", "9"]'],
                  "answer": ["4", "c"]}).to_csv(c, index=False)
    qc = dataset.load_questions(c)
    assert qc["options"].tolist() == [["3", "4", "5", "22"], ["4", "6", "7", "9"]] and qc["answer"].tolist() == ["4", "7"]
    assert qc["question_id"].tolist() == ["q_00001", "q_00002"]  # the custom loader's row numbers (1-based)
    df = dataset.make_dataset(question_file=str(c), n_null_personas=1)
    assert df["question_id"].nunique() == 2 and df.loc[df["question_id"] == "q_00002", "gold"].eq("C").all()
    assert df["text"].iloc[0] == "What is 2 + 2?\n\nA. 3\nB. 4\nC. 5\nD. 22\nAnswer with the letter of the correct option."


@pytest.mark.parametrize("content, match", [
    ('{"question": "Q?", "options": ["a", "b"], "answer": "z"}\n', r"row 1 \(line 1\) \(column 'answer'\): answers 'z' match none"),
    ('{"question": "Q?", "options": ["a"], "answer": "a"}\n', r"row 1 \(column 'options'\): must list 2 to 10 options"),
    ('{"question": "Q?", "options": ["a", "a"], "answer": "a"}\n', r"row 1 \(line 1\) \(column 'options'\): .*"),
    ('{"question": "Q?", "options": ["a", "b"], "answer": "a"}\n{"question": "R?", "options": ["a", "b", "c"], "answer": "a"}\n',
     r"row 2 \(line 2\) \(column 'options'\): hold 3 option\(s\); choices declares 2 per row"),
    ('{"question": "Q?", "answer": "a"}\n', r"needs the columns question, options, answer; missing \['options'\]"),
    ('{"question": "Q?", "options": ["a", "b"], "answer": "a"}\nnot json\n', r"line 2"),
])
def test_bad_question_files_get_one_clear_error(tmp_path, content, match):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    with pytest.raises(ValueError, match=r"^question_file: .*" + match):
        dataset.load_questions(f)
    with pytest.raises(ValueError, match=r"^question_file: .* does not exist"):
        dataset.load_questions(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match=r"^question_file: x.txt has the extension '.txt'"):
        (tmp_path / "x.txt").write_text("q")
        dataset.load_questions(tmp_path / "x.txt")
