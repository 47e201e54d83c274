"""Where things live: the repo root and the layout of a run directory."""
from __future__ import annotations

import re
from pathlib import Path


def repo_root() -> Path:
    """The checkout this package was installed from (the folder holding pyproject.toml)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "nbutils").is_dir():
            return parent
    raise RuntimeError(f"nbutils is not inside a checkout with pyproject.toml (it is at {here})")


def resolve(path: str | Path) -> Path:
    """Absolute paths stay; relative ones are taken from the repo root, never the working directory."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else repo_root() / p


def model_slug(model: str) -> str:
    """A file-name-safe name for a model id or path ("allenai/OLMo-2-1124-13B-Instruct" → "allenai--OLMo-2-1124-13B-Instruct")."""
    name = str(model).rstrip("/")
    if "/" in name and Path(name).expanduser().exists():
        name = Path(name).name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("/", "--")).strip("-")


def prompts_path(run_dir: str | Path) -> Path:
    """The dataset file of a run."""
    return resolve(run_dir) / "prompts.parquet"
