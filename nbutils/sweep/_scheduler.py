"""What the SLURM scheduler answers: the partition's resources, checked before a sweep writes or submits anything, and
the states of submitted jobs on clusters with or without accounting.

submitit asks ``sacct`` for job states. A cluster without accounting storage (a fresh install's default, common on small
clusters) answers ``sacct`` with an error, and every job would look pending until its result file appears. Here the
states come from ``sacct`` where it answers, else from ``squeue`` (queued and running jobs), ``scontrol show job``
(jobs that ended a few minutes ago) and, for jobs the scheduler has forgotten, the job's own result file.
"""
from __future__ import annotations

import logging
import re
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import submitit
from submitit.slurm.slurm import SlurmInfoWatcher

QUERY_TIMEOUT = 60  # seconds a squeue/scontrol/sinfo call may take


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=QUERY_TIMEOUT, check=False)


# ---------------------------------------------------------------- the partition, before anything is written

def _answer(cmd: list[str], source: str) -> str:
    try:
        res = _run(cmd)
    except (OSError, subprocess.TimeoutExpired) as err:
        res = subprocess.CompletedProcess(cmd, 1, "", str(err))
    if res.returncode != 0:
        raise ValueError(f"executor: {source}: slurm, but SLURM does not answer `{' '.join(cmd)}`: "
                         f"{(res.stderr or res.stdout).strip() or 'exit ' + str(res.returncode)}; is the cluster up "
                         "(sinfo), and is SLURM_CONF set where the cluster needs it?")
    return res.stdout


def partitions(source: str) -> dict[str, dict[str, str]]:
    """Every partition ``scontrol show partition`` lists: name → its fields (``Default``, ``MaxMemPerNode``, …)."""
    out = {}
    for line in _answer(["scontrol", "show", "partition", "--oneliner"], source).splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "PartitionName" in fields:
            out[fields["PartitionName"]] = fields
    return out


def nodes(partition: str, source: str) -> list[dict]:
    """The partition's nodes from ``sinfo``: name, CPUs, memory in MB and GPUs (count of ``gpu`` generic resources)."""
    rows = []
    for line in _answer(["sinfo", "--noheader", "--Node", "--partition", partition, "--format", "%N|%c|%m|%G"],
                        source).splitlines():
        name, cpus, mem, gres = (line.split("|") + ["", "", ""])[:4]
        kinds = [g.split(":") for g in re.sub(r"\([^)]*\)", "", gres).split(",")]  # gpu:a100:4(S:0-1),… → gpu
        gpus = sum(int(k[-1]) if k[-1].isdigit() else 1 for k in kinds if k[0].strip() == "gpu")
        rows.append({"node": name.strip(), "cpus": int(re.sub(r"\D", "", cpus) or 0),
                     "mem_mb": int(re.sub(r"\D", "", mem) or 0), "gpus": gpus})
    return rows


def check_partition(cluster: dict, source: str) -> None:
    """The ``cluster:`` block against the partition it names (or the cluster's default): the partition exists, and
    a job's GPUs, cores and memory fit on one of its nodes; a ValueError names the key and the fix."""
    parts = partitions(source)
    name = cluster.get("partition") or next((p for p, f in parts.items() if f.get("Default") == "YES"), None)
    if name is None:
        raise ValueError(f"cluster.partition: {source}: this cluster has no default partition; name one of "
                         f"{sorted(parts)}")
    if name not in parts:
        raise ValueError(f"cluster.partition: {source}: {name!r} is not a partition of this cluster; set partition: "
                         f"to one of {sorted(parts)}")
    rows = nodes(name, source)
    if not rows:
        raise ValueError(f"cluster.partition: {source}: partition {name} has no nodes; choose one of {sorted(parts)}")
    gpus = cluster.get("gpus_per_job", 1)
    most = max(r["gpus"] for r in rows)
    if gpus and not most:
        raise ValueError(f"cluster.gpus_per_job: {source}: gpus_per_job: {gpus}, but partition {name} has no GPUs; "
                         "set gpus_per_job: 0 (the jobs score on CPU), or a partition with GPUs")
    if gpus > most:
        raise ValueError(f"cluster.gpus_per_job: {source}: gpus_per_job: {gpus}, but the nodes of partition {name} "
                         f"have at most {most} GPUs; set gpus_per_job: {most} or less")
    cpus = cluster.get("cpus_per_job")
    most = max(r["cpus"] for r in rows)
    if cpus and cpus > most:
        raise ValueError(f"cluster.cpus_per_job: {source}: cpus_per_job: {cpus}, but the nodes of partition {name} "
                         f"have at most {most} CPUs; set cpus_per_job: {most} or less")
    mem = cluster.get("mem_gb")
    limits = [r["mem_mb"] for r in rows]
    cap = parts[name].get("MaxMemPerNode", "UNLIMITED")
    most = min(max(limits), int(cap)) if cap.isdigit() else max(limits)
    if mem and mem * 1024 > most:
        raise ValueError(f"cluster.mem_gb: {source}: mem_gb: {mem}, but a job of partition {name} gets at most "
                         f"{most / 1024:.1f} GB; set mem_gb: {int(most // 1024)} or less")


# ---------------------------------------------------------------- job states, with or without accounting

class QueueWatcher(SlurmInfoWatcher):
    """submitit's watcher of SLURM jobs: ``sacct`` where the cluster keeps accounting, else ``squeue`` and
    ``scontrol``; a job the scheduler no longer knows is COMPLETED or FAILED by its result file, else ENDED."""

    def __init__(self, delay_s: int = 5) -> None:
        super().__init__(delay_s=delay_s)
        self.said: set[str] = set()  # what was noted already (once each)
        self.results: dict[str, Path] = {}  # job id -> its result file (ClusterJob registers it)
        self.note = lambda line: None  # where a word about the scheduler goes (the sweep's log)

    def listen(self, note) -> None:
        """Words about the scheduler go to ``note`` from now on, each once (a sweep calls it when it submits)."""
        self.note, self.said = note, set()

    def update(self) -> None:
        command = self._make_command()
        if command is None:
            return
        self._num_calls += 1
        info = self._from_sacct(command)
        if info is None:
            info = self._from_queue({x.split("_")[0] for x in self._registered - self._finished})
        self._info_dict.update(info)
        self._last_status_check = time.time()
        for job_id in self._registered - self._finished:
            if self.is_done(job_id, mode="cache"):
                self._finished.add(job_id)

    def _from_sacct(self, command: list[str]) -> dict | None:
        try:
            res = _run(command)
        except (OSError, subprocess.TimeoutExpired) as err:
            res = subprocess.CompletedProcess(command, 1, "", str(err))
        if res.returncode == 0:
            return self.read_info(res.stdout)
        why = (res.stderr or res.stdout).strip() or f"exit {res.returncode}"
        if why not in self.said:
            self.said.add(why)
            self.note(f"sacct does not answer ({why}): job states come from squeue, scontrol and the jobs' result "
                      "files")
        return None

    def _from_queue(self, arrays: set[str]) -> dict:
        try:
            res = _run(["squeue", "--noheader", "--array", "--format", "%i|%T|%N", "--jobs", ",".join(sorted(arrays))])
        except (OSError, subprocess.TimeoutExpired):
            return {}
        if res.returncode != 0 and "Invalid job id" not in res.stderr:
            return {}  # the controller did not answer: the states stay as they were
        info = {}
        for line in res.stdout.splitlines():
            job_id, state, node = (line.split("|") + ["", ""])[:3]
            info[job_id.strip()] = {"JobID": job_id.strip(), "State": state.strip(), "NodeList": node.strip()}
        gone = [j for j in self._registered - self._finished if j not in info]
        for array in sorted({j.split("_")[0] for j in gone}):
            try:
                shown = _run(["scontrol", "show", "job", "--oneliner", array]).stdout
            except (OSError, subprocess.TimeoutExpired):
                shown = ""
            for line in shown.splitlines():
                f = dict(re.findall(r"(\w+)=(\S*)", line))
                job_id = (f"{f['ArrayJobId']}_{f['ArrayTaskId']}" if f.get("ArrayTaskId", "").isdigit()
                          else f.get("JobId", ""))
                if job_id in gone and f.get("JobState"):
                    info[job_id] = {"JobID": job_id, "State": f["JobState"], "NodeList": f.get("NodeList", "")}
        for job_id in gone:
            if job_id not in info:
                info[job_id] = {"JobID": job_id, "State": self._by_result(job_id), "NodeList": ""}
        return info

    def _by_result(self, job_id: str) -> str:
        path = self.results.get(job_id)
        if path is None or not path.exists():
            return "ENDED"
        try:
            outcome = submitit.core.utils.pickle_load(path)[0]
        except Exception:  # noqa: BLE001 - being written: the next call reads it
            return "COMPLETING"
        return "COMPLETED" if outcome == "success" else "FAILED"


class ClusterJob(submitit.SlurmJob):
    """A SLURM job whose state comes from ``QueueWatcher`` (with or without accounting)."""

    watcher = QueueWatcher()

    def __init__(self, folder, job_id: str, tasks=(0,)) -> None:
        super().__init__(folder, job_id, tasks)
        self.watcher.results[job_id] = self.paths.result_pickle

    def done(self, force_check: bool = False) -> bool:
        """Ended, by the scheduler's word first: a job requeued (by ``scontrol requeue``, a preemption or its time
        limit) is queued or running again, whatever result file its interrupted run left behind."""
        state = self.watcher.get_state(self.job_id, mode="force" if force_check else "standard").upper()
        if state.startswith(QUEUED):
            return False
        return super().done(force_check)


QUEUED = ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING")  # not ended yet


@contextmanager
def submitit_log(path: Path):
    """submitit's own messages (its sacct warnings among them) go to ``path``, not to the terminal, meanwhile."""
    log = logging.getLogger("submitit")
    handlers, propagate = list(log.handlers), log.propagate
    path.parent.mkdir(parents=True, exist_ok=True)
    to_file = logging.FileHandler(path)
    to_file.setFormatter(logging.Formatter("%(asctime)s submitit %(levelname)s %(message)s"))
    for h in handlers:
        log.removeHandler(h)
    log.addHandler(to_file)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(to_file)
        to_file.close()
        for h in handlers:
            log.addHandler(h)
        log.propagate = propagate
