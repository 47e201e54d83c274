"""Cluster sweeps through submitit, for real without a cluster: the local executor runs the same job array as real
subprocesses. Files are byte-identical to the serial sweep's (a tiny random-weight model scores there: the executor
is what is tested, and the real model's kill and requeue tests below keep the real load times); a failing job is reported with its log and its real
error while the others finish; a job killed with kill -9 is resubmitted by the next run and resumes from its
checkpoint; the `cluster:` block is checked before anything runs; the sbatch script of a SLURM array is checked
without a cluster (fake `sbatch`/`srun` on PATH record what would be submitted)."""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import psutil
import pytest
import submitit
import yaml

from nbutils.sweep import _cluster as cluster, _executors as executors
from nbutils import paths
from nbutils.studies.monotonicity.dataset import generate_prompts, write_prompts
from nbutils.sweep import run_sweep
from simulated_runs import comparable_bytes

ROOT = paths.repo_root()
LIMIT = 3  # prompts per concept and condition: 12 rows per model on the dataset below
# two concepts at one threshold, both conditions: a small dataset whose limited runs stay small
DATASET = dict(concepts=["more than 1/2", "less than 1/2"], conditions=["concept_learning", "explicit"],
               prompts_per_concept=6, n_examples=20, seed=0)


def _sweep(tmp: Path, name: str, models: list[str], **extra) -> Path:
    dataset = tmp / f"{name}-dataset.yaml"
    dataset.write_text(yaml.safe_dump(DATASET))
    cfg = {"study": "monotonicity", "run_dir": str(tmp / name), "dataset": str(dataset),
           "models": models, "analyze": {"n_boot": 200, "use_r": False}, **extra}
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump(cfg))
    return f


def _model(tmp: Path, name: str, base: Path | None = None, **params) -> str:
    base = yaml.safe_load((base or ROOT / "params" / "models" / "smollm2-135m-instruct.yaml").read_text())
    f = tmp / f"{name}.yaml"
    f.write_text(yaml.safe_dump({**base, **params}))
    return str(f)


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_model_dir):
    """The real model's file, and two model files of the tiny random-weight Llama (float32 and bfloat16)."""
    tmp = tmp_path_factory.mktemp("models")
    tiny = _model(tmp, "tiny", model=str(tiny_model_dir), chat_template="never")
    return tmp, [str(ROOT / "params" / "models" / "smollm2-135m-instruct.yaml")], \
        [tiny, _model(tmp, "tiny-bf16", Path(tiny), dtype="bfloat16")], paths.model_slug(str(tiny_model_dir))


def _run_files(run: Path) -> dict[str, bytes]:
    """What the comparison covers: the merged score tables, every analysis table, summary.json and results.md."""
    files = [p for p in (run / "scores").glob("*.parquet") if ".shard-" not in p.name]
    files += sorted((run / "tables").glob("*.csv")) + [run / "summary.json", run / "results.md"]
    return {str(p.relative_to(run)): comparable_bytes(p) for p in files}


# ---------------------------------------------------------------- validation, before anything runs

@pytest.mark.parametrize("block,message", [
    ({"partiton": "gpu"}, "unknown key(s) ['partiton']"),
    ({"gpus_per_job": "two"}, "cluster.gpus_per_job"),
    ({"shards_per_model": 0}, "cluster.shards_per_model"),
    ({"sbatch_extra": ["--constraint=a100"]}, "cluster.sbatch_extra"),
    ("gpu", "must be a mapping"),
])
def test_the_cluster_block_is_checked_before_anything_runs(tmp_path, models, block, message):
    f = _sweep(tmp_path, "bad", models[1][:1], executor="submitit-local", cluster=block)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        run_sweep(f)
    assert not (tmp_path / "bad").exists()


def test_an_unknown_executor_is_an_error_naming_the_choices(tmp_path, models):
    with pytest.raises(ValueError, match=r"executor: .* must be one of \['local', 'submitit-local', 'slurm'\]"):
        run_sweep(_sweep(tmp_path, "bad", models[1][:1], executor="slurn"))
    assert not (tmp_path / "bad").exists()


# ---------------------------------------------------------------- SLURM, without a cluster

@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """`srun` and `sbatch` that record the script and answer as SLURM does."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "srun").write_text("#!/bin/sh\nexit 0\n")
    # each sbatch call answers the next job id (4242, 4243, …) and keeps the script it was given
    (bin_ / "sbatch").write_text(f'#!/bin/sh\nn=$(cat {tmp_path}/n 2>/dev/null || echo 4242)\n'
                                 f'cp "$1" {tmp_path}/submitted-$n.sh\necho $((n + 1)) > {tmp_path}/n\n'
                                 f'echo "Submitted batch job $n"\n')
    # sacct: the states the test writes to sacct.txt
    (bin_ / "sacct").write_text(f'#!/bin/sh\necho "JobID|State|NodeList"\ncat {tmp_path}/sacct.txt 2>/dev/null\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def test_a_slurm_sweep_is_one_job_array_with_the_blocks_resources(fake_slurm):
    run = fake_slurm / "run"
    block = executors.check_cluster({"partition": "gpu", "account": "lab", "qos": "normal", "gpus_per_job": 1,
                                   "cpus_per_job": 8, "mem_gb": 64, "time_min": 180, "array_parallelism": 4,
                                   "shards_per_model": 2, "sbatch_extra": {"constraint": "a100"},
                                   "setup": ["source .venv/bin/activate"]}, "test")
    names = ["Qwen/Qwen3-32B", "meta-llama/Llama-3.1-70B-Instruct", "allenai/OLMo-2-1124-13B-Instruct",
             "mistralai/Mistral-Small-24B-Instruct-2501"]
    tasks = [cluster.Task(paths.model_slug(m), {"model": m, "quantization": "4bit"}, i, 2) for m in names for i in (0, 1)]
    jobs = cluster.ClusterScoring("slurm", run, "monotonicity", "notebooks/score.ipynb", block, out=lambda s: None)
    submitted = jobs.submit(tasks)
    script = (fake_slurm / "submitted-4242.sh").read_text()
    for flag in ("--array=0-7%4", "--partition=gpu", "--account=lab", "--qos=normal", "--gpus-per-node=1",
                 "--cpus-per-task=8", "--mem=64GB", "--time=180", "--constraint=a100", "--job-name=bias-probes",
                 f"--output={run / 'logs'}/%A_%a_0_log.out"):
        assert f"#SBATCH {flag}\n" in script, flag
    assert script.count("#SBATCH --array") == 1 and "source .venv/bin/activate" in script
    assert [j.job_id for j in submitted] == [f"4242_{i}" for i in range(8)]
    record = json.loads((run / "logs" / "jobs.json").read_text())
    assert [j["task"] for j in record["jobs"]][:2] == ["Qwen--Qwen3-32B.shard-0-of-2", "Qwen--Qwen3-32B.shard-1-of-2"]
    call = submitit.core.utils.DelayedSubmission.load(run / "logs" / "4242_5_submitted.pkl")
    root, notebook, output, params, _, tokens = call.args  # tokens: the sweep's run lock, which the job writes under
    assert isinstance(call.function, cluster.ScoreJob) and notebook == "notebooks/score.ipynb"
    assert params == {"model": names[2], "quantization": "4bit", "run_dir": str(run), "study": "monotonicity",
                      "shard_index": 1, "num_shards": 2}
    assert output.endswith("notebooks/score__allenai--OLMo-2-1124-13B-Instruct.shard-1-of-2.ipynb")


def test_the_shipped_slurm_recipe_is_valid_and_asks_for_one_array_of_16_jobs(fake_slurm):
    cfg = yaml.safe_load((ROOT / "params" / "slurm_gpu.yaml").read_text())
    block = executors.check_cluster(cfg["cluster"], "params/slurm_gpu.yaml")
    assert cfg["executor"] == "slurm" and len(cfg["models"]) == 4 and all((ROOT / m).exists() for m in cfg["models"])
    tasks = [cluster.Task(f"m{k}", {"model": f"m{k}"}, i, block["shards_per_model"]) for k in range(4) for i in range(4)]
    cluster.ClusterScoring("slurm", fake_slurm / "run", "monotonicity", "notebooks/score.ipynb", block,
                           out=lambda s: None).submit(tasks)
    script = (fake_slurm / "submitted-4242.sh").read_text()
    assert "#SBATCH --array=0-15%8\n" in script and "#SBATCH --constraint='a100|h100'\n" in script
    assert "#SBATCH --time=240\n" in script and "export HF_HUB_OFFLINE=1" in script


def test_a_rerun_watches_the_jobs_still_queued_and_submits_only_the_others(fake_slurm):
    run = fake_slurm / "run"
    tasks = [cluster.Task("m", {"model": "m"}, i, 4) for i in range(4)]
    cluster.ClusterScoring("slurm", run, "monotonicity", "notebooks/score.ipynb", {}, out=lambda s: None).submit(tasks)
    (fake_slurm / "sacct.txt").write_text("4242_0|RUNNING|n1\n4242_1|PENDING|\n4242_2|FAILED|n2\n4242_3|CANCELLED|n3\n")
    said = []
    again = cluster.ClusterScoring("slurm", run, "monotonicity", "notebooks/score.ipynb", {}, out=said.append)
    jobs = again.submit(tasks)
    assert [j.job_id for j in jobs] == ["4242_0", "4242_1", "4243_0", "4243_1"]
    assert [t.name for t in again.tasks] == ["m.shard-0-of-4", "m.shard-1-of-4", "m.shard-2-of-4", "m.shard-3-of-4"]
    assert "--array=0-1%2" in (fake_slurm / "submitted-4243.sh").read_text()
    assert "still queued or running" in said[0] and "submitted 2 job(s)" in said[1]


class _FakeJob:
    def __init__(self, job_id):
        self.job_id, self.state, self.cancelled = job_id, "RUNNING", False

    def done(self):
        return False

    def cancel(self, check=True):
        self.cancelled = True


@pytest.mark.parametrize("answer,cancelled", [("c", True), ("l", False), ("", False)])
def test_ctrl_c_asks_whether_to_cancel_the_jobs_and_says_how_to_go_on(tmp_path, answer, cancelled):
    said = []
    jobs = cluster.ClusterScoring("slurm", tmp_path, "monotonicity", "notebooks/score.ipynb", {}, out=said.append)
    jobs.jobs = [_FakeJob("77_0"), _FakeJob("77_1")]
    assert jobs.interrupted(ask=lambda prompt: answer) == ("cancelled" if cancelled else "left")
    assert all(j.cancelled == cancelled for j in jobs.jobs)
    assert "run the same command again" in said[-1] and ("jobs.json" in said[-1]) != cancelled


# ---------------------------------------------------------------- the local executor, for real

@pytest.fixture(scope="module")
def serial_and_jobs(tmp_path_factory, models):
    tmp = tmp_path_factory.mktemp("cluster")
    t0 = time.perf_counter()
    serial = run_sweep(_sweep(tmp, "serial", models[2]), limit=LIMIT)
    t1 = time.perf_counter()
    jobs = run_sweep(_sweep(tmp, "jobs", models[2], executor="submitit-local",
                            cluster={"shards_per_model": 2, "poll_seconds": 2}), limit=LIMIT)
    t2 = time.perf_counter()
    print(f"\nserial sweep {t1 - t0:.0f} s; submitit-local sweep (2 models x 2 shards) {t2 - t1:.0f} s")
    return tmp, serial, jobs


@pytest.mark.notebooks
def test_the_local_executor_writes_byte_identical_files_to_the_serial_sweep(serial_and_jobs, models):
    tmp, serial, jobs = serial_and_jobs
    tiny = models[3]
    assert not serial.failed and not jobs.failed and jobs.analyzed
    assert sorted(jobs.scored) == sorted(serial.scored) == [tiny, f"{tiny}.bfloat16"]
    a, b = _run_files(tmp / "serial"), _run_files(tmp / "jobs")
    assert len(a) > 15 and a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []
    run = tmp / "jobs"
    assert len(list((run / "scores").glob("*.shard-*-of-2.parquet"))) == 4  # the shards stay beside the merged file
    assert len(list((run / "notebooks").glob("score__*.shard-*-of-2.ipynb"))) == 4
    logs = json.loads((run / "logs" / "jobs.json").read_text())["jobs"]
    assert len(logs) == 4 and all(Path(j["log"]).parent == run / "logs" and Path(j["log"]).read_text().strip()
                                  for j in logs), "each job's log, beside the run, holds what the job said"
    html = (run / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and all(slug in html for slug in jobs.scored), "the report names both"


@pytest.mark.notebooks
def test_rerunning_submits_nothing_when_everything_is_scored(serial_and_jobs, models, capsys):
    tmp, _, _ = serial_and_jobs
    again = run_sweep(tmp / "jobs.yaml", limit=LIMIT)
    out = capsys.readouterr().out
    assert again.skipped == [models[3], f"{models[3]}.bfloat16"] and not again.scored
    assert "submitted" not in out


@pytest.mark.notebooks
def test_a_failing_job_is_reported_with_its_log_and_error_while_the_others_finish(serial_and_jobs, tmp_path, models,
                                                                                   capsys):
    tmp, _, _ = serial_and_jobs
    run = tmp_path / "run"
    shutil.copytree(tmp / "jobs", run, ignore=shutil.ignore_patterns("logs", ".lock"))
    # one model scored already (skipped), one new that scores, one that cannot load
    broken = tmp_path / "no-such-model"  # a model folder that passes the sweep's checks and fails to load in its job
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    bad = _model(tmp_path, "bad", model=str(broken))
    new = _model(tmp_path, "f16", Path(models[2][0]), dtype="float16")
    report = run_sweep(_sweep(tmp_path, "run", [models[2][0], new, bad], executor="submitit-local",
                              cluster={"poll_seconds": 2}), limit=LIMIT)
    out = capsys.readouterr().out
    assert report.skipped == [models[3]] and report.scored == [f"{models[3]}.float16"]
    (slug, err), = report.failed.items()
    assert "no-such-model" in slug and "model" in err and "Traceback" not in err
    failed_line = next(line for line in out.splitlines() if line.startswith("[sweep] FAILED job"))
    log = Path(failed_line.rsplit("log: ", 1)[1])
    assert log.parent == run / "logs" and "no-such-model" in log.read_text(), "the failed job's log holds its error"
    assert "submitted 2 job(s)" in out and report.analyzed


@pytest.mark.notebooks
def test_a_job_killed_with_kill_9_is_resubmitted_and_resumes_from_its_checkpoint(tmp_path, models):
    sweep = _sweep(tmp_path, "run", models[1][:1], executor="submitit-local", cluster={"poll_seconds": 1})
    run, slug = tmp_path / "run", "smollm2-135m-instruct"
    slow = _model(tmp_path, "slow", batch_size=1, checkpoint_every=1)  # a checkpoint after every prompt
    sweep.write_text(sweep.read_text().replace(models[1][0], slow))
    result = {}
    first = threading.Thread(target=lambda: result.setdefault("report", run_sweep(sweep, limit=LIMIT)))
    first.start()
    partial = paths.partial_file(run, slug, LIMIT)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (partial.exists() and _rows(partial) >= 2):
        time.sleep(0.2)
    assert partial.exists(), "the job never wrote a checkpoint"
    job_id = json.loads((run / "logs" / "jobs.json").read_text())["jobs"][0]["job_id"]
    proc = psutil.Process(int(job_id))
    for p in proc.children(recursive=True) + [proc]:  # the whole job, as a scheduler kills it
        p.kill()
    first.join(240)
    report = result["report"]
    assert report.failed and not report.scored and not paths.score_file(run, slug, LIMIT).exists()
    checkpointed = _rows(partial)
    assert 2 <= checkpointed < 12
    again = run_sweep(sweep, limit=LIMIT)
    assert again.scored == [slug] and not again.failed
    meta = json.loads(paths.sidecar(paths.score_file(run, slug, LIMIT)).read_text())
    assert meta["resumed_rows"] == checkpointed and meta["complete"] and meta["n_rows"] == 12
    assert "resuming from the checkpoint" in (run / "notebooks" / f"score__{slug}.ipynb").read_text()


def _rows(partial: Path) -> int:
    import pandas as pd

    try:
        return len(pd.read_parquet(partial))
    except Exception:  # noqa: BLE001 - being written right now
        return 0


@pytest.mark.notebooks
def test_a_preempted_job_is_requeued_and_resumes_from_its_checkpoint(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_prompts(generate_prompts(**DATASET), run, DATASET)
    params = {**yaml.safe_load((ROOT / "params" / "models" / "smollm2-135m-instruct.yaml").read_text()),
              "batch_size": 1, "checkpoint_every": 1, "limit": LIMIT}
    slug = "smollm2-135m-instruct"
    said = []
    jobs = cluster.ClusterScoring("submitit-local", run, "monotonicity", "notebooks/score.ipynb", {"poll_seconds": 1},
                                  out=said.append)
    job, = jobs.submit([cluster.Task(slug, params, 0, 1)])
    partial = paths.partial_file(run, slug, LIMIT)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and _rows(partial) < 2:
        time.sleep(0.2)
    # what SLURM does before preempting a job: the signal submitit requeues it on, to the job's task process
    task = next(p for p in psutil.Process(int(job.job_id)).children(recursive=True)
                if "submitit.core._submit" in " ".join(p.cmdline()))
    task.send_signal(submitit.JobEnvironment._usr_sig())
    assert jobs.wait() == {}
    meta = json.loads(paths.sidecar(paths.score_file(run, slug, LIMIT)).read_text())
    assert meta["complete"] and meta["n_rows"] == 12 and meta["resumed_rows"] >= 2
    log = Path(json.loads((run / "logs" / "jobs.json").read_text())["jobs"][0]["log"]).read_text()
    assert "this job is preempted" in log and "Requeued" in log
