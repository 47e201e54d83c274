"""Where a sweep's score notebooks run: the ``executor`` (``local``, ``submitit-local``, ``slurm``), the checks of the
sweep file's ``cluster:`` block and of the host, and the submitit executor they configure (``nbutils.sweep._cluster`` submits
and watches the jobs). Every check runs before anything is generated and names the key and what it allows."""
from __future__ import annotations

from pathlib import Path

import submitit

from ._parameters import integer

EXECUTORS = ("local", "submitit-local", "slurm")
JOB_NAME = "bias-probes"


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


_positive.allowed = "a number > 0"


def _text(v) -> bool:
    return isinstance(v, str) and bool(v.strip())


_text.allowed = "a non-empty string"


def _options(v) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, (str, int, float, bool)) for k, x in v.items())


_options.allowed = "a mapping of sbatch option names (without --) to values, e.g. {constraint: a100, mail-type: END}"


def _lines(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


_lines.allowed = "a list of shell lines run before each job (module load …, source .venv/bin/activate)"

# the sweep file's `cluster:` block: name -> (check, what it means)
CLUSTER_KEYS = {
    "partition": (_text, "SLURM partition"),
    "account": (_text, "SLURM account"),
    "qos": (_text, "SLURM quality of service"),
    "gpus_per_job": (integer(0), "GPUs per job (default 1 on SLURM, 0 locally)"),
    "cpus_per_job": (integer(1), "CPU cores per job"),
    "mem_gb": (_positive, "memory per job in GB"),
    "time_min": (integer(1), "time limit per job in minutes (default 240); a job past it is requeued from its checkpoint"),
    "array_parallelism": (integer(1), "jobs of the array running at once (SLURM)"),
    "shards_per_model": (integer(1), "jobs per model: each scores every N-th batch (default 1)"),
    "sbatch_extra": (_options, "more sbatch options"),
    "setup": (_lines, "shell lines before each job"),
    "poll_seconds": (_positive, "seconds between progress lines (default 30)"),
}
DEFAULT_TIME_MIN = 240
DEFAULT_POLL = 30.0


def check_cluster(block, source: str) -> dict:
    """The ``cluster:`` block, every key checked against its allowed names and values (an error names the key)."""
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise ValueError(f"cluster: {source}: must be a mapping of {sorted(CLUSTER_KEYS)}")
    unknown = sorted(set(block) - set(CLUSTER_KEYS))
    if unknown:
        raise ValueError(f"cluster: {source}: unknown key(s) {unknown}; allowed: {sorted(CLUSTER_KEYS)}")
    for k, v in block.items():
        check, what = CLUSTER_KEYS[k]
        if not check(v):
            raise ValueError(f"cluster.{k}: {source}: must be {check.allowed} ({what}), got {v!r}")
    return dict(block)


def check_executor(name, source: str) -> str:
    if name not in EXECUTORS:
        raise ValueError(f"executor: {source}: must be one of {list(EXECUTORS)}, got {name!r}")
    return name


def check_host(name: str, cluster: dict, source: str) -> None:
    """``executor: slurm`` needs SLURM's commands on this host (submitit calls ``sbatch`` and ``srun``, the checks
    ``sinfo`` and ``scontrol``) and a partition the ``cluster:`` block fits (``nbutils.sweep._scheduler``); otherwise a
    ValueError names the key and the fix, before anything is generated or written."""
    import shutil

    if name != "slurm":
        return
    missing = [c for c in ("sbatch", "srun", "sinfo", "scontrol") if shutil.which(c) is None]
    if missing:
        raise ValueError(f"executor: {source}: slurm needs a SLURM cluster, and this host has no "
                         f"{' or '.join(missing)} on its PATH; run the sweep on the cluster's login node, or choose "
                         "executor: submitit-local (the same jobs on this machine) or local (one model after the other "
                         "here); to try a cluster on this machine: scripts/slurm_local.sh start")
    from ._scheduler import check_partition

    check_partition(cluster, source)


def make_executor(kind: str, folder: Path, cluster: dict):
    """A submitit executor for ``kind`` with the ``cluster:`` block's settings (nothing is submitted)."""
    time_min = cluster.get("time_min", DEFAULT_TIME_MIN)
    if kind == "slurm":
        ex = submitit.SlurmExecutor(folder=folder)
        # the requeue signal 90 s before the time limit, or half-way through a job shorter than 3 minutes
        params = {"job_name": JOB_NAME, "time": time_min, "gpus_per_node": cluster.get("gpus_per_job", 1),
                  "ntasks_per_node": 1, "stderr_to_stdout": True, "signal_delay_s": min(90, time_min * 30)}
        for key, name in (("partition", "partition"), ("account", "account"), ("qos", "qos"),
                          ("cpus_per_job", "cpus_per_task"), ("array_parallelism", "array_parallelism"),
                          ("setup", "setup")):
            if key in cluster:
                params[name] = cluster[key]
        if "mem_gb" in cluster:
            params["mem"] = submitit.slurm.slurm._convert_mem(cluster["mem_gb"])
        if cluster.get("sbatch_extra"):
            params["additional_parameters"] = dict(cluster["sbatch_extra"])
        ex.update_parameters(**params)
        return ex
    if kind == "submitit-local":
        ex = submitit.LocalExecutor(folder=folder)
        ex.update_parameters(timeout_min=time_min, gpus_per_node=cluster.get("gpus_per_job", 0),
                             stderr_to_stdout=True, **({"setup": cluster["setup"]} if "setup" in cluster else {}))
        return ex
    raise ValueError(f"executor: {kind!r} does not submit jobs; one of {list(EXECUTORS[1:])} does")
