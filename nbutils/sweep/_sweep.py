"""Run a study's notebooks through papermill: generate once, score once per model, analyze.

The sweep names no study: it reads the registry (``nbutils.studies``) and checks every parameter file against
the notebook's own ``parameters`` cell (``nbutils.sweep._papermill``, which also runs them), so a typo is an error, not a
default. Relative paths (sweep, parameter and notebook files, run directories) are taken from the project root, where
the notebooks also run (``nbutils.paths.root``); notebooks and parameter files missing there come from the package's
copy.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .. import artifacts, model_files, paths, runlock, runstore, score_settings, studies
from ._cluster import ClusterScoring, ask_tty, merge as merge_cluster_jobs, plan as plan_cluster_jobs
from ._executors import check_cluster, check_executor, check_host
from ..runstore import Run, read_sidecar, write_sidecar
from ._papermill import Progress as _Progress, check_parameters, error_line, execute, notebook_parameters
from ..report import write_report

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
        """Human-readable summary: the findings first (the results' title, their table, as lm-evaluation-harness
        ends with its table, and the findings in words), where they are, then what the sweep did."""
        out = []
        if self.analyzed:
            from ..report import headline
            from ..results import opening, run_table_lines

            out += [*opening(headline(self.run_dir), run_table_lines(self.run_dir)), "",
                    f"results in words: {paths.results_path(self.run_dir)}"]
            out += [f"report: {paths.report_path(self.run_dir)}"] if paths.report_path(self.run_dir).is_file() else []
            out += [""]
        out += [f"study: {self.study}", f"run_dir: {self.run_dir}", f"scored: {self.scored or '-'}",
                f"skipped (already scored): {self.skipped or '-'}", f"analyzed: {self.analyzed}"]
        out += [f"also ran: {', '.join(self.extra)}"] if self.extra else []
        out += [f"FAILED {m}: {e}" for m, e in self.failed.items()]
        return out


# ---------------------------------------------------------------- one writer per run directory at a time

LockedError = runlock.LockedError


def run_lock(run_dir):
    """The run directory's lock for the whole sweep (``nbutils.runlock``): the notebooks it runs write under it."""
    return runlock.hold(run_dir, "sweeping")


class DatasetChanged(RuntimeError):
    """The run's dataset changed while the sweep was scoring or analysing it."""


def _check_dataset(run: Run, record, sha: str, step: str) -> None:
    """Stop when the dataset is not the one the sweep generated (another process or a person replaced it)."""
    dpath = run.dataset_path(record.dataset_file)
    now = artifacts.sha256_file(dpath) if dpath.exists() else None
    if now != sha:
        raise DatasetChanged(f"run_dir: {dpath} changed while the sweep ran (before {step}: its sha256 is "
                             f"{now[:12] + '…' if now else 'gone'}, the sweep generated {sha[:12]}…); nothing more "
                             "was scored or analysed: find what rewrote it, then run the sweep again")


def _check_settings(record, params: dict, model_file) -> None:
    """A model file's scoring settings checked as the score notebook will check them (``ScoreSettings``: dtype,
    quantization, shards, adapter and its base, chat template, ...), so a bad value stops the sweep before anything is
    generated, scored or locked, not only that model's notebook after the dataset is made."""
    try:
        score_settings.ScoreSettings.of_model_file(record.spec, params)
    except ValueError as err:
        raise ValueError(f"{err} (model file {model_file}; nothing was generated or scored)") from None


# ---------------------------------------------------------------- live progress from the engine's checkpoints

# ---------------------------------------------------------------- the sweep

@dataclass(frozen=True)
class SweepPlan:
    """A sweep file checked whole (``check_sweep``): what the sweep will run, every value already refused or
    accepted."""

    record: studies.Study
    run: Run  # the run directory, resolved once
    dataset: dict
    model_params: list
    analyze_params: dict
    extra: dict  # run analysis → (notebook, its parameters)
    executor: str
    cluster: dict


def check_sweep(sweep_file: str | Path | None = None, run_dir: str | None = None, dataset: str | None = None,
                models: list[str] | None = None, limit: int | None = None, kernel: str | None = None,
                n_boot: int | None = None, study: str | None = None, executor: str | None = None) -> SweepPlan:
    """The whole sweep checked before anything is written (nothing generated, scored or locked): the sweep file's
    keys and kinds, the executor and its ``cluster:`` block, the dataset parameters against the generate notebook,
    every model file as a ``ScoreSettings``, the ``analyze`` block (and a run analysis's block) as the analysis's
    parameter record. An error names the file, the key, the value and what is accepted."""
    cfg = artifacts.load_yaml(sweep_file, SWEEP_KEYS, "sweep") if sweep_file else {}
    source = str(sweep_file or "the sweep")
    executor = check_executor(executor or cfg.get("executor") or "local", source)
    cluster_cfg = check_cluster(cfg.get("cluster"), source)
    _check_kinds(cfg, source)
    for option, given in (("--study", study), ("--dataset", dataset), ("--kernel", kernel),
                          *(("--model", m) for m in models or ())):
        if given is not None and not str(given).strip():
            raise ValueError(f"{option}: must not be empty (an unset shell variable?); leave the option out to use "
                             f"the sweep file's value")
    if run_dir is not None:
        paths.check_run_dir(run_dir)  # an empty --run-dir is refused as an empty run_dir is, not replaced by the file's
    record = studies.get(study if study is not None else cfg.get("study", studies.DEFAULT))
    nbs = record.notebooks
    run_dir = run_dir if run_dir is not None else cfg.get("run_dir")
    dataset = dataset if dataset is not None else cfg.get("dataset")
    models = list(models or cfg.get("models") or [])
    for option, number in (("--limit", limit), ("--n-boot", n_boot)):
        if number is not None:
            score_settings.check_int(option, number, 1)
    if not run_dir or not dataset or not models:
        raise ValueError("sweep: needs run_dir, dataset and at least one model file (in the sweep file or as options)")
    run = Run(paths.check_run_dir(run_dir))  # a file, the root, an empty path or a name too long are refused there
    # every parameter file is checked against its notebook before anything runs
    ds = model_files.resolve_params(artifacts.load_yaml(dataset, None, "dataset"), dataset)
    check_parameters(nbs["generate"], ds, f"dataset {dataset}", fixed=("run_dir",))
    model_params = _model_params(models, record, executor, limit)
    model_files.labels_of({str(m): p for m, p in zip(models, model_params)},  # one name per model in the results
                          {str(m): score_settings.slug_of(p) for m, p in zip(models, model_params)})
    analyze_params = dict(cfg.get("analyze") or {})
    if n_boot is not None:
        analyze_params["n_boot"] = n_boot
    if limit is not None and "include_limited" in notebook_parameters(nbs["analyze"]):
        analyze_params.setdefault("include_limited", True)  # a --limit sweep analyses its limited scores
    # the block as the notebook declares it, then as the study's parameter record (its ranges, once)
    check_parameters(nbs["analyze"], analyze_params, f"analyze block of {source}", fixed=("run_dir",),
                     record=record.analysis_params)
    extra = _run_analyses(cfg, sweep_file, limit, run)  # run analyses asked for by the sweep file (e.g. `cues:`)
    check_host(executor, cluster_cfg, source)  # before anything is generated or written
    return SweepPlan(record, run, ds, model_params, analyze_params, extra, executor, cluster_cfg)


def _model_params(models: list, record, executor: str, limit: int | None) -> list[dict]:
    """Each model file read (its paths by one rule, ``model_files``), checked against the score notebook and as a
    ``ScoreSettings``, with the study's defaults under it."""
    nbs = record.notebooks
    model_params = []
    for m in models:
        p = model_files.resolve_params(artifacts.load_yaml(m, None, "model"), m)  # its paths: one rule (model_files)
        check_parameters(nbs["score"], p, f"model {m}", fixed=("run_dir", "study")
                         + (("shard_index", "num_shards") if executor != "local" else ()))
        if "model" not in p:
            raise ValueError(f"model: {m} does not name a `model`")
        if limit is not None:
            p["limit"] = limit
        model_params.append({**record.score_defaults, **p})
        _check_settings(record, model_params[-1], m)
    return model_params


def _run_analyses(cfg: dict, sweep_file, limit: int | None, run: Run) -> dict:
    """The run analyses a sweep file asks for (e.g. a ``cues:`` block), checked like every other notebook."""
    extra = {}
    for key, nb in studies.RUN_ANALYSES.items():
        if key in cfg:
            if not isinstance(cfg[key] or {}, dict):
                raise ValueError(f"sweep: {sweep_file}: `{key}` must be a mapping of {nb}'s parameters (or empty)")
            p = dict(cfg[key] or {})
            if limit is not None and "include_limited" in notebook_parameters(nb):
                p.setdefault("include_limited", True)
            check_parameters(nb, p, f"{key} block of {sweep_file}", fixed=("run_dir",),
                             record=studies.run_analysis_params(key))
            extra[key] = (nb, dict(p, run_dir=str(run)))
    return extra


def run_sweep(sweep_file: str | Path | None = None, run_dir: str | None = None, dataset: str | None = None,
              models: list[str] | None = None, limit: int | None = None, kernel: str | None = None,
              n_boot: int | None = None, study: str | None = None, verbose: bool = False,
              progress_every: float = 20.0, executor: str | None = None, ask=None) -> SweepReport:
    """Generate once, score once per model file (failures reported, not fatal), then analyze; the whole sweep is
    checked first (``check_sweep``).

    ``executor``: ``local`` (here, one model after the other), ``slurm`` or ``submitit-local`` (one job array of
    every model and shard, see ``nbutils.sweep._cluster``); default: the sweep file's, else local. ``ask``: how a cluster
    sweep asks, after Ctrl-C, whether to cancel its jobs (default: the terminal)."""
    plan = check_sweep(sweep_file, run_dir, dataset, models, limit, kernel, n_boot, study, executor)
    record, run, ds, model_params = plan.record, plan.run, plan.dataset, plan.model_params
    executor, cluster_cfg, nbs = plan.executor, plan.cluster, plan.record.notebooks
    report = SweepReport(run, record.name)
    with run_lock(run):
        at = _At("generate")
        try:
            print(f"[sweep] {record.name}: generate → {run / record.dataset_file}", flush=True)
            execute(nbs["generate"], run.executed_notebook(nbs["generate"]), dict(ds, run_dir=str(run)), kernel)
            sha = artifacts.sha256_file(run.dataset_path(record.dataset_file))
            if executor == "local":
                if cluster_cfg:
                    print("[sweep] the cluster: block is not used: executor is local (--executor slurm or "
                          "submitit-local submits jobs)", flush=True)
                _score_here(run, record, model_params, sha, kernel, report, at, progress_every, verbose)
            else:
                at.step = "scoring (cluster jobs)"
                _score_on_cluster(executor, cluster_cfg, run, record, model_params, kernel, report, ask)
            _analyse_and_report(run, record, plan, sha, kernel, report, at)
        except KeyboardInterrupt:
            print(f"[sweep] interrupted during {at.step}: scores so far are checkpointed under "
                  f"{paths.partial_dir(run)}; run the same command again to resume", flush=True)
            raise
        except Exception as err:  # noqa: BLE001 - one line first, the traceback only when asked
            print(f"[sweep] FAILED {at.step}: {error_line(err)}", flush=True)
            if verbose:
                traceback.print_exc()
            raise SweepFailed(f"{at.step}: {error_line(err)}") from err
    return report


class _At:
    """Where a sweep is, for the one line its failure prints."""

    def __init__(self, step: str):
        self.step = step


def _score_here(run: Run, record, model_params: list[dict], sha: str, kernel, report: SweepReport, at: _At,
                progress_every: float, verbose: bool) -> None:
    """The score step here, one model after the other: a model already scored on this dataset is skipped (its label
    kept up to date), a file another scoring made is set aside, and one model failing does not stop the others."""
    spec, nbs = record.spec, record.notebooks
    for p in model_params:
        slug = score_settings.slug_of(p)
        if not p.get("overwrite") and runstore.is_done(run, spec, p):
            print(f"[sweep] skip {slug}: already scored on this dataset", flush=True)
            _relabel(run, spec, p)
            report.skipped.append(slug)
            continue
        at.step = f"scoring {slug}"
        _check_dataset(run, record, sha, at.step)
        _set_aside_changed(run, spec, p)
        print(f"[sweep] score {slug}", flush=True)
        t0 = time.perf_counter()
        try:
            with _Progress(run, slug, progress_every):
                execute(nbs["score"], run.executed_notebook(nbs["score"], slug),
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


def _analyse_and_report(run: Run, record, plan: SweepPlan, sha: str, kernel, report: SweepReport, at: _At) -> None:
    """The analysis, the run analyses the sweep file asks for, then the report, once something was scored."""
    nbs = record.notebooks
    if report.scored or report.skipped:
        at.step = "analyze"
        _check_dataset(run, record, sha, at.step)
        print("[sweep] analyze", flush=True)
        execute(nbs["analyze"], run.executed_notebook(nbs["analyze"]),
                dict(plan.analyze_params, run_dir=str(run)), kernel)
        report.analyzed = True
        for key, (nb, p) in plan.extra.items():
            at.step = key
            print(f"[sweep] {key}", flush=True)
            execute(nb, run.executed_notebook(nb), p, kernel)
            report.extra.append(key)
        at.step = "report"
        _check_dataset(run, record, sha, at.step)
        write_report(run, record.name, warn=lambda line: print(f"[sweep] warning: {line}", flush=True))


def _score_on_cluster(kind: str, cfg: dict, run: Path, record, model_params: list[dict], kernel, report: SweepReport,
                      ask=None) -> None:
    """The score step as one job array (``nbutils.sweep._cluster``): submit what is missing, watch, merge."""
    shards = cfg.get("shards_per_model", 1)
    for p in model_params:
        _set_aside_changed(run, record.spec, p, shards)
    models, tasks, skipped = plan_cluster_jobs(run, record.spec, model_params, shards)
    for slug in skipped:
        print(f"[sweep] skip {slug}: already scored on this dataset", flush=True)
    report.skipped += skipped
    if not models:
        return
    merge_only = [slug for slug in models if not any(t.slug == slug for t in tasks)]
    if merge_only:
        print(f"[sweep] every shard of {', '.join(merge_only)} is scored already: merging", flush=True)
    jobs = ClusterScoring(kind, run, record.name, record.notebooks["score"], cfg, kernel,
                                  out=lambda line: print(line, flush=True))
    try:
        jobs.submit(tasks)
        failed = jobs.wait() if jobs.jobs else {}
    except KeyboardInterrupt:
        jobs.interrupted(ask or ask_tty)
        raise
    scored, bad = merge_cluster_jobs(run, models, shards, tasks, failed)
    report.scored += scored
    report.failed.update(bad)
    for slug, err in bad.items():
        print(f"[sweep] FAILED score {slug}: {err}", flush=True)


def _relabel(run: Path, spec, p: dict) -> None:
    """A scored model whose model file now gives another ``label``: the label its sidecar records is replaced (a
    label is display text, not part of what was scored, so the scores stay), and the sweep says so."""
    side = paths.sidecar(score_settings.ScoreSettings.of_model_file(spec, p).score_file(run))
    meta = read_sidecar(side)
    if meta.get("label") != p.get("label"):
        print(f"[sweep] {side.stem}: label {meta.get('label')!r} → {p.get('label')!r} (the scores stay)", flush=True)
        write_sidecar(meta.replace(label=p.get("label")), side)


def _set_aside_changed(run: Path, spec, p: dict, shards: int = 1) -> None:
    """A model's score file (and, scored as ``shards`` jobs, its shards' files) that a scoring with other identity
    settings made, set aside (``runstore.set_aside_changed``), so that the model is scored again as its file says;
    a model file with ``overwrite`` replaces them instead."""
    if p.get("overwrite"):
        return
    for q in [p] + ([dict(p, shard_index=i, num_shards=shards) for i in range(shards)] if shards > 1 else []):
        moved, why = runstore.set_aside_changed(run, spec, q)
        if moved:
            print(f"[sweep] {score_settings.slug_of(q)}: scored before with other settings ({why}); {len(moved)} "
                  f"file(s) moved to {moved[0].parent}; scoring again", flush=True)


def _check_kinds(cfg: dict, source: str) -> None:
    """Each value of a sweep file is of its kind: ``study``, ``run_dir`` and ``dataset`` a text, ``models`` a list of
    texts (paths of model files), ``analyze`` a mapping; else a ValueError naming the key and the file."""
    def bad(key: str, what: str) -> ValueError:
        return ValueError(f"sweep: {source}: `{key}` must be {what}, got {type(cfg[key]).__name__} {cfg[key]!r}")

    for key in ("study", "run_dir", "dataset"):
        if key in cfg and not isinstance(cfg[key], str):
            raise bad(key, "a text (a name or a path)")
    if "models" in cfg and not (isinstance(cfg["models"], list) and all(isinstance(m, str) for m in cfg["models"])):
        raise bad("models", "a list of model parameter files, e.g. [params/models/smollm2-135m-instruct.yaml]")
    if cfg.get("analyze") is not None and not isinstance(cfg["analyze"], dict):
        raise bad("analyze", "a mapping of the analysis notebook's parameters")


class SweepFailed(RuntimeError):
    """A step every model needs (generate, analyze) failed."""
