"""Checks on what a notebook run wrote, on content rather than existence: an executed notebook ran every code cell once,
in order, without an error, and shows given text; a LaTeX table holds the rows and numbers of its CSV twin; a figure is
a drawn image of a plausible size and its PDF twin is a PDF."""
from __future__ import annotations

import math
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd


def ran_clean(path: str | Path) -> nbformat.NotebookNode:
    """The executed notebook at ``path``, after checking that each code cell ran once, in order, with no error."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    assert counts == list(range(1, len(code) + 1)), f"{Path(path).name}: cells skipped or re-run ({counts})"
    errors = [o for c in code for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, f"{Path(path).name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    return nb


def output_text(nb: nbformat.NotebookNode) -> str:
    """Every printed or displayed text of an executed notebook (streams, plain text, Markdown), in cell order."""
    parts = []
    for cell in nb.cells:
        for o in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if o.output_type == "stream":
                parts.append(o.text)
            elif o.output_type in ("display_data", "execute_result"):
                parts.append(o.data.get("text/markdown") or o.data.get("text/plain", ""))
    return "\n".join(parts)


def tex_rows(path: str | Path) -> tuple[list[str], list[list[str]]]:
    """Header and body cells of a ``to_latex`` table (booktabs rules)."""
    lines = Path(path).read_text().splitlines()
    assert lines[0].startswith(r"\begin{tabular}") and lines[-1] == r"\end{tabular}", f"{path}: not a tabular"
    mid, bottom = lines.index(r"\midrule"), lines.index(r"\bottomrule")
    cells = [[c.strip() for c in line.strip().removesuffix(r"\\").split(" & ")] for line in lines[mid - 1:bottom]]
    return cells[0], cells[2:]  # the header, then the rows after \midrule


def assert_tex_matches_csv(stem: str | Path, float_format: str = "%.3f") -> pd.DataFrame:
    """``stem.tex`` has ``stem.csv``'s columns and rows, and every number of the CSV as ``float_format`` prints it
    (the run's own format: ``%.3f`` unless a study writes its tables otherwise; NaN as ``--``, or empty where the CSV's
    empty cell was an empty text); returns the CSV."""
    stem = Path(stem)
    table = pd.read_csv(stem.with_suffix(".csv"))
    header, rows = tex_rows(stem.with_suffix(".tex"))
    assert header == list(table.columns), f"{stem.name}.tex columns {header}"
    assert len(rows) == len(table), f"{stem.name}.tex has {len(rows)} rows, the CSV {len(table)}"
    numeric = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c]) and table[c].dtype != bool]
    for row, (_, want) in zip(rows, table.iterrows()):
        for col in numeric:
            cell, value = row[header.index(col)], want[col]
            if isinstance(value, float) and math.isnan(value):
                # a CSV reads an empty text as NaN too
                assert cell in ("--", ""), f"{stem.name}.tex {col}: {cell!r} for a missing value"
            else:
                shown = str(value) if pd.api.types.is_integer_dtype(table[col]) else float_format % value
                assert cell == shown, f"{stem.name}.tex {col}: {cell} for {value}"
    return table


def assert_figure(png: str | Path, min_size: tuple[int, int] = (400, 250)) -> None:
    """A drawn PNG (not blank, at least ``min_size`` pixels) with its PDF twin beside it."""
    from PIL import Image

    png = Path(png)
    with Image.open(png) as img:
        assert img.format == "PNG" and img.width >= min_size[0] and img.height >= min_size[1], f"{png.name}: {img.size}"
        pixels = np.asarray(img.convert("L"))
    assert len(np.unique(pixels)) > 8 and (pixels < 128).mean() > 0.002, f"{png.name} is blank"
    pdf = png.with_suffix(".pdf")
    assert pdf.read_bytes()[:5] == b"%PDF-" and b"/Page" in pdf.read_bytes(), f"{pdf.name} is not a PDF with a page"
