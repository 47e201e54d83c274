"""What the fast path's float32 tail costs, computed one prompt at a time and in groups, against the bare low-precision
pass it follows.

Each prompt is scored three ways, interleaved in rounds, model load excluded: ``whole`` (the low-precision model on the
whole prompt, no tail: the floor), ``tail_alone`` (prefix in low precision, the last ``FLOAT32_TAIL`` tokens in a
float32 pass of their own) and ``tail_grouped`` (the same, with the tails of ``TAIL_GROUP_ROWS`` prompts in one float32
pass, as the engine runs them). The tail's share is (time − whole) ÷ whole.

    python benchmarks/tail_groups.py --n 32 --rounds 2 --out benchmarks/results/tail-groups-<host>.json

``--low bfloat16`` is the engine's fast path and the default on a CPU with native bf16. Elsewhere the default is
``--low float32``: a float32 copy stands in for the bf16 model, so the numbers measure the tail's own cost (the
float32 pass over a few tokens, the cache hand-over) on a host where bf16 itself is emulated and slow.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import demo_prompts, versions  # noqa: E402
from score_speed import cpu_description  # noqa: E402

from nbutils import artifacts  # noqa: E402
from nbutils.engine.choices import build_requests, last_token_logprobs  # noqa: E402
from nbutils.engine.loading.host import cpu_supports_bf16  # noqa: E402
from nbutils.engine.models import load_model  # noqa: E402
from nbutils.engine.split import FLOAT32_TAIL, TAIL_GROUP_ROWS, tail_logprobs  # noqa: E402
from nbutils.score_settings import DEFAULT_MODEL  # noqa: E402

METHODS = ("whole", "tail_alone", "tail_grouped")


def score(method: str, low, ref, seqs: list, pad_id: int) -> torch.Tensor:
    """[len(seqs), vocab] log-probabilities of the next token, the way ``method`` computes them."""
    if method == "whole":
        return torch.cat([last_token_logprobs(low, [s], pad_id) for s in seqs])
    if method == "tail_alone":
        return torch.stack([lp for s in seqs for lp in tail_logprobs(low, ref, [s], FLOAT32_TAIL)])
    return torch.stack([lp for g in range(0, len(seqs), TAIL_GROUP_ROWS)
                        for lp in tail_logprobs(low, ref, seqs[g:g + TAIL_GROUP_ROWS], FLOAT32_TAIL)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=32, help="demo prompts (evenly spaced over its 120)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--low", choices=("bfloat16", "float32"), default=None,
                    help="the prefix's precision (default: bfloat16 on a native-bf16 CPU, else float32)")
    ap.add_argument("--model", default=DEFAULT_MODEL, help="the model (default: the embedded one)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    low_dtype = args.low or ("bfloat16" if cpu_supports_bf16() else "float32")
    prompts = demo_prompts(args.n)[0]
    lm = load_model(args.model, dtype="float32", rescore_margin=0.0, threads=args.threads)
    ref = lm.model
    low = copy.deepcopy(ref).to(getattr(torch, low_dtype))
    req = build_requests(lm.tokenizer, prompts["text"].tolist())
    seqs, cols = req.prompt_ids, [o[0] for o in req.option_ids[0]]
    for m in METHODS:  # warm-up
        score(m, low, ref, seqs[:2], req.pad_id)
    seconds = {m: [] for m in METHODS}
    out = {}
    for r in range(args.rounds):
        for m in METHODS[r % 3:] + METHODS[:r % 3]:
            t0 = time.perf_counter()
            out[m] = score(m, low, ref, seqs, req.pad_id)[:, cols].double().numpy()
            seconds[m].append(time.perf_counter() - t0)
    per = {m: float(np.median(s)) / len(seqs) for m, s in seconds.items()}
    margin = {m: out[m][:, 0] - out[m][:, 1] for m in METHODS}
    result = {
        "created": artifacts.now_utc(), "host": cpu_description(), "threads": torch.get_num_threads(),
        "versions": versions(), "model": args.model, "low_precision": low_dtype,
        "bf16_emulated": low_dtype == "bfloat16" and not cpu_supports_bf16(),
        "n_prompts": len(seqs), "mean_prompt_tokens": float(np.mean([len(s) for s in seqs])), "rounds": args.rounds,
        "float32_tail_tokens": FLOAT32_TAIL, "tail_group_rows": TAIL_GROUP_ROWS,
        "seconds_per_prompt": {m: round(v, 6) for m, v in per.items()},
        "seconds_per_round": {m: [round(x, 2) for x in s] for m, s in seconds.items()},
        "tail_share_alone": round((per["tail_alone"] - per["whole"]) / per["whole"], 4),
        "tail_share_grouped": round((per["tail_grouped"] - per["whole"]) / per["whole"], 4),
        "speed_grouped_vs_alone": round(per["tail_alone"] / per["tail_grouped"], 3),
        "max_abs_dlogp_grouped_vs_alone": float(np.abs(out["tail_grouped"] - out["tail_alone"]).max()),
        "max_abs_dmargin_grouped_vs_alone": float(np.abs(margin["tail_grouped"] - margin["tail_alone"]).max()),
        "decisions_grouped_equal_alone": int(((margin["tail_grouped"] > 0) == (margin["tail_alone"] > 0)).sum()),
    }
    if args.out:
        artifacts.write_json(result, args.out)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
