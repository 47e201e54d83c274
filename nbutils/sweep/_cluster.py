"""Scoring past one machine: the sweep's score step as ONE job array (a job per model and shard) through submitit.

``executor`` chooses where the score notebooks run (``nbutils.sweep._executors`` checks it and makes its submitit executor):
- ``local``: in the sweep's own process, one model after the other (the default; ``nbutils.sweep``);
- ``slurm``: submitit's SLURM executor: ``sbatch`` of one job array, ``array_parallelism`` of its jobs at a time,
  requeued from its checkpoint when SLURM preempts it or its time runs out;
- ``submitit-local``: submitit's local executor: the same jobs as real subprocesses of this machine (to try a cluster
  sweep, and to test it, without a cluster). All its jobs start at once.

Every job runs the shared score notebook through papermill (``nbutils.sweep._papermill``) with its
``shard_index``/``num_shards``, as ``python -m nbutils run`` would; it writes its executed notebook under
``{run}/notebooks/`` and submitit's logs under ``{run}/logs/``. The coordinating process (the sweep, which holds the
run's lock) submits, watches, then merges the shards of every model whose jobs all succeeded. What a job writes is
what the serial sweep writes: the shards are merged into exactly the score file an unsharded run writes.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import submitit

from .. import artifacts, paths, runlock, runstore, score_settings
from ._scheduler import QUEUED, ClusterJob, submitit_log
from ..runstore import read_sidecar
from ._executors import DEFAULT_POLL, make_executor
from ._papermill import error_line, execute

ALIVE = QUEUED  # SLURM states of a job not ended yet


# ---------------------------------------------------------------- what one job does

class ScoreJobError(RuntimeError):
    """A score notebook failed in a job: its real error in one line."""


class ScoreJob(submitit.helpers.Checkpointable):
    """One (model, shard): the score notebook through papermill. Checkpointable: when SLURM preempts the job or its
    time runs out, submitit requeues the same call, and the engine resumes from its checkpoint."""

    def __call__(self, root: str, notebook: str, output: str, params: dict, kernel: str | None = None,
                 lock_tokens: str = "") -> str:
        os.environ["NBUTILS_ROOT"] = root
        if lock_tokens:  # the sweep that submitted this job holds the run's lock: its notebooks write under it
            os.environ[runlock.TOKENS_ENV] = lock_tokens
        os.chdir(root)
        try:
            execute(notebook, Path(output), params, kernel)
        except Exception as err:  # noqa: BLE001 - one line the coordinator can show
            raise ScoreJobError(error_line(err)) from None
        return output


# ---------------------------------------------------------------- the coordinator

@dataclass
class Task:
    """One job's work: one model's parameters and one shard of it."""

    slug: str
    params: dict
    shard_index: int
    num_shards: int

    @property
    def name(self) -> str:
        return self.slug if self.num_shards == 1 else f"{self.slug}.shard-{self.shard_index}-of-{self.num_shards}"

    def job_params(self, run: Path, study: str) -> dict:
        p = dict(self.params, run_dir=str(run), study=study)
        if self.num_shards > 1:
            p.update(shard_index=self.shard_index, num_shards=self.num_shards)
        return p

    def score_file(self, run: Path) -> Path:
        return paths.score_file(run, self.slug, self.params.get("limit"), self.shard_index, self.num_shards)

    def rows(self, run: Path) -> tuple[int, int | None]:
        """(rows scored, rows planned or None) from the finished file's sidecar, else the live progress file."""
        side = paths.sidecar(self.score_file(run))
        if side.exists():
            try:
                meta = read_sidecar(side)
                if meta.get("complete"):
                    return int(meta.get("n_rows") or 0), int(meta.get("n_rows") or 0)
            except (OSError, ValueError):
                pass
        prog = paths.progress_file(paths.partial_file(run, self.slug, self.params.get("limit"), self.shard_index,
                                                      self.num_shards))
        try:
            p = json.loads(prog.read_text())
            return int(p["n_done"]), int(p["n_planned"])
        except (OSError, ValueError, KeyError):
            return 0, None


def plan(run: Path, spec, model_params: list[dict], shards: int) -> tuple[dict[str, dict], list[Task], list[str]]:
    """The models to score (slug → parameters), the (model, shard) jobs still to run for them (a shard finished in
    an earlier sweep is not run again), and the models already scored (skipped): ``runstore.is_done``, the rule of
    scoring itself (``score_settings.identity``)."""
    models, tasks, skipped = {}, [], []
    for p in model_params:
        slug = score_settings.slug_of(p)
        if not p.get("overwrite") and runstore.is_done(run, spec, p):
            skipped.append(slug)
            continue
        models[slug] = p
        tasks += [Task(slug, p, i, shards) for i in range(shards)
                  if shards == 1 or p.get("overwrite")
                  or not runstore.is_done(run, spec, dict(p, shard_index=i, num_shards=shards))]
    return models, tasks, skipped


def _status(job) -> tuple[str, BaseException | None]:
    """pending / running / done / failed, from submitit's view of the job, and a failed job's exception (asking
    for it waits for the job's result file, so it is asked once)."""
    try:
        finished = job.done()
    except Exception:  # noqa: BLE001 - the scheduler did not answer this time: ask again at the next interval
        return "running", None
    if not finished:
        state = str(job.state).upper()
        return ("pending" if state.startswith(("PENDING", "REQUEUED", "CONFIGURING", "UNKNOWN")) else "running"), None
    exc = job.exception()
    return ("done" if exc is None else "failed"), exc


def failure_line(job, exc: BaseException) -> str:
    """The real error of a failed job, in one line: the notebook's error when the job raised one, else what the
    scheduler says (killed, out of time, out of memory)."""
    text = str(exc or "")
    state = str(getattr(job, "state", "") or "")
    if state.upper().startswith("CANCELLED"):
        return ("cancelled (scancel, or by the cluster) before it finished; its checkpoint is kept: run the same "
                "command again to go on")
    marker = f"{ScoreJobError.__module__}.ScoreJobError: "
    for line in reversed(text.splitlines()):
        if marker in line or line.startswith("ScoreJobError: "):
            return line.split("ScoreJobError: ", 1)[1].strip()
    return (f"the job ended without a result (state {state}: killed, out of time or out of memory?)"
            if "has not produced any output" in text or "UncompletedJobError" in type(exc).__name__
            else (text.strip().splitlines() or [state])[-1])


def job_log(job) -> Path:
    """The job's log (stdout and stderr together)."""
    return Path(job.paths.stdout)


class ClusterScoring:
    """Submit the tasks as one job array, print progress per interval, report failures; the jobs' records are kept
    in ``{run}/logs/jobs.json`` so that a later sweep can tell the user which jobs it had submitted."""

    def __init__(self, kind: str, run: Path, study: str, notebook: str, cluster: dict, kernel: str | None = None,
                 out=print):
        self.kind, self.run, self.study, self.notebook, self.cluster = kind, run, study, notebook, cluster
        self.kernel, self.out = kernel, out
        self.folder = paths.logs_dir(run)
        self.jobs: list = []
        self.tasks: list[Task] = []
        self.final: dict[int, str] = {}  # job index -> done / failed, once it has ended
        self.log = self.folder / "sweep.log"  # what the scheduler and submitit said that is not for the terminal

    def note(self, line: str) -> None:
        """One line into the sweep's log (``{run}/logs/sweep.log``)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with self.log.open("a", encoding="utf-8") as f:
            f.write(f"{artifacts.now_utc()} {line}\n")

    def submit(self, tasks: list[Task]) -> list:
        """One job array of every task not already queued or running from an earlier sweep (SLURM: those are
        re-attached, not submitted twice); nothing is submitted when there is no task."""
        if not tasks:
            return []
        self.folder.mkdir(parents=True, exist_ok=True)
        ClusterJob.watcher.listen(self.note)
        attached, tasks = self._reattach(tasks)
        new = []
        if tasks:
            ex = make_executor(self.kind, self.folder, self.cluster)
            root = str(paths.root())
            with submitit_log(self.log), ex.batch():
                pending = [ex.submit(ScoreJob(), root, self.notebook,
                                     str(paths.executed_notebook(self.run, self.notebook, t.name)),
                                     t.job_params(self.run, self.study), self.kernel,
                                     os.environ.get(runlock.TOKENS_ENV, "")) for t in tasks]
            new = list(pending)
            if self.kind == "slurm":  # their states from the scheduler that is there (with or without accounting)
                new = [ClusterJob(self.folder, j.job_id) for j in new]
        self.jobs = [j for j, _ in attached] + new
        self.tasks = [t for _, t in attached] + tasks
        self._record()
        if attached:
            self.out(f"[sweep] {len(attached)} job(s) of an earlier sweep are still queued or running: watching them "
                     f"instead of submitting them again ({', '.join(j.job_id for j, _ in attached)})")
        if new:
            ids = [j.job_id for j in new]
            self.out(f"[sweep] submitted {len(ids)} job(s) as one array ({self.kind}): "
                     f"{ids[0] if len(ids) == 1 else ids[0] + ' … ' + ids[-1]}; logs in {self.folder}")
        return self.jobs

    def _reattach(self, tasks: list[Task]) -> tuple[list, list[Task]]:
        """SLURM jobs recorded by an earlier sweep of this run that are still queued or running, with their tasks;
        and the tasks left to submit."""
        rec = self.folder / "jobs.json"
        if self.kind != "slurm" or not rec.exists():
            return [], tasks
        try:
            old = {j["task"]: j["job_id"] for j in artifacts.read_json(rec).get("jobs", [])}
        except (OSError, ValueError, KeyError, TypeError):
            return [], tasks
        attached, rest = [], []
        for t in tasks:
            if t.name in old:
                job = ClusterJob(self.folder, old[t.name])
                try:
                    state = str(job.state).upper()
                except Exception:  # noqa: BLE001 - sacct did not answer: submit it again rather than wait forever
                    state = "UNKNOWN"
                if state.startswith(ALIVE):
                    attached.append((job, t))
                    continue
            rest.append(t)
        return attached, rest

    def _record(self) -> None:
        artifacts.write_json({"executor": self.kind, "submitted": artifacts.now_utc(),
                              "jobs": [{"job_id": j.job_id, "task": t.name, "log": str(job_log(j))}
                                       for j, t in zip(self.jobs, self.tasks)]},
                             self.folder / "jobs.json")

    def progress_line(self, states: Counter) -> str:
        rows = [t.rows(self.run) for t in self.tasks]
        done = sum(r[0] for r in rows)
        planned = None if any(r[1] is None for r in rows) else sum(r[1] for r in rows)
        return (f"[sweep] jobs: {states['pending']} pending, {states['running']} running, {states['done']} done, "
                f"{states['failed']} failed; {done}{'/' + str(planned) if planned is not None else ''} rows scored")

    def wait(self, every: float | None = None) -> dict[str, str]:
        """Until every job has ended: a progress line per interval (and when a job ends); returns the failures
        (task name → error line), each printed with its log."""
        every = every or self.cluster.get("poll_seconds", DEFAULT_POLL)
        with submitit_log(self.log):
            return self._watch(every)

    def _watch(self, every: float) -> dict[str, str]:
        failed: dict[str, str] = {}
        last_line, last_time = "", 0.0
        while True:
            states = []
            for i, j in enumerate(self.jobs):
                if i in self.final:
                    states.append(self.final[i])
                    continue
                state, exc = _status(j)
                if state == "failed":
                    name = self.tasks[i].name
                    failed[name] = failure_line(j, exc)
                    self.out(f"[sweep] FAILED job {j.job_id} ({name}): {failed[name]}; log: {job_log(j)}")
                    self.note(f"[sweep] FAILED job {j.job_id} ({name}): {failed[name]}")
                if state in ("done", "failed"):
                    self.final[i] = state
                states.append(state)
            line = self.progress_line(Counter(states))
            now = time.monotonic()
            finished = all(s in ("done", "failed") for s in states)
            if finished or (line != last_line and now - last_time >= every) or now - last_time >= 10 * every:
                self.out(line)
                self.note(line)
                last_line, last_time = line, now
            if finished:
                return failed
            time.sleep(min(every, 2.0))

    def unfinished(self) -> list:
        return [j for i, j in enumerate(self.jobs) if i not in self.final and _status(j)[0] in ("pending", "running")]

    def interrupted(self, ask=input) -> str:
        """After Ctrl-C: cancel the jobs that have not finished, or leave them running (SLURM); returns what was done.
        Local jobs are children of this terminal and have had the same Ctrl-C: they are stopped."""
        left = self.unfinished()
        again = ("run the same command again: it submits only the shards that are missing or failed, and each "
                 "resumes from its checkpoint")
        if not left:
            return "none"
        if self.kind != "slurm":
            for j in left:
                j.cancel(check=False)
            self.out(f"[sweep] stopped {len(left)} local job(s); to go on, {again}")
            return "cancelled"
        try:
            answer = ask(f"[sweep] {len(left)} job(s) still queued or running: cancel them (c) or leave them "
                         "running (l)? [l] ").strip().lower()
        except (EOFError, OSError):
            answer = "l"
        if answer.startswith("c"):
            for j in left:
                j.cancel(check=False)
            self.out(f"[sweep] cancelled {len(left)} job(s); their checkpoints are kept; to go on, {again}")
            return "cancelled"
        self.out(f"[sweep] left {len(left)} job(s) running (ids in {self.folder / 'jobs.json'}; `squeue -u $USER`). "
                 f"When they have ended, {again}, then it merges and analyses")
        return "left"


def merge(run: Path, models: dict[str, dict], shards: int, tasks: list[Task],
          failed: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """Merge the shards of every model whose jobs all succeeded: (models scored, models failed with their error)."""
    scored, bad = [], {}
    for slug, p in models.items():
        mine = [t for t in tasks if t.slug == slug]
        errors = {failed[t.name] for t in mine if t.name in failed}
        if errors:
            n = sum(t.name in failed for t in mine)
            bad[slug] = (f"{n} of {len(mine)} jobs failed: " if len(mine) > 1 else "") + "; ".join(sorted(errors))
            continue
        if shards > 1:
            try:
                runstore.merge_shards(run, slug, limit=p.get("limit"), overwrite=bool(p.get("overwrite")))
            except ValueError as err:
                bad[slug] = f"merge: {err}"
                continue
        scored.append(slug)
    return scored, bad


def ask_tty(prompt: str) -> str:
    """input() when a person is at the terminal; 'l' (leave the jobs running) otherwise."""
    if not sys.stdin or not sys.stdin.isatty():
        return "l"
    return input(prompt)
