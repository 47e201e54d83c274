"""Scoring speed, side by side on the same prompts and the same loaded model.

Methods: this engine (float32), the naive two-sequence method of the seeds, lm-evaluation-harness's
HFLM.loglikelihood (when `lm-eval` is installed), and the fast path (bfloat16 with float32 re-scoring of close
calls) where the CPU or GPU has native bfloat16. Reports prompts/s, tokens/s, peak memory, max |Δ log-prob| and
decision agreement against the naive method, and the ratio to the FLOP ceiling (2 × parameters × tokens ÷ the
matmul throughput measured here).

    python benchmarks/score_speed.py --n 100 --out benchmarks/results/cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import torch

from nbutils import artifacts
from nbutils.models import DEFAULT_MODEL, cpu_supports_bf16, load_model
from nbutils.prompts import generate_prompts
from nbutils.scoring import answer_logprobs, build_requests, naive_answer_logprobs, render_chat


class PeakRSS:
    """Peak resident memory of this process while the block runs (sampled every 5 ms), in MiB."""

    def __enter__(self):
        self.peak = self.base = self._rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._rss())

    @staticmethod
    def _rss() -> float:
        with open("/proc/self/status") as f:
            line = next(x for x in f if x.startswith("VmRSS"))
        return int(line.split()[1]) / 1024

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def matmul_gflops(dtype, m: int = 768, k: int = 576, n: int = 1536, device: str = "cpu") -> float:
    """Best-of-5 throughput of one transformer-sized matmul in this dtype."""
    a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(10):
            a @ b
        if device != "cpu":
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / 10)
    return 2 * m * k * n / best / 1e9


def lm_eval_logprobs(model, tokenizer, contexts: list[str], continuations: list[str]) -> np.ndarray:
    """lm-evaluation-harness HFLM.loglikelihood on the same model object, batch size 1."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=1, device=str(next(model.parameters()).device))
    reqs = [Instance("loglikelihood", {}, (c, a), i) for i, (c, a) in enumerate((c, a) for c in contexts for a in continuations)]
    out = np.array([r[0] for r in lm.loglikelihood(reqs, disable_tqdm=True)])
    return out.reshape(len(contexts), len(continuations))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--n", type=int, default=100, help="prompts")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rescore-margin", type=float, default=0.5)
    ap.add_argument("--methods", default="engine,naive,lm_eval,fast")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    methods = args.methods.split(",")
    df = generate_prompts(["more than 1/2", "less than 1/2"], prompts_per_concept=max(2, args.n // 2 + args.n % 2),
                          conditions=["concept_learning"], seed=42).head(args.n)
    texts = df["text"].tolist()
    lm = load_model(args.model, threads=args.threads)
    req = build_requests(lm.tokenizer, texts)
    tokens = sum(len(p) for p in req.prompt_ids)
    device = lm.meta["device"]
    n_params = lm.meta["n_parameters"]
    non_embed = n_params - lm.model.get_input_embeddings().weight.numel()
    ceiling = {"float32": matmul_gflops(torch.float32, device=device)}
    if device != "cpu" or cpu_supports_bf16():
        ceiling["bfloat16"] = matmul_gflops(torch.bfloat16, device=device)
    report = {"model": args.model, "device": device, "threads": torch.get_num_threads(), "n_prompts": len(texts),
              "mean_prompt_tokens": tokens / len(texts), "used_chat_template": req.used_chat_template,
              "matmul_gflops": ceiling, "cpu_native_bf16": cpu_supports_bf16(), "versions": artifacts.versions(),
              "created": artifacts.now_utc(), "methods": {}}
    results: dict[str, np.ndarray] = {}

    def run(name, fn, flop_dtype="float32", extra=None):
        with PeakRSS() as mem:
            t = time.perf_counter()
            lp = fn()
            dt = time.perf_counter() - t
        results[name] = lp
        achieved = 2 * non_embed * tokens / dt / 1e9
        report["methods"][name] = {"seconds": round(dt, 2), "prompts_per_s": round(len(texts) / dt, 3),
                                   "tokens_per_s": round(tokens / dt, 1), "peak_rss_mib": round(mem.peak, 1),
                                   "rss_increase_mib": round(mem.peak - mem.base, 1),
                                   "model_gflops": round(achieved, 1),
                                   "fraction_of_matmul_ceiling": round(achieved / ceiling[flop_dtype], 3), **(extra or {})}
        print(name, report["methods"][name], flush=True)

    answer_logprobs(lm.model, build_requests(lm.tokenizer, texts[:1]))  # warm-up
    if "engine" in methods:
        run("engine_float32", lambda: answer_logprobs(lm.model, req))
    if "naive" in methods:
        run("naive_two_pass", lambda: naive_answer_logprobs(lm.model, lm.tokenizer, texts))
    if "lm_eval" in methods:
        try:
            import lm_eval  # noqa: F401

            contexts = [render_chat(lm.tokenizer, t) for t in texts] if req.used_chat_template else texts
            run("lm_eval_hflm", lambda: lm_eval_logprobs(lm.model, lm.tokenizer, contexts, list(req.answer_strings)))
        except ImportError:
            report["methods"]["lm_eval_hflm"] = {"skipped": "lm-eval is not installed (pip install -e '.[bench]')"}
    if "fast" in methods:
        if "bfloat16" in ceiling:
            fast = load_model(args.model, dtype="bfloat16", rescore_margin=args.rescore_margin, threads=args.threads)
            from nbutils.scoring import plan_batches, score_batches

            rescored: list[int] = []

            def fast_path():
                out = np.zeros((len(texts), 2))
                batches = plan_batches([len(p) for p in req.prompt_ids], "auto", device)
                for r in score_batches(fast.model, req, batches, fast.reference, args.rescore_margin, progress=False):
                    out[r.indices] = r.logprobs
                    rescored.extend(i for i, f in zip(r.indices, r.rescored) if f)
                return out

            run("fast_bf16_rescored", fast_path, "bfloat16", {"rescore_margin": args.rescore_margin})
            report["methods"]["fast_bf16_rescored"]["rescored_prompts"] = len(rescored)
        else:
            report["methods"]["fast_bf16_rescored"] = {
                "skipped": "no native bfloat16 on this CPU (no avx512_bf16/amx_bf16 flag): bf16 matmuls are emulated "
                           "and slower than float32, so the fast path is float32 here"}
    ref = results.get("naive_two_pass")
    for name, lp in results.items():
        m = report["methods"][name]
        if ref is not None:
            m["max_abs_dlogp_vs_naive"] = float(np.abs(lp - ref).max())
            m["decision_agreement_vs_naive"] = float(((lp[:, 0] > lp[:, 1]) == (ref[:, 0] > ref[:, 1])).mean())
        if "engine_float32" in results and name != "engine_float32":
            e = results["engine_float32"]
            m["decision_agreement_vs_engine_float32"] = float(((lp[:, 0] > lp[:, 1]) == (e[:, 0] > e[:, 1])).mean())
    e = report["methods"].get("engine_float32", {})
    for other in ("naive_two_pass", "lm_eval_hflm", "fast_bf16_rescored"):
        o = report["methods"].get(other, {})
        if "seconds" in o and "seconds" in e:
            report[f"speedup_engine_vs_{other}"] = round(o["seconds"] / e["seconds"], 2)
    f = report["methods"].get("fast_bf16_rescored", {})
    for other in ("naive_two_pass", "lm_eval_hflm"):
        if "seconds" in f and "seconds" in report["methods"].get(other, {}):
            report[f"speedup_fast_vs_{other}"] = round(report["methods"][other]["seconds"] / f["seconds"], 2)
    print(json.dumps({k: v for k, v in report.items() if k.startswith("speedup")}, indent=1))
    if args.out:
        artifacts.write_json(report, args.out)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
