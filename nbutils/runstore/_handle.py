"""A run directory resolved once: ``Run(run_dir)``, the handle the report, ``nbutils runs`` and ``show``, the sweep
and the analyses take instead of resolving the folder again at every step.

The folder is resolved from the project root once (``paths.resolve``); each of its files is named by ``paths`` once
and kept (the score folder, ``summary.json``, ``results.md``, the report, an executed notebook, a dataset); what is read
from it is read once and kept (``summary.json``, the analysable score files). A ``Run`` is a path to the folder
(``os.fspath``, and the folder's ``Path`` methods), so a function that takes a run directory takes it too, and a
message prints it as the folder. Its files are read as they are when first asked for, so a reader makes a handle of
its own (the report, one line of ``runs``); a writer's handle (the sweep's) holds names only.
"""
from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

from .. import artifacts, paths


class Run(os.PathLike):
    """A run directory resolved once, its file names and what has been read of it kept."""

    def __init__(self, run_dir: str | os.PathLike):
        self.dir: Path = run_dir.dir if isinstance(run_dir, Run) else paths.resolve(run_dir)
        self._named: dict[tuple, Path] = {}

    @classmethod
    def of(cls, run_dir) -> "Run":
        """``run_dir`` itself when it is a ``Run`` already, else a new handle."""
        return run_dir if isinstance(run_dir, Run) else cls(run_dir)

    def __fspath__(self) -> str:
        return os.fspath(self.dir)

    def __str__(self) -> str:
        return str(self.dir)

    def __truediv__(self, other) -> Path:
        return self.dir / other

    def __repr__(self) -> str:
        return f"Run({str(self.dir)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Run) and other.dir == self.dir

    def __hash__(self) -> int:
        return hash(self.dir)

    def __getattr__(self, attr: str):
        """Anything else a path offers (``exists``, ``is_dir``, ``parent``, ``glob``, …): the folder's own."""
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self.dir, attr)

    def _path(self, what: str, *args) -> Path:
        """``paths.<what>(the folder, *args)``, named once."""
        key = (what, *args)
        if key not in self._named:
            self._named[key] = getattr(paths, what)(self.dir, *args)
        return self._named[key]

    # the run's files, each named by ``paths`` once
    @property
    def scores_dir(self) -> Path:
        return self._path("scores_dir")

    @property
    def summary_path(self) -> Path:
        return self._path("summary_path")

    @property
    def results_path(self) -> Path:
        return self._path("results_path")

    @property
    def report_path(self) -> Path:
        return self._path("report_path")

    @property
    def notebooks_dir(self) -> Path:
        return self._path("notebooks_dir")

    @property
    def tables_dir(self) -> Path:
        return self._path("tables_dir")

    @property
    def figures_dir(self) -> Path:
        return self._path("figures_dir")

    def dataset_path(self, filename: str) -> Path:
        return self._path("dataset_path", filename)

    def executed_notebook(self, notebook: str, slug: str | None = None) -> Path:
        return self._path("executed_notebook", notebook, slug)

    def legacy_executed_notebook(self, notebook: str) -> Path:
        return self._path("legacy_executed_notebook", notebook)

    # what is read of it, once
    @cached_property
    def analysable_score_files(self) -> list[Path]:
        """The score files an analysis reads (``paths.analysable_score_files``), as the folder holds them now."""
        return paths.analysable_score_files(self.dir)

    @cached_property
    def summary(self) -> dict:
        """``summary.json`` read and checked to be of this version (``artifacts.read_summary``)."""
        return artifacts.read_summary(self.summary_path)
