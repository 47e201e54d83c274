"""The paths a parameter file names (a model file's ``adapter`` and local ``model`` folder, a dataset file's
``data_file``), resolved by one rule for the notebooks, the sweep and the cluster jobs:

- an absolute path (or one starting with ``~``) is taken as it is;
- a relative path is taken from the parameter file's own folder when it exists there,
- else from the project root (``paths.root()``, where every notebook runs), whatever the working directory.

A path found beside the parameter file is written back as its path from the project root when it lies inside the
project (else as an absolute path), so a score file records the same ``adapter`` (and the same ``adapter_sha256``)
from whichever folder the sweep was started.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from . import labels, paths

PATH_KEYS = ("adapter", "model", "data_file")  # the parameters that name a file or folder


def canonical(path: Path) -> str:
    """``path`` as a parameter holds it: from the project root when it lies inside the project, else absolute."""
    where = Path(path).absolute()
    try:
        return where.relative_to(paths.root().absolute()).as_posix()
    except ValueError:
        return str(where)


def resolve_params(params: dict, param_file) -> dict:
    """``params`` (read from ``param_file``) with each relative path of ``PATH_KEYS`` that exists beside the file
    rewritten as ``canonical`` says; one that does not is left to be taken from the project root (a hub id, an
    embedded model's name and a missing path stay as they are: the checks that follow name them)."""
    folder = paths.resolve(param_file).parent
    out = dict(params)
    for key in PATH_KEYS:
        value = out.get(key)
        if not isinstance(value, str) or not value.strip() or value.startswith("~") or Path(value).is_absolute():
            continue
        beside = folder / value
        if beside.exists() and folder.absolute() != paths.root().absolute():
            out[key] = canonical(beside)
    return out



def label_of(params: Mapping, slug: str | None = None, where: str = "label") -> str:
    """The name results print for a model file's parameters: its ``label``, else one derived from the model and the
    adapter (``labels.derived_label``)."""
    from .score_settings import derived_label

    return labels.check_label(params.get("label"), where) or derived_label(params["model"], params.get("adapter"), slug)


def labels_of(files: Mapping[str, Mapping], slugs: Mapping[str, str]) -> dict[str, str]:
    """The label of each model file (``files``: file → its parameters; ``slugs``: file → its slug), one per file
    (``labels.distinct``: a given label two files share is refused, naming both)."""
    return labels.distinct({f: (label_of(p, slugs[f], f"label: {f}"), p.get("label") is not None, slugs[f])
                            for f, p in files.items()})
