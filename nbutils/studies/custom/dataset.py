"""A user's prompt file (CSV, TSV, JSONL or Parquet) read, checked row by row and written as the run's dataset.

``load_items`` (``nbutils.studies.common.prompt_items``) reads and checks the file; every problem is one ValueError
naming the parameter or file, the rows and the column. The dataset keeps the prompt as rendered for the model in
``text``, the gold option as scored in ``answer`` and the analysis groups in ``group``.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ... import artifacts, paths
from ...spec import ChoiceItems
from .. import get
from ..common.prompt_items import load_items

__all__ = ["load_items", "choice_items", "parameters", "write_items", "overview"]


def choice_items(items: pd.DataFrame) -> ChoiceItems:
    """The engine's view of the dataset: each row's options as scored, its gold option and its system message."""
    scored = [tuple(json.loads(s)) for s in items["scored"]]
    options = scored[0] if len(set(scored)) == 1 else scored
    systems = None
    if "system" in items and items["system"].notna().any():
        systems = [None if pd.isna(s) else str(s) for s in items["system"]]
    return ChoiceItems(options, items["answer"].tolist(), systems)


def parameters(data_file, columns, choices, option_format, group_by, system, shuffle_options, seed) -> dict:
    """What made the dataset, for its sidecar; the file's sha256 is in it, so an edited file is a new dataset."""
    return {"data_file": str(data_file), "data_file_sha256": artifacts.sha256_file(paths.resolve(data_file)),
            "columns": dict(columns or {}), "choices": choices if isinstance(choices, (int, np.integer)) else list(choices),
            "option_format": option_format, "group_by": list(group_by), "system": system,
            "shuffle_options": shuffle_options, "seed": seed}


def write_items(df: pd.DataFrame, run_dir, params: dict, overwrite: bool = False) -> dict:
    """``{run_dir}/items.parquet`` + sidecar; refuses to replace a dataset made from another file or parameters."""
    return artifacts.write_dataset(df, paths.dataset_path(run_dir, get("custom").dataset_file),
                                   {"parameters": params}, overwrite)


def overview(df: pd.DataFrame) -> pd.DataFrame:
    """Rows per group and gold answer: what the analysis will compare, and what a ``limit`` balances."""
    return df.pivot_table(index="group", columns="answer", values="row_id", aggfunc="size", fill_value=0)
