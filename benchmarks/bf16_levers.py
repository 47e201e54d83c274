"""What the library options do to the bf16 forward pass on this CPU: speed of each variant, and bf16's margin error.

It profiles the bf16 pass and tries the fixes a well-kept library offers (SDPA backends, oneDNN prepacking,
``torch.compile`` where it pays after its compile time). Each variant below scores the
same prompts with a bf16 copy of the same model, in one process, one after the other; the table in the README comes
from this script's JSON. Three accuracy variants (float32 LM head and final norm; autocast with a float32 residual
stream) measure whether bf16's error on the Yes − No margin can be cut cheaply, which would shrink the calibrated
re-score margin.

    python benchmarks/bf16_levers.py --n 24 --out benchmarks/results/bf16-levers-cpu.json

Speed variants: ``eager_sdpa`` (the engine's default), ``eager_attention`` (HF's eager attention),
``sdpa_math`` (SDPA forced to its math backend), ``mkldnn_linear`` (``torch.utils.mkldnn`` prepacked linears),
``compile`` (inductor, dynamic shapes), ``compile_freezing`` (inductor with freezing: oneDNN weight prepacking).
Accuracy variants: ``fp32_head``, ``autocast`` and ``float32_tail`` (the engine's split: bf16 prefix, the last
``FLOAT32_TAIL`` prompt tokens computed in float32 from the cast cache). Compile times are reported apart from the steady per-prompt time,
with the number of prompts after which the variant would pay for its compile time (none when it is not faster).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from score_speed import benchmark_prompts, cpu_description, matmul_gflops  # noqa: E402

from nbutils import artifacts  # noqa: E402
from nbutils.engine.choices import build_requests, last_token_logprobs  # noqa: E402
from nbutils.engine.split import FLOAT32_TAIL  # noqa: E402
from nbutils.engine.loading.host import cpu_supports_bf16  # noqa: E402
from nbutils.engine.models import load_model  # noqa: E402
from nbutils.score_settings import DEFAULT_MODEL  # noqa: E402

SPEED = ("eager_sdpa", "eager_attention", "sdpa_math", "mkldnn_linear", "compile", "compile_freezing")
ACCURACY = ("fp32_head", "autocast", "float32_tail")


class Float32Module(torch.nn.Module):
    """Runs a float32 module on an upcast input (the LM head or final norm of a bf16 model kept in float32)."""

    def __init__(self, module: torch.nn.Module):
        super().__init__()
        self.inner = module

    def forward(self, x):
        return self.inner(x.float())


def bf16_copy(reference: torch.nn.Module, attn: str | None = None) -> torch.nn.Module:
    """A bf16 copy of the float32 model, optionally with another attention implementation."""
    model = copy.deepcopy(reference).to(torch.bfloat16).eval()
    if attn is not None:
        model.set_attn_implementation(attn)
    return model


def build_variant(name: str, reference: torch.nn.Module):
    """(model, context manager factory, compile-mode flag, split kwargs) for a variant name."""
    if name == "eager_sdpa":
        return bf16_copy(reference), contextlib.nullcontext, False
    if name == "eager_attention":
        return bf16_copy(reference, "eager"), contextlib.nullcontext, False
    if name == "sdpa_math":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return bf16_copy(reference), lambda: sdpa_kernel(SDPBackend.MATH), False
    if name == "mkldnn_linear":
        from torch.utils import mkldnn as mkldnn_utils

        model = mkldnn_utils.to_mkldnn(bf16_copy(reference), torch.bfloat16)
        return model, contextlib.nullcontext, False
    if name in ("compile", "compile_freezing"):
        import torch._inductor.config as inductor_config

        torch._dynamo.reset()  # else a second compiled variant reuses the first one's graph and its settings
        inductor_config.freezing = name == "compile_freezing"
        model = bf16_copy(reference)
        model.forward = torch.compile(model.forward, dynamic=True)
        return model, contextlib.nullcontext, True
    if name == "fp32_head":
        model = bf16_copy(reference)
        model.lm_head = Float32Module(reference.lm_head)
        model.model.norm = Float32Module(reference.model.norm)
        return model, contextlib.nullcontext, False
    if name == "autocast":
        return reference, lambda: torch.autocast("cpu", dtype=torch.bfloat16), False
    if name == "float32_tail":  # the engine's fast path: bf16 prefix, the last FLOAT32_TAIL tokens in float32
        return bf16_copy(reference), contextlib.nullcontext, False, {"reference": reference, "tail": FLOAT32_TAIL}
    raise ValueError(f"--variants: unknown variant {name!r}; choose from {list(SPEED + ACCURACY)}")


def margins(model, prompts: list[list[int]], answer_cols: list[int], pad_id: int, ctx,
            split: dict | None = None) -> tuple[np.ndarray, list[float]]:
    """Yes − No margin of each prompt, and the seconds each forward pass took (``split``: reference and tail)."""
    out, secs = [], []
    with ctx():
        for p in prompts:
            t = time.perf_counter()
            lp = last_token_logprobs(model, [p], pad_id, **(split or {}))[0]
            secs.append(time.perf_counter() - t)
            out.append(float(lp[answer_cols[0]] - lp[answer_cols[1]]))
    return np.array(out), secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--n", type=int, default=12, help="prompts per variant (each ~700 tokens)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--variants", default=",".join(SPEED + ACCURACY))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    wanted = [v for v in args.variants.split(",") if v]
    for v in wanted:
        if v not in SPEED + ACCURACY:
            raise SystemExit(f"--variants: unknown variant {v!r}; choose from {list(SPEED + ACCURACY)}")
    if args.n < 2:
        raise SystemExit(f"--n: needs at least 2 prompts (one warms up), got {args.n}")
    lm = load_model(args.model, dtype="float32", threads=args.threads)
    req = build_requests(lm.tokenizer, benchmark_prompts(args.n + 1))
    warm, prompts = req.prompt_ids[0], req.prompt_ids[1:]
    cols = [ids[0] for ids in req.answer_ids]
    reference = lm.model
    exact, exact_secs = margins(reference, [warm] + prompts, cols, req.pad_id, contextlib.nullcontext)
    exact, f32_steady = exact[1:], float(np.mean(exact_secs[1:]))
    report = {"model": args.model, "n_prompts": len(prompts), "threads": torch.get_num_threads(),
              "mean_prompt_tokens": float(np.mean([len(p) for p in prompts])), "host": cpu_description(),
              "cpu_native_bf16": cpu_supports_bf16(),
              "matmul_gflops": {"float32": matmul_gflops(torch.float32), "bfloat16": matmul_gflops(torch.bfloat16)},
              "float32_seconds_per_prompt": round(f32_steady, 4), "versions": artifacts.versions(),
              "created": artifacts.now_utc(), "variants": {}}
    base = None
    for name in wanted:
        model, ctx, compiled, *split = build_variant(name, reference)
        split = split[0] if split else None
        t = time.perf_counter()
        margins(model, [warm], cols, req.pad_id, ctx, split)  # warm-up; compiles a compiled variant
        first = time.perf_counter() - t
        tail_secs: list[float] = []
        hooks = []
        if split:  # time the float32 tail on its own: on a native-bf16 host it is the split's whole overhead
            hooks = [reference.register_forward_pre_hook(lambda *_: tail_secs.append(-time.perf_counter())),
                     reference.register_forward_hook(lambda *_: tail_secs.__setitem__(-1, tail_secs[-1] + time.perf_counter()))]
        m, secs = margins(model, prompts, cols, req.pad_id, ctx, split)
        for h in hooks:
            h.remove()
        steady = float(np.mean(secs))
        err = np.abs(m - exact)
        row = {"seconds_per_prompt": round(steady, 4), "first_call_seconds": round(first, 2),
               "margin_error_max": float(err.max()), "margin_error_p50": float(np.median(err)),
               "decision_flips_vs_float32": int(((m > 0) != (exact > 0)).sum()),
               "speed_vs_float32": round(f32_steady / steady, 2)}
        if tail_secs:
            row["float32_tail_seconds_per_prompt"] = round(float(np.mean(tail_secs)), 4)
            row["float32_tail_share_of_float32_pass"] = round(float(np.mean(tail_secs)) / f32_steady, 4)
        if name == "eager_sdpa":
            base = steady
        if base is not None and name != "eager_sdpa":
            row["speed_vs_eager_sdpa"] = round(base / steady, 3)
            if compiled:
                gain = base - steady
                row["compile_pays_after_prompts"] = (int(np.ceil((first - base) / gain)) if gain > 0 else None)
        report["variants"][name] = row
        print(name, row, flush=True)
        del model
    if args.out:
        artifacts.write_json(report, args.out)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
