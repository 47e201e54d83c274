"""Cluster sweeps against a real SLURM: the one-node cluster of scripts/slurm_local.sh (Debian's slurm-wlm and munge,
no accounting storage). The partition is checked before anything is written; job states come from squeue and
scontrol; a SLURM sweep writes byte-identical files to the one-machine sweep; a job cancelled with scancel is reported
cancelled and the next sweep resumes it from its checkpoint; `scontrol requeue` and a time limit requeue a job, which
resumes from its checkpoint. Without a cluster these tests skip, except under CI=true, where they fail."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from nbutils.sweep import _cluster as cluster, _scheduler as scheduler
from nbutils import paths
from nbutils.studies.monotonicity.dataset import generate_prompts, write_prompts
from nbutils.sweep import run_sweep
from simulated_runs import comparable_bytes

pytestmark = pytest.mark.slurm

ROOT = paths.repo_root()
MODEL = ROOT / "params" / "models" / "smollm2-135m-instruct.yaml"
SLUG = "smollm2-135m-instruct"
# two concepts at one threshold, both conditions, short prompts: limit 1 is 4 rows, limit 3 is 12
DATASET = dict(concepts=["more than 1/2", "less than 1/2"], conditions=["concept_learning", "explicit"],
               prompts_per_concept=6, n_examples=8, seed=0)
BLOCK = {"gpus_per_job": 0, "cpus_per_job": 1, "time_min": 10, "poll_seconds": 1}  # what the local node offers
SLOW = {"batch_size": 1, "checkpoint_every": 1}  # a checkpoint after every prompt
# one torch thread everywhere: a job on the node and the test's own process (pinned to one core under xdist) compute
# alike, and the jobs leave the other core to the other test worker
ONE_THREAD = {"threads": 1}


@pytest.fixture(scope="module")
def slurm():
    """The cluster (SLURM_CONF, else the one scripts/slurm_local.sh started in .slurm/), or a skip with the reason."""
    conf = os.environ.get("SLURM_CONF") or str(ROOT / ".slurm" / "slurm.conf")
    why = None
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        why = "SLURM's commands are not installed (apt-get install slurm-wlm munge)"
    elif not Path(conf).is_file():
        why = f"no cluster configuration at {conf}"
    else:
        res = subprocess.run(["sinfo", "--noheader"], env=dict(os.environ, SLURM_CONF=conf), capture_output=True,
                             text=True, timeout=30)
        if res.returncode != 0 or "idle" not in res.stdout + subprocess.run(
                ["sinfo", "--noheader", "-o", "%t"], env=dict(os.environ, SLURM_CONF=conf), capture_output=True,
                text=True, timeout=30).stdout:
            why = f"the cluster of {conf} does not answer or has no idle node: {(res.stderr or res.stdout).strip()}"
    if why:
        message = f"{why}; start one with: scripts/slurm_local.sh start"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true needs a SLURM cluster (.ci/run starts one): {message}")
        pytest.skip(message)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", conf)
        yield conf


def _sweep(tmp: Path, name: str, executor: str = "slurm", model: Path | None = None, **block) -> Path:
    model = model or _model(tmp, "model")
    dataset = tmp / "dataset.yaml"
    dataset.write_text(yaml.safe_dump(DATASET))
    cfg = {"study": "monotonicity", "run_dir": str(tmp / name), "dataset": str(dataset), "models": [str(model)],
           "analyze": {"n_boot": 200, "use_r": False}, "executor": executor, "cluster": {**BLOCK, **block}}
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(cfg))
    return f


def _model(tmp: Path, name: str, **extra) -> Path:
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump({**yaml.safe_load(MODEL.read_text()), **ONE_THREAD, **extra}))
    return f


def _rows(partial: Path) -> int:
    import pandas as pd

    try:
        return len(pd.read_parquet(partial))
    except Exception:  # noqa: BLE001 - not there yet, or being written right now
        return 0


def _wait_rows(partial: Path, n: int, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and _rows(partial) < n:
        time.sleep(0.3)
    assert _rows(partial) >= n, f"no checkpoint of {n} rows in {partial} after {seconds} s"


@pytest.fixture
def released(slurm):
    """SLURM holds a requeued job two minutes (its BeginTime): meanwhile every such hold is lifted at once."""
    stop = threading.Event()

    def loop():
        while not stop.wait(0.5):
            held = subprocess.run(["squeue", "--noheader", "--states", "PENDING", "-o", "%i|%r"], capture_output=True,
                                  text=True).stdout
            for line in held.splitlines():
                job_id, reason = line.split("|", 1)
                if reason.strip() == "BeginTime":
                    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], capture_output=True)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


# ---------------------------------------------------------------- checked before anything is written

@pytest.mark.parametrize("block,message", [
    ({"gpus_per_job": 1}, "cluster.gpus_per_job: .* gpus_per_job: 1, but partition debug has no GPUs; "
                          "set gpus_per_job: 0"),
    ({"partition": "gpu"}, r"cluster.partition: .* 'gpu' is not a partition of this cluster; "
                           r"set partition: to one of \['debug'\]"),
    ({"cpus_per_job": 4096}, "cluster.cpus_per_job: .* cpus_per_job: 4096, but the nodes of partition debug have "
                             "at most"),
    ({"mem_gb": 100000}, "cluster.mem_gb: .* mem_gb: 100000, but a job of partition debug gets at most"),
])
def test_the_partition_refuses_what_it_cannot_run_before_anything_is_written(slurm, tmp_path, block, message):
    with pytest.raises(ValueError, match=message):
        run_sweep(_sweep(tmp_path, "run", **block))
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- job states without accounting

def test_job_states_come_from_the_scheduler_without_accounting(slurm, tmp_path, capfd):
    assert subprocess.run(["sacct"], capture_output=True).returncode != 0, "the local cluster keeps no accounting"
    jobs = cluster.ClusterScoring("slurm", tmp_path / "run", "monotonicity", "", BLOCK, out=lambda s: None)
    ex = cluster.make_executor("slurm", jobs.folder, BLOCK)
    wait = f"while [ ! -e {tmp_path / 'go'} ]; do sleep 0.2; done; echo ok"  # runs until the test says go
    job = scheduler.ClusterJob(jobs.folder, ex.submit(subprocess.check_output, ["sh", "-c", wait], text=True).job_id)
    scheduler.ClusterJob.watcher.listen(jobs.note)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and cluster._status(job)[0] != "running":
        time.sleep(0.5)
    assert cluster._status(job) == ("running", None)
    (tmp_path / "go").touch()
    while time.monotonic() < deadline + 60 and cluster._status(job)[0] != "done":
        time.sleep(0.5)
    assert cluster._status(job) == ("done", None) and job.result() == "ok\n"
    assert job.state in ("COMPLETED", "COMPLETING")
    out, err = capfd.readouterr()
    assert "sacct" not in out + err and "Bypassing" not in out + err
    log = (jobs.folder / "sweep.log").read_text()
    assert log.count("sacct does not answer (Slurm accounting storage is disabled)") == 1


# ---------------------------------------------------------------- real sweeps

@pytest.mark.notebooks
def test_a_slurm_sweep_writes_byte_identical_files_to_the_one_machine_sweep(slurm, tmp_path, capsys):
    serial = run_sweep(_sweep(tmp_path, "serial", executor="local"), limit=1)
    jobs = run_sweep(_sweep(tmp_path, "jobs", shards_per_model=2), limit=1)
    out = capsys.readouterr().out
    assert serial.scored == jobs.scored == [SLUG] and jobs.analyzed and not jobs.failed
    files = {}
    for name in ("serial", "jobs"):
        run = tmp_path / name
        found = [p for p in (run / "scores").glob("*.parquet") if ".shard-" not in p.name]
        found += sorted((run / "tables").glob("*.csv")) + [run / "summary.json", run / "results.md"]
        files[name] = {str(p.relative_to(run)): comparable_bytes(p) for p in found}
    assert len(files["serial"]) > 10 and files["serial"].keys() == files["jobs"].keys()
    assert [k for k in files["serial"] if files["serial"][k] != files["jobs"][k]] == []
    assert "submitted 2 job(s) as one array (slurm)" in out and "0 pending, 0 running, 2 done, 0 failed" in out
    assert "sacct" not in out and "Bypassing" not in out


@pytest.mark.notebooks
def test_scancel_of_one_task_is_reported_and_the_next_sweep_resumes_it(slurm, tmp_path, capsys):
    """limit 2: 8 rows, 4 per shard; the second shard is cancelled after its first checkpointed row."""
    sweep = _sweep(tmp_path, "run", model=_model(tmp_path, "slow", **SLOW), shards_per_model=2)
    run = tmp_path / "run"
    result = {}
    first = threading.Thread(target=lambda: result.setdefault("report", run_sweep(sweep, limit=2)))
    first.start()
    partial = paths.partial_file(run, SLUG, 2, 1, 2)
    _wait_rows(partial, 1)
    task = next(j for j in json.loads((run / "logs" / "jobs.json").read_text())["jobs"] if j["task"].endswith("1-of-2"))
    subprocess.run(["scancel", task["job_id"]], check=True)
    first.join(300)
    report, out = result["report"], capsys.readouterr().out
    assert report.failed == {SLUG: "1 of 2 jobs failed: cancelled (scancel, or by the cluster) before it finished; "
                                   "its checkpoint is kept: run the same command again to go on"}
    assert f"FAILED job {task['job_id']} ({SLUG}.shard-1-of-2): cancelled" in out
    assert paths.score_file(run, SLUG, 2, 0, 2).exists() and not paths.score_file(run, SLUG, 2, 1, 2).exists()
    kept = _rows(partial)
    assert 1 <= kept < 4
    again = run_sweep(sweep, limit=2)
    out = capsys.readouterr().out
    assert again.scored == [SLUG] and not again.failed and again.analyzed
    assert "submitted 1 job(s) as one array (slurm)" in out
    meta = json.loads(paths.sidecar(paths.score_file(run, SLUG, 2, 1, 2)).read_text())
    assert meta["complete"] and meta["n_rows"] == 4 and meta["resumed_rows"] >= kept


def _one_job(tmp: Path, limit: int | None = 3,
             dataset: dict = DATASET) -> tuple[cluster.ClusterScoring, object, Path, Path]:
    run = tmp / "run"
    run.mkdir()
    write_prompts(generate_prompts(**dataset), run, dataset)
    params = {**yaml.safe_load(MODEL.read_text()), **ONE_THREAD, **SLOW, "limit": limit}
    jobs = cluster.ClusterScoring("slurm", run, "monotonicity", "notebooks/score.ipynb", BLOCK, out=lambda s: None)
    job, = jobs.submit([cluster.Task(SLUG, params, 0, 1)])
    return jobs, job, run, paths.partial_file(run, SLUG, limit)


@pytest.mark.notebooks
def test_scontrol_requeue_of_a_running_task_resumes_from_its_checkpoint(released, tmp_path):
    jobs, job, run, partial = _one_job(tmp_path)
    _wait_rows(partial, 2)
    subprocess.run(["scontrol", "requeue", job.job_id], check=True)
    assert jobs.wait() == {}
    meta = json.loads(paths.sidecar(paths.score_file(run, SLUG, 3)).read_text())
    assert meta["complete"] and meta["n_rows"] == 12 and meta["resumed_rows"] >= 2


@pytest.mark.notebooks
def test_a_task_past_its_time_limit_is_requeued_and_finishes(slurm, tmp_path):
    """Once the job has a checkpoint, its time limit is cut to a minute past what it has run: SLURM signals it
    (submitit asks for the signal 90 s before the limit), submitit checkpoints and requeues it, and the test gives the
    requeued job its 10 minutes back (and lifts SLURM's two-minute hold); it resumes from its checkpoint."""
    # SLURM sends the signal at its first time-limit check after the cut, and checks every 30 s: the job scores 48
    # rows (float32, the CPU default) one at a time, about 48 s on a 2-core Zen 4 host, so it is still scoring then;
    # on a host fast enough to finish first the test says so and skips
    dataset = {**DATASET, "prompts_per_concept": 12}
    jobs, job, run, partial = _one_job(tmp_path, None, dataset=dataset)
    _wait_rows(partial, 1)
    ran = subprocess.run(["squeue", "--noheader", "--jobs", job.job_id, "-o", "%M"], capture_output=True,
                         text=True).stdout.strip()
    seconds = sum(int(x) * 60 ** i for i, x in enumerate(reversed(ran.replace("-", ":").split(":"))))
    subprocess.run(["scontrol", "update", f"JobId={job.job_id}", f"TimeLimit={seconds // 60 + 2}"], check=True)
    deadline = time.monotonic() + 180
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "--noheader", "--jobs", job.job_id, "-o", "%T"], capture_output=True,
                               text=True).stdout
        if "PENDING" in state or not state.strip():
            break
        time.sleep(0.5)
    finished = paths.score_file(run, SLUG).exists()  # all rows scored before the signal: nothing left to resume
    if "PENDING" in state:
        subprocess.run(["scontrol", "update", f"JobId={job.job_id}", "TimeLimit=10", "StartTime=now"], check=True)
    assert jobs.wait() == {}
    shown = subprocess.run(["scontrol", "show", "job", job.job_id], capture_output=True, text=True).stdout
    restarts = re.search(r"Restarts=(\d+)", shown)
    if "PENDING" not in state or finished:
        pytest.skip("the job scored all its rows before SLURM struck its cut time limit: this host scores too fast "
                    "for the test to see a timeout")
    meta = json.loads(paths.sidecar(paths.score_file(run, SLUG)).read_text())
    assert meta["complete"] and meta["n_rows"] == 48 and meta["resumed_rows"] >= 1
    assert restarts and int(restarts[1]) >= 1, shown  # SLURM itself counts the requeue
    log = Path(json.loads((run / "logs" / "jobs.json").read_text())["jobs"][0]["log"]).read_text()
    # the log holds the first attempt where SLURM appended the requeued one to it (it does not always keep it)
    if log.count("Starting with JobEnvironment") >= 2:
        assert "this job is timed-out" in log and "Requeued job" in log
