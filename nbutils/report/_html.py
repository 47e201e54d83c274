"""The report page's HTML (``report._page`` collects what goes on it): one self-contained page, escaped by default.

The page is safe to open whatever the run's data hold: it is built with a template engine that escapes by default
(jinja2), markdown is rendered with raw HTML escaped, tables are cleaned to table markup (bleach), so a group value such
as ``<script>…</script>`` reads as text; and a Content-Security-Policy forbids every fetch and every script but one:
the item browser's own, allowed by its sha256 (the page without an item browser allows none). Figures are data URIs,
so the one file can be mailed, archived or opened offline. The item browser's rows are HTML written here, escaped;
its script only hides and reorders them. Tables fit a 1280-pixel-wide window: long
cells and headers wrap, and a table of many columns is split into parts that repeat its naming columns.
"""
from __future__ import annotations

import math
import re
from copy import copy

from markupsafe import Markup

from ..results import EVIDENCE
from ._item_browser import _ITEMS_CSS, ITEMS_SCRIPT, SCRIPT_HASH, items_html  # noqa: F401 - the item browser

FOLD_ROWS = 8  # a table of more rows than this is folded away (a click opens it)
FOLD_CHARS = 2500  # and so is a table of fewer rows holding more text than this (long notes)
MAX_COLUMNS = 11  # a table shown with more columns than this is split into parts (each repeating the naming columns)
CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src {script}; object-src 'none'; "
       "base-uri 'none'; form-action 'none'")
_BASE64 = re.compile(r"^[A-Za-z0-9+/=]*$")
_TABLE_TAGS = {"table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col", "div", "span", "p",
               "br", "b", "strong", "i", "em", "code", "sub", "sup", "wbr"}
_TABLE_ATTRS = {"*": ["class", "id", "colspan", "rowspan", "title"]}
_CSS_SAFE = re.compile(r"^[^<>@\\]*$")  # a table's own style block: selectors and properties, nothing that loads
_NUMBER = re.compile(r"^\s*([<>]\s*)?[-+−]?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?%?\s*$|^\s*$", re.IGNORECASE)


def _markdown(text: str) -> Markup:
    """Markdown as HTML with any raw HTML in it escaped (it reads as text) and unsafe link targets dropped."""
    import mistune

    md = mistune.create_markdown(escape=True, plugins=["table", "strikethrough"])
    return Markup(md(text))


def cell_html(cell) -> Markup:
    """A markdown cell rendered, or a code cell's outputs (never its code)."""
    if cell.cell_type == "markdown":
        return Markup('<section class="text">{}</section>').format(_markdown(cell.source)) if cell.source.strip() \
            else Markup("")
    if cell.cell_type != "code":
        return Markup("")
    parts = [_output_html(o) for o in cell.get("outputs", [])]
    return Markup("\n").join(Markup('<div class="output">{}</div>').format(p) for p in parts if p)


def _output_html(out) -> Markup:
    """One output in its richest form a page can show by itself, made safe."""
    if out.get("output_type") == "stream":
        return Markup("<pre>{}</pre>").format(out.get("text", ""))
    data = out.get("data", {})
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            b64 = "".join(data[mime].split())
            if _BASE64.match(b64):
                return Markup('<img src="data:{};base64,{}" alt="figure">').format(mime, b64)
    if "image/svg+xml" in data:  # as an image: a script inside an SVG shown by <img> never runs
        import base64

        b64 = base64.b64encode(data["image/svg+xml"].encode()).decode()
        return Markup('<img src="data:image/svg+xml;base64,{}" alt="figure">').format(b64)
    if "text/html" in data:
        return _folded(_clean_table(data["text/html"]))
    if "text/markdown" in data:
        return _markdown(data["text/markdown"])
    if "text/plain" in data:
        return Markup("<pre>{}</pre>").format(data["text/plain"])
    return Markup("")


def _clean_table(html: str) -> Markup:
    """A table output (pandas HTML or a Styler) kept to table markup: any other tag in it, such as a data value that
    holds ``<script>`` or ``<img onerror=…>``, is escaped to text by bleach; the Styler's own style block is kept when
    it holds only selectors and properties; headers may wrap after an underscore; a table of many columns is split."""
    import bleach
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    styles = [s.extract().get_text() for s in soup.find_all("style")]
    clean = bleach.clean(str(soup), tags=_TABLE_TAGS, attributes=_TABLE_ATTRS, strip=False, strip_comments=True)
    soup = BeautifulSoup(clean, "html.parser")
    for table in soup.find_all("table"):
        _split_wide(table, soup)
    for th in soup.find_all("th"):  # a long column name may break after each underscore
        for text in [t for t in th.find_all(string=True) if "_" in t]:
            pieces = str(text).split("_")
            nodes = []
            for piece in pieces[:-1]:
                nodes += [piece + "_", soup.new_tag("wbr")]
            text.replace_with(*nodes, pieces[-1])
    style = "".join(f"<style>{s}</style>" for s in styles if _CSS_SAFE.match(s))
    return Markup(style + str(soup))


def _folded(table: Markup) -> Markup:
    """A table of more than ``FOLD_ROWS`` rows (or ``FOLD_CHARS`` characters) folded away (``<details>``), its caption
    naming it and its size; a shorter one as it is."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(str(table), "html.parser")
    rows = max((len(t.select("tbody > tr")) for t in soup.find_all("table")), default=0)
    if rows <= FOLD_ROWS and len(soup.get_text()) <= FOLD_CHARS:
        return Markup('<div class="table">{}</div>').format(table)
    caption = soup.find("caption")
    name = caption.get_text(" ", strip=True).split(":")[0] if caption else "the table"
    return Markup('<details class="table"><summary>{} ({} rows): show</summary>{}</details>').format(name, rows, table)


def headline_table(rows: list[dict]) -> Markup:
    """The run's headline tests, one row per model and what is tested (``nbutils.results.table_rows``); the columns
    of accuracies shown only when a study records them."""
    import jinja2

    if not rows:
        return Markup("")
    cols = [c for c in HEADLINE_COLUMNS if any(r.get(c[0]) for r in rows)]
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return Markup(env.from_string(_HEADLINE).render(cols=cols, rows=rows, evidence=EVIDENCE))


HEADLINE_COLUMNS = [("model", "model"), ("what", "what is tested"), ("acc_up", "accuracy upward"),
                    ("acc_down", "accuracy downward"), ("gap", "gap"), ("estimate", "estimate, 95% CI"), ("p", "p"),
                    ("test", "test"), ("reading", "what it means")]
_HEADLINE = """<table class="headline"><thead><tr>{% for c in cols %}<th>{{ c[1] }}</th>{% endfor %}</tr></thead>
<tbody>{% for r in rows %}<tr{% if r.verdict in evidence %} class="evidence"{% endif %}>
{%- for c in cols %}<td class="{{ c[0] }}">{{ r.get(c[0]) or "" }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>"""


def _split_wide(table, soup) -> None:
    """A table of more than ``MAX_COLUMNS`` columns becomes several, each repeating the leading naming columns (the
    ones whose cells are words, not numbers), so that no part is wider than the page."""
    rows = table.find_all("tr")
    if not rows or any(c.get("colspan") or c.get("rowspan") for r in rows for c in r.find_all(["th", "td"])):
        return
    grid = [r.find_all(["th", "td"], recursive=False) for r in rows]
    width = max(len(g) for g in grid)
    if width <= MAX_COLUMNS or any(len(g) != width for g in grid):
        return
    body = [g for g, r in zip(grid, rows) if r.find_parent("thead") is None]
    keys = 0
    while keys < min(4, width - 1) and all(not _NUMBER.match(g[keys].get_text()) for g in body):
        keys += 1
    rest = list(range(keys, width))
    parts = math.ceil(len(rest) / (MAX_COLUMNS - keys))
    size = math.ceil(len(rest) / parts)
    caption = table.find("caption")
    anchor = table
    for k in range(parts):
        cols = list(range(keys)) + rest[k * size:(k + 1) * size]
        part = soup.new_tag("table", attrs={k: v for k, v in table.attrs.items() if k != "id"})
        part["class"] = list(table.get("class") or []) + ["part"]
        for section_name in ("thead", "tbody"):
            section = table.find(section_name)
            if section is None:
                continue
            new_section = soup.new_tag(section_name)
            for r in section.find_all("tr", recursive=False):
                cells = r.find_all(["th", "td"], recursive=False)
                new_row = soup.new_tag("tr")
                for c in cols:
                    new_row.append(copy(cells[c]))
                new_section.append(new_row)
            part.append(new_section)
        if caption is not None and k == parts - 1:
            cap = copy(caption)
            cap.append(f" (split into {parts} parts of its columns to fit the page)")
            part.insert(0, cap)
        anchor.insert_after(part)
        anchor = part
    table.decompose()


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>{{ css }}</style>
</head>
<body>
<main>
{% for alert in alerts %}<div class="alert" role="alert"><strong>Warning:</strong> {{ alert }}</div>
{% endfor %}<h1>{{ title }}</h1>
{% if top.question %}<p class="question">{{ top.question }}</p>
{% endif %}<p class="about"><strong>Run</strong> <code>{{ about.run }}</code> · <strong>study</strong> {{ about.study }}
 · <strong>score files</strong> {{ about.score_files }}{% if about.ran %} · <strong>analysed</strong> {{ about.ran }}
{%- endif %}</p>
<section class="finding" id="finding">
{% if top.findings %}<ul class="findings">{% for line in top.findings %}<li>{{ line }}</li>{% endfor %}</ul>
{% endif %}{{ top.table }}
{% if top.wide %}{% if top.figure %}<figure class="wide">{{ top.figure }}<figcaption>{{ top.caption }}</figcaption>
</figure>{% endif %}<details class="words"><summary>{{ top.fold }}</summary><div class="words">{{ top.words }}</div>
</details>
{% else %}<div class="finding-grid"><div class="words">{{ top.words }}</div>
{% if top.figure %}<figure>{{ top.figure }}<figcaption>{{ top.caption }}</figcaption></figure>{% endif %}</div>
{% endif %}</section>
{% if toc %}<nav class="toc" aria-label="contents"><h2>Contents</h2><ol>
{%- for id, name in toc %}<li><a href="#{{ id }}">{{ name }}</a></li>{% endfor %}</ol></nav>
{% endif %}{% for id, part in sections %}<section class="part" id="{{ id }}">{{ part }}</section>
{% endfor %}{{ items }}</main>
{% if items %}<script>{{ script }}</script>
{% endif %}</body>
</html>
"""


def page(title: str, top: dict, about: dict, alerts: list[str], toc: list, sections: list,
         items: Markup = Markup("")) -> str:
    """The page from its parts: the finding first (``top``: the question, the headline table, the results in words
    and Figure 1), then the contents and the sections (``toc``: (anchor, name) pairs; ``sections``: (anchor, HTML)).
    Strings are escaped by the template; only the parts built as ``Markup`` (already escaped or cleaned) go in as
    HTML. ``items``: the item browser (``items_html``), with its script."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    csp = CSP.format(script=f"'{SCRIPT_HASH}'" if items else "'none'")
    top = {"question": "", "table": Markup(""), "words": Markup(""), "figure": Markup(""), "caption": "",
           "findings": [], "wide": False, "fold": "", **top}
    return env.from_string(_TEMPLATE).render(csp=csp, title=title, css=Markup(_CSS + _ITEMS_CSS), top=top,
                                             about=about, alerts=alerts, toc=toc, sections=sections, items=items,
                                             script=Markup(ITEMS_SCRIPT))


_CSS = """
body { margin: 0; background: #fff; color: #1f2328; font: 15px/1.55 system-ui, -apple-system, "Segoe UI", Roboto,
       "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1200px; margin: 0 auto; padding: 20px 20px 64px; }
h1 { font-size: 1.7em; line-height: 1.25; margin: 0.4em 0 0.6em; }
h2 { font-size: 1.3em; margin: 1.8em 0 0.5em; padding-bottom: 0.2em; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 1.1em; margin: 1.4em 0 0.4em; }
p, li { overflow-wrap: anywhere; }
code { font: 0.9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f6f8fa; padding: 0.1em 0.3em;
       border-radius: 4px; overflow-wrap: anywhere; }
pre { font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f6f8fa; padding: 10px 12px;
      border-radius: 6px; white-space: pre-wrap; overflow-wrap: anywhere; }
img { max-width: 100%; max-height: 640px; width: auto; height: auto; display: block; margin: 8px 0; }
.alert { background: #ffebe9; border: 2px solid #cf222e; color: #82071e; padding: 10px 14px; margin: 0 0 12px;
         border-radius: 6px; font-weight: 500; }
.about { color: #444; }
.output { margin: 10px 0; }
.table { max-width: 100%; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; max-width: 100%; }
table.part { margin-bottom: 2px; }
th, td { border: 1px solid #d0d7de; padding: 2px 6px !important; text-align: right; vertical-align: top; }
th { white-space: normal !important; overflow-wrap: normal; }
td { overflow-wrap: anywhere; }
td.reading, td.examples, td.floor { overflow-wrap: normal; min-width: 7em; }
td[class*="col"] { max-width: 36em; }
thead th { background: #f6f8fa; }
tbody tr:nth-child(even) { background: #fafbfc; }
caption { caption-side: bottom; text-align: left; font-size: 0.85em; color: #555; overflow-wrap: anywhere; }
.text table th, .text table td { text-align: left; }
.question { font-size: 1.1em; color: #444; margin-top: -0.4em; }
.finding { border: 1px solid #d0d7de; border-radius: 6px; padding: 4px 14px 8px; background: #fcfdfe; }
table.headline { font-size: 13px; margin: 8px 0; }
table.headline td, table.headline th { text-align: left; }
table.headline td.acc_up, table.headline td.acc_down, table.headline td.gap, table.headline td.p { text-align: right;
                                                                                  white-space: nowrap; }
table.headline tr.evidence td { font-weight: 600; }
.finding-grid { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 540px); gap: 18px; align-items: start; }
.finding-grid .words { font-size: 14px; }
.finding-grid .words li { margin-bottom: 4px; }
.finding figure { margin: 0; }
.finding figure img { max-height: 700px; width: auto; margin: 0 auto; }
figcaption { font-size: 0.85em; color: #555; }
ul.findings { font-size: 15px; margin: 10px 0 6px; padding-left: 1.3em; }
ul.findings li { margin-bottom: 3px; }
table.models td.num { text-align: right; white-space: nowrap; }
table.models td.model { min-width: 13em; }
table.models th.group { text-align: center; }
.legend { font-size: 12px; color: #555; margin: 2px 0 10px; }
.finding figure.wide img { max-height: none; max-width: min(100%, 900px); margin: 0; }
table.models td.floor, table.models td.examples { white-space: nowrap; }
details.words > summary { cursor: pointer; color: #0969da; margin: 8px 0; }
section.part img { max-height: none; }
.toc ol { columns: 2; margin: 0; }
details.table > summary, details.items > summary, details.prose > summary { cursor: pointer; color: #0969da;
                                                                            margin: 6px 0; }
@media print { body { font-size: 13px; } .finding-grid { grid-template-columns: minmax(0, 1fr) minmax(0, 300px); }
               section.items { display: none; } img, section.part img { max-height: 420px; width: auto; }
               section.part, .finding { break-inside: auto; } }
@media screen and (max-width: 760px) { .finding-grid { grid-template-columns: 1fr; } }
"""
