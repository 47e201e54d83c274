"""Did quantization change the result? The embedded model on the demo prompts in float32, bitsandbytes 8-bit
(LLM.int8) and 4-bit NF4 (double quantization, bf16 compute), all on the CPU.

For each precision: decisions (Yes vs No) equal to float32's, max and median |Δ margin| (margin = log P(Yes) −
log P(No)), and the time to score the same prompts relative to float32 (on the CPU bitsandbytes is for checking
results, not for speed). The prompts are spread evenly over the demo dataset
(``params/monotonicity/datasets/demo.yaml``).

    python benchmarks/quantization_cpu.py --n 24 --out benchmarks/results/quantization-cpu.json
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from nbutils import artifacts  # noqa: E402
from nbutils.engine.choices import answer_logprobs, build_requests  # noqa: E402
from nbutils.engine.models import load_model  # noqa: E402
from nbutils.score_settings import DEFAULT_MODEL  # noqa: E402
from nbutils.studies.monotonicity.dataset import generate_prompts  # noqa: E402
from score_speed import cpu_description  # noqa: E402

PRECISIONS = ("float32", "8bit", "4bit")


def demo_prompts(n: int) -> list[str]:
    params = yaml.safe_load((ROOT / "params" / "monotonicity" / "datasets" / "demo.yaml").read_text())
    df = generate_prompts(**params)
    if not 1 <= n <= len(df):
        raise SystemExit(f"--n: must be between 1 and {len(df)} (the demo dataset's size), got {n}")
    return df["text"].iloc[np.linspace(0, len(df) - 1, n).astype(int)].tolist()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=24, help="prompts, spread over the demo dataset")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--precisions", default=",".join(PRECISIONS))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "quantization-cpu.json")
    args = ap.parse_args(argv)
    precisions = args.precisions.split(",")
    if precisions[0] != "float32" or not set(precisions) <= set(PRECISIONS):
        ap.error(f"--precisions: float32 first, then any of {list(PRECISIONS[1:])}, got {args.precisions!r}")
    texts = demo_prompts(args.n)
    rows, margins, seconds = {}, {}, {}
    for precision in precisions:
        quantization = "none" if precision == "float32" else precision
        lm = load_model(args.model, device="cpu", dtype="float32", quantization=quantization, rescore_margin=0)
        req = build_requests(lm.tokenizer, texts)
        t0 = time.perf_counter()
        lp = answer_logprobs(lm.model, req)
        seconds[precision] = time.perf_counter() - t0
        margins[precision] = lp[:, 0] - lp[:, 1]
        rows[precision] = {"seconds": round(seconds[precision], 2),
                           "prompts_per_s": round(len(texts) / seconds[precision], 3),
                           "quantization_details": lm.meta.get("quantization_details", {})}
        print(f"[{precision}] {len(texts)} prompts in {seconds[precision]:.1f} s", file=sys.stderr)
    exact = margins["float32"]
    for precision in precisions[1:]:
        d = np.abs(margins[precision] - exact)
        rows[precision].update(
            decisions_equal_to_float32=int(((margins[precision] > 0) == (exact > 0)).sum()), n_prompts=len(texts),
            max_abs_margin_diff=round(float(d.max()), 4), median_abs_margin_diff=round(float(np.median(d)), 4),
            time_vs_float32=round(seconds[precision] / seconds["float32"], 2))
    report = {"model": args.model, "n_prompts": len(texts),
              "mean_prompt_tokens": round(float(np.mean([len(ids) for ids in req.prompt_ids])), 1),
              "host": cpu_description(), "precisions": rows, "versions": artifacts.versions()}
    artifacts.write_json(report, args.out)
    print("| precision | decisions equal to float32 | max / median |Δ margin| | time vs float32 |")
    print("| --- | --- | --- | --- |")
    for precision in precisions[1:]:
        r = rows[precision]
        print(f"| {precision} | {r['decisions_equal_to_float32']} of {r['n_prompts']} | "
              f"{r['max_abs_margin_diff']:.2f} / {r['median_abs_margin_diff']:.2f} | {r['time_vs_float32']:.1f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
