"""The engine at 1B+ scale: a model built from a real architecture with random weights, in bf16, 8-bit and 4-bit.

Weights are random (nothing is downloaded), so the log-probs carry no meaning; the point is speed and memory at
the scale of the seed models. For each precision the script reports prompts/s, tokens/s, peak GPU memory, and
the achieved model FLOP/s (2 × non-embedding parameters × tokens ÷ time) as a fraction of a bf16 matmul ceiling
it measures on the same device and of the card's nominal dense bf16 peak, where the card is known, and the time
the paper-sized column of one model (``--project`` prompts, 38,000 by default) would take at that speed.

    python benchmarks/gpu_scale.py --config benchmarks/configs/olmo2-13b.json --out benchmarks/results/gpu-h100-olmo2-13b.json

``--tokenizer`` takes a saved tokenizer folder instead of reading the embedded model's GGUF (a machine without the
embedded model's package: ``scripts/gpu_kit.sh`` saves one). ``--layers``, ``--override`` and ``--device cpu``
shrink the same run to a quick check of the script itself (the tests do this).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from nbutils import artifacts
from nbutils.engine.batching import plan_batches
from nbutils.engine.choices import build_requests, score_batches
from nbutils.engine.loading.embedded import embedded_gguf
from nbutils.engine.loading.host import resolve_device
from nbutils.engine.models import load_model
from nbutils.score_settings import DEFAULT_MODEL
from score_speed import benchmark_prompts, decision_agreement, matmul_gflops

CONFIG = Path(__file__).parent / "configs" / "smollm2-1.7b.json"
# Nominal dense bf16 tensor-core peaks (TFLOP/s, no sparsity), from the vendors' data sheets.
NOMINAL_BF16_TFLOPS = {"H200": 989.4, "H100 PCIe": 756.0, "H100": 989.4, "A100": 312.0, "L40S": 362.1, "L4": 121.0,
                       "A10G": 70.0}


def nominal_peak(device_name: str) -> float | None:
    """The nominal dense bf16 peak of a known card, in TFLOP/s; None when unknown."""
    for key, tflops in NOMINAL_BF16_TFLOPS.items():  # the more specific names come first
        if key in device_name:
            return tflops
    return None


def parse_overrides(items: list[str]) -> dict:
    """``["hidden_size=64", "rope_theta=1e4"]`` → ``{"hidden_size": 64, "rope_theta": 10000.0}`` (JSON values)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--override: expected KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def load_tokenizer(tokenizer: Path | None):
    """A saved tokenizer folder, or the embedded model's tokenizer read from its GGUF (without loading that model)."""
    from transformers import AutoTokenizer

    if tokenizer is not None:
        return AutoTokenizer.from_pretrained(tokenizer)
    folder_gguf, gguf_file = embedded_gguf(DEFAULT_MODEL)
    return AutoTokenizer.from_pretrained(folder_gguf, gguf_file=gguf_file)


def build_random_model(config_path: Path, folder: Path, layers: int | None = None, seed: int = 0,
                       tokenizer: Path | None = None, overrides: dict | None = None, device: str = "cpu") -> dict:
    """Write a random-weight bf16 model of this architecture (and the embedded model's tokenizer) to ``folder``.

    The weights are drawn on ``device`` (a GPU draws 13B parameters in seconds; a CPU takes minutes)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    spec = {k: v for k, v in json.loads(config_path.read_text()).items() if not k.startswith("_")}
    spec.update(overrides or {})
    if layers is not None:
        spec["num_hidden_layers"] = layers
    config = AutoConfig.for_model(**spec)
    tok = load_tokenizer(tokenizer)
    if len(tok) > config.vocab_size:
        raise ValueError(f"config: vocab_size {config.vocab_size} is smaller than the tokenizer's {len(tok)}")
    torch.manual_seed(seed)
    t = time.perf_counter()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    n_params = sum(p.numel() for p in model.parameters())
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    tok.save_pretrained(folder)
    return {"config": str(config_path), "model_type": config.model_type, "num_hidden_layers": config.num_hidden_layers,
            "hidden_size": config.hidden_size, "n_parameters": n_params, "weights_seed": seed,
            "overrides": overrides or {}, "build_seconds": round(time.perf_counter() - t, 1)}


def add_model_arguments(ap) -> None:
    """The options every GPU script shares: the architecture, device, tokenizer, shrinking for quick checks, output."""
    ap.add_argument("--config", type=Path, default=CONFIG, help="a config.json of a real architecture")
    ap.add_argument("--device", default="auto",
                    help="auto (a CUDA GPU; refused without one), cuda, cuda:N, or cpu for a dry run at small sizes")
    ap.add_argument("--tokenizer", type=Path, default=None, help="a saved tokenizer folder (default: the embedded model's)")
    ap.add_argument("--layers", type=int, default=None, help="override num_hidden_layers (quick checks only)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE", help="a config value (quick checks)")
    ap.add_argument("--out", type=Path, default=None)


def gpu_device(device: str, script: str) -> str:
    """The device a GPU script measures on: ``auto`` is a CUDA GPU, and a machine without one is refused (exit 2)
    rather than measured on its CPU under a GPU script's name; ``cpu`` asks for a dry run of the script (with
    ``--layers`` and a small ``--n``), its report saying ``cpu``."""
    import sys

    if device == "auto" and not torch.cuda.is_available():
        print(f"{script}: no CUDA GPU is visible (torch {torch.__version__}, CUDA build "
              f"{torch.version.cuda or 'none'}): these are GPU measurements and are not run on a CPU; run it on a "
              "CUDA machine, or give --device cpu --layers 1 --n 8 for a dry run of the script", file=sys.stderr)
        raise SystemExit(2)
    try:
        return resolve_device(device)
    except ValueError as err:
        print(f"{script}: --{err}", file=sys.stderr)
        raise SystemExit(2) from None


def build_from_args(args, folder: Path, device: str) -> dict:
    """``build_random_model`` with the options of ``add_model_arguments``."""
    return build_random_model(args.config, folder, args.layers, tokenizer=args.tokenizer,
                              overrides=parse_overrides(args.override), device=device)


def load_precision(folder: Path, precision: str, device: str):
    """The model in ``folder`` at one precision (a dtype name, ``8bit`` or ``4bit``), with no float32 twin."""
    quant = precision if precision in ("8bit", "4bit") else "none"
    dtype = "bfloat16" if quant != "none" else precision
    return load_model(str(folder), quantization=quant, dtype=dtype, device=device, rescore_margin=0)


def score_all(lm, req, batch_size) -> np.ndarray:
    """Every prompt's option log-probs [n, options], in prompt order, batched as a scoring run batches them (longest
    first, under the token budget the load probed from the GPU's free memory)."""
    batches = plan_batches([len(p) for p in req.prompt_ids], batch_size, lm.meta["device"], lm.meta.get("token_budget"))
    out = np.zeros((len(req.prompt_ids), len(req.option_ids[0])))
    for res in score_batches(lm.model, req, batches, progress=False):
        out[res.indices] = np.vstack(res.logprobs)
    return out


def time_scoring(folder: Path, precision: str, device: str, texts: list[str], batch_size) -> tuple[dict, np.ndarray]:
    """Load the random model in one precision and score all prompts once (after a warm-up batch)."""
    lm = load_precision(folder, precision, device)
    req = build_requests(lm.tokenizer, texts)
    score_all(lm, build_requests(lm.tokenizer, texts[:2]), batch_size)  # warm-up (kernels, allocator)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
    t = time.perf_counter()
    lp = score_all(lm, req, batch_size)
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t
    tokens = sum(len(p) for p in req.prompt_ids)
    non_embed = lm.meta["n_parameters"] - lm.model.get_input_embeddings().weight.numel()
    row = {"load_seconds": lm.meta["load_seconds"], "seconds": round(dt, 2), "prompts_per_s": round(len(texts) / dt, 2),
           "tokens_per_s": round(tokens / dt, 1), "mean_prompt_tokens": round(tokens / len(texts), 1),
           "model_tflops": round(2 * non_embed * tokens / dt / 1e12, 2), "non_embedding_parameters": non_embed,
           "token_budget": lm.meta.get("token_budget"), "quantization_details": lm.meta.get("quantization_details")}
    if cuda:
        row["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    del lm
    if cuda:
        torch.cuda.empty_cache()
    return row, lp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(ap)
    ap.add_argument("--precisions", default="bfloat16,8bit,4bit", help="comma list of bfloat16, float16, float32, 8bit, 4bit")
    ap.add_argument("--n", type=int, default=256, help="prompts")
    ap.add_argument("--batch-size", default="auto")
    ap.add_argument("--project", type=int, default=38_000, help="prompts of one model's paper-sized column, to project")
    args = ap.parse_args()
    batch_size = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
    device = gpu_device(args.device, "gpu_scale.py")
    texts = benchmark_prompts(args.n)
    gpu = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    report = {"device": gpu, "n_prompts": len(texts), "batch_size": args.batch_size, "versions": artifacts.versions(),
              "created": artifacts.now_utc(), "precisions": {}}
    if device.startswith("cuda"):
        report["bf16_matmul_ceiling_tflops"] = round(matmul_gflops(torch.bfloat16, 8192, 8192, 8192, device) / 1e3, 1)
        report["nominal_bf16_peak_tflops"] = nominal_peak(gpu)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        report["model"] = build_from_args(args, Path(tmp), device)
        for precision in args.precisions.split(","):
            if precision in ("8bit", "4bit") and not device.startswith("cuda"):
                report["precisions"][precision] = {"skipped": "bitsandbytes 8/4-bit needs a CUDA GPU"}
                continue
            row, results[precision] = time_scoring(Path(tmp), precision, device, texts, batch_size)
            for key, peak in (("of_matmul_ceiling", report.get("bf16_matmul_ceiling_tflops")),
                              ("of_nominal_peak", report.get("nominal_bf16_peak_tflops"))):
                if peak:
                    row[f"fraction_{key}"] = round(row["model_tflops"] / peak, 3)
            row[f"projected_minutes_for_{args.project}_prompts"] = round(args.project / row["prompts_per_s"] / 60, 1)
            report["precisions"][precision] = row
            print(precision, row, flush=True)
    if "bfloat16" in results:
        ref = results["bfloat16"]
        for name, lp in results.items():
            if name != "bfloat16":
                report["precisions"][name]["max_abs_dlogp_vs_bfloat16"] = float(np.abs(lp - ref).max())
                report["precisions"][name]["decision_agreement_vs_bfloat16"] = decision_agreement(lp, ref)
    print(json.dumps(report, indent=1))
    if args.out:
        artifacts.write_json(report, args.out)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
