"""The first screen of a report on several models (``report._page``): the finding, one sentence per model, then the
models side by side (``nbutils.results``) and the forest plot of their gaps; the results in words follow, without
the copy of the table that ``results.md`` holds. A run of one model, or of a study without the table, keeps the
report's headline table.
"""
from __future__ import annotations

import base64

from markupsafe import Markup

from ..results import (MODELS_HEADING, models_applies, models_conditions, models_legend, model_names, models_sentences,
                       models_shown)
from .. import paths

FIGURE = "forest_models"  # the figure the analysis writes under figures/


def top(run, summary: dict) -> dict | None:
    """What opens the page (``findings``: a sentence per model; ``table``; ``figure`` and its ``caption``), or None
    for a run this view is not made for."""
    if not models_applies(summary) or len(model_names(summary)) < 2:
        return None
    text = paths.results_path(run).read_text(encoding="utf-8") if paths.results_path(run).is_file() else ""
    return {"findings": models_sentences(summary), "table": table_html(summary), "figure": _figure(run),
            "fold": fold(text),
            "caption": f"Figure 1: each model's gap, its headline test's odds ratio with its 95% CI "
                       f"({len(model_names(summary))} models, in the order they were scored)", "wide": True}


def words(text: str) -> str:
    """``results.md`` without its models table (the page shows the table above it)."""
    return text.split(MODELS_HEADING, 1)[0].rstrip() + "\n"


def fold(text: str) -> str:
    """What the folded results in words hold, counted: ``every result in words: 48 findings and 3 caveats``."""
    body, _, caveats = words(text).partition("*Caveats:*")
    n, k = (sum(line.startswith("- ") for line in part.splitlines()) for part in (body, caveats))
    return (f"Every result in words: {n} finding{'s' * (n != 1)}"
            + (f" and {k} caveat{'s' * (k != 1)} (the tests that could not be estimated, the design's power)" if k
               else "") + ": show")


_TABLE = """<table class="headline models"><thead>{% if groups %}<tr>{% for g in groups %}<th{% if g.span > 1 %}
 colspan="{{ g.span }}" class="group"{% endif %}>{{ g.name }}</th>{% endfor %}</tr>{% endif %}
<tr>{% for c in cols %}<th>{{ c.head }}</th>{% endfor %}</tr></thead>
<tbody>{% for r in rows %}<tr{% if r._reading in ("learned", "mirror", "prior") %} class="evidence"{% endif %}>
{%- for c in cols %}<td class="{{ c.cls }}">{{ r[c.key] }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>
<p class="legend">{{ legend }}</p>"""


def table_html(summary: dict) -> Markup:
    """The models table as HTML, every cell escaped by the template; the conditions' accuracies under a common
    header."""
    import jinja2

    cols, rows = models_shown(summary)
    shown, groups = [], []
    for key, head in cols:
        cond = next((c for c in models_conditions(summary) if key.endswith(f"_{c}") and key.startswith("acc_")),
                    None)
        name = head.split(" (")[0] if cond else head
        shown.append({"key": key, "head": name.replace(" %", " (%)"), "cls": "num" if key not in (
            "model", "floor", "examples", "reading") else key})
        title = head.split(" (", 1)[1].rstrip(")") if cond else ""
        if groups and title and groups[-1]["name"] == title:
            groups[-1]["span"] += 1
        else:
            groups.append({"name": title, "span": 1})
    if all(g["name"] == "" for g in groups):
        groups = []
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return Markup(env.from_string(_TABLE).render(cols=shown, rows=rows, groups=groups,
                                                 legend=models_legend(summary)))


def _figure(run) -> Markup:
    """The forest plot as a data URI, or nothing when the analysis did not draw it."""
    png = paths.figures_dir(run) / f"{FIGURE}.png"
    if not png.is_file() or png.is_symlink():
        return Markup("")
    b64 = base64.b64encode(png.read_bytes()).decode()
    return Markup('<img class="forest" src="data:image/png;base64,{}" alt="forest plot of each model\'s gap">').format(b64)
