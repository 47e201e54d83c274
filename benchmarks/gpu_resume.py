"""A scoring run killed with SIGKILL mid-run and started again writes the very file an uninterrupted run writes.

A random-weight model of a real architecture scores ``--n`` concept-learning prompts in a child process that
checkpoints as it goes; once the checkpoint holds ``--kill-at`` of the rows, the child is killed with SIGKILL (no
clean-up of any kind), a second child resumes the run, and a third scores the same dataset uninterrupted in another
run directory. The report gives the rows in the checkpoint at the kill, the rows the resumed run took from it, each
child's time, and whether the two score files have the same sha256.

    python benchmarks/gpu_resume.py --n 2000 --out benchmarks/results/gpu-h100-resume.json

``--device cpu`` with ``--layers`` / ``--override`` shrinks it to a quick check of the script (the tests do this).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_scale import add_model_arguments, build_from_args, gpu_device

def make_run(run: Path, n: int) -> int:
    """A monotonicity run directory with at least ``n`` prompts (both concepts, both conditions); its row count."""
    from nbutils import artifacts
    from nbutils.paths import prompts_path
    from nbutils.studies.monotonicity.dataset import generate_prompts

    params = dict(concepts=["more than 1/2", "less than 1/2"], conditions=["concept_learning", "explicit"],
                  prompts_per_concept=max(2, 2 * -(-n // 8)), seed=11)
    df = generate_prompts(**params)
    run.mkdir(parents=True)
    artifacts.write_dataset(df, prompts_path(run), {"parameters": params})
    return len(df)


def score_child(args) -> None:
    """The child: load the model and score the run (resuming from its checkpoint if there is one)."""
    from gpu_scale import load_precision
    from nbutils import studies
    from nbutils.engine.run import score_run

    lm = load_precision(args.model_dir, args.precision, args.device)
    print("loaded", flush=True)
    t = time.perf_counter()
    _, meta = score_run(args.score, lm, studies.get("monotonicity").spec, checkpoint_every=args.checkpoint_every,
                        progress=False)
    print(json.dumps({"complete": meta["complete"], "resumed_rows": meta.get("resumed_rows"),
                      "scoring_seconds": round(time.perf_counter() - t, 2)}), flush=True)


def child(args, run: Path) -> subprocess.Popen:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--score", str(run), "--model-dir", str(args.model_dir),
           "--precision", args.precision, "--device", args.device, "--checkpoint-every", str(args.checkpoint_every)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def finish(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"a scoring child failed (exit {proc.returncode}); its output:\n{out}")
    return json.loads(out.strip().splitlines()[-1])


def checkpoint_rows(run: Path) -> int:
    import pyarrow.parquet as pq

    from nbutils import paths

    files = list(paths.partial_dir(run).glob("*.parquet"))
    try:
        return pq.read_metadata(files[0]).num_rows if files else 0
    except Exception:  # noqa: BLE001 - replaced under our feet (written atomically): read it next time
        return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(ap)
    ap.add_argument("--precision", default="bfloat16", help="bfloat16, float16, float32, 8bit or 4bit")
    ap.add_argument("--n", type=int, default=2000, help="prompts (at least)")
    ap.add_argument("--kill-at", type=float, default=0.25, help="share of the rows checkpointed before the kill")
    ap.add_argument("--checkpoint-every", type=int, default=4, help="batches between checkpoints")
    ap.add_argument("--score", type=Path, default=None, help=argparse.SUPPRESS)  # the child's mode
    ap.add_argument("--model-dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.score is not None:
        return score_child(args)

    import torch

    from nbutils import artifacts, paths

    args.device = gpu_device(args.device, "gpu_resume.py")
    report = {"device": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu",
              "precision": args.precision, "checkpoint_every": args.checkpoint_every, "versions": artifacts.versions(),
              "created": artifacts.now_utc()}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        args.model_dir = tmp / "model"
        report["model"] = build_from_args(args, args.model_dir, args.device)
        killed, whole = tmp / "killed", tmp / "whole"
        report["n_prompts"] = make_run(killed, args.n)
        make_run(whole, args.n)
        want = max(1, int(args.kill_at * report["n_prompts"]))

        proc = child(args, killed)
        assert proc.stdout.readline().strip() == "loaded", "the first child did not load the model"
        t = time.perf_counter()
        while proc.poll() is None and checkpoint_rows(killed) < want:
            time.sleep(0.01)
        if proc.poll() is not None:
            raise SystemExit(f"the run finished before {want} rows were checkpointed: lower --kill-at or raise --n")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        report["killed_after_seconds"] = round(time.perf_counter() - t, 2)
        report["rows_in_checkpoint_at_kill"] = checkpoint_rows(killed)

        report["resumed"] = finish(child(args, killed))
        report["uninterrupted"] = finish(child(args, whole))
        files = {name: sorted(paths.scores_dir(run).glob("*.parquet")) for name, run in (("killed", killed), ("whole", whole))}
        sha = {name: [artifacts.sha256_file(f) for f in fs] for name, fs in files.items()}
        report["score_files"] = {name: [f.name for f in fs] for name, fs in files.items()}
        report["sha256"] = {name: s[0] if len(s) == 1 else s for name, s in sha.items()}
        report["identical"] = len(sha["killed"]) == 1 and sha["killed"] == sha["whole"]
    print(json.dumps({k: report[k] for k in ("n_prompts", "rows_in_checkpoint_at_kill", "resumed", "uninterrupted",
                                             "identical")}, indent=1))
    if args.out:
        artifacts.write_json(report, args.out)
    if not report["identical"]:
        raise SystemExit("the resumed run's score file differs from the uninterrupted run's")


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
