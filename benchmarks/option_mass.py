"""How much of the next-token probability the answer options hold, with and without the chat template.

For each model and each ``chat_template`` setting (``always``, ``never``) it scores the same demo prompts (the
monotonicity study's paper design: 20 examples, both conditions, balanced) and records per prompt the options' share
of the next-token distribution (Yes and No, each as the engine scores it), the choice, and the five most likely next
tokens for the first prompts; per condition the mean, median and the share of prompts below one half; and the
scoring speed (prompts/s, prompt tokens/s, peak resident memory) of the setting the study uses. One quiet run per
model; say which host.

    python benchmarks/option_mass.py --model qwen2.5-coder-0.5b-instruct --n 40 \
        --out benchmarks/results/option-mass-qwen2.5-coder-0.5b-instruct.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from nbutils import artifacts
from nbutils.engine.choices import build_requests, last_token_logprobs
from nbutils.engine.loading.host import cpu_supports_bf16
from nbutils.engine.models import load_model
from nbutils.studies.monotonicity.dataset import generate_prompts

sys.path.insert(0, str(Path(__file__).resolve().parent))
from score_speed import PeakRSS  # noqa: E402

CONCEPTS = [f"{d} than {t}" for t in ("1/4", "1/3", "1/2", "2/3", "3/4") for d in ("more", "less")]


def prompts(n: int, seed: int = 0):
    """``n`` prompts of the paper's design, balanced over concepts, conditions and true/false queries."""
    per = max(2, -(-n // (len(CONCEPTS) * 2)))
    per += per % 2
    data = generate_prompts(CONCEPTS, prompts_per_concept=per, n_examples=20, seed=seed)
    return data.groupby(["concept", "condition"], group_keys=False).head(max(1, n // 20)).reset_index(drop=True)


def measure(lm, data, mode: str, show: int) -> dict:
    """Score ``data`` under ``chat_template: mode`` with the full next-token distribution kept."""
    req = build_requests(lm.tokenizer, data["text"].tolist(), mode)
    first = [[a[0] for a in opts] for opts in req.option_ids]
    mass, choice, top, seconds = [], [], [], 0.0
    for i, ids in enumerate(req.prompt_ids):
        t = time.perf_counter()
        lp = last_token_logprobs(lm.model, [ids], req.pad_id)[0]
        seconds += time.perf_counter() - t
        p = lp.exp()
        mass.append(float(p[first[i]].sum()))
        choice.append(["Yes", "No"][int(lp[first[i][1]] > lp[first[i][0]])])
        if i < show:
            best = torch.topk(p, 5)
            top.append({"prompt_id": str(data["prompt_id"].iloc[i]), "condition": data["condition"].iloc[i],
                        "options_mass": round(mass[-1], 4),
                        "top5": [[lm.tokenizer.decode([int(t)]), round(float(q), 4)]
                                 for q, t in zip(best.values, best.indices)]})
    mass = np.array(mass)
    per = {}
    for cond in sorted(data["condition"].unique()):
        m = mass[(data["condition"] == cond).to_numpy()]
        per[cond] = {"n": int(len(m)), "mean": round(float(m.mean()), 4), "median": round(float(np.median(m)), 4),
                     "share_below_half": round(float((m < 0.5).mean()), 4)}
    correct = np.array([(c == "Yes") == bool(g) for c, g in zip(choice, data["label"])])
    n_tok = sum(len(p) for p in req.prompt_ids)
    return {"used_chat_template": req.used_chat_template, "options_mass": per,
            "accuracy": {c: round(float(correct[(data["condition"] == c).to_numpy()].mean()), 4)
                         for c in sorted(data["condition"].unique())},
            "prompts_per_second": round(len(ids_ := req.prompt_ids) / seconds, 4),
            "prompt_tokens_per_second": round(n_tok / seconds, 1), "mean_prompt_tokens": round(n_tok / len(ids_), 1),
            "top_continuations": top}


def cpu_name() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (else the machine type)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(x.split(":", 1)[1].strip() for x in f if x.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=40, help="prompts per setting (both conditions)")
    ap.add_argument("--show", type=int, default=3, help="prompts whose five most likely next tokens are kept")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    data = prompts(args.n)
    t = time.perf_counter()
    with PeakRSS() as rss:
        lm = load_model(args.model, dtype=args.dtype, rescore_margin=0.0)
        load_s = time.perf_counter() - t
        out = {mode: measure(lm, data, mode, args.show) for mode in ("always", "never")}
    result = {"model": args.model, "dtype": args.dtype, "n_prompts": int(len(data)), "load_seconds": round(load_s, 1),
              "peak_rss_mib": round(rss.peak), "settings": out,
              "host": {"cpu": cpu_name(), "threads": torch.get_num_threads(),
                       "native_bf16": cpu_supports_bf16(), "torch": torch.__version__}}
    artifacts.write_json(result, args.out)
    print(json.dumps({m: (v["options_mass"], v["accuracy"], v["prompts_per_second"]) for m, v in out.items()}))


if __name__ == "__main__":
    main()
