"""What a robustness-multiverse run costs against the plain design of the same size: the same number of prompts,
scored with the same loaded model, back to back (alternating, so a busy host slows both alike).

The plain dataset asks every prompt the papers' way; the multiverse dataset deals every template, phrase and
answer-word pair of the catalogue over the same number of prompts (so its options differ by row: Yes/No and
True/False). Reports seconds per round, prompts/s, mean prompt tokens, the multiverse/plain time ratio, and the
token totals of both designs at the robustness demo's size (192 prompts), which do not depend on the host's load.

    python benchmarks/robustness_cost.py --prompts-per-concept 6 --rounds 1 --out benchmarks/results/robustness-cost.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from nbutils import artifacts, studies
from nbutils.engine import models, run
from nbutils.score_settings import DEFAULT_MODEL
from nbutils.studies.monotonicity import dataset

CONCEPTS = ["more than 1/2", "less than 1/2"]


def make_run(root: Path, name: str, ppc: int, multiverse: bool) -> Path:
    """A run directory holding one generated dataset (24 prompts at ``ppc`` 6)."""
    run_dir = root / name
    kw = dict(templates="all", phrases="all", answer_words="all") if multiverse else {}
    df = dataset.generate_prompts(CONCEPTS, prompts_per_concept=ppc, **kw)
    params = dataset.parameters(CONCEPTS, list(dataset.CONDITIONS), ppc, 20, 0, **kw)
    dataset.write_prompts(df, run_dir, params)
    return run_dir


def token_totals(tokenizer, ppc: int = 48) -> dict:
    """Prompt tokens (raw text, no chat template) of the robustness demo's size (192 prompts), plain and multiverse:
    the forward pass's cost, measured without the host's load in it."""
    out = {}
    for kind, kw in (("plain", {}), ("multiverse", dict(templates="all", phrases="all", answer_words="all"))):
        df = dataset.generate_prompts(CONCEPTS, prompts_per_concept=ppc, **kw)
        out[kind] = int(sum(len(tokenizer(t)["input_ids"]) for t in df["text"]))
    out["ratio_multiverse_to_plain"] = out["multiverse"] / out["plain"]
    out["prompts"] = 2 * 2 * ppc
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts-per-concept", type=int, default=6, help="per concept and condition (6: 24 prompts)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of plain then multiverse")
    ap.add_argument("--dtype", default="float32", help="float32 (default: no bf16 margin calibration per run) or auto")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    spec = studies.get("monotonicity").spec
    lm = models.load_model(DEFAULT_MODEL, quantization="auto", dtype=a.dtype, device="cpu", scorer="choices")
    seconds: dict[str, list[float]] = {"plain": [], "multiverse": []}
    tokens: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="robustness-cost-") as tmp:
        for i in range(a.rounds):
            for kind in ("plain", "multiverse") if i % 2 == 0 else ("multiverse", "plain"):
                run_dir = make_run(Path(tmp), f"{kind}{i}", a.prompts_per_concept, kind == "multiverse")
                t0 = time.perf_counter()
                scores, meta = run.score_run(run_dir, lm, spec, progress=False)
                seconds[kind].append(time.perf_counter() - t0)
                tokens[kind] = float(scores["n_tokens"].mean())
                n = len(scores)
    plain, multi = float(np.median(seconds["plain"])), float(np.median(seconds["multiverse"]))
    report = {"prompts": n, "rounds": a.rounds, "seconds": seconds, "median_seconds": {"plain": plain, "multiverse": multi},
              "prompts_per_second": {"plain": n / plain, "multiverse": n / multi},
              "mean_prompt_tokens": tokens, "ratio_multiverse_to_plain": multi / plain,
              "token_totals": token_totals(lm.tokenizer),
              "model": DEFAULT_MODEL, "dtype": lm.meta.get("dtype"),
              "host": {"platform": platform.platform(), "cpus": os.cpu_count(),
                       "load_average": os.getloadavg()},
              "versions": artifacts.versions(), "created": artifacts.now_utc()}
    print(json.dumps(artifacts.json_clean(report), indent=1))
    if a.out:
        a.out.write_text(json.dumps(artifacts.json_clean(report), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
