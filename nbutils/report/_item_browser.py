"""The report's item browser (``report._page`` collects the items, ``report._html`` makes the page): one row
per item and model, each opening its whole prompt, a filter box and sortable columns, every text escaped by the
template; its one script only hides and reorders rows, and the page allows it by its sha256.

For two models the browser pairs them (``paired``): the items they answer differently come first, ordered by how far
apart their margins are, the two models' rows of an item side by side, with a column of the difference; and buttons
show only the wrong answers, only the items the two answer differently, one model, or one condition.
"""
from __future__ import annotations

import base64
import hashlib

from markupsafe import Markup

_ITEMS = """<section class="items" id="items">
<h2>Items</h2>
<p>{{ intro }}</p>{% for line in notes %}
<p class="note">{{ line }}</p>{% endfor %}
<p><input type="search" placeholder="filter: words every shown row contains" aria-label="filter the items" hidden>
<span class="count">{{ rows|length }} items</span></p>{% if filters %}
<p class="filters" role="group" aria-label="show only" hidden>show only: {% for f in filters %}<button type="button"
 class="filter" data-key="{{ f.key }}" data-value="{{ f.value }}" aria-pressed="false">{{ f.name }}</button>
{% endfor %}</p>{% endif %}
<details class="items"><summary>{{ rows|length }} items: show them</summary>
<table class="items"><thead><tr>{% for h in head %}<th>{% if h.kind %}<button type="button"
 data-col="{{ loop.index0 }}" data-kind="{{ h.kind }}">{{ h.name }}</button>{% else %}{{ h.name }}{% endif %}</th>
{%- endfor %}</tr></thead>
<tbody>{% for r in rows %}
<tr data-model="{{ r.m }}" data-cond="{{ r.cond }}" data-wrong="{{ r.wrong }}" data-disagree="{{ r.dis }}">
{%- for c in r.cells %}<td{% if c.v is not none %} data-v="{{ c.v }}"{% endif %}>{{ c.text }}</td>{% endfor -%}
<td class="q"><details><summary>{{ r.gist }}</summary><p class="id">{{ r.id }}</p><pre>{{ r.text }}</pre></details>
</td></tr>
{%- endfor %}
</tbody></table></details>
</section>"""


def paired(df):
    """Two models' items (``nbutils.items``) with ``pair_diff`` (the item's margin of the first model less the
    second's) and ``disagree`` (their answers differ), the items they answer differently first, by how far apart
    their margins are, each item's two rows together; None unless the frame holds two models' answer choices, each
    item once per model."""
    import pandas as pd

    models = list(dict.fromkeys(df["model"]))
    id_col = df.attrs.get("id_column")
    if len(models) != 2 or not {"margin", "choice"} <= set(df.columns) or id_col not in df.columns:
        return None
    a, b = (df[df["model"] == m].set_index(id_col) for m in models)
    if a.index.duplicated().any() or b.index.duplicated().any():
        return None
    shared = a.index.intersection(b.index)
    diff = a.loc[shared, "margin"] - b.loc[shared, "margin"]
    dis = a.loc[shared, "choice"].astype(str) != b.loc[shared, "choice"].astype(str)
    out = df.assign(pair_diff=df[id_col].map(diff), disagree=df[id_col].map(dis).astype("boolean").fillna(False),
                    _abs=df[id_col].map(diff.abs()), _m=df["model"].map({m: i for i, m in enumerate(models)}))
    out = out.sort_values(["disagree", "_abs", id_col, "_m"], ascending=[False, False, True, True], kind="stable",
                          na_position="last").drop(columns=["_abs", "_m"])
    out.attrs = dict(df.attrs)
    return out


def items_html(df, intro: str, notes: list[str]) -> Markup:
    """The item browser: one row per item (``nbutils.items``), each opening its whole prompt; a filter box and sortable
    columns, made to work by ``ITEMS_SCRIPT``; two models paired (``paired``), with filter buttons. Every text is
    escaped by the template."""
    import jinja2
    import pandas as pd

    pair = paired(df)
    models = list(dict.fromkeys(df["model"]))
    conditions = list(dict.fromkeys(df["condition"])) if "condition" in df.columns else []
    if pair is not None:
        df = pair
        intro += (f" The two models are paired: the items they answer differently come first ({int(df['disagree'].sum()) // 2}"
                  f" of {df[df.attrs['id_column']].nunique()}), ordered by the difference of their margins "
                  f"(Δ margin: {models[0]}'s less {models[1]}'s); the buttons show only some rows.")
    several = df["model"].nunique() > 1
    design = list(df.attrs.get("table_design", []))
    choices = "margin" in df.columns
    outcome = [("gold", "text"), ("choice", "text"), ("correct", "text"), ("margin", "num"), ("|margin|", "num")] \
        if choices else [("ppl", "num"), ("mean_logprob", "num"), ("sum_logprob", "num")]
    head = [{"name": n, "kind": "text"} for n in (["model"] if several else []) + design]
    head += [{"name": n, "kind": k} for n, k in outcome + ([("Δ margin", "num")] if pair is not None else [])]
    head += [{"name": "question" if choices else "sentence", "kind": None}]

    def cell(name, r):
        if name == "correct":
            return {"text": "" if pd.isna(r["correct"]) else "✓" if r["correct"] else "✗", "v": None}
        if name in ("margin", "|margin|"):
            x = abs(r["margin"]) if name == "|margin|" else r["margin"]
            return {"text": "" if pd.isna(x) else f"{x:+.3f}" if name == "margin" else f"{x:.3f}",
                    "v": "" if pd.isna(x) else repr(float(x))}
        if name == "Δ margin":
            x = r["pair_diff"]
            return {"text": "" if pd.isna(x) else f"{x:+.3f}", "v": "" if pd.isna(x) else repr(float(x))}
        if name in ("ppl", "mean_logprob", "sum_logprob"):
            return {"text": f"{r[name]:.3f}" if name != "ppl" else f"{r[name]:.1f}", "v": repr(float(r[name]))}
        return {"text": str(r[name]), "v": None}

    names = [h["name"] for h in head[:-1]]
    id_col = df.attrs.get("id_column", df.columns[1])
    index = {m: str(i) for i, m in enumerate(models)}
    rows = [{"cells": [cell(n, r) for n in names], "gist": r["gist"], "text": r["text"], "id": f"{id_col} {r[id_col]}",
             "m": index[r["model"]], "cond": str(r["condition"]) if "condition" in df.columns else "",
             "wrong": "1" if "correct" in df.columns and not pd.isna(r["correct"]) and not r["correct"] else "0",
             "dis": "1" if pair is not None and bool(r["disagree"]) else "0"} for _, r in df.iterrows()]
    filters = []
    if pair is not None:
        filters = [{"key": "wrong", "value": "1", "name": "wrong answers"},
                   {"key": "disagree", "value": "1", "name": "the two disagree"}]
        filters += [{"key": "model", "value": index[m], "name": m} for m in models]
        filters += [{"key": "cond", "value": str(c), "name": str(c).replace("_", " ")} for c in conditions]
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return Markup(env.from_string(_ITEMS).render(intro=intro, notes=notes, head=head, rows=rows, filters=filters))


# The item browser's script: a filter over each row's text (the whole prompt included) and sorting by a column. It
# reads text and data attributes and moves rows; it never writes HTML.
ITEMS_SCRIPT = """
(() => {
  const box = document.getElementById("items");
  if (!box) return;
  const table = box.querySelector("table.items"), body = table.tBodies[0], rows = Array.from(body.rows);
  const filter = box.querySelector("input"), count = box.querySelector(".count");
  const texts = rows.map((r) => r.textContent.toLowerCase());
  filter.hidden = false;
  const buttons = Array.from(box.querySelectorAll("button.filter"));
  const group = box.querySelector(".filters");
  if (group) group.hidden = false;
  const show = () => {
    const terms = filter.value.toLowerCase().split(/\\s+/).filter(Boolean);
    const on = {};  // pressed buttons: one of a key's values, and every key
    buttons.filter((b) => b.getAttribute("aria-pressed") === "true").forEach((b) => {
      (on[b.dataset.key] = on[b.dataset.key] || []).push(b.dataset.value);
    });
    let n = 0;
    rows.forEach((r, i) => {
      const ok = terms.every((t) => texts[i].includes(t))
        && Object.keys(on).every((k) => on[k].includes(r.dataset[k]));
      r.hidden = !ok; n += ok;
    });
    count.textContent = n + " of " + rows.length + " items";
  };
  buttons.forEach((b) => b.addEventListener("click", () => {
    b.setAttribute("aria-pressed", b.getAttribute("aria-pressed") === "true" ? "false" : "true");
    show();
  }));
  let timer;
  filter.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(show, 120); });
  show();
  const heads = Array.from(table.tHead.rows[0].cells);
  table.querySelectorAll("th button").forEach((b) => b.addEventListener("click", () => {
    const col = Number(b.dataset.col), num = b.dataset.kind === "num", th = heads[col];
    const up = th.getAttribute("aria-sort") !== "ascending";
    const key = (r) => (num ? parseFloat(r.cells[col].dataset.v) : r.cells[col].textContent);
    const order = rows.map((r, i) => [key(r), i]).sort((a, z) => {
      let d;
      if (num) d = (isNaN(a[0]) - isNaN(z[0])) || (isNaN(a[0]) ? 0 : (up ? a[0] - z[0] : z[0] - a[0]));
      else d = (up ? 1 : -1) * a[0].localeCompare(z[0], undefined, {numeric: true});
      return d || a[1] - z[1];
    });
    heads.forEach((h) => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", up ? "ascending" : "descending");
    body.append(...order.map((o) => rows[o[1]]));
  }));
})();
"""
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(ITEMS_SCRIPT.encode()).digest()).decode()


_ITEMS_CSS = """
.items .filters button { font: inherit; font-size: 0.9em; margin: 0 4px 4px 0; padding: 1px 8px; border: 1px solid #d0d7de;
                         border-radius: 12px; background: #f6f8fa; cursor: pointer; }
.items .filters button[aria-pressed="true"] { background: #0969da; border-color: #0969da; color: #fff; }
.items input { width: 28em; max-width: 100%; font: inherit; padding: 3px 6px; margin-right: 1em; }
.items .count, .items .note { color: #555; }
table.items th button { font: inherit; font-weight: 600; border: 0; background: none; padding: 0; cursor: pointer; }
table.items th[aria-sort="ascending"] button::after { content: " ▲"; }
table.items th[aria-sort="descending"] button::after { content: " ▼"; }
table.items th, table.items td { text-align: left; white-space: nowrap; }
table.items td[data-v] { text-align: right; }
table.items td.q { white-space: normal; min-width: 24em; max-width: 48em; }
table.items summary { cursor: pointer; }
table.items .id { margin: 4px 0 0; color: #555; font-size: 0.95em; }
table.items pre { margin: 4px 0; max-height: 28em; overflow: auto; }
"""
