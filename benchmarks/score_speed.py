"""Scoring speed, side by side on the same prompts and the same loaded model.

Methods: this engine (float32), the naive two-sequence method of the seeds, lm-evaluation-harness's
HFLM.loglikelihood (when `lm-eval` is installed), and the fast path (bfloat16 with float32 re-scoring of close
calls) where the CPU or GPU has native bfloat16 (or anywhere with --force-fast, to measure its error and the share
of re-scored prompts on hardware where its speed means nothing). Reports prompts/s, tokens/s, peak memory, max |Δ log-prob| and
decision agreement against the naive method, and the ratio to the FLOP ceiling (2 × parameters × tokens ÷ the
matmul throughput measured here). The fast path's margin is calibrated as a run calibrates it (``--rescore-margin
auto``): before the rounds, every prompt is scored on the fast path once (untimed) and the closest call of each part
of the plan is scored in float32; those float32 passes are charged to the fast path (per worker, as they ran side by
side) and their prompts keep their float32 scores in the rounds; its bf16 forward passes are also timed on their
own (``bf16_pass_*``). The fast path
computes each prompt's last ``--float32-tail`` tokens in float32 after its bf16 prefix, as the engine does
(``bf16_margin_error_*`` is that split's error; ``--float32-tail 0`` measures whole-prompt bf16).

    python benchmarks/score_speed.py --n 100 --out benchmarks/results/cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from nbutils import artifacts
from nbutils.engine.batching import pass_workers, plan_batches
from nbutils.engine.choices import answer_logprobs, build_requests, render_chat, score_batches
from nbutils.engine.split import FLOAT32_TAIL
from nbutils.engine.calibration import CALIBRATION_SIZE, SAFETY_FACTOR, measure_margin
from nbutils.engine.loading.host import cpu_supports_bf16
from nbutils.engine.models import load_model
from nbutils.score_settings import DEFAULT_MODEL
from nbutils.studies.monotonicity.dataset import generate_prompts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference_scoring import reference_logprobs  # noqa: E402


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


def benchmark_prompts(n: int) -> list[str]:
    """The same ``n`` concept-learning prompts (~700 tokens each) for every benchmark."""
    per_concept = -(-n // 2)
    per_concept += per_concept % 2  # the generator balances true and false queries, so it takes an even number
    df = generate_prompts(["more than 1/2", "less than 1/2"], prompts_per_concept=max(2, per_concept),
                          conditions=["concept_learning"], seed=42)
    return df["text"].head(n).tolist()


def lm_eval_logprobs(model, tokenizer, contexts: list[str], continuations: list[str]) -> np.ndarray:
    """lm-evaluation-harness HFLM.loglikelihood on the same model object, batch size 1."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=1, device=str(next(model.parameters()).device))
    reqs = [Instance("loglikelihood", {}, (c, a), i) for i, (c, a) in enumerate((c, a) for c in contexts for a in continuations)]
    out = np.array([r[0] for r in lm.loglikelihood(reqs, disable_tqdm=True)])
    return out.reshape(len(contexts), len(continuations))


def cpu_description() -> dict:
    """The host CPU's model name and whether its bf16 is native (the flags that decide it)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "unknown")
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model\t")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), []))
    return {"cpu": name, "cpu_model_number": model, "cores": os.cpu_count(),
            "bf16_flags": sorted(flags & {"avx512_bf16", "amx_bf16", "amx_tile", "avx512f"}),
            "native_bf16": cpu_supports_bf16()}


class ForwardTimer:
    """Wall time spent inside one module's forward calls (pre/post hooks)."""

    def __init__(self, module: torch.nn.Module):
        self.seconds, self.calls = 0.0, 0
        module.register_forward_pre_hook(self._start)
        module.register_forward_hook(self._stop)

    def _start(self, *_):
        self._t = time.perf_counter()

    def _stop(self, *_):
        self.seconds += time.perf_counter() - self._t
        self.calls += 1


def decision_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Share of prompts where two [n, (yes, no)] score arrays pick the same answer."""
    return float(((a[:, 0] > a[:, 1]) == (b[:, 0] > b[:, 1])).mean())


def bf16_error_report(low: np.ndarray, exact: np.ndarray, rescored: np.ndarray) -> dict:
    """How far bf16 scores (before re-scoring) are from float32, and whether re-scoring caught every flip."""
    m_low, m_exact = low[:, 0] - low[:, 1], exact[:, 0] - exact[:, 1]
    err = np.abs(m_low - m_exact)
    flips = (m_low > 0) != (m_exact > 0)
    return {"bf16_max_abs_dlogp_vs_float32": float(np.abs(low - exact).max()),
            "bf16_margin_error_max": float(err.max()), "bf16_margin_error_p99": float(np.quantile(err, 0.99)),
            "bf16_decision_flips_before_rescoring": int(flips.sum()),
            "flips_left_unrescored": int((flips & ~rescored).sum())}


OP_GROUPS = {"matmul": ("aten::mm", "aten::addmm", "aten::bmm", "mkldnn"), "attention": ("scaled_dot_product",),
             "casts_copies": ("aten::copy_", "aten::_to_copy", "aten::cat", "aten::contiguous")}


def forward_profile(model, prompt_ids: list[int], repeats: int = 3) -> dict:
    """Where one forward pass spends its time (torch.profiler self CPU time, ms per forward and share), by group:
    matmuls, attention (SDPA), casts/copies, and the element-wise rest (norms, RoPE, SiLU, residual adds)."""
    from torch.profiler import ProfilerActivity, profile

    from nbutils.engine.choices import last_token_logprobs

    last_token_logprobs(model, [prompt_ids], 0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            last_token_logprobs(model, [prompt_ids], 0)
    groups: dict[str, float] = {}
    for ev in prof.key_averages():
        group = next((g for g, keys in OP_GROUPS.items() if any(k in ev.key for k in keys)), "elementwise_and_other")
        groups[group] = groups.get(group, 0.0) + ev.self_cpu_time_total / 1e3 / repeats
    total = sum(groups.values())
    return {g: {"ms": round(ms, 1), "share": round(ms / total, 3)} for g, ms in sorted(groups.items(), key=lambda x: -x[1])}


def calibration_shortfall_chance(errors: np.ndarray, size: int, factor: float) -> float:
    """Chance that a random calibration sample of ``size`` of these prompts sets ``factor`` × its largest error
    below the largest error of all of them (all ``size`` drawn from those with factor × error < max): C(k, s) / C(n, s)."""
    from math import comb

    k = int((factor * errors < errors.max()).sum())
    return comb(k, size) / comb(len(errors), size) if size <= len(errors) else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--n", type=int, default=100, help="prompts")
    ap.add_argument("--rounds", type=int, default=5,
                    help="the prompts are split into this many chunks and the methods take turns on each chunk, so "
                         "a change in the host's load during the run hits every method alike")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--rescore-margin", default="auto",
                    help="'auto': calibrated on --calibration-size of the prompts (as a run does), or a fixed number")
    ap.add_argument("--calibration-size", type=int, default=CALIBRATION_SIZE)
    ap.add_argument("--float32-tail", type=int, default=None,
                    help="prompt tokens the fast path computes in float32 after a bf16 prefix (default: the engine's "
                         "FLOAT32_TAIL; 0 = the whole prompt in bf16)")
    ap.add_argument("--methods", default="engine,naive,lm_eval,fast")
    ap.add_argument("--force-fast", action="store_true",
                    help="run the bf16 fast path even where bf16 is emulated (its speed is then not meaningful)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    wanted = args.methods.split(",")
    texts = benchmark_prompts(args.n)
    lm = load_model(args.model, dtype="float32", threads=args.threads)
    req = build_requests(lm.tokenizer, texts)
    lengths = [len(p) for p in req.prompt_ids]
    device = lm.meta["device"]
    non_embed = lm.meta["n_parameters"] - lm.model.get_input_embeddings().weight.numel()
    ceiling = {"float32": matmul_gflops(torch.float32, device=device)}
    if device != "cpu" or cpu_supports_bf16() or args.force_fast:
        ceiling["bfloat16"] = matmul_gflops(torch.bfloat16, device=device)
    report = {"model": args.model, "device": device, "threads": torch.get_num_threads(), "n_prompts": len(texts),
              "rounds": args.rounds, "mean_prompt_tokens": sum(lengths) / len(texts),
              "used_chat_template": req.used_chat_template, "matmul_gflops": ceiling,
              "cpu_native_bf16": cpu_supports_bf16(), "host": cpu_description(), "versions": artifacts.versions(), "created": artifacts.now_utc(),
              "methods": {}}

    # name -> (scores for a chunk of texts, the dtype whose matmul ceiling applies, fixed report fields)
    methods: dict[str, tuple] = {}
    if "engine" in wanted:
        methods["engine_float32"] = (lambda chunk, idx: answer_logprobs(lm.model, build_requests(lm.tokenizer, chunk)),
                                     "float32", {})
    if "naive" in wanted:
        # the tests' independent reference: the tokenizer's own chat template, one unpadded pass per prompt and answer
        methods["naive_two_pass"] = (lambda chunk, idx: np.vstack(reference_logprobs(lm.model, lm.tokenizer, chunk)),
                                     "float32", {})
    if "lm_eval" in wanted:
        try:
            import lm_eval  # noqa: F401

            def lm_eval_chunk(chunk, idx):
                contexts = [render_chat(lm.tokenizer, t)[0] for t in chunk] if req.used_chat_template else chunk
                return lm_eval_logprobs(lm.model, lm.tokenizer, contexts, list(req.answer_strings))

            methods["lm_eval_hflm"] = (lm_eval_chunk, "float32", {})
        except ImportError:
            report["methods"]["lm_eval_hflm"] = {"skipped": "lm-eval is not installed (pip install -e '.[bench]')"}
    low_precision: list[np.ndarray] = []
    rescored: list[np.ndarray] = []
    calibrated: dict[int, tuple] = {}  # prompt -> (float32, bf16) scores from the calibration sample
    fast_extra: dict = {}
    if "fast" in wanted and "bfloat16" in ceiling:
        margin_arg = "auto" if args.rescore_margin == "auto" else float(args.rescore_margin)
        fast = load_model(args.model, dtype="bfloat16", rescore_margin=margin_arg, threads=args.threads)
        bf16_timer = ForwardTimer(fast.model)
        tail = (FLOAT32_TAIL if fast.reference is not None else 0) if args.float32_tail is None else args.float32_tail
        margin = margin_arg
        if margin_arg == "auto":  # once, over all prompts, as score_run does (untimed); the float32 passes of its
            # sample are charged to the fast path, per worker as they ran side by side
            plan = plan_batches(lengths, "auto", device)
            fast_lp = {i: lp for r in score_batches(fast.model, req, plan, fast.reference, 0.0, progress=False,
                                                     tail=tail) for i, lp in zip(r.indices, r.logprobs)}
            done = {i: {"logps": lp, "rescored": False} for i, lp in fast_lp.items()}
            cal, sample = measure_margin(fast.model, fast.reference, req, plan, done, args.calibration_size,
                                         SAFETY_FACTOR, tail)
            margin = cal.margin
            calibrated.update({i: (lp, fast_lp[i]) for i, lp in sample.items()})
            workers = pass_workers(fast.model, len(calibrated))[0]
            fast_extra.update(cal.as_meta(), calibration_seconds=round(cal.seconds / workers, 2))
            bf16_timer.seconds = 0.0

        def fast_chunk(chunk, idx):
            out, low, flags = np.zeros((len(chunk), 2)), np.zeros((len(chunk), 2)), np.zeros(len(chunk), bool)
            todo = [k for k, i in enumerate(idx) if i not in calibrated]
            for k, i in enumerate(idx):
                if i in calibrated:
                    out[k], low[k], flags[k] = calibrated[i][0], calibrated[i][1], True
            if todo:
                creq = build_requests(fast.tokenizer, [chunk[k] for k in todo])
                batches = plan_batches([len(p) for p in creq.prompt_ids], "auto", device)
                for r in score_batches(fast.model, creq, batches, fast.reference, margin, progress=False, tail=tail):
                    rows = [todo[j] for j in r.indices]
                    out[rows], low[rows], flags[rows] = np.vstack(r.logprobs), np.vstack(r.low_precision), r.rescored
            low_precision.append(low)
            rescored.append(flags)
            return out

        emulated = device == "cpu" and not cpu_supports_bf16()
        fast_extra.update(rescore_margin=margin, rescore_margin_requested=args.rescore_margin, float32_tail_tokens=tail,
                          bf16_emulated_speed_not_meaningful=emulated)
        methods["fast_bf16_rescored"] = (fast_chunk, "bfloat16", fast_extra)
    elif "fast" in wanted:
        report["methods"]["fast_bf16_rescored"] = {
            "skipped": "no native bfloat16 on this CPU (no avx512_bf16/amx_bf16 flag): bf16 matmuls are emulated "
                       "and slower than float32, so the fast path is float32 here (--force-fast measures its error anyway)"}

    answer_logprobs(lm.model, build_requests(lm.tokenizer, texts[:1]))  # warm-up
    if "fast_bf16_rescored" in methods:
        answer_logprobs(fast.model, build_requests(fast.tokenizer, texts[:1]))
        bf16_timer.seconds = 0.0
    chunks = [list(c) for c in np.array_split(np.arange(len(texts)), args.rounds) if len(c)]
    seconds = {name: [] for name in methods}
    parts: dict[str, list[np.ndarray]] = {name: [] for name in methods}
    peak = {name: {"rss": 0.0, "rss_increase": 0.0, "gpu": 0.0} for name in methods}
    cuda = device.startswith("cuda")
    names = list(methods)
    for r, idx in enumerate(chunks):
        chunk = [texts[i] for i in idx]
        for name in names[r % len(names):] + names[: r % len(names)]:  # rotate who goes first
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            with PeakRSS() as mem:
                t = time.perf_counter()
                parts[name].append(methods[name][0](chunk, idx))
                if cuda:
                    torch.cuda.synchronize()
                seconds[name].append(time.perf_counter() - t)
            stats = peak[name]
            stats["rss"] = max(stats["rss"], mem.peak)
            stats["rss_increase"] = max(stats["rss_increase"], mem.peak - mem.base)
            if cuda:
                stats["gpu"] = max(stats["gpu"], torch.cuda.max_memory_allocated() / 2**20)
        print(f"round {r + 1}/{len(chunks)}:", {n: round(seconds[n][-1], 1) for n in names}, flush=True)

    results = {name: np.concatenate(parts[name]) for name in methods}
    tokens = sum(lengths)
    if "fast_bf16_rescored" in methods and "calibration_seconds" in fast_extra:
        seconds["fast_bf16_rescored"][0] += fast_extra["calibration_seconds"]  # charged to its first round
    for name, (_, flop_dtype, extra) in methods.items():
        dt = sum(seconds[name])
        achieved = 2 * non_embed * tokens / dt / 1e9
        row = {"seconds": round(dt, 2), "prompts_per_s": round(len(texts) / dt, 3), "tokens_per_s": round(tokens / dt, 1),
               "peak_rss_mib": round(peak[name]["rss"], 1), "rss_increase_mib": round(peak[name]["rss_increase"], 1),
               "model_gflops": round(achieved, 1), "fraction_of_matmul_ceiling": round(achieved / ceiling[flop_dtype], 3),
               "seconds_per_round": [round(x, 2) for x in seconds[name]], **extra}
        if cuda:
            row["peak_gpu_memory_mib"] = round(peak[name]["gpu"], 1)
        report["methods"][name] = row
    if "fast_bf16_rescored" in results:
        flags = np.concatenate(rescored)  # as the engine recorded them, not recomputed here
        f = report["methods"]["fast_bf16_rescored"]
        n_bf16 = len(texts) - len(calibrated)  # prompts whose bf16 pass ran inside the rounds
        bf16_tokens = sum(max(0, n - tail) for i, n in enumerate(lengths) if i not in calibrated)  # the bf16 prefix
        if bf16_timer.seconds > 0 and n_bf16:
            achieved_bf16 = 2 * non_embed * bf16_tokens / bf16_timer.seconds / 1e9
            f.update(bf16_pass_seconds=round(bf16_timer.seconds, 2),
                     bf16_pass_prompts_per_s=round(n_bf16 / bf16_timer.seconds, 3),
                     bf16_pass_tokens_per_s=round(bf16_tokens / bf16_timer.seconds, 1),
                     bf16_pass_fraction_of_bf16_ceiling=round(achieved_bf16 / ceiling["bfloat16"], 3))
        if "calibration_seconds" in f:
            steady = sum(seconds["fast_bf16_rescored"]) - f["calibration_seconds"]
            f["prompts_per_s_after_calibration"] = round(n_bf16 / steady, 3) if steady > 0 else None
        f["rescored_prompts"], f["rescored_fraction"] = int(flags.sum()), float(flags.mean())  # calibration included
        f["rescored_by_margin"] = int(flags.sum()) - len(calibrated)
        if "engine_float32" in results:
            f.update(bf16_error_report(np.concatenate(low_precision), results["engine_float32"], flags))
            if f.get("calibration_error_max"):
                f["run_error_max_over_calibration_error_max"] = round(f["bf16_margin_error_max"] / f["calibration_error_max"], 2)
                low_all, exact_all = np.concatenate(low_precision), results["engine_float32"]
                errs = np.abs((low_all[:, 0] - low_all[:, 1]) - (exact_all[:, 0] - exact_all[:, 1]))
                from scipy.stats import spearmanr

                f["error_margin_rank_correlation"] = round(float(spearmanr(errs, np.abs(low_all[:, 0] - low_all[:, 1]))[0]), 3)
                f["calibration_shortfall_chance"] = {  # would a random sample of this size have under-covered this run?
                    f"factor_{g:g}": round(calibration_shortfall_chance(errs, f["calibration_size"], g), 5) for g in (1.5, 2, 3)}
    ref = results.get("naive_two_pass")
    for name, lp in results.items():
        m = report["methods"][name]
        if ref is not None:
            m["max_abs_dlogp_vs_naive"] = float(np.abs(lp - ref).max())
            m["decision_agreement_vs_naive"] = decision_agreement(lp, ref)
        if "engine_float32" in results and name != "engine_float32":
            m["decision_agreement_vs_engine_float32"] = decision_agreement(lp, results["engine_float32"])
    if "fast_bf16_rescored" in methods:  # after the timed rounds, so the profiler's overhead touches no timing
        report["methods"]["fast_bf16_rescored"]["bf16_forward_profile"] = forward_profile(fast.model, req.prompt_ids[0])
    speed_ups(report, seconds)
    print(json.dumps({k: v for k, v in report.items() if k.startswith("speedup")}, indent=1))
    if args.out:
        artifacts.write_json(report, args.out)


def speed_ups(report: dict, seconds: dict[str, list[float]]) -> None:
    """Total-time ratios, and the range of the per-round ratios (the spread the host's load left in them)."""
    pairs = [("engine", "engine_float32", o) for o in ("naive_two_pass", "lm_eval_hflm", "fast_bf16_rescored")]
    if not report["methods"].get("fast_bf16_rescored", {}).get("bf16_emulated_speed_not_meaningful", True):
        pairs += [("fast", "fast_bf16_rescored", o) for o in ("naive_two_pass", "lm_eval_hflm")]
    for label, mine, other in pairs:
        if mine in seconds and other in seconds:
            per_round = [o / m for m, o in zip(seconds[mine], seconds[other]) if m > 0 and o > 0]
            report[f"speedup_{label}_vs_{other}"] = round(sum(seconds[other]) / sum(seconds[mine]), 2)
            if per_round:  # a round whose prompts were all in the calibration sample has no ratio
                report[f"speedup_{label}_vs_{other}_round_range"] = [round(min(per_round), 2), round(max(per_round), 2)]


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
