"""The item browser pairs two models: the items they answer differently first, by how far apart their margins are,
each item's two rows together, with the difference in a column and filter buttons (wrong answers, the two disagree,
a model, a condition); names with markup read as text; one model or three keep the plain browser."""
from __future__ import annotations

import pandas as pd
from bs4 import BeautifulSoup

from nbutils.report import ITEMS_SCRIPT, SCRIPT_HASH, items_html, paired

A, B = 'Base <i>LM</i> "135M"', "Base + upward control"


def frame(models=(A, B)) -> pd.DataFrame:
    rows = []
    margins = {A: [2.0, -1.0, 0.5, 3.0], B: [1.5, 2.0, -3.0, 2.9]}  # items p1, p2 disagree; p0, p3 agree
    for m in models:
        for i in range(4):
            x = margins.get(m, margins[A])[i]
            rows.append({"model": m, "prompt_id": f"p{i}", "condition": "concept_learning" if i < 2 else "explicit",
                         "gist": f"question {i}", "text": f"the whole prompt {i}", "gold": "Yes",
                         "choice": "Yes" if x > 0 else "No", "correct": x > 0, "margin": x})
    df = pd.DataFrame(rows)
    df.attrs.update(id_column="prompt_id", table_design=["condition"], notes=[])
    return df


def test_two_models_are_paired_disagreements_first_by_the_difference_of_their_margins():
    out = paired(frame())
    assert list(out["prompt_id"]) == ["p2", "p2", "p1", "p1", "p0", "p0", "p3", "p3"]  # |3.5| > |−3.0|, then |0.5| > |0.1|
    assert list(out["model"][:2]) == [A, B] and out["disagree"].tolist() == [True] * 4 + [False] * 4
    assert out.loc[out["prompt_id"] == "p1", "pair_diff"].tolist() == [-3.0, -3.0]
    assert paired(frame((A,))) is None and paired(frame((A, B, "third"))) is None


def test_the_paired_browser_has_its_buttons_rows_marked_and_names_as_text():
    html = str(items_html(frame(), "Every item.", []))
    soup = BeautifulSoup(html, "html.parser")
    buttons = [(b["data-key"], b["data-value"], b.get_text()) for b in soup.select("button.filter")]
    assert buttons == [("wrong", "1", "wrong answers"), ("disagree", "1", "the two disagree"), ("model", "0", A),
                       ("model", "1", B), ("cond", "concept_learning", "concept learning"), ("cond", "explicit", "explicit")]
    rows = soup.select("table.items tbody tr")
    assert [(r["data-model"], r["data-disagree"], r["data-wrong"]) for r in rows[:2]] == [("0", "1", "0"), ("1", "1", "1")]
    assert "Δ margin" in [th.get_text() for th in soup.select("table.items th")]
    assert "<i>LM</i>" not in html and "Base &lt;i&gt;LM&lt;/i&gt;" in html
    assert "come first (2 of 4)" in soup.get_text()
    assert "button.filter" in ITEMS_SCRIPT and SCRIPT_HASH.startswith("sha256-")


def test_one_model_keeps_the_plain_browser():
    soup = BeautifulSoup(str(items_html(frame((A,)), "Every item.", [])), "html.parser")
    assert not soup.select("button.filter") and "Δ margin" not in soup.get_text()
