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


def tex_parts(path: str | Path) -> list[tuple[list[str], list[list[str]]]]:
    """Header and body cells of each part of a table as ``nbutils.results`` writes it (booktabs rules; a tabular, or a
    longtable whose head and foot come before its rows)."""
    lines = Path(path).read_text().splitlines()
    parts, i = [], 0
    while i < len(lines):
        if lines[i] == r"\toprule":
            header = _tex_cells(lines[i + 1])
            j = lines.index(r"\midrule", i) + 1
            if lines[j] == r"\endhead":
                j = lines.index(r"\endfoot", j) + 1
            rows = []
            while not lines[j].startswith((r"\bottomrule", r"\end{")):
                rows.append(_tex_cells(lines[j]))
                j += 1
            parts.append((header, rows))
            i = j
        i += 1
    assert parts, f"{path}: no table"
    return parts


def _tex_cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().removesuffix(r"\\").split(" & ")]


def assert_tex_matches_csv(stem: str | Path, float_format: str = "%.3f", formats: dict | None = None) -> pd.DataFrame:
    """``stem.tex`` has ``stem.csv``'s columns (by their labels, each part repeating the naming columns; an estimate
    and its 95% CI bounds may share one cell, ``x [low, high]``; the columns its comment names as "in the CSV only"
    left out) and rows, and every number of the CSV as ``float_format`` (or ``formats[column]``) prints it (the run's
    own format: ``%.3f`` unless a study writes its tables otherwise; NaN as ``--``, or empty where the CSV's empty cell
    was an empty text; p-values as the report writes them; the valid rows first, an invalid row's estimates left out);
    returns the CSV as it is."""
    import re

    from nbutils.display import fmt_p_cell
    from nbutils.results._latex import _CI_PAIRS, _COUNTS, _P, _stacked, escape, label

    stem = Path(stem)
    csv = table = pd.read_csv(stem.with_suffix(".csv"))
    if "valid" in table.columns and table["valid"].dtype == bool and not table["valid"].all():
        table = pd.concat([table[table["valid"]], table[~table["valid"]]], ignore_index=True)  # valid rows first
        gone = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c]) and table[c].dtype != bool
                and not _COUNTS.match(c)]
        table.loc[~table["valid"], gone] = math.nan  # an invalid row's estimates are left out
    p_cols = {c for c in table.columns if (c == "p" or _P.match(c)) and pd.api.types.is_numeric_dtype(table[c])}
    text = stem.with_suffix(".tex").read_text()
    only = re.search(r"^% in the CSV only: (.*)$", text, re.M)
    left_out = set(only.group(1).split(", ")) if only else set()
    labels = {_stacked(label(c)): c for c in table.columns}
    bounds = {}
    for c in table.columns:
        low, high = _CI_PAIRS.get(c, (f"{c}_ci_low", f"{c}_ci_high"))
        if low in table.columns and high in table.columns:
            labels[_stacked(label(c) + " [95\\% CI]")], bounds[c] = c, (low, high)
    fmt = lambda col: (formats or {}).get(col, float_format)  # noqa: E731
    seen = []
    for header, rows in tex_parts(stem.with_suffix(".tex")):
        assert all(h in labels for h in header), f"{stem.name}.tex header {header}"
        assert len(rows) == len(table), f"{stem.name}.tex has {len(rows)} rows, the CSV {len(table)}"
        cols = [labels[h] for h in header]
        merged = [c for c, h in zip(cols, header) if c in bounds and h != _stacked(label(c))]
        seen += [x for c in cols for x in ((c, *bounds[c]) if c in merged else (c,)) if x not in seen]
        numeric = [c for c in cols if pd.api.types.is_numeric_dtype(table[c]) and table[c].dtype != bool]
        for row, (_, want) in zip(rows, table.iterrows()):
            for col in numeric:
                cell, value = row[cols.index(col)], want[col]
                if isinstance(value, float) and math.isnan(value):
                    # a CSV reads an empty text as NaN too
                    assert cell in ("--", ""), f"{stem.name}.tex {col}: {cell!r} for a missing value"
                    continue
                if col in p_cols:  # as the report writes it
                    assert cell == escape(fmt_p_cell(value)), f"{stem.name}.tex {col}: {cell} for {value}"
                    continue
                shown = str(value) if pd.api.types.is_integer_dtype(table[col]) else fmt(col) % value
                if col in merged and all(math.isfinite(want[b]) for b in bounds[col]):
                    shown += f" [{fmt(col) % want[bounds[col][0]]}, {fmt(col) % want[bounds[col][1]]}]"
                assert cell == shown.replace("%", r"\%"), f"{stem.name}.tex {col}: {cell} for {value}"
    assert set(seen) == set(table.columns) - left_out, f"{stem.name}.tex columns {seen}"
    return csv


def assert_tables_compile(run: str | Path) -> list[str]:
    """Every ``tables/*.tex`` of a run compiles with pdflatex in a plain article (the packages ``nbutils.results``
    names) and fits the page: no line more than 2 pt too wide, nothing taller than a page that does not break. Returns the tables' names. Skips without pdflatex."""
    import re
    import shutil
    import subprocess
    import tempfile

    import pytest

    from nbutils.results._latex import PACKAGES

    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex is not installed (Debian: apt-get install texlive-latex-base texlive-latex-recommended)")
    tables = sorted(Path(run, "tables").glob("*.tex"))
    assert tables, f"{run}: no LaTeX tables"
    with tempfile.TemporaryDirectory() as d:
        for tex in tables:
            doc = Path(d) / f"{tex.stem}.tex"
            doc.write_text("\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage[margin=1in]{geometry}\n"
                           f"\\usepackage{{{','.join(PACKAGES)}}}\n\\begin{{document}}\n\\input{{{tex.as_posix()}}}\n"
                           "\\end{document}\n")
            done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=d,
                                  capture_output=True, text=True, timeout=120)
            log = doc.with_suffix(".log").read_text(errors="replace")
            assert done.returncode == 0, f"{tex.name} does not compile: {log[-1500:]}"
            wide = [float(x) for x in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]
            assert max(wide, default=0) <= 2, f"{tex.name} is {max(wide)} pt wider than the page"
            assert "Overfull \\vbox" not in log, f"{tex.name} is taller than a page and does not break across pages"
    return [t.stem for t in tables]


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
