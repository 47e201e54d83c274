"""The name a model goes by in words (its ``label``): what every sentence, table, figure, LaTeX cell, the item browser
and ``show`` print. A model file may give one (``label:``); without one it is derived from the model and its adapter
(``derived_label``). A label is display text only: it is never a file name (a model's files go by its slug) and never
part of what makes two score files the same scoring, so changing it never asks for scoring again.

Being display text, a label is made safe for each output that renders text: Markdown (``markdown``, ``markdown_text``:
its characters that Markdown, HTML or math would read escaped, in results.md and the notebooks' Markdown alike), LaTeX
(``results.latex_escape``; a letter pdflatex cannot set is said by ``latex_unset`` when the tables are written), figures (drawn
as text, never as mathtext: ``nbutils.analysis``), HTML (the report's templates escape it). Nor may a given label be
another model's file name (``distinct``), which ``show --model`` would read either way."""
from __future__ import annotations

import re
from typing import Mapping

from . import paths

LABEL_MAX = 80  # characters of a label: a table cell, a figure's tick, a LaTeX cell


def check_label(label, where: str = "label") -> str | None:
    """A model file's ``label``: None, or one line of at most ``LABEL_MAX`` printable characters (returned stripped);
    else a ValueError naming ``where``."""
    if label is None:
        return None
    if (not isinstance(label, str) or not label.strip() or len(label) > LABEL_MAX or not label.isprintable()
            or not any(ch.isalnum() for ch in label)):
        raise ValueError(f"{where}: must be one line of text of 1 to {LABEL_MAX} printable characters with a letter or "
                         f"digit among them (the name results print for this model), or left out for a name derived "
                         f"from the model; got {label!r}")
    return label.strip()


def derived_label(model: str, adapter: str | None = None, slug: str | None = None, hub_id: str | None = None) -> str:
    """A readable name for a model without a ``label``: the model's own name (``hub_id``'s, an embedded model's hub
    name, else the last part of the hub id or folder), `` + `` the adapter's folder name, and what else its score
    file's ``slug`` marks (an adapter's strength, a precision, a limit) in brackets: ``SmolLM2-135M-Instruct + smollm2-135m-upward-control``."""
    name = str(hub_id or model).rstrip("/").rsplit("/", 1)[-1] or str(model)
    out = name + (f" + {str(adapter).rstrip('/').rsplit('/', 1)[-1]}" if adapter else "")
    base = paths.score_slug(model, adapter=adapter) if model else ""
    rest = slug[len(base):] if slug and base and slug.startswith(base) else ""
    scaled = re.match(r"-s(\d+(?:\.\d+)?(?:e[+-]?\d+)?)", rest) if adapter else None  # at another strength
    strength = scaled.group(1) if scaled else ""
    rest = rest[scaled.end():] if scaled else rest
    marks = ([f"strength {strength}"] if strength else []) + [m for m in rest.split(".") if m]
    return out + (f" ({', '.join(marks)})" if marks else "")


_MARKDOWN = re.compile(r"([\\`*_\[\]<>|$~&#{}])")  # read by Markdown, its HTML or math anywhere in a line
_LEADING = re.compile(r"^(?:([-+])|(\d+)([.)]))")  # at the start of a list item: a list of its own


def markdown(label: str) -> str:
    """``label`` as Markdown that shows it as it is: a backslash before each character that Markdown, the HTML in it
    or math would read (``<``, ``*``, ``_``, ``[``, ``|``, ``$``, …), and before a start that would begin a list."""
    out = _MARKDOWN.sub(r"\\\1", str(label))
    m = _LEADING.match(out)
    if m:
        out = ("\\" + out) if m.group(1) else f"{m.group(2)}\\{out[len(m.group(2)):]}"
    return out


def markdown_text(text: str, names) -> str:
    """``text`` (Markdown made with the model labels ``names`` in it) with each label written as ``markdown`` writes
    it, the longest first, where it is not escaped already (a backslash before a character shows it the same, so a
    word a label shares is unharmed)."""
    for name in sorted({str(n) for n in names if n}, key=len, reverse=True):
        safe = markdown(name)
        if safe != name:  # not where a writer escaped it already (a table cell's ``\<``)
            text = re.sub(r"(?<!\\)" + re.escape(name), lambda _: safe, text)
    return text


def latex_unset(label: str) -> list[str]:
    """The scripts of the letters in ``label`` that pdflatex cannot set in the tables (``results.latex_escape`` writes their
    code points, ``[U+4E2D]``): ``["Arabic", "CJK"]``; empty when it can set every one."""
    import unicodedata

    from .results import latex_escape

    names = [unicodedata.name(ch, "") for ch in dict.fromkeys(str(label)) if "[U+" in latex_escape(ch)]
    scripts = {(n.split(" ")[0] if n else "unnamed") for n in names}
    return sorted(w if w in ("CJK", "unnamed") else w.title() for w in scripts)


def figure_unset(label: str) -> list[str]:
    """The scripts of the letters in ``label`` that no font the figures use has (matplotlib draws them as empty
    boxes): ``["CJK"]``; empty when the fonts have every one."""
    import unicodedata

    import matplotlib
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    props = font_manager.FontProperties(family=matplotlib.rcParams["font.family"])
    find = getattr(font_manager.fontManager, "_find_fonts_by_props", None)  # the fallback list, where there is one
    fonts = [FT2Font(str(f)) for f in (find(props) if find else [font_manager.findfont(props)])]
    missing = [ch for ch in dict.fromkeys(str(label)) if ch.isprintable() and not ch.isspace()
               and not any(f.get_char_index(ord(ch)) for f in fonts)]
    scripts = {(unicodedata.name(ch, "").split(" ")[0] or "unnamed") for ch in missing}
    return sorted(w if w in ("CJK", "unnamed") else w.title() for w in scripts)


def distinct(entries: Mapping[str, tuple[str, bool, str]]) -> dict[str, str]:
    """Each entry's label, one per entry (``entries``: file → (label, whether a model file gave it, the file's slug)):
    two files that go by one label are refused, naming both, when either label was given; two derived alike (two
    checkpoints named ``checkpoint-100`` in different folders) go by their slugs instead, which are distinct."""
    by_label: dict[str, list[str]] = {}
    slugs = {slug: where for where, (_, _, slug) in entries.items()}
    for where, (label, given, slug) in entries.items():
        by_label.setdefault(label, []).append(where)
        other = slugs.get(label)
        if given and other is not None and other != where:  # `show --model NAME` would name either
            raise ValueError(f"label: {where} goes by {label!r}, the file name of {other}'s scores; give it a label "
                             "no other model's score file is named")
    out = {}
    for label, wheres in by_label.items():
        if len(wheres) > 1 and any(entries[w][1] for w in wheres):
            raise ValueError(f"label: {wheres[0]} and {wheres[1]} both go by {label!r}; give one of them another "
                             "`label:` so that results can tell them apart")
        out.update({w: entries[w][2] if len(wheres) > 1 else label for w in wheres})
    return out
