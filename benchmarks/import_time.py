"""How long ``python -m nbutils import lm-eval`` takes on a large run: two synthetic lm-evaluation-harness samples files
of ``--n`` documents each (four options, log-likelihoods written as lm-eval writes them, as text; the gold at a random
position; a ``subject`` field in ten groups), imported into a fresh run directory, then analysed (the custom study's
``analyze_run``, without R).

    python benchmarks/import_time.py --n 10000 --out benchmarks/results/import-time.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def samples_file(path: Path, n: int, skill: float, seed: int) -> Path:
    """A samples file of ``n`` documents in lm-eval's layout; ``skill`` raises the gold option's log-likelihood."""
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            doc = {"id": i, "subject": f"subject-{i % 10}", "question": f"Question {i}?",
                   "choices": [f"option {i}-{j}" for j in range(4)], "gold": int((i * 7919) % 4)}
            lls = rng.normal(-5.0, 1.5, 4)
            lls[doc["gold"]] += skill
            context = f"Question: {doc['question']}\nAnswer:"
            pred = int(np.argmax(lls))
            rec = {"doc_id": i, "doc": doc, "target": str(doc["gold"]),
                   "arguments": {f"gen_args_{j}": {"arg_0": context, "arg_1": " " + c} for j, c in enumerate(doc["choices"])},
                   "resps": [[[str(float(x)), "False"]] for x in lls], "filtered_resps": [[str(float(x)), "False"] for x in lls],
                   "filter": "none", "metrics": ["acc"],
                   "doc_hash": hashlib.sha256(json.dumps(doc, indent=2).encode()).hexdigest(),
                   "prompt_hash": hashlib.sha256(context.encode()).hexdigest(),
                   "target_hash": hashlib.sha256(str(doc["gold"]).encode()).hexdigest(), "acc": float(pred == doc["gold"])}
            f.write(json.dumps(rec) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000, help="documents per log")
    ap.add_argument("--out", help="write the report here (JSON)")
    ap.add_argument("--import-only", action="store_true", help="time the import alone, not the analysis")
    args = ap.parse_args(argv)
    from nbutils import artifacts
    from nbutils.imports import import_logs
    from nbutils.studies.custom.analysis import analyze_run

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        logs = [samples_file(tmp / m / "samples_synthetic_2026-01-01T00-00-00.000000.jsonl", args.n, s, k)
                for k, (m, s) in enumerate([("model-a", 1.0), ("model-b", 1.3)])]
        size = sum(p.stat().st_size for p in logs) / 1e6
        t0 = time.perf_counter()
        done = import_logs("lm-eval", logs, tmp / "run", group_by=["doc.subject"], label=["model-a", "model-b"])
        t1 = time.perf_counter()
        if not args.import_only:
            analyze_run(tmp / "run", use_r=False)
        t2 = time.perf_counter()
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), None) if Path("/proc/cpuinfo").exists() else None
    report = {"items_per_log": args.n, "logs": 2, "jsonl_mb": round(size, 1), "import_seconds": round(t1 - t0, 2),
              "analysis_seconds": None if args.import_only else round(t2 - t1, 2), "items_shared": done.n_items, "cpu": cpu,
              "versions": artifacts.versions()}
    print(f"{args.n} items × 2 logs ({size:.1f} MB of JSONL): import {t1 - t0:.1f} s"
          + ("" if args.import_only else f", analysis {t2 - t1:.1f} s") + f"; {done.n_items} items shared")
    if args.out:
        artifacts.write_json(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
