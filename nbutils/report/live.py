"""The report of an analysis run in JupyterLab (or by nbclient): the notebook's last cell writes ``report.html`` as a
papermill run's ``python -m nbutils run`` does after it, so the page is never an earlier run's.

``start(study)`` (in the notebook's first code cell after its parameters) records, in this kernel, what each cell
shows; ``finish(recorder, run_dir)`` (its last cell) writes the executed notebook into the run (``notebooks/``, marked
``interactive``, with the times it ran) from the saved notebook's cells and the outputs recorded, then the report.
Under papermill (``nbutils.sweep._papermill.execute`` sets ``paths.PAPERMILL_ENV``) both do nothing: papermill writes the
executed notebook itself and the report follows it.
"""
from __future__ import annotations

import os
from pathlib import Path

from .. import artifacts, paths, studies


class Recorder:
    """The outputs each cell shows in this kernel (display_data and a cell's value), by the cell's source."""

    def __init__(self, notebook: str, shell):
        self.notebook, self.shell, self.started = notebook, shell, artifacts.now_utc()
        self.outputs: dict[str, list] = {}
        self._cell: list | None = None

    def _pre(self, info) -> None:
        self._cell = self.outputs[info.raw_cell.strip()] = []

    def _post(self, result) -> None:
        value = getattr(result, "result", None)
        if value is not None and self._cell is not None:
            data, meta = self.shell.display_formatter.format(value)
            self._add("execute_result", data, meta)
        self._cell = None

    def _add(self, kind: str, data: dict, meta: dict | None) -> None:
        import nbformat

        if self._cell is not None:
            extra = {"execution_count": None} if kind == "execute_result" else {}
            self._cell.append(nbformat.v4.new_output(kind, data=dict(data), metadata=dict(meta or {}), **extra))


def start(study: str):
    """Record this kernel's outputs for ``finish``; None under papermill or outside IPython."""
    if os.environ.get(paths.PAPERMILL_ENV):
        return None
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None:
        return None
    rec = Recorder(studies.get(study).notebooks["analyze"], shell)
    shell.events.register("pre_run_cell", rec._pre)
    shell.events.register("post_run_cell", rec._post)
    publish = shell.display_pub.publish

    def recorded(data, metadata=None, *args, **kwargs):
        rec._add("display_data", data, metadata)
        return publish(data, metadata, *args, **kwargs)

    shell.display_pub.publish = recorded
    return rec


def finish(rec, run_dir) -> str:
    """Write the executed notebook and ``report.html`` of an analysis run outside papermill; say what was written
    (or, under papermill, that the run's command writes the report after the notebook)."""
    if rec is None:
        return "report.html: written after this notebook by `python -m nbutils run` (or the sweep)"
    import nbformat

    from ._page import write_report

    run = paths.resolve(run_dir)
    nb = nbformat.read(paths.resolve(rec.notebook), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = rec.outputs.get(cell.source.strip(), [])
            cell.execution_count = None
    nb.metadata["nbutils"] = {"interactive": True, "input_path": rec.notebook, "start_time": rec.started,
                              "end_time": artifacts.now_utc()}
    out = paths.executed_notebook(run, rec.notebook)
    paths.check_inside(run, out, "run_dir")
    artifacts.atomic_write(out, lambda p: nbformat.write(nb, str(p)))
    page = write_report(run)
    return f"report → {Path(os.path.relpath(page, paths.root())) if page.is_relative_to(paths.root()) else page}"
