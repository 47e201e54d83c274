"""Forward passes side by side on a CPU (``batching.pass_workers``) against one after the other on all the threads.

The engine's own calls, model load excluded: the fast path as a run takes it (``calibration.score_calibrated``:
bf16 prefixes and grouped float32 tails for every prompt, 8 of them scored again in float32 for the margin, close
calls re-scored in float32) and the float32 path (``score_batches`` on every prompt), each with
``CPU_WORKERS`` passes at once and with one, interleaved in rounds. Reports seconds and prompts/s per round and their
medians, the ratio, and whether the two ways gave the same log-probs bit for bit.

    python benchmarks/pass_workers.py --n 48 --rounds 2 --out benchmarks/results/pass-workers-<host>.json

On a CPU without native bf16 the fast path is left out unless ``--force-fast`` (bf16 is emulated there).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import demo_prompts, versions  # noqa: E402
from score_speed import cpu_description  # noqa: E402

from nbutils import artifacts  # noqa: E402
from nbutils.engine import batching  # noqa: E402
from nbutils.engine.calibration import CALIBRATION_SIZE, score_calibrated  # noqa: E402
from nbutils.engine.choices import build_requests, score_batches  # noqa: E402
from nbutils.engine.loading.host import cpu_supports_bf16  # noqa: E402
from nbutils.engine.models import load_model  # noqa: E402
from nbutils.engine.split import FLOAT32_TAIL  # noqa: E402
from nbutils.score_settings import DEFAULT_MODEL  # noqa: E402


def fast_path(lm, req, batches):
    """The fast path as a run takes it: every prompt, the calibration sample, the close calls re-scored; (log-probs in
    row order, prompts re-scored beyond the sample)."""
    done: dict = {}
    cal = score_calibrated(lm.model, lm.reference, req, batches, done, size=CALIBRATION_SIZE, tail=FLOAT32_TAIL)
    return np.vstack([done[i]["logps"] for i in sorted(done)]), sum(r["rescored"] for r in done.values()) - cal.size


def float32_path(lm, req, batches):
    return _rows(score_batches(lm.reference, req, batches, progress=False)), 0


def _rows(results):
    out = {i: lp for r in results for i, lp in zip(r.indices, r.logprobs)}
    return np.vstack([out[i] for i in sorted(out)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=48, help="demo prompts (evenly spaced over its 120)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", default=DEFAULT_MODEL, help="the model (default: the embedded one)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--force-fast", action="store_true", help="time the bf16 fast path on a CPU without native bf16")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    native = cpu_supports_bf16()
    lm = load_model(args.model, dtype="bfloat16" if native or args.force_fast else "float32",
                    rescore_margin="auto" if native or args.force_fast else 0.0, threads=args.threads)
    if lm.reference is None:  # float32 only: the loaded model is its own reference
        lm.reference = lm.model
    paths = {"float32": float32_path} | ({"fast_path": fast_path} if lm.model is not lm.reference else {})
    req = build_requests(lm.tokenizer, demo_prompts(args.n)[0]["text"].tolist())
    batches = batching.pack_batches([len(p) for p in req.prompt_ids], 1)
    workers = batching.CPU_WORKERS
    ways = {f"{workers}_at_once": workers, "one_at_a_time": 1}
    float32_path(lm, req, batches[:2])  # warm-up
    seconds = {p: {w: [] for w in ways} for p in paths}
    scores, rescored = {}, {}
    for r in range(args.rounds):
        for name, path in paths.items():
            for way, k in (list(ways.items()) if r % 2 == 0 else list(ways.items())[::-1]):
                batching.CPU_WORKERS = k
                t0 = time.perf_counter()
                scores[name, way], rescored[name, way] = path(lm, req, batches)
                seconds[name][way].append(time.perf_counter() - t0)
            print(f"round {r + 1}:", name, {w: round(s[-1], 2) for w, s in seconds[name].items()}, flush=True)
    batching.CPU_WORKERS = workers
    result = {"created": artifacts.now_utc(), "host": cpu_description(), "native_bf16": native,
              "threads": torch.get_num_threads(), "versions": versions(), "model": args.model, "n_prompts": len(batches),
              "mean_tokens": round(float(np.mean([len(p) for p in req.prompt_ids])), 1), "rounds": args.rounds,
              "workers": workers, "paths": {}}
    for name in paths:
        med = {w: float(np.median(s)) for w, s in seconds[name].items()}
        a, b = list(ways)
        result["paths"][name] = {
            "seconds_per_round": {w: [round(x, 3) for x in s] for w, s in seconds[name].items()},
            "prompts_per_s_median": {w: round(len(batches) / med[w], 4) for w in ways},
            f"x_faster_than_{b}": round(med[b] / med[a], 3),
            "rescored": {w: int(rescored[name, w]) for w in ways},
            "identical_logprobs": bool(np.array_equal(scores[name, a], scores[name, b]))}
    out = args.out or Path(__file__).resolve().parent / "results" / "pass-workers.json"
    artifacts.write_json(result, out)
    print({n: {k: v for k, v in p.items() if k != "seconds_per_round"} for n, p in result["paths"].items()})
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
