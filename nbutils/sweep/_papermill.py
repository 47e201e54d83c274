"""The papermill runner: one notebook's parameters read and checked against its ``parameters`` cell, then executed.

Below the sweep and the cluster jobs, which both run notebooks through it (``nbutils.sweep`` one after the other here,
``nbutils.sweep._cluster`` one per job): parameter files are read strictly (``artifacts.load_yaml``), every name and value is checked
against the notebook's own declarations (``nbutils.sweep._parameters``) before papermill starts it, the executed copy never
writes through a link, and the kernel's stderr goes to the run's log. A failed notebook's real error is one line
(``error_line``).
"""
from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from .. import adapters, artifacts, paths, runlock
from ._parameters import check_values, declared as declared_parameters


WATCHED = ("score.ipynb",)  # notebooks that score rows: ``run_notebook`` prints their progress to the terminal
KERNEL_STARTS = 3  # tries to start a kernel that dies before its handshake (kernels started at once on one host can
# pick the same free TCP port; the loser exits with "Address already in use" before running any cell)
KERNEL_DIED_AT_START = "Kernel died before replying to kernel_info"
PROGRESS_EVERY = 20.0  # seconds between two progress lines


def notebook_parameters(notebook: str) -> set[str]:
    """Names in the notebook's cell tagged ``parameters`` (what papermill can set)."""
    return set(declared_parameters(notebook))


def check_parameters(notebook: str, params: dict, source: str, fixed: tuple[str, ...] = (), record=None) -> None:
    """Unknown names are an error naming the source and the notebook's parameters (``fixed`` ones are set by the
    sweep itself and may not be given); each value is checked against the notebook's declared type and its range.
    ``record``: the notebook's parameter record (an analysis's, ``analysis.AnalysisParams``), built from the
    values it declares, so that its ranges are checked here too (the registry says which notebook has which)."""
    allowed = notebook_parameters(notebook) - set(fixed)
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(f"{source}: unknown parameter(s) {unknown} for {notebook}; allowed: {sorted(allowed)}")
    check_values(notebook, params, source)
    if record is not None:
        record.from_mapping({k: v for k, v in params.items() if k in record.names()}, where=source)


def execute(notebook: str, output: Path, params: dict, kernel: str | None = None, progress: bool = False) -> None:
    """Execute one notebook with papermill into a temporary file beside ``output``, renamed over ``output`` when it
    ends (also when it failed, to show where): a symbolic link at ``output`` is replaced, never written through, and
    inside the run directory no folder on the way may be a link."""
    import papermill as pm

    output = Path(output)
    run_dir = params.get("run_dir")
    if isinstance(run_dir, str) and run_dir.strip():
        if output.absolute().is_relative_to(paths.resolve(run_dir).absolute()):
            paths.check_inside(run_dir, output, "output notebook")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = artifacts.temp_beside(output, ".running.ipynb")
    try:
        with _stderr_to(paths.kernel_log(output)), _under_papermill():
            for start in range(1, KERNEL_STARTS + 1):
                try:
                    pm.execute_notebook(str(paths.resolve(notebook)), str(tmp), parameters=params, kernel_name=kernel,
                                        cwd=str(paths.root()), progress_bar=progress, log_output=False)
                    break
                except RuntimeError as err:  # no cell ran: start it again, after a pause that differs per process
                    if KERNEL_DIED_AT_START not in str(err) or start == KERNEL_STARTS:
                        raise
                    time.sleep(random.uniform(0.5, 2.0))
    except OSError as err:
        artifacts.raise_if_full(err, output)
        raise
    finally:
        if tmp.exists() and tmp.stat().st_size:
            os.replace(tmp, output)
        tmp.unlink(missing_ok=True)


@contextmanager
def _under_papermill():
    """Tell the kernel it runs under papermill (it inherits this process's environment), so that an analysis's last
    cell leaves the report to the command that runs it (``nbutils.report.live``)."""
    before = os.environ.get(paths.PAPERMILL_ENV)
    os.environ[paths.PAPERMILL_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(paths.PAPERMILL_ENV, None)
        else:
            os.environ[paths.PAPERMILL_ENV] = before


@contextmanager
def _stderr_to(log: Path):
    """Send this process's stderr (file descriptor 2, which the kernel inherits) to ``log`` while a notebook runs, so
    the kernel's own chatter (its transport warning at start, a traceback when it is stopped mid-cell) lands in the
    run's log instead of the terminal; a notebook's real error still comes back through papermill."""
    sys.stderr.flush()
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as err:
        raise ValueError(f"kernel log: cannot open {log} ({err.strerror}); a symbolic link there is not written "
                         "through: remove it") from None
    saved = os.dup(2)
    try:
        os.dup2(fd, 2)
        os.close(fd)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run_notebook(notebook: str, output: str | None, params: dict, kernel: str | None = None, record=None) -> Path:
    """One notebook, its parameters checked against its ``parameters`` cell (and its parameter ``record``, for an
    analysis notebook) before papermill starts it, run under the lock of the run directory it writes (its
    ``run_dir``, given or the notebook's default)."""
    nb = paths.resolve(notebook)
    if not nb.exists():
        raise ValueError(f"notebook: {nb} does not exist")
    if nb.suffix != ".ipynb" or not nb.is_file():
        raise ValueError(f"notebook: {nb} is not a notebook file (.ipynb); give one of the suite's notebooks, such as "
                         "notebooks/monotonicity/01_generate.ipynb")
    check_parameters(notebook, params, "-p", record=record)
    if isinstance(params.get("model"), str) and params["model"]:
        paths.check_model_folder(params["model"], paths.root())  # before a kernel starts (it runs in the root)
    adapter = params.get("adapter")
    if isinstance(adapter, str) and adapter and adapters.is_local(adapter):
        adapters.read_config(adapters.local_folder(adapter), adapter)
    declared = declared_parameters(notebook)
    run_dir = params.get("run_dir", declared.get("run_dir", (None, None))[1])
    record = paths.executed_notebook(run_dir or "outputs/adhoc", notebook)
    out = check_output(output, nb, record) if output else record
    if run_dir is None:
        execute(notebook, out, params, kernel)
        return out
    with runlock.hold(run_dir, f"running {notebook} on"):
        if nb.name in WATCHED:  # scoring: rows done, rate and ETA on the terminal, as a sweep prints them
            with Progress(run_dir, "", PROGRESS_EVERY, who="run"):
                execute(notebook, out, params, kernel)
        else:
            execute(notebook, out, params, kernel)
    return out


class Progress:
    """Prints rows done / total, rate and ETA of the model being scored, read from the engine's progress file (every
    ``every`` seconds, when it changed); ``slug`` "" watches whichever model the run is scoring."""

    def __init__(self, run_dir, slug: str, every: float = 20.0, who: str = "sweep"):
        self.run_dir, self.slug, self.every, self.who = run_dir, slug, every, who
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        last = None
        while not self.stop.wait(self.every):
            files = sorted(paths.partial_dir(self.run_dir).glob(f"{self.slug}*.progress.json"), key=_mtime)
            if not files:
                continue
            try:
                p = json.loads(files[-1].read_text())
            except (OSError, ValueError):
                continue
            if p == last:
                continue
            last = p
            rate = p.get("rows_per_second") or 0
            eta = (p["n_planned"] - p["n_done"]) / rate if rate else float("nan")
            who = self.slug or files[-1].name.split(".progress")[0]
            print(f"[{self.who}] {who}: {p['n_done']}/{p['n_planned']} rows, {rate:.2f}/s, ETA {eta / 60:.1f} min",
                  flush=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # removed as the run finished
        return 0.0


def check_output(output: str, source: Path, record: Path | None = None) -> Path:
    """The output notebook of ``nbutils run``, once it is a new or executed notebook: an ``.ipynb`` file that is not
    the source notebook, not a notebook of the checkout's ``notebooks/``, not a data file of a run, and not in a run's
    ``notebooks/`` unless it is this step's own record there (``record``: the run's executed copy of this notebook)."""
    out = paths.resolve(output)
    folder = out.absolute().parent
    own = record is not None and out.absolute() == Path(record).absolute()
    if folder.name == "notebooks" and not own and (paths.is_run(folder.parent) or (
            record is not None and folder == Path(record).absolute().parent)):
        raise ValueError(f"output: {out} is among the executed notebooks of the run {folder.parent}, each the record "
                         f"of how a step of that run was made; name a file outside it, or leave OUTPUT out "
                         f"(this step's record: {record})")
    if out.suffix != ".ipynb":
        raise ValueError(f"output: {out} is not a notebook file (.ipynb); the executed copy never replaces a run's "
                         "data, tables or figures: name a new .ipynb file, or leave OUTPUT out for "
                         "{run_dir}/notebooks/<name>.ipynb")
    if out.absolute() == source.absolute() or (out.exists() and out.resolve() == source.resolve()):
        raise ValueError(f"output: {out} is the notebook being run; name another file (or leave OUTPUT out)")
    sources = [paths.root() / "notebooks"] + [p for p in [paths.shipped_copy("notebooks")] if p is not None]
    if any(out.resolve().is_relative_to(s.resolve()) for s in sources):
        raise ValueError(f"output: {out} is under the suite's notebooks/ folder; executed copies belong in a run "
                         "directory (leave OUTPUT out for {run_dir}/notebooks/<name>.ipynb)")
    return out


def error_line(err: BaseException) -> str:
    """The real error of a failed notebook (papermill wraps it): ``Type: message``, last line of the message."""
    name = getattr(err, "ename", None) or type(err).__name__
    msg = str(getattr(err, "evalue", "") or err).strip().splitlines()
    return f"{name}: {msg[-1] if msg else ''}"
