"""A prompt file (CSV, TSV, JSONL or Parquet) read as it is: its rows as exact values, with the line each starts on, and
every byte checked to be UTF-8 (``read_table``). Turning the rows into a run's items is ``prompt_items.load_items``.

Every problem a file can have is one ValueError naming the file, the rows (1-based, after the header; with the line for
text files) and the column, and what is allowed.
"""
from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ... import paths

FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl",
           ".parquet": "parquet", ".pq": "parquet"}
MAX_LISTED = 5  # offending rows named in an error message
_UNDECODABLE = re.compile("[\udc80-\udcff]")


# ---------------------------------------------------------------- reading the file

@dataclass
class RawTable:
    """A file's rows as read, with the line each starts on (text formats) so errors can point at it."""

    frame: pd.DataFrame
    lines: list[int] | None
    path: Path

    def where(self, i: int) -> str:
        """``row 3 (line 4)``: row ``i`` (0-based) as a user finds it in the file."""
        return f"row {i + 1}" + (f" (line {self.lines[i]})" if self.lines else "")

    def rows(self, idx) -> str:
        """The first offending rows, and how many more."""
        idx = list(idx)
        text = ", ".join(self.where(i) for i in idx[:MAX_LISTED])
        return text + (f" and {len(idx) - MAX_LISTED} more" if len(idx) > MAX_LISTED else "")


def read_table(data_file) -> RawTable:
    """The rows of a CSV, TSV, JSONL or Parquet file (CSV/TSV values as exact strings; UTF-8, a BOM allowed)."""
    if not isinstance(data_file, (str, Path)) or not str(data_file).strip():
        raise ValueError(f"data_file: must be the path of a CSV, TSV, JSONL or Parquet file, got {data_file!r}")
    path = paths.resolve(data_file)
    if not path.is_file():
        raise ValueError(f"data_file: {path} does not exist")
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise ValueError(f"data_file: {path.name} has the extension {path.suffix!r}; allowed: {sorted(FORMATS)}")
    if kind == "parquet":
        frame, lines = _read_parquet(path), None
    else:
        data = path.read_bytes()
        if not data.strip():
            raise ValueError(f"data_file: {path} is empty")
        for bom, encoding in ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
                              (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16")):
            if data.startswith(bom):
                raise ValueError(f"data_file: {path.name} is saved as {encoding} (it starts with its byte-order mark); "
                                 "save the file as UTF-8")
        text = data.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")
        frame, lines = _read_jsonl(text, path) if kind == "jsonl" else _read_delimited(text, path, kind)
    raw = RawTable(frame.reset_index(drop=True), lines, path)
    if len(raw.frame) == 0:
        raise ValueError(f"data_file: {path} has no rows" + (f" (only a header: {list(frame.columns)})" if len(frame.columns) else ""))
    _check_decodable(raw)
    if kind == "jsonl":
        raw.frame = raw.frame.infer_objects()
    return raw


def _read_delimited(text: str, path: Path, kind: str) -> tuple[pd.DataFrame, list[int]]:
    """CSV (RFC 4180 quoting) or TSV (no quoting: quotes in a prompt stay as written); blank lines are skipped."""
    opts = {"delimiter": ","} if kind == "csv" else {"delimiter": "\t", "quoting": csv.QUOTE_NONE}
    reader = csv.reader(io.StringIO(text, newline=""), **opts)
    try:
        header = next(reader, None)
        if header is None:
            raise ValueError(f"data_file: {path} is empty")
        header = [h.strip() for h in header]
        if kind == "csv" and len(header) == 1 and header[0].count(";") >= 1:
            raise ValueError(f"data_file: {path.name} line 1 has no commas but semicolons ({header[0]!r}): it looks like "
                             "a semicolon-separated file (as some spreadsheet locales save CSV); save it with commas, "
                             "or as tab-separated .tsv")
        if any(not h for h in header):
            raise ValueError(f"data_file: {path.name} line 1: the header has a blank column name ({header})")
        dup = sorted({h for h in header if header.count(h) > 1})
        if dup:
            raise ValueError(f"data_file: {path.name} line 1: the header repeats column(s) {dup}")
        rows, lines, start = [], [], reader.line_num + 1
        for rec in reader:
            line, start = start, reader.line_num + 1
            if not rec or (len(rec) == 1 and not rec[0].strip()):
                continue
            if len(rec) != len(header):
                raise ValueError(f"data_file: {path.name} row {len(rows) + 1} (line {line}) has {len(rec)} fields; "
                                 f"the header has {len(header)} ({header})" + ("; a text with commas needs double quotes"
                                                                               if kind == "csv" else ""))
            rows.append(rec)
            lines.append(line)
    except csv.Error as err:
        raise ValueError(f"data_file: {path.name} line {reader.line_num}: {err}") from None
    return pd.DataFrame(rows, columns=header, dtype=object), lines


def _read_jsonl(text: str, path: Path) -> tuple[pd.DataFrame, list[int]]:
    """One JSON object per line; blank lines are skipped."""
    records, lines = [], []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"data_file: {path.name} line {n} is not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"data_file: {path.name} line {n} must hold one JSON object like "
                             f'{{"prompt": "…", "answer": "Yes"}}, got a {type(obj).__name__}')
        records.append(obj)
        lines.append(n)
    return pd.DataFrame(records, dtype=object), lines  # typed after the UTF-8 check (read_table)


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_parquet(path)
    except Exception as err:  # noqa: BLE001 - pyarrow raises several kinds for a file that is not Parquet
        raise ValueError(f"data_file: {path.name} is not a readable Parquet file ({type(err).__name__}: {err})") from None
    for col in frame.columns:  # binary columns: decode here so bad bytes are reported like in text files
        if is_text(frame[col]) and frame[col].map(lambda v: isinstance(v, bytes)).any():
            frame[col] = frame[col].map(lambda v: v.decode("utf-8", errors="surrogateescape") if isinstance(v, bytes) else v)
    return frame


def _check_decodable(raw: RawTable) -> None:
    """Bytes that are not UTF-8 are an error naming the rows, the column and the first bad byte."""
    bad_names = [c for c in raw.frame.columns if isinstance(c, str) and _UNDECODABLE.search(c)]
    if bad_names:
        raise ValueError(f"data_file: {raw.path.name} has a column name that is not valid UTF-8 ({bad_names[0]!r}); "
                         "save the file as UTF-8")
    for col in raw.frame.columns:
        s = raw.frame[col]
        if not is_text(s):
            continue
        hit = s.map(lambda v: isinstance(v, str) and _UNDECODABLE.search(v) is not None)
        if hit.any():
            idx = np.flatnonzero(hit.to_numpy())
            byte = ord(_UNDECODABLE.search(s.iloc[idx[0]]).group()) - 0xDC00
            raise ValueError(f"data_file: {raw.path.name} {raw.rows(idx)} (column {col!r}): bytes that are not valid "
                             f"UTF-8 (first: 0x{byte:02x}); save the file as UTF-8")


def is_text(s: pd.Series) -> bool:
    """Object or string dtype (pandas 3 gives text its own dtype)."""
    return s.dtype == object or pd.api.types.is_string_dtype(s.dtype)
