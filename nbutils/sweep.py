"""Run a study's notebooks through papermill: generate once, score once per model, analyze.

The sweep names no study: it reads the registry (``nbutils.studies``) and checks every parameter file against
the notebook's own ``parameters`` cell (``papermill.inspect_notebook``), so a typo is an error, not a default.
Relative paths (sweep, parameter and notebook files, run directories) are taken from the project root, where the
notebooks also run (``nbutils.paths.root``); notebooks and parameter files missing there come from the package's copy.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import artifacts, cluster, parameters, paths, runlock, runstore, studies
from .report import write_report

SWEEP_KEYS = {"study", "run_dir", "dataset", "models", "analyze", "executor", "cluster"} | set(studies.RUN_ANALYSES)


@dataclass
class SweepReport:
    """What a sweep did: models scored, skipped, failed (with their errors)."""

    run_dir: Path
    study: str = ""
    scored: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    analyzed: bool = False
    extra: list[str] = field(default_factory=list)  # run analyses (studies.RUN_ANALYSES) done after the analysis

    def lines(self) -> list[str]:
        """Human-readable summary."""
        out = [f"study: {self.study}", f"run_dir: {self.run_dir}", f"scored: {self.scored or '-'}",
               f"skipped (already scored): {self.skipped or '-'}", f"analyzed: {self.analyzed}"]
        out += [f"also ran: {', '.join(self.extra)}"] if self.extra else []
        out += [f"FAILED {m}: {e}" for m, e in self.failed.items()]
        if self.analyzed:  # the findings, as lm-evaluation-harness ends with its table
            from .report import headline

            out += ["", *headline(self.run_dir), "", f"results in words: {paths.results_path(self.run_dir)}"]
            out += [f"report: {paths.report_path(self.run_dir)}"] if paths.report_path(self.run_dir).is_file() else []
        return out


def load_yaml(path: str | Path, allowed: set[str] | None = None, what: str = "parameter file") -> dict:
    """Read a YAML mapping strictly (a key given twice is an error naming it and its lines); unknown keys are an error
    naming the file and the allowed keys."""
    p = paths.resolve(path)
    if not p.exists():
        raise ValueError(f"{what}: {p} does not exist")
    if not p.is_file():
        raise ValueError(f"{what}: {p} is not a file")
    data = artifacts.read_yaml(p.read_text(), f"{what}: {p}") or {}
    if not isinstance(data, dict):
        raise ValueError(f"{what}: {p} must hold a mapping of parameter names to values")
    if allowed is not None and set(data) - allowed:
        raise ValueError(f"{what}: {p} has unknown keys {sorted(set(data) - allowed)}; allowed: {sorted(allowed)}")
    return data


def notebook_parameters(notebook: str) -> set[str]:
    """Names in the notebook's cell tagged ``parameters`` (what papermill can set)."""
    return set(parameters.declared(notebook))


def check_parameters(notebook: str, params: dict, source: str, fixed: tuple[str, ...] = ()) -> None:
    """Unknown names are an error naming the source and the notebook's parameters (``fixed`` ones are set by the
    sweep itself and may not be given); each value is checked against the notebook's declared type and its range."""
    allowed = notebook_parameters(notebook) - set(fixed)
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(f"{source}: unknown parameter(s) {unknown} for {notebook}; allowed: {sorted(allowed)}")
    parameters.check_values(notebook, params, source)


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
        with _stderr_to(paths.kernel_log(output)):
            pm.execute_notebook(str(paths.resolve(notebook)), str(tmp), parameters=params, kernel_name=kernel,
                                cwd=str(paths.root()), progress_bar=progress, log_output=False)
    except OSError as err:
        artifacts.raise_if_full(err, output)
        raise
    finally:
        if tmp.exists() and tmp.stat().st_size:
            os.replace(tmp, output)
        tmp.unlink(missing_ok=True)


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


def run_notebook(notebook: str, output: str | None, params: dict, kernel: str | None = None) -> Path:
    """One notebook, its parameters checked against its ``parameters`` cell before papermill starts it, run under
    the lock of the run directory it writes (its ``run_dir``, given or the notebook's default)."""
    nb = paths.resolve(notebook)
    if not nb.exists():
        raise ValueError(f"notebook: {nb} does not exist")
    check_parameters(notebook, params, "-p")
    declared = parameters.declared(notebook)
    run_dir = params.get("run_dir", declared.get("run_dir", (None, None))[1])
    out = check_output(output, nb) if output else paths.executed_notebook(run_dir or "outputs/adhoc", notebook)
    if run_dir is None:
        execute(notebook, out, params, kernel)
        return out
    with runlock.hold(run_dir, f"running {notebook} on"):
        execute(notebook, out, params, kernel)
    return out


def check_output(output: str, source: Path) -> Path:
    """The output notebook of ``nbutils run``, once it is a new or executed notebook: an ``.ipynb`` file that is not
    the source notebook, not a notebook of the checkout's ``notebooks/`` and not a data file of a run."""
    out = paths.resolve(output)
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


# ---------------------------------------------------------------- one writer per run directory at a time

LockedError = runlock.LockedError


def run_lock(run_dir):
    """The run directory's lock for the whole sweep (``nbutils.runlock``): the notebooks it runs write under it."""
    return runlock.hold(run_dir, "sweeping")


class DatasetChanged(RuntimeError):
    """The run's dataset changed while the sweep was scoring or analysing it."""


def _check_dataset(run: Path, record, sha: str, step: str) -> None:
    """Stop when the dataset is not the one the sweep generated (another process or a person replaced it)."""
    dpath = paths.dataset_path(run, record.dataset_file)
    now = artifacts.sha256_file(dpath) if dpath.exists() else None
    if now != sha:
        raise DatasetChanged(f"run_dir: {dpath} changed while the sweep ran (before {step}: its sha256 is "
                             f"{now[:12] + '…' if now else 'gone'}, the sweep generated {sha[:12]}…); nothing more "
                             "was scored or analysed: find what rewrote it, then run the sweep again")


# ---------------------------------------------------------------- live progress from the engine's checkpoints

class _Progress:
    """Prints rows done / total, rate and ETA of the model being scored, read from the engine's progress file."""

    def __init__(self, run_dir, slug: str, every: float = 20.0):
        self.run_dir, self.slug, self.every = run_dir, slug, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        last = None
        while not self.stop.wait(self.every):
            files = sorted(paths.partial_dir(self.run_dir).glob(f"{self.slug}*.progress.json"))
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
            print(f"[sweep] {self.slug}: {p['n_done']}/{p['n_planned']} rows, {rate:.2f}/s, ETA {eta / 60:.1f} min",
                  flush=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()


# ---------------------------------------------------------------- the sweep

def run_sweep(sweep_file: str | Path | None = None, run_dir: str | None = None, dataset: str | None = None,
              models: list[str] | None = None, limit: int | None = None, kernel: str | None = None,
              n_boot: int | None = None, study: str | None = None, verbose: bool = False,
              progress_every: float = 20.0, executor: str | None = None, ask=None) -> SweepReport:
    """Generate once, score once per model file (failures reported, not fatal), then analyze.

    ``executor``: ``local`` (here, one model after the other), ``slurm`` or ``submitit-local`` (one job array of
    every model and shard, see ``nbutils.cluster``); default: the sweep file's, else local. ``ask``: how a cluster
    sweep asks, after Ctrl-C, whether to cancel its jobs (default: the terminal)."""
    cfg = load_yaml(sweep_file, SWEEP_KEYS, "sweep") if sweep_file else {}
    source = str(sweep_file or "the sweep")
    executor = cluster.check_executor(executor or cfg.get("executor") or "local", source)
    cluster_cfg = cluster.check_cluster(cfg.get("cluster"), source)
    record = studies.get(study or cfg.get("study", studies.DEFAULT))
    nbs = record.notebooks
    run_dir = run_dir or cfg.get("run_dir")
    dataset = dataset or cfg.get("dataset")
    models = list(models or cfg.get("models") or [])
    if not run_dir or not dataset or not models:
        raise ValueError("sweep: needs run_dir, dataset and at least one model file (in the sweep file or as options)")
    run = paths.check_run_dir(run_dir)
    if run.exists() and not run.is_dir():
        raise ValueError(f"run_dir: {run} is a file; give a folder (it is created if missing)")
    # every parameter file is checked against its notebook before anything runs
    ds = load_yaml(dataset, None, "dataset")
    check_parameters(nbs["generate"], ds, f"dataset {dataset}", fixed=("run_dir",))
    model_params = []
    for m in models:
        p = load_yaml(m, None, "model")
        check_parameters(nbs["score"], p, f"model {m}", fixed=("run_dir", "study")
                         + (("shard_index", "num_shards") if executor != "local" else ()))
        if "model" not in p:
            raise ValueError(f"model: {m} does not name a `model`")
        if limit is not None:
            p["limit"] = limit
        model_params.append({**record.score_defaults, **p})
    analyze_params = dict(cfg.get("analyze") or {})
    if n_boot is not None:
        analyze_params["n_boot"] = n_boot
    check_parameters(nbs["analyze"], analyze_params, f"analyze block of {sweep_file or 'the sweep'}", fixed=("run_dir",))
    if limit is not None and "include_limited" in notebook_parameters(nbs["analyze"]):
        analyze_params.setdefault("include_limited", True)  # a --limit sweep analyses its limited scores
    extra = {}  # run analyses asked for by the sweep file (e.g. a `cues:` block), checked like every other notebook
    for key, nb in studies.RUN_ANALYSES.items():
        if key in cfg:
            if not isinstance(cfg[key] or {}, dict):
                raise ValueError(f"sweep: {sweep_file}: `{key}` must be a mapping of {nb}'s parameters (or empty)")
            p = dict(cfg[key] or {})
            check_parameters(nb, p, f"{key} block of {sweep_file}", fixed=("run_dir",))
            if limit is not None and "include_limited" in notebook_parameters(nb):
                p.setdefault("include_limited", True)
            extra[key] = (nb, dict(p, run_dir=str(run)))
    report = SweepReport(run, record.name)
    with run_lock(run):
        step = "generate"
        try:
            cluster.check_host(executor, source)  # before anything is generated
            print(f"[sweep] {record.name}: generate → {run / record.dataset_file}", flush=True)
            execute(nbs["generate"], paths.executed_notebook(run, nbs["generate"]), dict(ds, run_dir=str(run)), kernel)
            sha = artifacts.sha256_file(paths.dataset_path(run, record.dataset_file))
            spec = record.spec
            if executor == "local":
                if cluster_cfg:
                    print("[sweep] the cluster: block is not used: executor is local (--executor slurm or "
                          "submitit-local submits jobs)", flush=True)
                for p in model_params:
                    slug = paths.score_slug(p["model"], p.get("quantization", "auto"), p.get("dtype", "auto"))
                    if not p.get("overwrite") and runstore.is_done(run, spec, p):
                        print(f"[sweep] skip {slug}: already scored on this dataset", flush=True)
                        report.skipped.append(slug)
                        continue
                    step = f"scoring {slug}"
                    _check_dataset(run, record, sha, step)
                    print(f"[sweep] score {slug}", flush=True)
                    t0 = time.perf_counter()
                    try:
                        with _Progress(run, slug, progress_every):
                            execute(nbs["score"], paths.executed_notebook(run, nbs["score"], slug),
                                    dict(p, run_dir=str(run), study=record.name), kernel)
                        report.scored.append(slug)
                        print(f"[sweep] scored {slug} in {time.perf_counter() - t0:.0f} s", flush=True)
                    except KeyboardInterrupt:
                        raise
                    except Exception as err:  # noqa: BLE001 - one model failing must not stop the others
                        report.failed[slug] = error_line(err)
                        print(f"[sweep] FAILED score {slug}: {report.failed[slug]}", flush=True)
                        if verbose:
                            traceback.print_exc()
                    _check_dataset(run, record, sha, f"the next step after scoring {slug}")
            else:
                step = "scoring (cluster jobs)"
                _score_on_cluster(executor, cluster_cfg, run, record, model_params, kernel, report, ask)
            if report.scored or report.skipped:
                step = "analyze"
                _check_dataset(run, record, sha, step)
                print("[sweep] analyze", flush=True)
                execute(nbs["analyze"], paths.executed_notebook(run, nbs["analyze"]),
                        dict(analyze_params, run_dir=str(run)), kernel)
                report.analyzed = True
                for key, (nb, p) in extra.items():
                    step = key
                    print(f"[sweep] {key}", flush=True)
                    execute(nb, paths.executed_notebook(run, nb), p, kernel)
                    report.extra.append(key)
                step = "report"
                _check_dataset(run, record, sha, step)
                write_report(run, record.name, warn=lambda line: print(f"[sweep] warning: {line}", flush=True))
        except KeyboardInterrupt:
            print(f"[sweep] interrupted during {step}: scores so far are checkpointed under "
                  f"{paths.partial_dir(run)}; run the same command again to resume", flush=True)
            raise
        except Exception as err:  # noqa: BLE001 - one line first, the traceback only when asked
            print(f"[sweep] FAILED {step}: {error_line(err)}", flush=True)
            if verbose:
                traceback.print_exc()
            raise SweepFailed(f"{step}: {error_line(err)}") from err
    return report


def _score_on_cluster(kind: str, cfg: dict, run: Path, record, model_params: list[dict], kernel, report: SweepReport,
                      ask=None) -> None:
    """The score step as one job array (``nbutils.cluster``): submit what is missing, watch, merge."""
    shards = cfg.get("shards_per_model", 1)
    models, tasks, skipped = cluster.plan(run, record.spec, model_params, shards)
    for slug in skipped:
        print(f"[sweep] skip {slug}: already scored on this dataset", flush=True)
    report.skipped += skipped
    if not models:
        return
    merge_only = [slug for slug in models if not any(t.slug == slug for t in tasks)]
    if merge_only:
        print(f"[sweep] every shard of {', '.join(merge_only)} is scored already: merging", flush=True)
    jobs = cluster.ClusterScoring(kind, run, record.name, record.notebooks["score"], cfg, kernel,
                                  out=lambda line: print(line, flush=True))
    try:
        jobs.submit(tasks)
        failed = jobs.wait() if jobs.jobs else {}
    except KeyboardInterrupt:
        jobs.interrupted(ask or cluster.ask_tty)
        raise
    scored, bad = cluster.merge(run, models, shards, tasks, failed)
    report.scored += scored
    report.failed.update(bad)
    for slug, err in bad.items():
        print(f"[sweep] FAILED score {slug}: {err}", flush=True)


class SweepFailed(RuntimeError):
    """A step every model needs (generate, analyze) failed."""
