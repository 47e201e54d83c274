"""Items: ``nbutils.items`` against the score and dataset files read here with pandas, ``python -m nbutils show``'s
filters and order, its refusals, ``nbutils runs``, and the report's item browser (hostile prompt text rendered in
headless Chromium with nothing run but the browser's own script; the 5,000-item cap).

Every run here is a shipped sample copied to a temporary folder, or one built from it without a model."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from bs4 import BeautifulSoup

import test_report as tr
from nbutils import artifacts, paths, studies
from nbutils.__main__ import main
from nbutils.items import disagree, items, plain, select, table_lines, write_jsonl
from nbutils.report import ALL_ITEMS, KEEP, write_report
from nbutils.runstore import write_scores

SAMPLES = paths.repo_root() / "outputs" / "samples"
MODEL = "smollm2-135m-instruct"  # the score file's slug
LABEL = "SmolLM2-135M-Instruct"  # the name results print (derived from the embedded model's hub name)
DESIGN = {"monotonicity": ["concept", "threshold", "monotonicity", "condition"],
          "negation": ["item_id", "category", "context", "form"],
          "personas": ["persona_id", "persona_kind", "category", "question_id", "question_type"],
          "custom": ["group", "concept"]}
HOSTILE = ["<script>document.title='PWNED'</script>", "</textarea></pre></details></td></tr></table><b>out</b>",
           "\"><img src=x onerror=\"document.body.dataset.pwned=1\">",
           "</script><script>document.title='PWNED'</script>"]


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> dict:
    """Each study's sample run, copied (the shipped ones are inputs, never written)."""
    base = tmp_path_factory.mktemp("samples")
    out = {}
    for study in DESIGN:
        out[study] = base / study
        shutil.copytree(SAMPLES / study, out[study])
    return out


def files(run, study):
    """The run's dataset and its one score file, as pandas reads them."""
    record = studies.get(study)
    data = pd.read_parquet(run / record.dataset_file)
    scores = pd.read_parquet(run / "scores" / f"{MODEL}.parquet")
    return record, data, scores


@pytest.mark.parametrize("study", list(DESIGN))
def test_each_item_is_its_dataset_row_beside_its_score_row(samples, study):
    run = samples[study]
    record, data, scores = files(run, study)
    df = items(run)
    key = record.id_column
    assert len(df) == len(scores) and set(df[key]) == set(scores[key]) and (df["model"] == LABEL).all()
    assert (df["slug"] == MODEL).all()
    assert df.attrs["design"] == DESIGN[study]
    d, s = data.set_index(key).loc[df[key]], scores.set_index(key).loc[df[key]]
    assert df["text"].tolist() == d[record.text_column].tolist()
    for c in DESIGN[study]:
        assert df[c].tolist() == d[c].tolist(), c
    assert (df["precision"] == json.loads((run / "scores" / f"{MODEL}.json").read_text())["dtype"]).all()
    if study == "negation":
        for c in ("n_tokens", "sum_logprob", "mean_logprob", "ppl"):
            assert np.array_equal(df[c].to_numpy(), s[c].to_numpy()), c
        return
    gold = (np.where(d["label"], "Yes", "No") if study == "monotonicity"
            else d["gold" if study == "personas" else "answer"])
    assert df["gold"].tolist() == list(gold)
    assert df["choice"].tolist() == s["choice"].tolist() and df["correct"].tolist() == s["correct"].tolist()
    assert np.array_equal(df["margin"].to_numpy(), s["margin"].to_numpy())
    lps = [c for c in scores.columns if c.startswith("logp_")]
    assert np.array_equal(df[lps].to_numpy(), s[lps].to_numpy(), equal_nan=True)  # NaN: past a row's own options
    first = json.loads(next(iter(main_lines(["show", str(run), "--jsonl", "--limit", "1"]))))
    i = scores.index[scores[key] == first[key]][0]
    assert first["logprobs"] == dict(zip(df["options"].iloc[0], scores.loc[i, lps].tolist()))
    assert first["text"] == data.set_index(key).loc[first[key], record.text_column]


def main_lines(argv, capsys=None) -> list[str]:
    """What ``python -m nbutils ARGV`` prints, line by line (it must succeed)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue().splitlines()


def test_show_wrong_is_every_error_most_confident_first(samples):
    run = samples["monotonicity"]
    _, data, scores = files(run, "monotonicity")
    got = [json.loads(line) for line in main_lines(["show", str(run), "--wrong", "--jsonl"])]
    errors = scores[~scores["correct"]]
    assert len(got) == len(errors) and not any(g["correct"] for g in got)
    assert {g["prompt_id"] for g in got} == set(errors["prompt_id"])
    margins = [abs(g["margin"]) for g in got]
    assert margins == sorted(margins, reverse=True)
    assert all("\n" in g["text"] and g["text"].endswith("?") for g in got)  # the whole few-shot prompt


def test_show_closest_where_and_limit(samples, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")  # the table's width: not whatever terminal (or none) the test runs under
    run = samples["monotonicity"]
    _, data, scores = files(run, "monotonicity")
    got = [json.loads(line) for line in main_lines(["show", str(run), "--closest", "7", "--jsonl"])]
    assert [g["prompt_id"] for g in got] == scores.iloc[np.argsort(scores["margin"].abs().to_numpy(), kind="stable")][
        "prompt_id"].head(7).tolist()
    argv = ["show", str(run), "--where", "condition=explicit", "--where", "concept=less than 1/3",
            "--where", "concept=more than 2/3", "--jsonl"]
    got = [json.loads(line) for line in main_lines(argv)]
    want = data[(data["condition"] == "explicit") & data["concept"].isin(["less than 1/3", "more than 2/3"])]
    assert sorted(g["prompt_id"] for g in got) == sorted(want["prompt_id"])
    ok = [json.loads(line) for line in main_lines(["show", str(run), "--where", "correct=true", "--jsonl"])]
    assert len(ok) == int(scores["correct"].sum())
    table = main_lines(["show", str(run), "--limit", "4"])
    assert table[0].startswith("margin: log-probability of the first option minus the second's (Yes − No)")
    assert table[-1].startswith("4 of 120 items") and table[-6].startswith("margin  gold")
    closest = " ".join(main_lines(["show", str(run), "--closest", "3"]))
    assert "3 of 3 items of smallest |margin|, the closest of 120" in closest, "how many they are the closest of"


@pytest.mark.parametrize("study", list(DESIGN))
def test_the_table_fits_the_terminal_and_full_shows_the_whole_prompt(samples, study, monkeypatch):
    """The table is as wide as $COLUMNS says (120 where nothing says), and keeps each prompt's question part: the
    end of its last line, whole where the terminal has room for it."""
    run = samples[study]
    record, data, _ = files(run, study)
    for columns in ("120", "80", "150"):
        monkeypatch.setenv("COLUMNS", columns)
        lines = main_lines(["show", str(run), "--limit", "50"])
        assert all(len(line) <= int(columns) for line in lines), columns
        assert max(map(len, lines)) > int(columns) - 30, "the table uses the terminal's width"
        if study != "negation":  # a prompt: its question part (the end of its last sentence) is shown
            last = [plain(t).rsplit(" ", 1)[-1] for t in items(run).head(50)["gist"]]  # the question, its end
            rows = [line for line in lines if line[:1] in "+-" and line[1:2].isdigit()]  # each starts with its margin
            assert len(rows) == len(last) and all(r.endswith(end) for r, end in zip(rows, last)), columns
    full = "\n".join(main_lines(["show", str(run), "--full", "--limit", "1"]))
    first = items(run).iloc[0]
    assert all(line.strip() in full for line in first["text"].splitlines())


def test_cut_question_fits_and_keeps_the_last_sentence_where_it_fits():
    """2,000 random texts of random sentences and widths: the cut fits, leaves a short text alone, and ends with the
    last sentence (whole where it fits with its "… ", else its end)."""
    import re

    from nbutils.items import cut_question

    rng = np.random.default_rng(7)
    for _ in range(2000):
        parts = ["".join(rng.choice(list("ab ?"), rng.integers(1, 30))) for _ in range(rng.integers(1, 7))]
        text, width = ". ".join(parts), int(rng.integers(2, 90))
        out = cut_question(text, width)
        assert len(out) <= width, (text, width, out)
        if len(text) <= width:
            assert out == text
            continue
        last = re.split(r"(?<=[.!:;])\s+(?=\S)", text)[-1]
        assert out.endswith(last if len(last) + 2 <= width else last[len(last) - width + 1:]), (text, width, out)
        assert "…" in out


def test_where_and_counts_are_checked_before_anything_is_read(samples, capsys):
    run = str(samples["monotonicity"])
    assert main(["show", run, "--where", "colour=red"]) == 2
    err = capsys.readouterr().err
    assert "'colour' is not a key" in err and "'concept'" in err and "'condition'" in err
    assert main(["show", run, "--where", "concept=more than 1/5"]) == 2
    err = capsys.readouterr().err
    assert "no value 'more than 1/5'" in err and "'more than 1/4'" in err and "'less than 3/4'" in err
    assert main(["show", run, "--where", "concept"]) == 2 and "KEY=VALUE" in capsys.readouterr().err
    assert main(["show", run, "--model", "gpt-9"]) == 2 and MODEL in capsys.readouterr().err
    for bad in (["--closest", "0"], ["--limit", "-3"], ["--limit", "x"]):
        with pytest.raises(SystemExit) as stop:
            main(["show", run, *bad])
        assert stop.value.code == 2 and "must be an integer ≥ 1" in capsys.readouterr().err
    assert main(["show", str(samples["negation"]), "--wrong"]) == 2 and "sentences" in capsys.readouterr().err


def test_stale_and_edited_score_files_are_never_items(samples, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(samples["custom"], run)
    scores = paths.scores_dir(run)
    for name in ("edited", "stale"):
        shutil.copy(scores / f"{MODEL}.parquet", scores / f"{name}.parquet")
        shutil.copy(scores / f"{MODEL}.json", scores / f"{name}.json")
    edited = pd.read_parquet(scores / "edited.parquet")
    edited.loc[0, "margin"] += 1
    edited.to_parquet(scores / "edited.parquet")
    meta = artifacts.read_json(scores / "stale.json")
    artifacts.write_json(dict(meta, dataset_sha256="0" * 64), scores / "stale.json")
    df = items(run)
    assert set(df["model"]) == {LABEL}
    edited_note = "not shown: edited.json is not as written: edited.parquet changed"
    assert any(n.startswith(edited_note) for n in df.attrs["notes"])
    assert "not shown: stale.json is made from an earlier version of the dataset" in df.attrs["notes"]


def test_jsonl_export_and_terminal_text_are_safe(samples, tmp_path):
    df = items(samples["custom"])
    out = write_jsonl(df, tmp_path / "items.jsonl")
    back = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [b["row_id"] for b in back] == df["row_id"].tolist() and back[3]["text"] == df["text"].iloc[3]
    with pytest.raises(FileExistsError, match="exists"):
        write_jsonl(df, out)
    assert plain("red \x1b[31mtext\x07 \u202eevil") == "red \\x1b[31mtext\\x07 \\u202eevil"
    hostile = df.head(2).copy()
    hostile.attrs = dict(df.attrs)
    hostile["gist"] = ["\x1b]0;title\x07 clear \x1b[2J", "fine"]
    assert "\x1b" not in "\n".join(table_lines(hostile)) and "\\x1b[2J" in "\n".join(table_lines(hostile))


def hostile_run(src, dst, n_copies: int = 1, seed: int = 0):
    """A custom run built from the sample without a model: its rows repeated ``n_copies`` times with new ids, the
    prompt and group texts hostile, and scores drawn at random, every derived column made as the engine makes it."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.md"))
    data = pd.read_parquet(dst / "items.parquet")
    data = pd.concat([data.assign(row_id=data["row_id"] + f"#{k}") for k in range(n_copies)], ignore_index=True)
    for i, col in enumerate(("text", "prompt")):
        data[col] = [f"{t}\n{HOSTILE[(j + i) % len(HOSTILE)]}" for j, t in enumerate(data[col])]
    data["group"] = [HOSTILE[j % len(HOSTILE)] for j in range(len(data))]
    data.to_parquet(dst / "items.parquet")
    side = artifacts.read_json(dst / "items.json")
    artifacts.write_json(dict(side, sha256=artifacts.sha256_file(dst / "items.parquet"), rows=len(data)),
                         dst / "items.json")
    rng = np.random.default_rng(seed)
    yes, no = -rng.exponential(2, len(data)), -rng.exponential(2, len(data))
    choice = np.where(yes >= no, "Yes", "No")
    scores = pd.DataFrame({"row_id": data["row_id"], "logp_yes": yes, "logp_no": no, "margin": yes - no,
                           "choice": choice, "correct": choice == data["answer"].to_numpy()})
    meta = artifacts.read_json(dst / "scores" / f"{MODEL}.json")
    meta = {k: v for k, v in meta.items() if k not in ("n_rows", "scores_sha256", "ids_sha256")}
    write_scores(scores, dict(meta, dataset_sha256=artifacts.sha256_file(dst / "items.parquet")),
                 dst / "scores" / f"{MODEL}.parquet")
    tr.executed(dst, [tr.code("x")], notebook=studies.get("custom").notebooks["analyze"])
    return data, scores


@tr.needs_chromium
def test_hostile_prompts_in_the_item_browser_are_text_and_only_its_script_runs(samples, tmp_path):
    data, _ = hostile_run(samples["custom"], tmp_path / "run")
    page = write_report(tmp_path / "run")
    soup = BeautifulSoup(page.read_text(), "html.parser")
    tr.only_the_item_browser_script(soup)
    assert not [t.name for t in soup.find_all(True) if any(a.lower().startswith("on") for a in t.attrs)]
    assert not soup.find_all("img") and not soup.find_all("textarea") and not soup.find("b", string="out")
    pres = [p.get_text() for p in soup.select("table.items pre")]
    assert sorted(pres) == sorted(data["text"])  # every prompt whole, as text
    dom = tr.chromium_dom(page)
    assert dom.title.get_text() != "PWNED" and not dom.body.get("data-pwned"), "a hostile text ran"
    assert dom.select_one("#items input").get("hidden") is None, "the browser's own script did not run"
    assert dom.select_one("#items .count").get_text() == f"{len(data)} of {len(data)} items"
    assert sorted(p.get_text() for p in dom.select("table.items pre")) == sorted(data["text"])


def test_the_browser_holds_every_item_up_to_the_cap_then_the_errors_and_closest_calls(samples, tmp_path):
    n_copies = ALL_ITEMS // 24 + 1  # 24 rows in the sample: just over the cap
    _, scores = hostile_run(samples["custom"], tmp_path / "big", n_copies)
    assert len(scores) > ALL_ITEMS
    page = write_report(tmp_path / "big").read_text()
    ids = [p.get_text().removeprefix("row_id ") for p in BeautifulSoup(page, "html.parser").select("table.items .id")]
    order = np.argsort(scores["margin"].abs().to_numpy(), kind="stable")
    closest = scores.iloc[order]["row_id"].head(KEEP)
    wrong = scores[~scores["correct"]]
    errors = wrong.iloc[np.argsort(-wrong["margin"].abs().to_numpy(), kind="stable")]["row_id"].head(KEEP)
    assert sorted(ids) == sorted(set(closest) | set(errors)) and len(ids) < 2 * KEEP + 1
    # a run outside the project is named by a placeholder, never by this machine's path
    assert "python -m nbutils show RUN_DIR --jsonl" in page and f"{len(scores):,} scored items" in page
    assert str(tmp_path) not in page

    small = tmp_path / "small"  # at the cap: every item
    shutil.copytree(tmp_path / "big", small)
    keep = scores["row_id"].head(ALL_ITEMS)
    data = pd.read_parquet(small / "items.parquet")
    data[data["row_id"].isin(keep)].to_parquet(small / "items.parquet")
    side = artifacts.read_json(small / "items.json")
    artifacts.write_json(dict(side, sha256=artifacts.sha256_file(small / "items.parquet")), small / "items.json")
    meta = artifacts.read_json(small / "scores" / f"{MODEL}.json")
    meta = {k: v for k, v in meta.items() if k not in ("n_rows", "scores_sha256", "ids_sha256")}
    write_scores(scores.head(ALL_ITEMS), dict(meta, dataset_sha256=artifacts.sha256_file(small / "items.parquet")),
                 small / "scores" / f"{MODEL}.parquet")
    page = write_report(small).read_text()
    assert page.count('<p class="id">') == ALL_ITEMS and "most confident errors" not in page


def test_runs_lists_the_samples(samples, capsys):
    lines = main_lines(["runs", str(samples["custom"].parent)])
    for study, n in (("custom", 24), ("monotonicity", 120), ("negation", 96), ("personas", 162)):
        assert any(line.startswith(f"{study}  [{study}]  {n} items · {LABEL}") and "not analysed" in line
                   for line in lines), (study, lines)
    assert main(["runs", str(samples["custom"] / "items.parquet")]) == 2 and "not a folder" in capsys.readouterr().err


def test_the_notebooks_items_to_read_are_the_errors_and_closest_calls(samples):
    from nbutils.items import to_read

    run = samples["monotonicity"]
    _, _, scores = files(run, "monotonicity")
    text = to_read(run, n=5)
    wrong = scores[~scores["correct"]]
    errors = wrong.iloc[np.argsort(-wrong["margin"].abs().to_numpy(), kind="stable")]["prompt_id"].head(5)
    closest = scores.iloc[np.argsort(scores["margin"].abs().to_numpy(), kind="stable")]["prompt_id"].head(5)
    blocks = text.split("═══ ")
    assert blocks[1].startswith(f"{LABEL}: the 5 most confident errors of 120 items")
    assert [ln.split(" · ")[1] for ln in blocks[1].splitlines() if ln.startswith("── ")] == errors.tolist()
    assert [ln.split(" · ")[1] for ln in blocks[2].splitlines() if ln.startswith("── ")] == closest.tolist()
    assert "… 15 earlier lines (--full shows them)" in text and "Does Alice have" in text
    sentences = to_read(samples["negation"], n=2).split("═══ ")
    assert "the 2 least likely sentences" in sentences[1] and "the 2 most likely sentences" in sentences[2]


CLICKS = """<script>
window.addEventListener("load", () => {
  const ids = () => [...document.querySelectorAll("table.items tbody tr")].map(
    (r) => r.querySelector(".id").textContent);
  const button = (name) => [...document.querySelectorAll("table.items th button")].find((b) => b.textContent === name);
  const seen = {};
  button("|margin|").click(); seen.up = ids();
  button("|margin|").click(); seen.down = ids();
  button("concept").click(); seen.concept = ids();
  const box = document.querySelector("#items input");
  box.value = "less than 1/3 explicit"; box.dispatchEvent(new Event("input"));
  setTimeout(() => {
    seen.count = document.querySelector("#items .count").textContent;
    seen.shown = [...document.querySelectorAll("table.items tbody tr")].filter((r) => !r.hidden).map(
      (r) => r.querySelector(".id").textContent);
    const pre = document.createElement("pre"); pre.id = "clicked"; pre.textContent = JSON.stringify(seen);
    document.body.appendChild(pre);
  }, 500);
});
</script>"""


@tr.needs_chromium
def test_the_browser_sorts_and_filters_as_the_files_say(samples, tmp_path):
    """The browser's own script, driven by clicks and typing in Chromium (a copy of the page whose policy lets the
    test's script run too): |margin| up and down, a design column, and a filter of two words."""
    import re
    import subprocess

    run = tmp_path / "run"
    shutil.copytree(samples["monotonicity"], run)
    tr.executed(run, [tr.code("x")])
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", write_report(run).read_text())
    page = tmp_path / "clicked.html"
    page.write_text(html.replace("</body>", CLICKS + "</body>"))
    dom = subprocess.run([tr.CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}/p",
                          "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=180, check=True).stdout
    seen = json.loads(BeautifulSoup(dom, "html.parser").find(id="clicked").get_text())
    _, data, scores = files(run, "monotonicity")
    by_abs = scores.assign(a=scores["margin"].abs()).sort_values("a", kind="stable")["prompt_id"]
    assert [i.removeprefix("prompt_id ") for i in seen["up"]] == by_abs.tolist()
    by_abs_down = scores.assign(a=-scores["margin"].abs()).sort_values("a", kind="stable")["prompt_id"]
    assert [i.removeprefix("prompt_id ") for i in seen["down"]] == by_abs_down.tolist()  # ties: in file order
    concepts = data.set_index("prompt_id").loc[[i.removeprefix("prompt_id ") for i in seen["concept"]], "concept"]
    assert concepts.tolist() == sorted(data["concept"])
    want = data[(data["concept"] == "less than 1/3") & (data["condition"] == "explicit")]["prompt_id"]
    assert sorted(i.removeprefix("prompt_id ") for i in seen["shown"]) == sorted(want)
    assert seen["count"] == f"{len(want)} of 120 items"


CONTROL = paths.repo_root() / "outputs" / "samples" / "control"  # two models on the same prompts (read, not written)
CONTROL_LABELS = ("SmolLM2-135M-Instruct", "SmolLM2-135M + upward control")


def test_show_names_the_model_whenever_the_run_holds_several(monkeypatch):
    """The control run: its three most confident errors are all the control's, and the table still names it."""
    monkeypatch.setenv("COLUMNS", "160")
    lines = main_lines(["show", str(CONTROL), "--wrong", "--limit", "3"])
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("margin  gold"))
    assert "model" in lines[head].split()
    assert all(CONTROL_LABELS[1] in ln for ln in lines[head + 1: head + 4]), lines
    one = main_lines(["show", str(CONTROL), "--model", "smollm2-135m-instruct", "--limit", "2"])  # by slug
    assert all(CONTROL_LABELS[0] in ln for ln in one[3:5]), one


def test_show_disagree_lists_both_models_answers_to_the_items_they_answer_differently(capsys):
    df = items(CONTROL)
    wide = df.pivot_table(index="prompt_id", columns="model", values="choice", aggfunc="first")
    differ = set(wide.index[wide[CONTROL_LABELS[0]] != wide[CONTROL_LABELS[1]]])
    got = disagree(df, "smollm2-135m-instruct", CONTROL_LABELS[1])  # a slug and a label
    assert set(got["prompt_id"]) == differ and len(got) == 2 * len(differ) and 0 < len(differ) < len(wide)
    assert list(got["model"][::2]) == [CONTROL_LABELS[0]] * len(differ), "pairs, the first model first"
    pairs = got["choice"].to_numpy().reshape(-1, 2)
    assert (pairs[:, 0] != pairs[:, 1]).all()
    gaps = np.abs(np.diff(got["margin"].to_numpy().reshape(-1, 2), axis=1)).ravel()
    assert (np.diff(gaps) <= 1e-12).all(), "the largest difference in margin first"
    lines = main_lines(["show", str(CONTROL), "--disagree", CONTROL_LABELS[1], "smollm2-135m-instruct", "--limit", "4"])
    assert " ".join(lines).count(f"4 of {2 * len(differ)} rows, both models' answers to the {len(differ)} items") == 1
    assert sum(CONTROL_LABELS[0] in ln for ln in lines) == 2 and sum(CONTROL_LABELS[1] in ln for ln in lines) == 2
    assert main(["show", str(CONTROL), "--disagree", "smollm2-135m-instruct", CONTROL_LABELS[0]]) == 2
    assert "two different models" in capsys.readouterr().err
    assert main(["show", str(CONTROL), "--disagree", "gpt-9", CONTROL_LABELS[0]]) == 2
    assert "'SmolLM2-135M + upward control' (smollm2-135m-instruct.smollm2-135m-upward" in capsys.readouterr().err


def test_runs_prints_each_models_headline_the_ones_that_found_something_first():
    from nbutils.report._run_index import _headlines

    def rec(model, p, **kw):
        return {"test": "gee_bias_reduced", "term": "upward", "condition": "concept_learning", "estimate": 1.0,
                "p": p, "valid": True, "headline": True, **({"model": model} if model else {}), **kw}

    summary = {"records": [rec("base", 0.9), rec("base", 0.5, condition="explicit"), rec("control", 0.001),
                           rec(None, 0.0001, models=["control", "base"], term="upward:model", test="glmm_models")]}
    lines = _headlines(summary)
    assert lines[0].startswith("control") and lines[0].endswith("p = .001 (GEE by threshold)"), lines
    assert lines[1].startswith("base") and "p = .900" in lines[1], lines
    assert lines[2] == "+ 1 more headline test of these models (other conditions or terms), 0 at p < .05 (results.md)"
    assert lines[3] == "+ 1 comparison of two models, 1 at p < .05 (results.md)"
    assert not any("gee_bias_reduced" in line or "glmm_models" in line for line in lines), "short names, not ids"
    many = {"records": [rec(f"m{i}", 0.5) for i in range(6)]}
    assert _headlines(many)[-1] == "… 2 more models, 0 of them with a finding at p < .05 (results.md)"


SEEDS = paths.repo_root() / "outputs" / "samples" / "validation"  # analysed runs of six models (read, not written)


def test_runs_says_each_models_reading_as_the_report_does_shortened():
    """On an analysed run of six models: each model's line is its reading's sentence (the report's words) cut to its
    claim, with the headline's estimate, p and the test's short name; no test id; the models not shown are counted."""
    import re

    from nbutils import artifacts
    from nbutils.results import SHORT_METHODS
    from nbutils.results import reading
    from nbutils.results import fmt_p
    from nbutils.report._run_index import _headlines, shorten

    summary = artifacts.read_summary(SEEDS / "seed-33" / "summary.json")
    lines = _headlines(summary)
    heads = {h["model"]: h for h in summary["headline"] if h.get("model")}
    for line in lines[:4]:
        model = max((m for m in heads if line.startswith(m)), key=len)
        h = heads[model]
        said = reading(summary, model, h["condition"])["sentence"]
        assert line.startswith(model + shorten(said[len(model):])), (line, said)
        assert fmt_p(h["p"]) in line and SHORT_METHODS[h["test"]] in line, line
        assert len(line.split()) < len(said.split()), "shortened"
    assert not any(re.search(r"\b(glmm_lrt|glmm_models|gee_bias_reduced)\b", line) for line in lines)
    assert lines[4] == "… 2 more models, 0 of them with a finding at p < .05 (results.md)", lines
    assert shorten("a (95% CI [1, 2]) b (one-sided binomial) c (x (y; z)) d; e.") == "a b (one-sided binomial) c d"
