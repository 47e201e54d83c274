"""Reading a user's prompt file: the four formats agree, answers are normalised, options rendered, and every mistake
a file can hold is one ValueError naming the rows and the column."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from nbutils import studies
from nbutils.artifacts import OverwriteError
from nbutils.runstore import select_limit
from nbutils.paths import repo_root
from nbutils.studies.custom import dataset
from nbutils.studies.common.prompt_items import LETTER_INSTRUCTION
from nbutils.studies.custom.dataset import choice_items, load_items

ROWS = [
    {"id": "q1", "topic": "geo", "question": 'Is Paris, the "city of light", in France?', "gold": "Yes."},
    {"id": "q2", "topic": "geo", "question": "Is Rome in Spain?\nThink first.", "gold": " no "},
    {"id": "q3", "topic": "math", "question": "Is 2 + 2 = 4?", "gold": "YES"},
    {"id": "q4", "topic": "math", "question": "Is 3 > 5? Café.", "gold": "No"},
]
MAP = {"prompt": "question", "answer": "gold", "item_id": "id"}
KEEP = ["row_id", "item_id", "group", "row", "prompt", "text", "answer", "answer_text", "answer_raw", "options", "scored",
        "n_options", "topic"]


def write(frame: pd.DataFrame, path) -> None:
    """The same table in the format the suffix names (TSV without quoting, as spreadsheets export it)."""
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".tsv":
        path.write_text("\t".join(frame.columns) + "\n" + "".join(
            "\t".join(str(v).replace("\n", " ") for v in r) + "\n" for r in frame.itertuples(index=False)))
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in frame.to_dict("records")))
    else:
        frame.to_parquet(path, index=False)


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_every_format_round_trips_to_the_same_items(tmp_path, suffix):
    frame = pd.DataFrame(ROWS)
    if suffix == ".tsv":  # TSV has no quoting, so no line breaks inside a field
        frame["question"] = frame["question"].str.replace("\n", " ")
    path = tmp_path / f"data{suffix}"
    write(frame, path)
    items = load_items(path, MAP, group_by=["topic"])
    assert items["prompt"].tolist() == frame["question"].tolist()  # quotes, commas, accents and line breaks intact
    assert items["answer"].tolist() == ["Yes", "No", "Yes", "No"]
    assert items["answer_raw"].tolist() == ["Yes.", " no ", "YES", "No"]
    assert items["row_id"].tolist() == ["q1", "q2", "q3", "q4"] and items["group"].tolist() == ["geo", "geo", "math", "math"]
    assert items["text"].tolist() == items["prompt"].tolist()
    reference = load_items(_reference(tmp_path, frame), MAP, group_by=["topic"])
    pd.testing.assert_frame_equal(items[KEEP].astype(str), reference[KEEP].astype(str))
    if suffix == ".csv":
        assert items["line"].tolist() == [2, 3, 5, 6]  # q2's prompt spans two lines
    items_path = tmp_path / "run"
    dataset.write_items(items, items_path, dataset.parameters(path, MAP, ["Yes", "No"], "text", ["topic"], None, False, 0))
    back = pd.read_parquet(items_path / studies.get("custom").dataset_file)
    pd.testing.assert_frame_equal(back[KEEP].astype(str), items[KEEP].astype(str))


def _reference(tmp_path, frame):
    path = tmp_path / "reference.jsonl"
    write(frame, path)
    return path


def test_letters_render_a_list_and_score_the_letters(tmp_path):
    path = tmp_path / "mc.jsonl"
    write(pd.DataFrame([{"prompt": "Capital of Italy?", "answer": "rome.", "opts": ["Paris", "Rome", "Madrid"]},
                        {"prompt": "2 + 2?", "answer": "c", "opts": ["3", "5", "4"]}]), path)
    items = load_items(path, {"choices": "opts"}, choices=3, option_format="letters")
    assert items["text"].iloc[0] == ("Capital of Italy?\n\nA. Paris\nB. Rome\nC. Madrid\n" + LETTER_INSTRUCTION)
    assert items["answer"].tolist() == ["B", "C"] and items["answer_text"].tolist() == ["Rome", "4"]
    ci = choice_items(items)
    assert ci.options == ("A", "B", "C") and ci.gold == ["B", "C"] and ci.systems is None
    text = load_items(path, {"choices": "opts"}, choices=3, option_format="text")
    assert choice_items(text).options == [("Paris", "Rome", "Madrid"), ("3", "5", "4")]
    assert text["answer"].tolist() == ["Rome", "4"]


def test_choices_column_accepts_json_lists_and_pipes(tmp_path):
    path = tmp_path / "mc.csv"
    path.write_text('prompt,answer,choices\nA colour?,red,"[""red"", ""blue""]"\nA fruit?,Pear,apple | pear\n')
    items = load_items(path, choices=2)
    assert [json.loads(o) for o in items["options"]] == [["red", "blue"], ["apple", "pear"]]
    assert items["answer"].tolist() == ["red", "pear"]


def test_shuffled_options_are_seeded_and_keep_the_gold_option(tmp_path):
    path = tmp_path / "mc.jsonl"
    rows = [{"prompt": f"Q{i}", "answer": "w", "choices": ["w", "x", "y", "z"]} for i in range(12)]
    write(pd.DataFrame(rows), path)
    a = load_items(path, choices=4, shuffle_options=True, seed=1)
    b = load_items(path, choices=4, shuffle_options=True, seed=1)
    c = load_items(path, choices=4, shuffle_options=True, seed=2)
    assert a.equals(b) and not a["options"].equals(c["options"])
    assert a["answer"].eq("w").all() and a["options"].nunique() > 1
    letters = load_items(path, choices=4, shuffle_options=True, seed=1, option_format="letters")
    assert [json.loads(o).index("w") for o in letters["options"]] == [ord(x) - 65 for x in letters["answer"]]


def test_system_message_per_file_and_per_row(tmp_path):
    path = tmp_path / "s.jsonl"
    write(pd.DataFrame([{"prompt": "a?", "answer": "Yes", "sys": "Be brief."}, {"prompt": "b?", "answer": "No", "sys": ""}]), path)
    items = load_items(path, {"system": "sys"}, system="Answer Yes or No.")
    assert items["system"].tolist() == ["Be brief.", "Answer Yes or No."]
    assert choice_items(items).systems == ["Be brief.", "Answer Yes or No."]
    plain = load_items(path)  # the `sys` column is not mapped and no file-level message: no system turn
    assert "system" not in plain.columns and choice_items(plain).systems is None


def test_other_file_columns_travel_along_without_shadowing_scores(tmp_path):
    path = tmp_path / "x.jsonl"
    write(pd.DataFrame([{"prompt": "a?", "answer": "Yes", "label": 1, "concept": "more than 1/2", "text": "t", "n": 3}]), path)
    items = load_items(path)
    assert {"file_label", "file_text", "concept", "n"} <= set(items.columns) and "label" not in items.columns
    assert items["text"].iloc[0] == "a?"


def test_repeated_items_across_groups_get_distinct_row_ids(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("item_id,cond,prompt,answer\ns1,A,p?,Yes\ns1,B,p again?,No\ns2,A,q?,No\n")
    items = load_items(path, group_by=["cond"])
    assert items["row_id"].tolist() == ["A::s1", "B::s1", "A::s2"] and items["item_id"].tolist() == ["s1", "s1", "s2"]


def test_sorted_file_gives_a_balanced_seeded_limit_per_group():
    """The shipped example lists every Yes row before every No row; `limit` still draws both answers in every group."""
    items = load_items(repo_root() / "params/custom/data/example_yesno.jsonl", MAP, group_by=["concept"])
    assert items["answer"].tolist() == sorted(items["answer"], key=lambda a: a != "Yes")  # sorted by answer
    spec = studies.get("custom").spec
    picked = select_limit(items, spec, 4, seed=0)
    counts = picked.groupby(["group", "answer"]).size().unstack()
    assert (counts.sum(axis=1) == 4).all()
    assert counts.loc["more than 1/2"].tolist() == [2, 2] and counts.loc["less than 1/2"].tolist() == [2, 2]
    assert counts.loc["more than 1/3"].min() >= 1  # 6 Yes, 2 No: proportional, never one answer only
    assert picked.equals(select_limit(items, spec, 4, seed=0))
    assert not picked["row_id"].equals(select_limit(items, spec, 4, seed=5)["row_id"])
    assert items.head(12)["answer"].eq("Yes").all()  # what the old first-rows limit would have taken


def test_dataset_is_tied_to_its_file(tmp_path):
    path = tmp_path / "d.jsonl"
    write(pd.DataFrame(ROWS), path)
    run = tmp_path / "run"
    params = dataset.parameters(path, MAP, ["Yes", "No"], "text", [], None, False, 0)
    dataset.write_items(load_items(path, MAP), run, params)
    assert dataset.write_items(load_items(path, MAP), run, params)["rows"] == 4  # same file, same parameters: kept
    write(pd.DataFrame(ROWS[:3]), path)
    with pytest.raises(OverwriteError, match="other parameters"):
        dataset.write_items(load_items(path, MAP), run, dataset.parameters(path, MAP, ["Yes", "No"], "text", [], None, False, 0))


# ---------------------------------------------------------------- every error names the rows and the column

def _err(tmp_path, name: str, content, **kw) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ValueError) as info:
        load_items(path, **kw)
    return str(info.value)


def test_missing_column(tmp_path):
    msg = _err(tmp_path, "a.csv", "question,gold\nq?,Yes\n", columns={"prompt": "question", "answer": "label"})
    assert msg.startswith("columns: 'answer' maps to column 'label'") and "['question', 'gold']" in msg
    msg = _err(tmp_path, "b.csv", "question,gold\nq?,Yes\n", columns={"answer": "gold"})
    assert "has no column 'prompt'" in msg and "columns={'prompt': 'question'}" in msg


def test_empty_file(tmp_path):
    assert "is empty" in _err(tmp_path, "e.jsonl", b"")
    assert "has no rows (only a header: ['prompt', 'answer'])" in _err(tmp_path, "h.csv", "prompt,answer\n")
    assert "is empty" in _err(tmp_path, "blank.jsonl", "\n\n")


def test_duplicate_item_ids(tmp_path):
    msg = _err(tmp_path, "d.csv", "item_id,prompt,answer\na,p?,Yes\nb,q?,No\na,r?,No\n")
    assert msg == ("data_file: d.csv row 1 (line 2), row 3 (line 4) (column 'item_id'): duplicate item ids, e.g. 'a'")


def test_blank_prompt(tmp_path):
    msg = _err(tmp_path, "b.jsonl", '{"prompt": "ok?", "answer": "Yes"}\n{"prompt": "  ", "answer": "No"}\n'
                                    '{"answer": "No"}\n')
    assert msg == "data_file: b.jsonl row 2 (line 2), row 3 (line 3) (column 'prompt'): blank prompt (empty, or only spaces and invisible characters)"


def test_undecodable_bytes(tmp_path):
    msg = _err(tmp_path, "u.csv", b"prompt,answer\nfine?,Yes\ncaf\xe9?,No\n")
    assert msg.startswith("data_file: u.csv row 2 (line 3) (column 'prompt'): bytes that are not valid UTF-8 (first: 0xe9)")
    msg = _err(tmp_path, "u.jsonl", b'{"prompt": "x?", "answer": "N\xffo"}\n')
    assert "row 1 (line 1) (column 'answer')" in msg and "0xff" in msg


def test_choices_column_with_another_number_of_options(tmp_path):
    msg = _err(tmp_path, "c.csv", "prompt,answer,opts\np?,a,a | b | c\nq?,a,a | b\nr?,b,a | b | c | d\n",
               columns={"choices": "opts"}, choices=3)
    assert msg == ("data_file: c.csv row 2 (line 3), row 3 (line 4) (column 'opts'): hold 2, 4 option(s); choices "
                   "declares 3 per row (options are a JSON list or separated by '|')")


def test_answer_matching_no_option(tmp_path):
    lines = "".join(f'{{"prompt": "p{i}?", "answer": "{a}"}}\n' for i, a in enumerate(["Yes", "Maybe", "No", "Perhaps."]))
    msg = _err(tmp_path, "a.jsonl", lines)
    assert msg.startswith("data_file: a.jsonl row 2 (line 2), row 4 (line 4) (column 'answer'): answers 'Maybe', "
                          "'Perhaps.' match none of the options ['Yes', 'No']")
    many = "".join(f'{{"prompt": "p{i}?", "answer": "x{i}"}}\n' for i in range(8))
    assert "and 3 more" in _err(tmp_path, "m.jsonl", many)
    per_row = _err(tmp_path, "p.jsonl", '{"prompt": "p?", "answer": "z", "choices": ["x", "y"]}\n', choices=2)
    assert "its options (row 1 (line 1): ['x', 'y'])" in per_row


@pytest.mark.parametrize("kw, match", [
    ({"columns": {"question": "q"}}, r"columns: unknown key\(s\) \['question'\]"),
    ({"option_format": "numbers"}, "option_format: must be one of"),
    ({"choices": ["Yes"]}, "choices: needs at least 2 options"),
    ({"choices": ["Yes", "yes."]}, "choices: options must differ"),
    ({"choices": 3}, "choices: an integer"),
    ({"group_by": "topic"}, "group_by: must be a list"),
    ({"group_by": ["nope"]}, r"group_by: data_file d.csv has no column\(s\) \['nope'\]"),
    ({"seed": -1}, "seed: must be an integer"),
])
def test_bad_parameters(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        _err_raise(tmp_path, **kw)


def _err_raise(tmp_path, **kw):
    path = tmp_path / "d.csv"
    path.write_text("prompt,answer\np?,Yes\n")
    load_items(path, **kw)


def test_bad_files(tmp_path):
    assert "extension '.xlsx'" in _err(tmp_path, "d.xlsx", "x")
    assert "line 2 is not valid JSON" in _err(tmp_path, "j.jsonl", '{"prompt": "a", "answer": "Yes"}\n{oops\n')
    assert "row 1 (line 2) has 3 fields; the header has 2" in _err(tmp_path, "f.csv", "prompt,answer\na, b,Yes\n")
    assert "set choices to the number of options" in _err(tmp_path, "c.csv", "prompt,answer,choices\np?,a,a|b\n")


# ---------------------------------------------------------------- cells that are not one text, and contradictions

def test_invisible_only_prompt_is_blank(tmp_path):
    msg = _err(tmp_path, "z.jsonl", '{"prompt": "ok?", "answer": "Yes"}\n{"prompt": "\\u200b", "answer": "No"}\n'
                                    '{"prompt": "\\ufeff \\u2060", "answer": "No"}\n')
    assert msg.startswith("data_file: z.jsonl row 2 (line 2), row 3 (line 3) (column 'prompt'): blank prompt")


def test_a_list_column_as_prompt_is_refused_naming_the_column(tmp_path):
    frame = pd.DataFrame({"prompt": [["Is 3 > 2?"], ["Is 1 > 2?"]], "answer": ["Yes", "No"]})
    frame.to_parquet(tmp_path / "l.parquet")
    with pytest.raises(ValueError) as err:
        load_items(tmp_path / "l.parquet")
    assert str(err.value).startswith("data_file: l.parquet row 1, row 2 (column 'prompt'): a list or mapping where one "
                                     "text was expected")


def test_nested_options_are_refused_and_numbers_are_texts(tmp_path):
    msg = _err(tmp_path, "o.jsonl", '{"prompt": "p?", "answer": "a", "choices": ["a", ["b", "c"], 3]}\n',
               choices=3)
    assert "(column 'choices'): each option must be one text, not a list or mapping" in msg
    p = tmp_path / "n.jsonl"
    p.write_text('{"prompt": "p?", "answer": "3", "choices": ["a", "b", 3]}\n')
    items = load_items(p, choices=3)
    assert json.loads(items["options"].iloc[0]) == ["a", "b", "3"] and items["answer"].iloc[0] == "3"


def test_a_struct_column_travels_along_as_json_text(tmp_path):
    frame = pd.DataFrame({"prompt": ["p?", "q?"], "answer": ["Yes", "No"],
                          "meta": [{"tags": ["x", "y"], "n": 1}, {"tags": ["z"], "n": 2}]})
    frame.to_parquet(tmp_path / "s.parquet")
    items = load_items(tmp_path / "s.parquet")
    assert json.loads(items["meta"].iloc[0]) == {"tags": ["x", "y"], "n": 1}


def test_the_same_prompt_with_two_different_answers_is_refused(tmp_path):
    msg = _err(tmp_path, "c.csv", "prompt,answer\nIs it?,Yes\nOther?,No\nIs it?,No\n")
    assert msg == ("data_file: c.csv row 1 (line 2), row 3 (line 4) (column 'answer'): the same prompt with the same "
                   "options has different answers (no vs yes for 'Is it?'); one of them is wrong")
    p = tmp_path / "same.csv"
    p.write_text("prompt,answer\nIs it?,Yes\nIs it?,yes.\n")  # the same answer twice is a repeat, not a contradiction
    assert len(load_items(p)) == 2


def test_the_load_notebook_defaults_work_for_any_file(tmp_path):
    """The notebook's own defaults name no column a plain prompt/answer file may lack (e.g. ``concept``)."""
    import papermill as pm

    defaults = {k: v["default"] for k, v in pm.inspect_notebook(str(repo_root() / "notebooks/custom/01_load.ipynb")).items()}
    assert defaults["group_by"] == "[]"
    p = tmp_path / "plain.csv"
    p.write_text("prompt,answer\nIs it?,Yes\nIs it not?,No\n")
    items = load_items(p, group_by=json.loads(defaults["group_by"]))
    assert list(items["group"]) == ["all", "all"]
