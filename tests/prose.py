"""Checks that prose quotes a results file's figures: a page's text, and whether it says a sentence with the file's
numbers in it (``says``)."""
from __future__ import annotations

import json
import re

from nbutils import paths

ROOT = paths.repo_root()


def text(rel: str) -> str:
    """A page's text with line breaks as spaces (a figure may sit across a wrapped line), or a notebook's markdown."""
    path = ROOT / rel
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return " ".join(" ".join("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")
    return " ".join(path.read_text().split())


def says(page: str, template: str, *values: float, where: str = "") -> None:
    """``page`` holds ``template`` with each ``{}`` a number equal to the matching value rounded to its digits."""
    pattern = re.escape(template).replace(r"\{\}", r"(-?\d*\.?\d+)")
    wanted = template.format(*(f"{v:.4g}" for v in values))
    found = re.search(pattern, page)
    assert found, f"{where or 'the page'} should say: {wanted} (the results file's values)"
    for shown, value in zip(found.groups(), values):
        digits = len(shown.partition(".")[2])
        assert abs(float(shown) - value) <= 0.5 * 10 ** -digits + 1e-9, (
            f"{where or 'the page'} says {found.group(0)!r}; the results file gives {wanted!r}")
